"""The bench's own Kafka traffic: the bulk load, end offsets, what a read_committed consumer reads of a
copy, fixed-rate latency probes."""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

from confluent_kafka import (OFFSET_BEGINNING, Consumer, IsolationLevel, KafkaException, Message, Producer,
                             TopicPartition)
from confluent_kafka.admin import OffsetSpec

from strait.errors import StraitError
from strait_lab.clients import create_topic, librdkafka_log
from strait_lab.kafka import KafkaCluster

log = logging.getLogger(__name__)

HEADERS = [("bench-header", b"strait-bench")]
KEEP_FOREVER = {"retention.ms": "-1"}  # the records keep their load-time timestamps
# librdkafka's default, spelled out: a copy made in transactions is read as its users read it
READ_COMMITTED = {"isolation.level": "read_committed"}


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


def bench_producer(cluster: KafkaCluster, **extra: str) -> Producer:
    """The bench's own idempotent producer into ``cluster`` (its load and probes), with ``extra`` settings."""
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
    producer = bench_producer(cluster)
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


class CommittedView:
    """A topic as a read_committed consumer sees it, for a copy written in transactions.

    A transactional copy's high watermarks count its commit markers (one per partition per
    transaction) and the records of open transactions, so they run ahead of what its users read. The
    view reads the last stable offsets instead, and checks that a partition is complete by its last
    readable record (the load's keys are unique). One admin client and one consumer serve every call;
    :meth:`close` frees them.
    """

    def __init__(self, cluster: KafkaCluster, topic: str, partitions: int) -> None:
        self.cluster, self.topic, self.partitions = cluster, topic, partitions
        self.admin = cluster.admin()
        self.consumer = Consumer({**cluster.client_config(), "group.id": "strait-bench-committed",
                                  "enable.auto.commit": "false", "fetch.wait.max.ms": "5", **READ_COMMITTED,
                                  "logger": librdkafka_log})
        self._ended: set[int] = set()  # partitions seen to end with their source's last record

    def close(self) -> None:
        """Close the consumer (the admin client needs no closing)."""
        self.consumer.close()

    def ends(self, retry_seconds: float = 60.0) -> Progress:
        """Each partition's last stable offset (0 while the topic does not exist); a topic without
        leaders yet is asked again for up to ``retry_seconds``."""
        deadline = time.monotonic() + retry_seconds
        while True:
            try:
                return self._ends()
            except KafkaException as exc:
                if time.monotonic() > deadline:
                    raise BenchError(f"cannot read the committed ends of {self.topic} on cluster "
                                     f"{self.cluster.alias}: {exc}") from exc
                log.debug("committed ends not readable yet topic=%s error=%s", self.topic, exc)
                time.sleep(0.5)

    def _ends(self) -> Progress:
        # ListOffsets on a topic the replicator has not created yet fails only after a long wait for leaders
        metadata = self.admin.list_topics(self.topic, timeout=10).topics.get(self.topic)
        if metadata is None or metadata.error is not None:
            return Progress({p: 0 for p in range(self.partitions)})
        latest = OffsetSpec.latest()
        partitions = {TopicPartition(self.topic, p): latest for p in range(self.partitions)}
        futures = self.admin.list_offsets(partitions, isolation_level=IsolationLevel.READ_COMMITTED,
                                          request_timeout=10)
        return Progress({tp.partition: future.result().offset for tp, future in futures.items()})

    def last_keys(self, ends: Mapping[int, int], timeout: float = 60.0) -> dict[int, bytes | None]:
        """The key of the last record a read_committed consumer reads below each partition's given end
        (None where it reads none)."""
        deadline = time.monotonic() + timeout
        keys: dict[int, bytes | None] = {}
        window = 2  # the last record, then its transaction's commit marker
        pending = {p: end for p, end in ends.items() if end > 0}
        while pending:
            found = self._read_tail({p: max(0, end - window) for p, end in pending.items()}, pending, deadline)
            keys.update({p: key for p, key in found.items() if key is not None})
            # nothing readable in the window (aborted records, markers): look further back
            pending = {p: end for p, end in pending.items() if p not in keys and end - window > 0}
            window *= 16
        return {p: keys.get(p) for p in ends}

    def _read_tail(self, starts: Mapping[int, int], ends: Mapping[int, int],
                   deadline: float) -> dict[int, bytes | None]:
        """The last key read from each start up to its end."""
        last: dict[int, bytes | None] = {p: None for p in starts}
        for message in self._read(starts, ends, deadline, wait=0.01):  # a few records: do not wait for more
            last[message.partition()] = message.key()
        return last

    def holds_all(self, progress: Progress, source_ends: Mapping[int, int],
                  last_keys: Mapping[int, bytes | None]) -> bool:
        """Whether every partition ends with its source partition's last record (``last_keys``).

        The copy keeps each partition's order and the keys are unique, so a partition whose last
        record is its source's holds them all. Only partitions whose committed end reached the
        source's are read (below it they cannot hold every record yet); one found complete is not
        read again, the source topic being loaded once.
        """
        due = {p: progress.ends.get(p, 0) for p, end in source_ends.items()
               if p not in self._ended and 0 < end <= progress.ends.get(p, 0)}
        found = self.last_keys(due) if due else {}
        self._ended.update(p for p, key in found.items() if key is not None and key == last_keys.get(p))
        return all(p in self._ended or end == 0 for p, end in source_ends.items())

    def count(self, timeout: float = 600.0) -> int:
        """How many records a read_committed consumer reads from the start of the topic to its committed ends."""
        ends = self.ends().ends
        starts = {p: OFFSET_BEGINNING for p, end in ends.items() if end > 0}
        return sum(1 for _ in self._read(starts, ends, time.monotonic() + timeout))

    def _read(self, starts: Mapping[int, int], ends: Mapping[int, int], deadline: float,
              wait: float = 0.1) -> Iterator[Message]:
        """Every record read from each partition's start up to its end, read_committed (``wait``: the
        longest a batch waits to fill)."""
        self.consumer.assign([TopicPartition(self.topic, p, start) for p, start in starts.items()])
        pending = set(starts)
        try:
            while pending:
                if time.monotonic() > deadline:
                    raise BenchError(f"reading {self.topic} on cluster {self.cluster.alias}: partitions "
                                     f"{sorted(pending)} not read to their committed ends in time")
                for message in self.consumer.consume(10_000, timeout=wait):
                    if message.error() is None and message.offset() < ends[message.partition()]:
                        yield message
                # positions, not offsets: a partition's committed records end with a commit marker
                positions = self.consumer.position([TopicPartition(self.topic, p) for p in pending])
                pending -= {tp.partition for tp in positions if tp.offset >= ends[tp.partition]}
        finally:
            self.consumer.unassign()


