"""The bench's own Kafka traffic: the bulk load, end offsets, fixed-rate latency probes."""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from strait.errors import StraitError
from strait_lab.clients import create_topic, librdkafka_log
from strait_lab.kafka import KafkaCluster

log = logging.getLogger(__name__)

HEADERS = [("bench-header", b"strait-bench")]
KEEP_FOREVER = {"retention.ms": "-1"}  # the records keep their load-time timestamps


class BenchError(StraitError):
    """A benchmark measurement failed (a system did not copy every record in time, a tool failed)."""


@dataclass(frozen=True)
class Progress:
    """Records per partition at the end of a topic."""

    ends: Mapping[int, int]

    @property
    def total(self) -> int:
        """Records in the topic (its partitions start at offset 0)."""
        return sum(self.ends.values())


def payloads(size: int, count: int = 256) -> list[bytes]:
    """Random (incompressible) values, reused round-robin so generating them costs nothing per record."""
    return [os.urandom(size) for _ in range(count)]


def _producer(cluster: KafkaCluster, **extra: str) -> Producer:
    return Producer({**cluster.client_config(), "linger.ms": "5", "batch.size": "1048576",
                     "queue.buffering.max.kbytes": "1048576", "enable.idempotence": "true",
                     "logger": librdkafka_log, **extra})


def _send(producer: Producer, topic: str, key: bytes, value: bytes) -> None:
    while True:
        try:
            producer.produce(topic, key=key, value=value, headers=HEADERS)
            return
        except BufferError:  # local queue full: let deliveries drain
            producer.poll(0.05)


def load_topic(cluster: KafkaCluster, topic: str, partitions: int, records: int, size: int) -> float:
    """Create the topic and produce ``records`` keyed records with headers; return the seconds it took."""
    create_topic(cluster.admin(), topic, partitions, config=KEEP_FOREVER)
    values = payloads(size)
    producer = _producer(cluster)
    started = time.monotonic()
    for i in range(records):
        _send(producer, topic, b"key-%d" % i, values[i % len(values)])
        if i % 1000 == 0:
            producer.poll(0)
    if producer.flush(300):
        raise BenchError(f"loading topic {topic} on cluster {cluster.alias}: records still unacknowledged "
                         f"after 300s")
    seconds = time.monotonic() - started
    log.info("loaded topic=%s records=%d seconds=%.1f", topic, records, seconds)
    return seconds


def end_offsets(cluster: KafkaCluster, topic: str, partitions: int, retry_seconds: float = 60.0) -> Progress:
    """The end offset of every partition (0 for a topic that does not exist yet).

    A topic the replicator just created has no leaders for a moment; such errors are retried.
    """
    deadline = time.monotonic() + retry_seconds
    while True:
        try:
            return _end_offsets(cluster, topic, partitions)
        except KafkaException as exc:
            if time.monotonic() > deadline:
                raise BenchError(f"cannot read the end offsets of {topic} on cluster {cluster.alias}: "
                                 f"{exc}") from exc
            log.debug("end offsets not readable yet topic=%s error=%s", topic, exc)
            time.sleep(0.5)


def _end_offsets(cluster: KafkaCluster, topic: str, partitions: int) -> Progress:
    consumer = Consumer({**cluster.client_config(), "group.id": "strait-bench-ends",
                         "logger": librdkafka_log})
    try:
        metadata = consumer.list_topics(topic, timeout=10).topics.get(topic)
        if metadata is None or metadata.error is not None:
            return Progress({p: 0 for p in range(partitions)})
        return Progress({p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                         for p in range(partitions)})
    finally:
        consumer.close()


class LatencyProbe:
    """Produce to the source at a fixed rate (CreateTime = now) and time each record's arrival on the target.

    The remote topic keeps the source's timestamps, so the broker's append time on the target is not
    readable; the arrival time at a target consumer polling with ``fetch.wait.max.ms`` of 5 ms is the
    proxy (it adds at most a few milliseconds).
    """

    def __init__(self, source: KafkaCluster, target: KafkaCluster, topic: str, remote: str, partitions: int,
                 size: int) -> None:
        self.source, self.target = source, target
        self.topic, self.remote, self.partitions = topic, remote, partitions
        self.values = payloads(size, 64)
        self.slow_seconds: list[str] = []  # of the last measure: where its slow records were created

    def measure(self, rate: int, seconds: float, timeout: float = 180.0) -> list[float]:
        """Latencies (ms) of all records produced at ``rate`` records/s for ``seconds``; fails on a loss."""
        consumer = Consumer({**self.target.client_config(), "group.id": "strait-bench-latency",
                             "enable.auto.commit": "false", "fetch.wait.max.ms": "5", "fetch.min.bytes": "1",
                             "logger": librdkafka_log})
        try:
            start = end_offsets(self.target, self.remote, self.partitions)
            consumer.assign([TopicPartition(self.remote, p, o) for p, o in start.ends.items()])
            consumer.consume(1, timeout=1.0)  # join the fetch loop before the clock starts
            total = max(1, int(rate * seconds))
            producer_thread = threading.Thread(target=self._produce, args=(rate, total), daemon=True)
            producer_thread.start()
            created, latencies = self._collect(consumer, total, seconds + timeout)
            producer_thread.join(timeout)
            self.slow_seconds = slow_seconds(created, latencies)
        finally:
            consumer.close()
        if len(latencies) < total:
            raise BenchError(f"latency run at {rate} records/s: only {len(latencies)} of {total} records "
                             f"reached "
                             f"{self.remote} on cluster {self.target.alias}; see the replicator's log")
        return latencies

    def _produce(self, rate: int, total: int) -> None:
        producer = _producer(self.source, **{"linger.ms": "0"})
        started = time.monotonic()
        for i in range(total):
            due = started + i / rate
            delay = due - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            _send(producer, self.topic, b"probe-%d" % i, self.values[i % len(self.values)])
            producer.poll(0)
        producer.flush(60)

    def _collect(self, consumer: Consumer, total: int, timeout: float) -> tuple[list[int], list[float]]:
        """Each probe record's creation time (ms) and latency (ms)."""
        created: list[int] = []
        latencies: list[float] = []
        deadline = time.monotonic() + timeout
        while len(latencies) < total and time.monotonic() < deadline:
            # poll, not consume(n): a batch call waits for n records or its timeout, delaying arrivals
            message = consumer.poll(0.05)
            if message is None or message.error() is not None:
                continue
            if (message.key() or b"").startswith(b"probe-"):
                created.append(message.timestamp()[1])
                latencies.append(time.time() * 1000 - created[-1])
        return created, latencies


SLOW_MS = 250.0  # about MM2's p99 in the bench: a second with records slower than this is listed


def slow_seconds(created: list[int], latencies: list[float], most: int = 8) -> list[str]:
    """The seconds (wall clock, UTC) whose records took longest, worst first: ``HH:MM:SS max=…ms
    slow=N`` for up to ``most`` seconds with a record over SLOW_MS (to set beside the system's log)."""
    worst: dict[int, tuple[float, int]] = {}
    for at, latency in zip(created, latencies):
        if latency > SLOW_MS:
            second = at // 1000
            top, count = worst.get(second, (0.0, 0))
            worst[second] = (max(top, latency), count + 1)
    ranked = sorted(worst.items(), key=lambda item: -item[1][0])[:most]
    return [f"{time.strftime('%H:%M:%S', time.gmtime(second))} max={top:.0f}ms slow={count}"
            for second, (top, count) in ranked]
