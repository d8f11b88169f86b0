"""One sync pass of one flow: topics and partitions, internal topics, topic configs, ACLs.

:class:`FlowSync` lists both clusters and runs the due steps (:mod:`.topic_sync`, :mod:`.config_sync`,
:mod:`.acl_sync`); each works item by item, so a failure is recorded and retried with its own
backoff without stopping the rest of the pass. Only a cluster that cannot even be listed fails the
pass as a whole (:class:`PassFailed`).
"""

from __future__ import annotations

import logging
import time
from dataclasses import replace

from confluent_kafka.admin import AdminClient

from strait.config.model import ClusterConfig, FlowConfig
from strait.errors import StraitError
from strait.kafka.admin import KafkaAdminError, admin_client, check_distinct_clusters, cluster_topics, topic_partitions
from strait.remote_topics import replicated_topics
from strait.retry import KeyedBackoff, error_kind, is_transient
from strait_configsync import metrics
from strait_configsync.acl_sync import AclSync
from strait_configsync.config_sync import ConfigSync
from strait_configsync.drift import ErrorNote, FlowReport
from strait_configsync.passes import STEPS, Fence, PassFailed, PassState, SyncOptions
from strait_configsync.topic_sync import TopicSync

log = logging.getLogger(__name__)

__all__ = ["STEPS", "FlowSync", "PassFailed", "SyncOptions"]


class FlowSync:
    """Runs sync passes for one flow and remembers what later passes need (drift, backoffs, clients)."""

    def __init__(self, flow: FlowConfig, source: ClusterConfig, target: ClusterConfig, holder: str,
                 fence: Fence, options: SyncOptions) -> None:
        self.holder, self.fence, self.options = holder, fence, options
        self.flow, self.source, self.target = flow, source, target
        self._admins: tuple[AdminClient, AdminClient] | None = None
        self.backoff = KeyedBackoff()
        self.last: FlowReport = FlowReport(flow.name, holder, time.time())
        self._topics, self._configs, self._acls = TopicSync(self), ConfigSync(self), AclSync(self)

    def update(self, flow: FlowConfig, source: ClusterConfig, target: ClusterConfig) -> None:
        """Adopt a new flow or cluster configuration (new clients when the clusters changed)."""
        if (source, target) != (self.source, self.target):
            self._admins = None
        self.flow, self.source, self.target = flow, source, target

    def clients(self) -> tuple[AdminClient, AdminClient]:
        """The source's and the target's admin clients (new ones after a transient error)."""
        if self._admins is None:
            self._admins = (admin_client(self.source.librdkafka_config("admin")),
                            admin_client(self.target.librdkafka_config("admin")))
        return self._admins

    def run(self, steps: frozenset[str]) -> FlowReport:
        """One pass over the given steps; other steps keep the drift of their last pass.

        Raises:
            PassFailed: a cluster could not be listed; nothing was changed.
            LeaseLostError: the flow's lease was lost; stop at once.
        """
        flow = self.flow
        source_admin, target_admin = self.clients()
        timeout = self.options.admin_timeout
        try:
            source_id, source_parts = cluster_topics(source_admin, flow.source, timeout)
            target_id, target_parts = cluster_topics(target_admin, flow.target, timeout)
            check_distinct_clusters(flow.name, (flow.source, source_id), (flow.target, target_id))
        except KafkaAdminError as exc:
            self._admins = None  # the next pass starts from fresh metadata
            raise PassFailed(f"flow {flow.name}: {exc}") from exc
        state = PassState(replicated_topics(flow, source_parts), source_parts, target_parts)
        report = replace(self.last, holder=self.holder, flow=flow.name)
        if "topics" in steps and flow.refresh_topics.enabled:
            self._topics.sync_topics(state)
            self._topics.sync_internal_topics(state)
            state.target_partitions = topic_partitions(target_admin, flow.target, timeout)
        report = self._topics.drift(report, state)
        if "configs" in steps:
            report = self._configs.run(report, state)
        if "acls" in steps:
            report = self._acls.run(report, state)
        report = replace(report, updated_at=time.time(), errors=tuple(state.errors),
                         topics_in_sync=TopicSync.in_sync(report, state))
        self.last = report
        return report

    # -- errors ------------------------------------------------------------------------------------

    def fail(self, state: PassState, key: str, sig: str, exc: StraitError) -> None:
        """Record a failed item: its backoff (fresh clients after a transient error), the error metric and note."""
        transient = is_transient(exc)
        if transient:
            self._admins = None  # the next try starts from fresh metadata
        delay = self.backoff.failed(key, sig, transient)
        kind = error_kind(exc)
        metrics.ERRORS.labels(service=metrics.SERVICE, flow=self.flow.name, kind=kind).inc()
        log.warning("flow=%s kind=%s retry_in=%.1fs %s", self.flow.name, kind, delay, exc)
        state.errors.append(ErrorNote(kind, str(exc)))

    def action(self, action: str, count: int = 1) -> None:
        """Count changes made (``strait_configsync_actions_total``)."""
        if count:
            metrics.ACTIONS.labels(flow=self.flow.name, action=action).inc(count)
