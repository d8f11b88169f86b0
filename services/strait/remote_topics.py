"""Which source topics a flow replicates, under what remote names, and keeping those topics in shape.

Shared by the replicator (which must never write to a topic that does not exist) and the config-sync
service: both call :func:`reconcile_remote_topics`, which is idempotent.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass

from confluent_kafka.admin import AdminClient

from strait.config.model import FlowConfig
from strait.kafka.admin import TopicSpec, create_topics, grow_partitions
from strait.kafka.configs import carried_configs, describe_topic_configs
from strait.policy import should_replicate_topic

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RemoteTopic:
    """A replicated topic: its source name, its name on the target, the source's partitions and the
    partitions its remote topic should have (the same, unless the flow repartitions)."""

    source: str
    remote: str
    partitions: int
    remote_partitions: int = 0

    def __post_init__(self) -> None:
        if not self.remote_partitions:
            object.__setattr__(self, "remote_partitions", self.partitions)


@dataclass(frozen=True)
class ReconcileReport:
    """What one reconciliation did and what it could not fix."""

    created: tuple[str, ...] = ()
    grown: tuple[str, ...] = ()
    # remote topics with more partitions than their source: records keep their partition number,
    # so the extra partitions stay empty; reported, never shrunk
    more_partitions_than_source: tuple[str, ...] = ()


def replicated_topics(flow: FlowConfig, source_partitions: Mapping[str, int]) -> list[RemoteTopic]:
    """The source topics the flow replicates (MM2's filter, internal-topic and cycle rules), sorted."""
    names, topic_filter = flow.topic_names(), flow.topic_filter()
    policy = names.policy
    return [
        RemoteTopic(topic, names.remote(topic), count, flow.target_partitions or count)
        for topic, count in sorted(source_partitions.items())
        if should_replicate_topic(policy, topic_filter, topic, flow.target, flow.heartbeats_replication_enabled)
    ]


def reconcile_remote_topics(
    flow: FlowConfig, topics: list[RemoteTopic], target_partitions: Mapping[str, int],
    source_admin: AdminClient, target_admin: AdminClient,
) -> ReconcileReport:
    """Create missing remote topics like their source (partitions, configs) and grow the ones behind.

    A repartitioning flow's remote topics get its own partition count instead of the source's.

    New remote topics get the source topic's configs the flow carries (:func:`carried_configs`):
    retention above all, or records with old timestamps would be deleted on arrival.
    """
    missing = [t for t in topics if t.remote not in target_partitions]
    described = describe_topic_configs(source_admin, flow.source, [t.source for t in missing])
    if described.errors:
        raise next(iter(described.errors.values()))
    allowed = flow.config_property_filter()
    created = create_topics(target_admin, flow.target, [
        TopicSpec(t.remote, t.remote_partitions, flow.replication_factor,
                  carried_configs(described.configs.get(t.source, {}), allowed))
        for t in missing
    ])
    behind = {t.remote: t.remote_partitions for t in topics
              if t.remote in target_partitions and target_partitions[t.remote] < t.remote_partitions}
    grow_partitions(target_admin, flow.target, behind)
    ahead = tuple(t.remote for t in topics
                  if t.remote in target_partitions and target_partitions[t.remote] > t.remote_partitions)
    for remote in ahead:
        log.warning("flow=%s topic=%s has more partitions on %s than on %s; extra partitions stay empty",
                    flow.name, remote, flow.target, flow.source)
    return ReconcileReport(tuple(created), tuple(sorted(behind)), ahead)
