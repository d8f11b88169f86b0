"""The worker that syncs one flow while its replica holds the flow's lease.

Each step (topics, configs, ACLs) runs at its flow interval, and all of them at once when the
flow's configuration changes. A pass that cannot run at all (a cluster unreachable) is retried
with the shared cluster retry policy (:mod:`strait.retry`: a few seconds at most, so a cluster that
answers again is synced at once), never a crash loop.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, replace

import redis

from strait.config.model import StraitConfig
from strait.coord.leases import LeaseKeeper, LeaseLostError, Leases
from strait.coord.redis_client import CoordinationError, redis_errors
from strait.replicas import FlowWorker
from strait.retry import FlowTrouble
from strait_configsync import metrics
from strait_configsync.drift import ErrorNote, FlowReport, encode_report, report_key
from strait_configsync.ownership import Ownership, owned_key
from strait_configsync.sync import STEPS, FlowSync, PassFailed, SyncOptions

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class WorkerContext:
    """What every flow worker of a process shares."""

    client: redis.Redis
    leases: Leases
    holder: str
    namespace: str
    options: SyncOptions


class RedisFence:
    """The flow's lease seen by a pass: checked before acting, fencing every Redis write."""

    def __init__(self, context: WorkerContext, keeper: LeaseKeeper, flow: str) -> None:
        self._context, self._keeper, self._flow = context, keeper, flow

    def check(self) -> None:
        """Raise LeaseLostError when the lease is lost or past its local deadline."""
        self._keeper.ensure_valid()

    def load_ownership(self) -> Ownership:
        """The flow's ownership record from Redis."""
        client = self._context.client
        with redis_errors(client, f"read ownership of flow {self._flow}"):
            return Ownership.decode(client.get(owned_key(self._context.namespace, self._flow)))

    def save_ownership(self, ownership: Ownership) -> None:
        """Store the ownership record, only while the lease is ours."""
        self._context.leases.fenced_set(self._keeper.ensure_valid(),
                                        owned_key(self._context.namespace, self._flow), ownership.encode())

    def publish(self, report: FlowReport, ttl: float) -> None:
        """Store the drift report for `strait status`, only while the lease is ours."""
        self._context.leases.fenced_set(self._keeper.ensure_valid(),
                                        report_key(self._context.namespace, self._flow), encode_report(report), ttl=ttl)


class SyncWorker(FlowWorker):
    """Syncs one flow while this replica holds the flow's lease (the thread and lease are the frame's)."""

    def __init__(self, context: WorkerContext, keeper: LeaseKeeper, config: StraitConfig, flow_name: str) -> None:
        super().__init__(metrics.SERVICE, keeper, config, flow_name)
        self._context = context
        self._fence = RedisFence(context, keeper, flow_name)
        flow = config.flow(flow_name)
        self._sync = FlowSync(flow, config.cluster(flow.source), config.cluster(flow.target), context.holder,
                              self._fence, context.options)
        self._trouble = FlowTrouble(metrics.SERVICE, flow_name, "sync pass")

    def start(self) -> SyncWorker:
        """Start syncing; returns self."""
        metrics.set_leader(self.name, True)
        super().start()
        return self

    def work(self) -> None:
        due = dict.fromkeys(STEPS, 0.0)
        while self.running:
            if self._adopt_update():
                due = dict.fromkeys(STEPS, 0.0)
            now = time.monotonic()
            ready = frozenset(step for step, at in due.items() if at <= now)
            if ready:
                self._pass(ready, due)
            self.wake.wait(max(0.0, min(due.values()) - time.monotonic()))
            self.wake.clear()

    def close(self) -> None:
        metrics.set_leader(self.name, False)

    def _adopt_update(self) -> bool:
        config = self.take_update()
        if config is None:
            return False
        flow = config.flow(self.name)
        self._sync.update(flow, config.cluster(flow.source), config.cluster(flow.target))
        log.info("flow=%s configuration changed: syncing now", self.name)
        return True

    def _pass(self, ready: frozenset[str], due: dict[str, float]) -> None:
        """Run one pass, schedule the next, publish the report."""
        flow = self._sync.flow
        intervals = {"topics": flow.refresh_topics.interval_seconds,
                     "configs": flow.sync_topic_configs.interval_seconds,
                     "acls": flow.sync_topic_acls.interval_seconds}
        started = time.monotonic()
        try:
            report = self._sync.run(ready)
            for step in ready:
                due[step] = started + intervals[step]
            self._trouble.succeeded(state=None)  # the report sets the flow's state
        except LeaseLostError:
            raise
        except Exception as exc:  # the loop must outlive any failure, PassFailed and Redis trouble included
            cause = exc.__cause__ if isinstance(exc, PassFailed) and exc.__cause__ else exc
            delay = self._trouble.failed(cause, message=str(exc))
            for step in due:
                due[step] = started + delay
            report = replace(self._sync.last, updated_at=time.time(), holder=self._context.holder,
                             errors=(ErrorNote(self._trouble.kind or "internal", str(exc)),))
        metrics.export_report(report, time.time())
        self._publish(report, max(intervals.values()))

    def _publish(self, report: FlowReport, interval: float) -> None:
        try:
            self._fence.publish(report, ttl=max(60.0, 3 * interval))
        except LeaseLostError:
            raise
        except CoordinationError as exc:
            log.warning("flow=%s drift report not published: %s", self.name, exc)
