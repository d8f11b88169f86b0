"""Consumer-group admin calls shared by the checkpoint service and failover."""

from __future__ import annotations

from collections.abc import Sequence

from confluent_kafka import ConsumerGroupState, ConsumerGroupTopicPartitions, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from strait.kafka.admin import DEFAULT_TIMEOUT, KafkaAdminError, explain_error

# A group in one of these states has members: strait never writes its offsets.
ACTIVE_STATES = (ConsumerGroupState.STABLE, ConsumerGroupState.PREPARING_REBALANCING,
                 ConsumerGroupState.COMPLETING_REBALANCING)


def group_states(admin: AdminClient, alias: str, groups: Sequence[str],
                 timeout: float = DEFAULT_TIMEOUT) -> dict[str, ConsumerGroupState]:
    """Each group's state on the cluster (DEAD/EMPTY when it has no members)."""
    if not groups:
        return {}
    states: dict[str, ConsumerGroupState] = {}
    for group, future in admin.describe_consumer_groups(list(groups), request_timeout=timeout).items():
        try:
            states[group] = future.result(timeout=timeout).state
        except KafkaException as exc:
            raise explain_error(exc, alias, f"describing group {group}") from None
    return states


def alter_group_offsets(admin: AdminClient, alias: str, group: str, writes: list[TopicPartition],
                        timeout: float = DEFAULT_TIMEOUT) -> None:
    """Commit ``writes`` for ``group`` on cluster ``alias``; raises naming the first partition that failed."""
    future = admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(group, writes)],
                                                request_timeout=timeout)[group]
    try:
        result = future.result(timeout=timeout)
    except KafkaException as exc:
        raise explain_error(exc, alias, f"writing offsets of group {group}") from None
    failed = [tp for tp in result.topic_partitions or [] if tp.error is not None]
    if failed:
        raise KafkaAdminError(f"cluster {alias} group {group}: writing the offset of {failed[0].topic}"
                              f"[{failed[0].partition}] failed: {failed[0].error}")
