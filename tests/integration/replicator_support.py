"""Shared helpers of the replicator tests: configs on the test clusters, processes, waiting."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import yaml

from strait_lab.clients import Record, consume_all
from strait_lab.kafka import KafkaCluster


def flow_config(source: KafkaCluster, target: KafkaCluster, include: list[str], **flow: Any) -> dict[str, Any]:
    """A strait YAML config (as a dict) with one flow source->target over topics matching ``include``."""
    return {
        "clusters": {
            source.alias: {"bootstrap_servers": source.bootstrap_servers},
            target.alias: {"bootstrap_servers": target.bootstrap_servers},
        },
        "flows": [{
            "source": source.alias, "target": target.alias,
            "topics": {"include": include},
            "replication_factor": 1,
            "refresh_topics": {"enabled": True, "interval_seconds": 3},
            **flow,
        }],
    }


def write_config(path: Path, config: Mapping[str, Any]) -> Path:
    """Write a config dict as YAML."""
    path.write_text(yaml.safe_dump(dict(config), sort_keys=False))
    return path


def wait_for(condition: Callable[[], Any], timeout: float, what: str, interval: float = 1.0) -> Any:
    """Poll until ``condition()`` is truthy; fail naming ``what`` at the timeout.

    Transient Kafka errors (a partition's leader moving after growth, say) count as "not yet".
    """
    from confluent_kafka import KafkaException

    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = condition()
        except KafkaException as exc:
            last = exc
        else:
            if last:
                return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what} (last: {last!r})")


def records_by_partition(cluster: KafkaCluster, topic: str) -> dict[int, list[Record]]:
    """Every record of the topic, grouped by partition, in offset order."""
    grouped: dict[int, list[Record]] = {}
    for record in consume_all({**cluster.client_config(), "fetch.message.max.bytes": "10485760"}, topic):
        grouped.setdefault(record.partition or 0, []).append(record)
    for records in grouped.values():
        records.sort(key=lambda r: r.offset or 0)
    return grouped


def count(cluster: KafkaCluster, topic: str) -> int:
    """Records in the topic (from the low to the high watermark of each partition)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({**cluster.client_config(), "group.id": "strait-counter"})
    try:
        metadata = consumer.list_topics(topic, timeout=10).topics.get(topic)
        if metadata is None or metadata.error is not None:
            return 0
        total = 0
        for p in metadata.partitions:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            total += high - low
        return total
    finally:
        consumer.close()


def last_values(cluster: KafkaCluster, topic: str) -> dict[int, bytes | None]:
    """The value of the last record of each non-empty partition."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({**cluster.client_config(), "group.id": "strait-tail", "enable.auto.commit": False})
    try:
        metadata = consumer.list_topics(topic, timeout=10).topics.get(topic)
        if metadata is None or metadata.error is not None:
            return {}
        values: dict[int, bytes | None] = {}
        for p in metadata.partitions:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            if high > low:
                consumer.assign([TopicPartition(topic, p, high - 1)])
                message = consumer.poll(10)
                if message is not None and not message.error():
                    values[p] = message.value()
        return values
    finally:
        consumer.close()
