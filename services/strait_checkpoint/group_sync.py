"""Group offset sync: a flow's translated offsets written to target groups that have no active members.

A target offset only moves back when the source group's committed offset moved back (the group
was reset on the source); a group that turns active on the target meanwhile is left alone.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

from confluent_kafka import ConsumerGroupTopicPartitions, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from strait.config.model import FlowConfig
from strait.coord.leases import LeaseKeeper
from strait.kafka.admin import SERVICE_ADMIN_TIMEOUT, explain_error
from strait.kafka.groups import ACTIVE_STATES, group_states
from strait.translation import CheckpointKey, PartitionTranslation, committed_offsets
from strait_checkpoint import metrics
from strait_checkpoint.shards import HeldShards

log = logging.getLogger(__name__)


class GroupOffsetSync:
    """The source offset each (group, remote topic, partition) was last synced for, and the sync passes."""

    def __init__(self, flow: str) -> None:
        self.flow = flow
        self.synced_upstream: dict[CheckpointKey, int] = {}

    def keep_only(self, owned: Callable[[CheckpointKey], bool]) -> None:
        """Forget the groups this process no longer serves."""
        self.synced_upstream = {k: v for k, v in self.synced_upstream.items() if owned(k)}

    def sync_pass(self, flow: FlowConfig, target_consumer: Mapping[str, str], target_admin: AdminClient,
                  translations: Mapping[str, list[PartitionTranslation]], shards: HeldShards) -> None:
        """Write each inactive target group's translated offsets, under its shard's lease."""
        translated = {g: [t for t in ts if t.downstream is not None] for g, ts in translations.items()}
        translated = {g: ts for g, ts in translated.items() if ts}
        states = group_states(target_admin, flow.target, list(translated), SERVICE_ADMIN_TIMEOUT)
        synced = active = 0
        for group, result in translated.items():
            if states.get(group) in ACTIVE_STATES:
                active += 1
                continue

            def write(keeper: LeaseKeeper, g: str = group, r: list[PartitionTranslation] = result) -> bool:
                return self._sync_group(flow, target_consumer, target_admin, g, r, keeper)

            written = shards.as_holder(group, "synced", write)
            if written is None:
                continue
            if written:
                synced += 1
            else:
                active += 1
        metrics.GROUPS_SYNCED.labels(self.flow).set(synced)
        metrics.GROUPS_ACTIVE_ON_TARGET.labels(self.flow).set(active)

    def _sync_group(self, flow: FlowConfig, target_consumer: Mapping[str, str], target_admin: AdminClient,
                    group: str, translations: list[PartitionTranslation], keeper: LeaseKeeper) -> bool:
        """Write the group's translated offsets to the target; False when the group turned out active."""
        partitions = [TopicPartition(t.remote_topic, t.partition) for t in translations]
        current = {(c.topic, c.partition): c.offset for c in committed_offsets(
            target_consumer, flow.target, group, partitions, SERVICE_ADMIN_TIMEOUT)}
        writes = self._moves(group, translations, current)
        if not writes:
            return True
        keeper.ensure_valid()  # only the shard's lease holder writes
        request = [ConsumerGroupTopicPartitions(group, writes)]
        future = target_admin.alter_consumer_group_offsets(request, request_timeout=SERVICE_ADMIN_TIMEOUT)[group]
        try:
            result = future.result(timeout=SERVICE_ADMIN_TIMEOUT)
        except KafkaException as exc:
            if exc.args and exc.args[0].code() in (KafkaError.UNKNOWN_MEMBER_ID, KafkaError.REBALANCE_IN_PROGRESS):
                log.info("flow=%s group=%s became active on the target, not synced", self.flow, group)
                return False
            raise explain_error(exc, flow.target, f"writing offsets of group {group}") from None
        upstream = {(t.remote_topic, t.partition): t.upstream for t in translations}
        for tp in result.topic_partitions or []:
            if tp.error is None:
                self.synced_upstream[(group, tp.topic, tp.partition)] = upstream[(tp.topic, tp.partition)]
        metrics.GROUP_OFFSETS_WRITTEN.labels(self.flow).inc(len(writes))
        log.info("flow=%s group=%s target offsets written partitions=%d", self.flow, group, len(writes))
        return True

    def _moves(self, group: str, translations: list[PartitionTranslation],
               current: Mapping[tuple[str, int], int]) -> list[TopicPartition]:
        """The offsets to write: forward, or back only after a reset of the source group."""
        writes: list[TopicPartition] = []
        for t in translations:
            key = (group, t.remote_topic, t.partition)
            assert t.downstream is not None
            now_at = current.get((t.remote_topic, t.partition))
            reset = t.upstream < self.synced_upstream.get(key, -1)
            if now_at is None or t.downstream > now_at or (t.downstream < now_at and reset):
                writes.append(TopicPartition(t.remote_topic, t.partition, t.downstream, t.metadata))
            elif t.downstream == now_at:
                self.synced_upstream[key] = t.upstream
        return writes


