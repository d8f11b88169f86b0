"""Shared helpers of the replicator tests: configs on the test clusters, processes, waiting."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import yaml
from confluent_kafka import Producer

from strait_lab.clients import Record, consume_all
from strait_lab.kafka import KafkaCluster
from strait_lab.services import StraitProcess


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


def produce_numbered(cluster: KafkaCluster, topic: str, partitions: int, total: int, rate: float = 10_000,
                     stop: threading.Event | None = None, first: int = 0) -> int:
    """Produce ``total`` records numbered by partition ("<partition>:<sequence>") at ``rate``, record i
    to partition i % partitions, from i = ``first`` (the records produced before); how many."""
    producer = Producer({**cluster.client_config(), "linger.ms": 5, "enable.idempotence": True})
    started = time.monotonic()
    sent = 0
    for i in range(first, first + total):
        if stop is not None and stop.is_set():
            break
        partition = i % partitions
        producer.produce(topic, key=f"k{i}".encode(), value=f"{partition}:{i // partitions}".encode(),
                         partition=partition)
        sent += 1
        if sent % 100 == 0:
            producer.poll(0)
            time.sleep(max(0.0, started + sent / rate - time.monotonic()))
    assert producer.flush(60) == 0
    return sent


def numbered_copies(target: KafkaCluster, remote: str) -> dict[int, list[int]]:
    """The sequence numbers on each remote partition, in offset order."""
    return {p: [int(r.value.split(b":")[1]) for r in records]
            for p, records in records_by_partition(target, remote).items()}


def resume_evidence(process: StraitProcess, topic: str) -> list[tuple[str, str]]:
    """(evidence, duplicates bound) of every resume line the process logged for ``topic``."""
    pattern = re.compile(rf"topic={re.escape(topic)} resumes evidence=(\S+) duplicates_at_most=(\S+)")
    return pattern.findall(process.process.log_path.read_text(errors="replace"))


class NumberedLoad:
    """:func:`produce_numbered` at ``rate`` in a thread until :meth:`stop`; ``produced`` then says how many."""

    def __init__(self, cluster: KafkaCluster, topic: str, partitions: int, rate: float, first: int = 0) -> None:
        self._stop = threading.Event()
        self._sent: list[int] = []
        self._thread = threading.Thread(target=lambda: self._sent.append(
            produce_numbered(cluster, topic, partitions, 10**9, rate, self._stop, first)), daemon=True)
        self._thread.start()

    def stop(self) -> int:
        """Stop producing (idempotent); the records produced."""
        self._stop.set()
        self._thread.join(60)
        return self._sent[0] if self._sent else 0
