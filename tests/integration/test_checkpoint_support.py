"""Shared helpers of the heartbeat and checkpoint tests."""

from __future__ import annotations

import time

from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

from strait_lab.kafka import KafkaCluster

def commit_offsets(cluster: KafkaCluster, group: str, partitions: list[TopicPartition], timeout: float = 60.0) -> None:
    """Commit a group's offsets through the admin API, retrying while the coordinator is still loading."""
    admin = cluster.admin()  # kept alive while its futures run
    deadline = time.monotonic() + timeout
    while True:
        result = admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(group, partitions)])[group]
        errors = [tp.error for tp in result.result(timeout=30).topic_partitions if tp.error is not None]
        if not errors:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"committing offsets of {group}: {errors[0]}")
        time.sleep(0.5)
