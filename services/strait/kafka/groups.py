"""Consumer-group admin calls shared by the checkpoint service and failover."""

from __future__ import annotations

from collections.abc import Sequence

from confluent_kafka import ConsumerGroupState, KafkaException
from confluent_kafka.admin import AdminClient

from strait.kafka.admin import DEFAULT_TIMEOUT, explain_error

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
