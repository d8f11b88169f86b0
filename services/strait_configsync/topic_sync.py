"""The topics step of a configsync pass: remote topics and partitions, internal topics, topic drift."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import replace

from confluent_kafka.admin import AdminClient

from strait.kafka.admin import KafkaAdminError, TopicSpec, create_topics, internal_topic
from strait.kafka.configs import ConfigChange, alter_topic_configs, describe_topic_configs
from strait.remote_topics import reconcile_remote_topics
from strait_configsync.drift import FlowReport, PartitionMismatch, capped
from strait_configsync.passes import PassContext, PassState, signature

log = logging.getLogger(__name__)

COMPACT = {"cleanup.policy": "compact"}


class TopicSync:
    """Creates missing remote topics, grows partitions, keeps the flow's internal topics compacted."""

    def __init__(self, sync: PassContext) -> None:
        self.sync = sync

    def sync_topics(self, state: PassState) -> None:
        source_admin, target_admin = self.sync.clients()
        work = [t for t in state.topics if state.target_partitions.get(t.remote, t.remote_partitions) < t.remote_partitions
                or t.remote not in state.target_partitions]
        for topic in work:
            key, sig = f"topic:{topic.remote}", signature(topic.remote_partitions)
            if not self.sync.backoff.ready(key, sig):
                continue
            self.sync.fence.check()
            try:
                # one topic per call: a topic the target refuses must not hold back the others
                done = reconcile_remote_topics(self.sync.flow, [topic], state.target_partitions, source_admin, target_admin)
            except KafkaAdminError as exc:
                self.sync.fail(state, key, sig, exc)
                continue
            self.sync.backoff.succeeded(key)
            self.sync.action("topic_created", len(done.created))
            self.sync.action("partitions_grown", len(done.grown))

    def _internal_specs(self) -> dict[str, list[TopicSpec]]:
        flow, names = self.sync.flow, self.sync.flow.topic_names()
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

    def sync_internal_topics(self, state: PassState) -> None:
        admins = dict(zip((self.sync.flow.source, self.sync.flow.target), self.sync.clients(), strict=True))
        existing = {self.sync.flow.source: state.source_partitions, self.sync.flow.target: state.target_partitions}
        for alias, specs in self._internal_specs().items():
            for spec in specs:
                key = f"internal:{alias}:{spec.name}"
                if not self.sync.backoff.ready(key):
                    continue
                self.sync.fence.check()
                try:
                    self._keep_internal_topic(admins[alias], alias, spec, existing[alias])
                except KafkaAdminError as exc:
                    self.sync.fail(state, key, "", exc)
                    continue
                self.sync.backoff.succeeded(key)

    def _keep_internal_topic(self, admin: AdminClient, alias: str, spec: TopicSpec,
                             existing: Mapping[str, int]) -> None:
        timeout = self.sync.options.admin_timeout
        if spec.name not in existing:
            self.sync.action("internal_topic_created", len(create_topics(admin, alias, [spec], timeout)))
            return
        if existing[spec.name] != 1:
            log.warning("flow=%s cluster=%s internal topic=%s has %d partitions; MM2 readers use partition 0 only",
                        self.sync.flow.name, alias, spec.name, existing[spec.name])
        described = describe_topic_configs(admin, alias, [spec.name], timeout)
        if spec.name in described.errors:
            raise described.errors[spec.name]
        policy = described.configs[spec.name].get("cleanup.policy")
        if policy is None or policy.value != "compact":
            failed = alter_topic_configs(admin, alias, {spec.name: ConfigChange(COMPACT)}, timeout)
            if failed:
                raise failed[spec.name]
            self.sync.action("internal_topic_compacted")

    def drift(self, report: FlowReport, state: PassState) -> FlowReport:
        missing = [t.remote for t in state.topics if t.remote not in state.target_partitions]
        mismatched = [PartitionMismatch(t.remote, t.remote_partitions, state.target_partitions[t.remote])
                      for t in state.topics
                      if t.remote in state.target_partitions
                      and state.target_partitions[t.remote] != t.remote_partitions]
        internal = sorted(f"{alias}:{spec.name}" for alias, specs in self._internal_specs().items()
                          for spec in specs
                          if spec.name in (state.source_partitions if alias == self.sync.flow.source
                                           else state.target_partitions))
        return replace(report, topics_replicated=len(state.topics), missing=capped(missing),
                       missing_count=len(missing), partition_mismatch=capped(mismatched),
                       partition_mismatch_count=len(mismatched), internal_topics=tuple(internal))

    @staticmethod
    def in_sync(report: FlowReport, state: PassState) -> int:
        drifted = {d.topic for d in report.config_drift}
        return sum(1 for t in state.topics
                   if state.target_partitions.get(t.remote) == t.remote_partitions and t.remote not in drifted)
