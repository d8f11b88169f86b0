"""The replica frame of strait services (configsync, heartbeat, checkpoint): work spread over replicas.

A service's work items are its flows (configsync, heartbeat) or shards of them (checkpoint:
``<flow>#<index>/<count>``, see :class:`strait.coord.assignment.ShardItem`). Replicas register in
their service's membership group; every replica computes the same balanced assignment of the
items over the live members, and before working on an item it takes the item's fenced lease
(``<service>:<item>``), so no item is ever worked on by two replicas at once. A killed replica
stops renewing: its membership and its leases expire within one lease TTL and its items move to
the survivors.
"""

from __future__ import annotations

import abc
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

import redis

from strait.config.model import StraitConfig
from strait.coord.assignment import ShareTracker, item_flow
from strait.coord.leases import LeaseKeeper, LeaseLostError, Leases
from strait.coord.membership import MemberKeeper, Membership
from strait.coord.redis_client import CoordinationError, connect
from strait.coord.restarts import MarkPublisher
from strait.metrics import ERRORS
from strait.service import ConfigFeed, follow_config, run_service, stop_time_left
from strait.settings import DEFAULT_LEASE_TTL, Settings

log = logging.getLogger(__name__)

# A worker ends within a tick once asked, its requests answered in milliseconds; one still busy after
# this is waiting on a cluster that does not answer (admin timeouts of 15 s and more).
WORKER_STOP_SECONDS = 3.0


@dataclass(frozen=True)
class SupervisorOptions:
    """How a replica takes part in its service group."""

    service: str
    flows: tuple[str, ...] = ()  # only work items of these flows (all wanted ones when empty)
    lease_ttl: float = DEFAULT_LEASE_TTL
    tick_seconds: float = 0.5
    namespace: str = "strait"

    @classmethod
    def of(cls, service: str, settings: Settings) -> SupervisorOptions:
        """A replica of ``service`` as the process's settings say."""
        return cls(service, settings.flows, settings.lease_ttl, namespace=settings.namespace)


class FlowWorker(abc.ABC):
    """Works on one item (a flow or a shard of one) in a thread while its lease is held; releases it at the end."""

    def __init__(self, service: str, keeper: LeaseKeeper, config: StraitConfig, flow_name: str) -> None:
        self.name = flow_name
        self.service = service
        self.keeper = keeper
        self.config = config
        self._pending: StraitConfig | None = None
        self._lock = threading.Lock()
        self.wake, self.stopping = threading.Event(), threading.Event()
        self.restart_mark = _restart_mark(config, item_flow(flow_name))  # the restart it started under
        self._thread = threading.Thread(target=self._run, name=f"{service}-{flow_name}", daemon=True)

    @property
    def alive(self) -> bool:
        """Whether the thread still runs."""
        return self._thread.is_alive()

    @property
    def running(self) -> bool:
        """Whether the worker should keep going (not stopped, lease not lost)."""
        return not self.stopping.is_set() and not self.keeper.lost

    def start(self) -> FlowWorker:
        """Start working; returns self."""
        self._thread.start()
        return self

    def update(self, config: StraitConfig) -> None:
        """Hand a new configuration to the worker's thread."""
        with self._lock:
            self._pending = config
        self.wake.set()

    def take_update(self) -> StraitConfig | None:
        """The configuration handed over since the last call, if any (worker thread)."""
        with self._lock:
            config, self._pending = self._pending, None
        if config is not None:
            self.config = config
        return config

    def stop(self) -> None:
        """Ask the worker to end (does not wait)."""
        self.stopping.set()
        self.wake.set()

    def join(self, timeout: float) -> None:
        """Wait for the thread to end."""
        self._thread.join(timeout)

    def _run(self) -> None:
        try:
            self.work()
        except LeaseLostError as exc:
            log.warning("service=%s flow=%s lease lost, stopping: %s", self.service, self.name, exc)
        except Exception:
            log.exception("service=%s flow=%s worker failed", self.service, self.name)
            ERRORS.labels(service=self.service, flow=item_flow(self.name), kind="internal").inc()
        finally:
            try:
                self.close()
            finally:
                self.keeper.stop(release=True)
                log.info("service=%s flow=%s worker stopped", self.service, self.name)

    @abc.abstractmethod
    def work(self) -> None:
        """The item's loop; return when :attr:`running` turns false."""

    def close(self) -> None:
        """Release the worker's clients (called once when the loop ends)."""


WorkerFactory = Callable[[LeaseKeeper, StraitConfig, str], FlowWorker]


def lease_name(service: str, item: str) -> str:
    """The lease a replica of ``service`` holds while working on ``item`` (a flow, or a shard of one)."""
    return f"{service}:{item}"


def _restart_mark(config: StraitConfig, flow: str) -> str:
    """The flow's ``restarted_at`` in ``config`` ("" when none, or for an item of no configured flow)."""
    return next((f.restarted_at or "" for f in config.flows if f.name == flow), "")


