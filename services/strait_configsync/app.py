"""The configsync process: keeps every enabled flow's target in step with its source.

Work items are flows. Replicas register in the ``configsync`` membership group; every replica
computes the same balanced assignment of flows over the live members, and before acting on a flow
it takes the flow's fenced lease (``configsync:<flow>``), so no flow is ever synced by two replicas
at once. A killed replica stops renewing: its membership and its leases expire within one lease
TTL and the flows move to the survivors. A replica hands a flow over by finishing its pass and
releasing the lease.

The configuration comes from Redis (live: a new version takes effect at once) or from a file;
coordination always goes through Redis (the file's ``redis_url`` with ``--config``).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import uuid
from dataclasses import dataclass
from pathlib import Path

import redis

from strait.config import load_config
from strait.config.model import DEFAULT_REDIS_URL, StraitConfig
from strait.config.secrets import resolve_value
from strait.coord.assignment import ShareTracker
from strait.coord.leases import LeaseKeeper, Leases
from strait.coord.membership import MemberKeeper, Membership
from strait.coord.redis_client import CoordinationError, connect
from strait.service import ConfigFeed, follow_config, run_service
from strait_configsync import metrics
from strait_configsync.sync import SyncOptions
from strait_configsync.worker import FlowWorker, WorkerContext

log = logging.getLogger(__name__)

GROUP = "configsync"


@dataclass(frozen=True)
class ConfigSyncOptions:
    """How the configsync process runs."""

    redis_url: str | None = None
    config_file: Path | None = None
    flows: tuple[str, ...] = ()  # only these flows (all enabled ones when empty)
    metrics_port: int = 0
    lease_ttl: float = 15.0
    delete_acls: bool = False
    admin_timeout: float = 15.0
    tick_seconds: float = 0.5
    namespace: str = "strait"


def lease_name(flow: str) -> str:
    """The lease a replica holds while syncing ``flow``."""
    return f"{GROUP}:{flow}"


class ConfigSync:
    """The control loop: membership, share of the flows, leases, and one worker per held flow."""

    def __init__(self, options: ConfigSyncOptions, client: redis.Redis, metrics_port: int = 0) -> None:
        self.options = options
        self.member_id = f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        self._client = client
        self._leases = Leases(client, options.namespace)
        self._membership = Membership(client, options.namespace)
        self._member = MemberKeeper(self._membership, GROUP, self.member_id, options.lease_ttl,
                                    {"host": socket.gethostname(), "pid": str(os.getpid()),
                                     "metrics_port": str(metrics_port)})
        self._tracker = ShareTracker(self._membership, GROUP, self.member_id)
        self._context = WorkerContext(client, self._leases, self.member_id, options.namespace,
                                      SyncOptions(options.admin_timeout, options.delete_acls))
        self._workers: dict[str, FlowWorker] = {}
        self._stopping: list[FlowWorker] = []
        self.feed = ConfigFeed()
        self._applied: StraitConfig | None = None

    def step(self) -> None:
        """One control-loop pass: follow the share, take and give back leases, pass on new configs."""
        config = self.feed.current()
        if config is None:
            return
        wanted = {f.name for f in config.enabled_flows if not self.options.flows or f.name in self.options.flows}
        share = self._tracker.refresh(wanted)
        mine = share.items & wanted
        self._stopping = [w for w in self._stopping if w.alive]
        for name, worker in list(self._workers.items()):
            if name not in mine or not worker.alive:
                log.info("flow=%s leaving this replica member=%s", name, self.member_id)
                worker.stop()
                self._stopping.append(self._workers.pop(name))
        if not share.stale:
            for name in sorted(mine - set(self._workers)):
                self._take(name, config)
        if config is not self._applied:
            for worker in self._workers.values():
                worker.update(config)
            self._applied = config

    def _take(self, name: str, config: StraitConfig) -> None:
        if any(w.name == name for w in self._stopping):
            return  # still finishing its last pass here; take it again once released
        try:
            lease = self._leases.acquire(lease_name(name), self.member_id, self.options.lease_ttl)
        except CoordinationError as exc:
            log.warning("flow=%s lease not acquired: %s", name, exc)
            metrics.ERRORS.labels(service=metrics.SERVICE, flow=name, kind="coordination").inc()
            return
        if lease is None:
            return  # the previous owner still holds it; it expires within one TTL
        keeper = LeaseKeeper(self._leases, lease).start()
        self._workers[name] = FlowWorker(self._context, keeper, config, name).start()
        log.info("flow=%s taken member=%s token=%s", name, self.member_id, lease.token)

    def run(self, stop: threading.Event) -> None:
        """Run until ``stop`` is set, then hand every flow back."""
        self._member.start()
        try:
            while not stop.is_set():
                try:
                    self.step()
                except Exception:  # the control loop must outlive any one step's trouble
                    log.exception("configsync control step failed")
                    metrics.ERRORS.labels(service=metrics.SERVICE, flow="", kind="control").inc()
                self.feed.changed.wait(self.options.tick_seconds)
                self.feed.changed.clear()
        finally:
            for worker in [*self._workers.values(), *self._stopping]:
                worker.stop()
            for worker in [*self._workers.values(), *self._stopping]:
                worker.join(timeout=self.options.admin_timeout * 4)
            self._member.stop()


def _redis_url(options: ConfigSyncOptions, config: StraitConfig | None) -> str:
    if options.redis_url:
        return options.redis_url
    if config is not None:
        return resolve_value(config.redis_url)
    return os.environ.get("STRAIT_REDIS_URL", DEFAULT_REDIS_URL)


def main(options: ConfigSyncOptions) -> int:
    """Run configsync until SIGINT or SIGTERM."""

    def body(stop: threading.Event, port: int) -> None:
        file_config = load_config(options.config_file) if options.config_file is not None else None
        client = connect(_redis_url(options, file_config))  # coordination needs Redis either way
        service = ConfigSync(options, client, port)
        watcher = follow_config(service.feed, options.config_file, client, options.namespace)
        try:
            service.run(stop)
        finally:
            if watcher is not None:
                watcher.stop()

    return run_service(metrics.SERVICE, options.metrics_port, body)
