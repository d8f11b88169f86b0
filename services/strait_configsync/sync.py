"""One sync pass of one flow: topics and partitions, internal topics, topic configs, ACLs.

Each step works topic by topic (or binding by binding): a failure is recorded with a message naming
topic and cluster, retried later with its own backoff, and never stops the rest of the pass. Only
a cluster that cannot even be listed fails the pass as a whole (:class:`PassFailed`).
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Protocol

from confluent_kafka.admin import AclBinding, AdminClient

from strait.config.model import ClusterConfig, FlowConfig
from strait.errors import StraitError
from strait.kafka.acls import AuthorizerDisabledError, create_acls, delete_acls, describe_acls, describe_binding
from strait.kafka.admin import (
    KafkaAdminError,
    TopicSpec,
    admin_client,
    check_distinct_clusters,
    cluster_topics,
    create_topics,
    internal_topic,
    topic_partitions,
)
from strait.kafka.configs import ConfigChange, alter_topic_configs, describe_topic_configs
from strait.retry import KeyedBackoff, error_kind, is_transient
from strait.remote_topics import RemoteTopic, reconcile_remote_topics, replicated_topics
from strait_configsync import metrics
from strait_configsync.acls import desired_acls
from strait_configsync.configs import drifted_keys, plan_configs, wanted_configs
from strait_configsync.drift import ConfigDrift, ErrorNote, FlowReport, PartitionMismatch, capped
from strait_configsync.ownership import Ownership

log = logging.getLogger(__name__)

STEPS = ("topics", "configs", "acls")
COMPACT = {"cleanup.policy": "compact"}


class Fence(Protocol):
    """The flow's lease as the pass sees it: check it before acting, write Redis under it."""

    def check(self) -> None:
        """Raise LeaseLostError when the lease is gone."""

    def load_ownership(self) -> Ownership:
        """The flow's ownership record."""

    def save_ownership(self, ownership: Ownership) -> None:
        """Store the flow's ownership record (fenced)."""


class PassFailed(StraitError):
    """The pass could not run at all (a cluster could not be listed)."""


def signature(*parts: object) -> str:
    """A short stable digest of what is being attempted."""
    return hashlib.blake2b(repr(parts).encode(), digest_size=8).hexdigest()


def _change_signature(change: ConfigChange) -> str:
    return signature(sorted(change.set.items()), sorted(change.delete))


@dataclass
class _Pass:
    """What one pass collects on its way."""

    topics: list[RemoteTopic]
    source_partitions: dict[str, int]
    target_partitions: dict[str, int]
    errors: list[ErrorNote] = field(default_factory=list)


@dataclass(frozen=True)
class SyncOptions:
    """How passes behave."""

    admin_timeout: float = 15.0
    delete_acls: bool = False