class LatencyProbe:
    """Produce to the source at a fixed rate (CreateTime = now) and time each record's arrival on the target.

    The remote topic keeps the source's timestamps, so the broker's append time on the target is not
    readable; the arrival time at a target consumer polling with ``fetch.wait.max.ms`` of 5 ms is the
    proxy (it adds at most a few milliseconds). The consumer reads read_committed: for a copy made in
    transactions the latency is the time until the record is visible to such readers.
    """

    def __init__(self, source: KafkaCluster, target: KafkaCluster, topic: str, remote: str, partitions: int,
                 size: int) -> None:
        self.source, self.target = source, target
        self.topic, self.remote, self.partitions = topic, remote, partitions
        self.values = payloads(size, 64)
        self.slow_seconds: list[str] = []  # of the last measure: where its slow records were created
        self.warmup_latencies: list[float] = []  # of the last measure: its warm-up records', not counted

    def measure(self, rate: int, seconds: float, warmup_seconds: float = 0.0,
                on_clock_start: Callable[[], None] | None = None, timeout: float = 180.0) -> list[float]:
        """Latencies (ms) of all records produced at ``rate`` records/s for ``seconds``; fails on a loss.

        The same producer first sends ``warmup_seconds`` of records at that rate, read and kept apart
        (:attr:`warmup_latencies`): a new producer's first seconds (its connections, its idempotent
        producer id, the brokers' first appends of the idle probe topic) slowed every system alike and
        made most of a window's records over 250 ms. ``on_clock_start`` is called once the first
        measured record is due.
        """
        consumer = Consumer({**self.target.client_config(), "group.id": "strait-bench-latency",
                             "enable.auto.commit": "false", "fetch.wait.max.ms": "5", "fetch.min.bytes": "1",
                             **READ_COMMITTED, "logger": librdkafka_log})
        try:
            start = end_offsets(self.target, self.remote, self.partitions)
            consumer.assign([TopicPartition(self.remote, p, o) for p, o in start.ends.items()])
            consumer.consume(1, timeout=1.0)  # join the fetch loop before the clock starts
            warmup, total = int(rate * warmup_seconds), max(1, int(rate * seconds))
            clock_started = threading.Event()
            producer_thread = threading.Thread(target=self._produce, daemon=True,
                                               args=(rate, warmup, total, clock_started))
            producer_thread.start()
            created, latencies = self._collect(consumer, warmup, total, seconds + warmup_seconds + timeout,
                                               clock_started, on_clock_start)
            producer_thread.join(timeout)
            self.slow_seconds = slow_seconds(created, latencies)
        finally:
            consumer.close()
        if len(latencies) < total or len(self.warmup_latencies) < warmup:
            raise BenchError(f"latency run at {rate} records/s: only {len(latencies)} of {total} records "
                             f"(and {len(self.warmup_latencies)} of {warmup} warm-up records) reached "
                             f"{self.remote} on cluster {self.target.alias}; see the replicator's log")
        return latencies

    def _produce(self, rate: int, warmup: int, total: int, clock_started: threading.Event) -> None:
        producer = bench_producer(self.source, **{"linger.ms": "0"})
        started = time.monotonic()
        for i in range(warmup + total):
            due = started + i / rate
            delay = due - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            if i == warmup:
                clock_started.set()
            key = b"warmup-%d" % i if i < warmup else b"probe-%d" % (i - warmup)
            _send(producer, self.topic, key, self.values[i % len(self.values)])
            producer.poll(0)
        producer.flush(60)

    def _collect(self, consumer: Consumer, warmup: int, total: int, timeout: float,
                 clock_started: threading.Event,
                 on_clock_start: Callable[[], None] | None) -> tuple[list[int], list[float]]:
        """Each probe record's creation time (ms) and latency (ms); the warm-up's latencies apart."""
        created: list[int] = []
        latencies: list[float] = []
        self.warmup_latencies = []
        deadline = time.monotonic() + timeout
        while (len(latencies) < total or len(self.warmup_latencies) < warmup) and time.monotonic() < deadline:
            if on_clock_start is not None and clock_started.is_set():
                on_clock_start()
                on_clock_start = None
            # poll, not consume(n): a batch call waits for n records or its timeout, delaying arrivals
            message = consumer.poll(0.05)
            if message is None or message.error() is not None:
                continue
            key = message.key() or b""
            if key.startswith(b"probe-"):
                created.append(message.timestamp()[1])
                latencies.append(time.time() * 1000 - created[-1])
            elif key.startswith(b"warmup-"):
                self.warmup_latencies.append(time.time() * 1000 - message.timestamp()[1])
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