class FlowSupervisor:
    """Membership, this replica's share of the work items, their leases, and one worker per held item."""

    def __init__(self, options: SupervisorOptions, client: redis.Redis, metrics_port: int,
                 wanted: Callable[[StraitConfig], set[str]], make_worker: WorkerFactory) -> None:
        self.options = options
        self.member_id = f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        self.client = client
        self.leases = Leases(client, options.namespace)
        membership = Membership(client, options.namespace)
        self._member = MemberKeeper(membership, options.service, self.member_id, options.lease_ttl,
                                    {"host": socket.gethostname(), "pid": str(os.getpid()),
                                     "metrics_port": str(metrics_port)})
        self._tracker = ShareTracker(membership, options.service, self.member_id, holders=self._flow_holders)
        self._wanted, self._make_worker = wanted, make_worker
        self._workers: dict[str, FlowWorker] = {}
        self._stopping: list[FlowWorker] = []
        self.feed = ConfigFeed()
        self._applied: StraitConfig | None = None
        self._marks = MarkPublisher(client, options.namespace)

    def lease_name(self, item: str) -> str:
        """The lease a replica holds while working on ``item``."""
        return lease_name(self.options.service, item)

    def _flow_holders(self, items: frozenset[str]) -> dict[str, str]:
        """Which replica works on each item now, by the items' leases: it keeps the assignment sticky."""
        by_lease = {self.lease_name(item): item for item in items}
        return {by_lease[name]: holder for name, holder in self.leases.holders(by_lease).items()}

    def step(self) -> None:
        """One pass: follow the share, take and give back leases, pass on new configurations."""
        config = self.feed.current()
        if config is None:
            return
        wanted = {name for name in self._wanted(config)
                  if not self.options.flows or item_flow(name) in self.options.flows}
        share = self._tracker.refresh(wanted)
        mine = share.items & wanted
        self._stopping = [w for w in self._stopping if w.alive]
        restarted = config.restarted_flows(self._applied) if config is not self._applied else frozenset()
        for name, worker in list(self._workers.items()):
            if item_flow(name) in restarted:
                log.info("service=%s flow=%s restart requested: ending the work, it is taken again",
                         self.options.service, name)
            elif name not in mine or not worker.alive:
                log.info("service=%s flow=%s leaving this replica", self.options.service, name)
            else:
                continue
            worker.stop()
            self._stopping.append(self._workers.pop(name))
        if not share.stale:
            for name in sorted(mine - set(self._workers)):
                self._take(name, config)
        if config is not self._applied:
            for worker in self._workers.values():
                worker.update(config)
            self._applied = config
        self._marks.refresh(lambda: {self.lease_name(name): worker.restart_mark
                                     for name, worker in self._workers.items() if worker.alive})

    def _take(self, name: str, config: StraitConfig) -> None:
        if any(w.name == name for w in self._stopping):
            return  # still ending here; taken again once its lease is released
        try:
            lease = self.leases.acquire(self.lease_name(name), self.member_id, self.options.lease_ttl)
        except CoordinationError as exc:
            log.warning("service=%s flow=%s lease not acquired: %s", self.options.service, name, exc)
            ERRORS.labels(service=self.options.service, flow=name, kind="coordination").inc()
            return
        if lease is None:
            return  # the previous owner still holds it; it expires within one TTL
        keeper = LeaseKeeper(self.leases, lease).start()
        self._workers[name] = self._make_worker(keeper, config, name).start()
        self._marks.soon()  # a worker started (or restarted): say so at once
        log.info("service=%s flow=%s taken member=%s token=%s", self.options.service, name, self.member_id,
                 lease.token)

    def run(self, stop: threading.Event) -> None:
        """Run until ``stop`` is set, then end every worker (their leases are released)."""
        self._member.start()
        try:
            while not stop.is_set():
                try:
                    self.step()
                except Exception:  # the control loop must outlive any one step's trouble
                    log.exception("service=%s control step failed", self.options.service)
                    ERRORS.labels(service=self.options.service, flow="", kind="control").inc()
                self.feed.changed.wait(self.options.tick_seconds)
                self.feed.changed.clear()
        finally:
            workers = [*self._workers.values(), *self._stopping]
            for worker in workers:
                worker.stop()
            self._join(workers, time.monotonic() + min(WORKER_STOP_SECONDS, stop_time_left(stop)))
            self._member.stop()

    def _join(self, workers: list[FlowWorker], deadline: float) -> None:
        """Wait until ``deadline`` for the workers to end (each releases its lease as it ends).

        A worker blocked in a request to a dead cluster (admin timeouts of 15 s and more, a close
        that waits for its coordinator) is left behind: the process exits under it, and its lease
        expires within one TTL, as a killed replica's does.
        """
        for worker in workers:
            worker.join(timeout=max(0.0, deadline - time.monotonic()))
        stuck = sorted(worker.name for worker in workers if worker.alive)
        if stuck:
            log.warning("service=%s items=%s still busy at the stop deadline (a cluster not answering?): "
                        "leaving them; their leases expire within %.0fs", self.options.service,
                        ",".join(stuck), self.options.lease_ttl)


def run_supervised(settings: Settings, options: SupervisorOptions, wanted: Callable[[StraitConfig], set[str]],
                   make_worker: Callable[[FlowSupervisor, LeaseKeeper, StraitConfig, str], FlowWorker]) -> int:
    """Run a supervised service process until SIGINT or SIGTERM."""

    def body(stop: threading.Event, port: int) -> None:
        client = connect(settings.coordination_url())  # coordination needs Redis either way
        supervisor: FlowSupervisor

        def factory(keeper: LeaseKeeper, config: StraitConfig, name: str) -> FlowWorker:
            return make_worker(supervisor, keeper, config, name)

        supervisor = FlowSupervisor(options, client, port, wanted, factory)
        watcher = follow_config(supervisor.feed, settings, client, options.service)
        try:
            supervisor.run(stop)
        finally:
            if watcher is not None:
                watcher.stop()

    return run_service(options.service, settings, body)