class FlowSync:
    """Runs sync passes for one flow and remembers what later passes need (drift, backoffs, clients)."""

    def __init__(self, flow: FlowConfig, source: ClusterConfig, target: ClusterConfig, holder: str,
                 fence: Fence, options: SyncOptions) -> None:
        self.holder, self.fence, self.options = holder, fence, options
        self.flow, self.source, self.target = flow, source, target
        self._admins: tuple[AdminClient, AdminClient] | None = None
        self.backoff = KeyedBackoff()
        self.last: FlowReport = FlowReport(flow.name, holder, time.time())

    def update(self, flow: FlowConfig, source: ClusterConfig, target: ClusterConfig) -> None:
        """Adopt a new flow or cluster configuration (new clients when the clusters changed)."""
        if (source, target) != (self.source, self.target):
            self._admins = None
        self.flow, self.source, self.target = flow, source, target

    def _clients(self) -> tuple[AdminClient, AdminClient]:
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
        source_admin, target_admin = self._clients()
        timeout = self.options.admin_timeout
        try:
            source_id, source_parts = cluster_topics(source_admin, flow.source, timeout)
            target_id, target_parts = cluster_topics(target_admin, flow.target, timeout)
            check_distinct_clusters(flow.name, (flow.source, source_id), (flow.target, target_id))
        except KafkaAdminError as exc:
            self._admins = None  # the next pass starts from fresh metadata
            raise PassFailed(f"flow {flow.name}: {exc}") from exc
        state = _Pass(replicated_topics(flow, source_parts), source_parts, target_parts)
        report = replace(self.last, holder=self.holder, flow=flow.name)
        if "topics" in steps and flow.refresh_topics.enabled:
            self._sync_topics(state)
            self._sync_internal_topics(state)
            state.target_partitions = topic_partitions(target_admin, flow.target, timeout)
        report = self._topic_drift(report, state)
        if "configs" in steps:
            report = self._sync_configs(report, state)
        if "acls" in steps:
            report = self._sync_acls(report, state)
        report = replace(report, updated_at=time.time(), errors=tuple(state.errors),
                         topics_in_sync=self._in_sync(report, state))
        self.last = report
        return report

    # -- errors ------------------------------------------------------------------------------------

    def _fail(self, state: _Pass, key: str, sig: str, exc: StraitError) -> None:
        transient = is_transient(exc)
        if transient:
            self._admins = None  # the next try starts from fresh metadata
        delay = self.backoff.failed(key, sig, transient)
        kind = error_kind(exc)
        metrics.ERRORS.labels(service=metrics.SERVICE, flow=self.flow.name, kind=kind).inc()
        log.warning("flow=%s kind=%s retry_in=%.1fs %s", self.flow.name, kind, delay, exc)
        state.errors.append(ErrorNote(kind, str(exc)))

    def _action(self, action: str, count: int = 1) -> None:
        if count:
            metrics.ACTIONS.labels(flow=self.flow.name, action=action).inc(count)

    # -- topics and partitions ----------------------------------------------------------------------

    def _sync_topics(self, state: _Pass) -> None:
        source_admin, target_admin = self._clients()
        work = [t for t in state.topics if state.target_partitions.get(t.remote, t.remote_partitions) < t.remote_partitions
                or t.remote not in state.target_partitions]
        for topic in work:
            key, sig = f"topic:{topic.remote}", signature(topic.remote_partitions)
            if not self.backoff.ready(key, sig):
                continue
            self.fence.check()
            try:
                # one topic per call: a topic the target refuses must not hold back the others
                done = reconcile_remote_topics(self.flow, [topic], state.target_partitions, source_admin, target_admin)
            except KafkaAdminError as exc:
                self._fail(state, key, sig, exc)
                continue
            self.backoff.succeeded(key)
            self._action("topic_created", len(done.created))
            self._action("partitions_grown", len(done.grown))

    def _internal_specs(self) -> dict[str, list[TopicSpec]]:
        flow, names = self.flow, self.flow.topic_names()
        specs: dict[str, list[TopicSpec]] = {flow.source: [], flow.target: []}
        if flow.emit_heartbeats.enabled:
            # MM2 keeps heartbeats on the target; strait's heartbeat service writes the source's copy
            rf = flow.internal_topic_replication_factor("heartbeats")
            specs[flow.target].append(internal_topic(names.heartbeats, rf))
            specs[flow.source].append(internal_topic(names.heartbeats, rf))
        if flow.emits_checkpoints:
            rf = flow.internal_topic_replication_factor("checkpoints")
            specs[flow.target].append(internal_topic(names.checkpoints, rf))
        if flow.writes_offset_syncs:
            syncs = names.offset_syncs
            rf = flow.internal_topic_replication_factor("offset_syncs")
            specs[syncs.alias].append(internal_topic(syncs.topic, rf))
        return specs

    def _sync_internal_topics(self, state: _Pass) -> None:
        admins = dict(zip((self.flow.source, self.flow.target), self._clients(), strict=True))
        existing = {self.flow.source: state.source_partitions, self.flow.target: state.target_partitions}
        for alias, specs in self._internal_specs().items():
            for spec in specs:
                key = f"internal:{alias}:{spec.name}"
                if not self.backoff.ready(key):
                    continue
                self.fence.check()
                try:
                    self._keep_internal_topic(admins[alias], alias, spec, existing[alias])
                except KafkaAdminError as exc:
                    self._fail(state, key, "", exc)
                    continue
                self.backoff.succeeded(key)

    def _keep_internal_topic(self, admin: AdminClient, alias: str, spec: TopicSpec,
                             existing: Mapping[str, int]) -> None:
        timeout = self.options.admin_timeout
        if spec.name not in existing:
            self._action("internal_topic_created", len(create_topics(admin, alias, [spec], timeout)))
            return
        if existing[spec.name] != 1:
            log.warning("flow=%s cluster=%s internal topic=%s has %d partitions; MM2 readers use partition 0 only",
                        self.flow.name, alias, spec.name, existing[spec.name])
        described = describe_topic_configs(admin, alias, [spec.name], timeout)
        if spec.name in described.errors:
            raise described.errors[spec.name]
        policy = described.configs[spec.name].get("cleanup.policy")
        if policy is None or policy.value != "compact":
            failed = alter_topic_configs(admin, alias, {spec.name: ConfigChange(COMPACT)}, timeout)
            if failed:
                raise failed[spec.name]
            self._action("internal_topic_compacted")

    def _topic_drift(self, report: FlowReport, state: _Pass) -> FlowReport:
        missing = [t.remote for t in state.topics if t.remote not in state.target_partitions]
        mismatched = [PartitionMismatch(t.remote, t.remote_partitions, state.target_partitions[t.remote])
                      for t in state.topics
                      if t.remote in state.target_partitions
                      and state.target_partitions[t.remote] != t.remote_partitions]
        internal = sorted(f"{alias}:{spec.name}" for alias, specs in self._internal_specs().items()
                          for spec in specs
                          if spec.name in (state.source_partitions if alias == self.flow.source
                                           else state.target_partitions))
        return replace(report, topics_replicated=len(state.topics), missing=capped(missing),
                       missing_count=len(missing), partition_mismatch=capped(mismatched),
                       partition_mismatch_count=len(mismatched), internal_topics=tuple(internal))

    @staticmethod
    def _in_sync(report: FlowReport, state: _Pass) -> int:
        drifted = {d.topic for d in report.config_drift}
        return sum(1 for t in state.topics
                   if state.target_partitions.get(t.remote) == t.remote_partitions and t.remote not in drifted)

    # -- configs ------------------------------------------------------------------------------------

    def _sync_configs(self, report: FlowReport, state: _Pass) -> FlowReport:
        if not self.flow.sync_topic_configs.enabled:
            return replace(report, config_drift=(), config_drift_count=0)
        source_admin, target_admin = self._clients()
        present = [t for t in state.topics if t.remote in state.target_partitions]
        timeout = self.options.admin_timeout
        source = describe_topic_configs(source_admin, self.flow.source, [t.source for t in present], timeout)
        target = describe_topic_configs(target_admin, self.flow.target, [t.remote for t in present], timeout)
        ownership = self.fence.load_ownership()
        allowed = self.flow.config_property_filter()
        owned: dict[str, frozenset[str]] = {}
        changes: dict[str, ConfigChange] = {}
        drift: dict[str, list[str]] = {}
        for topic in present:
            before = ownership.configs.get(topic.remote, frozenset())
            owned[topic.remote] = before
            error = source.errors.get(topic.source) or target.errors.get(topic.remote)
            if error is not None:
                self._fail(state, f"config:{topic.remote}", "describe", error)
                continue
            wanted = wanted_configs(source.configs[topic.source], allowed)
            current = target.configs[topic.remote]
            plan = plan_configs(wanted, current, before)
            if not plan.change or self.backoff.ready(f"config:{topic.remote}", _change_signature(plan.change)):
                owned[topic.remote] = plan.owned_after
                if plan.change:
                    changes[topic.remote] = plan.change
            drift[topic.remote] = drifted_keys(wanted, current)
        self.fence.check()
        failed = alter_topic_configs(target_admin, self.flow.target, changes, timeout)
        for remote, change in changes.items():
            key = f"config:{remote}"
            if remote in failed:
                self._fail(state, key, _change_signature(change), failed[remote])
                owned[remote] = ownership.configs.get(remote, frozenset())
                continue
            self.backoff.succeeded(key)
            drift[remote] = []
            self._action("config_set", len(change.set))
            self._action("config_deleted", len(change.delete))
        new = Ownership({t: k for t, k in owned.items() if k}, ownership.acls)
        if new != ownership:
            self.fence.save_ownership(new)
        drifted = [ConfigDrift(topic, tuple(keys)) for topic, keys in sorted(drift.items()) if keys]
        return replace(report, config_drift=capped(drifted), config_drift_count=len(drifted))

    # -- ACLs ---------------------------------------------------------------------------------------

    def _sync_acls(self, report: FlowReport, state: _Pass) -> FlowReport:
        if not self.flow.sync_topic_acls.enabled:
            return replace(report, acl_sync="disabled", acls_wanted=0, acls_missing=(), acls_missing_count=0,
                           acls_deleted_on_source=(), acls_deleted_on_source_count=0)
        source_admin, target_admin = self._clients()
        timeout = self.options.admin_timeout
        try:
            source_acls = describe_acls(source_admin, self.flow.source, timeout=timeout)
        except AuthorizerDisabledError:
            return replace(report, acl_sync="source has no authorizer", acls_wanted=0, acls_missing=(),
                           acls_missing_count=0, acls_deleted_on_source=(), acls_deleted_on_source_count=0)
        except KafkaAdminError as exc:
            self._fail(state, "acls:source", "", exc)
            return replace(report, acl_sync="failed")
        wanted = desired_acls(self.flow, source_acls, [t.source for t in state.topics])
        try:
            on_target = set(describe_acls(target_admin, self.flow.target, timeout=timeout))
        except KafkaAdminError as exc:
            self._fail(state, "acls:target", "", exc)
            return self._acl_report(report, wanted, wanted, set(), "failed")
        ownership = self.fence.load_ownership()
        missing = wanted - on_target
        stale = (ownership.acls - wanted) & on_target
        created = self._apply_acls(state, "create", missing)
        deleted = self._apply_acls(state, "delete", stale) if self.options.delete_acls else set()
        if stale - deleted and not self.options.delete_acls:
            log.warning("flow=%s cluster=%s keeps %d ACLs deleted on %s (start with --delete-acls to remove): %s",
                        self.flow.name, self.flow.target, len(stale), self.flow.source,
                        "; ".join(sorted(describe_binding(b) for b in stale))[:2000])
        present = (on_target | created) - deleted
        new = Ownership(ownership.configs, frozenset((wanted & present) | (stale - deleted)))
        if new != ownership:
            self.fence.save_ownership(new)
        return self._acl_report(report, wanted, missing - created, stale - deleted, "ok")

    def _apply_acls(self, state: _Pass, verb: str, bindings: set[AclBinding]) -> set[AclBinding]:
        key = f"acls:{verb}"
        sig = signature(sorted(map(describe_binding, bindings)))
        if not bindings or not self.backoff.ready(key, sig):
            return set()
        self.fence.check()
        call = create_acls if verb == "create" else delete_acls
        _, target_admin = self._clients()
        try:
            result = call(target_admin, self.flow.target, bindings, timeout=self.options.admin_timeout)
        except KafkaAdminError as exc:
            self._fail(state, key, sig, exc)
            return set()
        if result.failed:
            self._fail(state, key, sig, result.failed[0][1])
        else:
            self.backoff.succeeded(key)
        self._action(f"acl_{verb}d", len(result.done))
        return set(result.done)

    @staticmethod
    def _acl_report(report: FlowReport, wanted: set[AclBinding], missing: set[AclBinding],
                    stale: set[AclBinding], status: str) -> FlowReport:
        return replace(report, acl_sync=status, acls_wanted=len(wanted),
                       acls_missing=capped(sorted(map(describe_binding, missing))), acls_missing_count=len(missing),
                       acls_deleted_on_source=capped(sorted(map(describe_binding, stale))),
                       acls_deleted_on_source_count=len(stale))
