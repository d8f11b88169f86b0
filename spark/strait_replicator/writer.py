"""The executor side: copy source offset ranges to the target, record by record, in order.

A task reads its ranges with a librdkafka consumer and produces every record to the same partition
number of its remote topic with key, value, headers and timestamp unchanged and in order (idempotent
producer); then the exact offset syncs for what was copied are produced, and one summary row per
source partition goes back to the driver. Records never pass through the JVM or Arrow. Any read or
delivery error fails the task, so Spark never commits a batch that is not fully on the target
(at-least-once, nothing lost).
"""

from __future__ import annotations

import logging
import os
import sys
import time
import zipimport
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from strait.errors import StraitError
from strait.logs import setup_logging
from strait.offsets import OffsetTranslationError, SyncPoint
from strait.policy import ReplicationPolicy
from strait.records import OffsetSync

log = logging.getLogger(__name__)

# Seconds; replication latency = target acknowledgement time - source record timestamp.
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)

SUMMARY_SCHEMA = (
    "topic string, partition int, remote_topic string, records long, bytes long, "
    "first_offset long, last_offset long, syncs int, latency_counts array<long>, latency_sum double, "
    "lag long"
)
SUMMARY_FIELDS = ("topic", "partition", "remote_topic", "records", "bytes", "first_offset", "last_offset", "syncs",
                  "latency_counts", "latency_sum", "lag")
PRODUCER_DEFAULTS = {
    "enable.idempotence": "true",  # keeps per-partition order across retries
    "acks": "all",
    "linger.ms": "5",
    "batch.size": "1048576",
    "message.max.bytes": "104857600",  # let the target broker judge record sizes, not the client
    "queue.buffering.max.kbytes": "262144",
    "queue.buffering.max.messages": "1000000",  # the default 100,000 stalls the copy loop on BufferError
}

CONSUMER_DEFAULTS = {
    "fetch.max.bytes": "52428800",
    "max.partition.fetch.bytes": "4194304",
    # A deep prefetch queue keeps fetches in flight while the loop produces (measured: 16 MiB gave
    # 30k records/s, 128 MiB 100k). Records prefetched past a range's end are dropped when the
    # next task assigns its ranges, so a task may read up to this much more than it copies.
    "queued.max.messages.kbytes": "131072",
    "fetch.wait.max.ms": "100",
}
# The copy loop's own settings; the user's consumer settings cannot change them.
CONSUMER_FIXED = {
    "enable.auto.commit": "false",
    "enable.auto.offset.store": "false",
    "enable.partition.eof": "true",
    "auto.offset.reset": "earliest",
}
CONSUME_BATCH = 10_000
# librdkafka wants a group.id and looks up its coordinator even for a consumer that only assigns
# partitions and never commits: the replicator's principal needs DESCRIBE on this group, no more.
SOURCE_GROUP = "strait-replicator"


def _install_lazy_zip_invalidation() -> None:
    """Re-read a zip archive on ``importlib.invalidate_caches()`` only when the file changed.

    PySpark's worker calls ``importlib.invalidate_caches()`` before every task, and Python 3.11's
    zipimporter then re-parses the whole directory of pyspark.zip (about 1,200 entries): profiled at
    two thirds of a worker's CPU time with one task per partition per micro-batch. Python 3.12 made
    this lazy (CPython gh-103200); this gives 3.11 the same effect, keeping the invalidation for an
    archive that really changed (new mtime or size).
    """
    if sys.version_info >= (3, 12) or getattr(zipimport.zipimporter.invalidate_caches, "strait_lazy", False):
        return
    reread = zipimport.zipimporter.invalidate_caches
    versions: dict[str, tuple[int, int] | None] = {}

    def invalidate_caches(self: zipimport.zipimporter) -> None:
        try:
            stat = os.stat(self.archive)
            version: tuple[int, int] | None = (stat.st_mtime_ns, stat.st_size)
        except OSError:
            version = None
        if version is not None and versions.get(self.archive) == version:
            return
        versions[self.archive] = version
        reread(self)

    invalidate_caches.strait_lazy = True  # type: ignore[attr-defined]
    zipimport.zipimporter.invalidate_caches = invalidate_caches  # type: ignore[method-assign]


_install_lazy_zip_invalidation()


class ReplicationWriteError(StraitError):
    """A record or an offset sync could not be written to the target; the batch is not committed."""


class ReplicationReadError(StraitError):
    """A source range could not be read to its end; the batch is not committed."""


@dataclass(frozen=True)
class WriterSettings:
    """What a task needs to copy records of one flow (pickled to the executors)."""

    flow: str
    source_alias: str
    target_alias: str
    policy: ReplicationPolicy
    target_producer: Mapping[str, str]
    syncs_producer: Mapping[str, str]
    syncs_topic: str
    syncs_alias: str
    source_consumer: Mapping[str, str] = field(default_factory=dict)
    flush_timeout: float = 120.0
    read_timeout: float = 120.0
    remote_names: Mapping[str, str] = field(default_factory=dict)

    def remote_topic(self, topic: str) -> str:
        """The remote topic name of a source topic."""
        return self.remote_names.get(topic) or self.policy.format_remote_topic(self.source_alias, topic)


@dataclass(frozen=True)
class CopyRange:
    """Source offsets ``[start, end)`` of one topic-partition to copy; ``start`` None: from the earliest."""

    topic: str
    partition: int
    start: int | None
    end: int

    @property
    def has_records(self) -> bool:
        """False for an empty range and one going backwards (a re-created topic)."""
        return self.start is None or self.start < self.end

    @property
    def size(self) -> int:
        """Offsets in the range, at most its records; from the earliest it counts from offset 0."""
        return self.end - (self.start or 0)


_producers: dict[tuple[tuple[str, str], ...], Producer] = {}
_consumers: dict[tuple[tuple[str, str], ...], Consumer] = {}


def _producer(config: Mapping[str, str]) -> Producer:
    """One producer per configuration per Python worker, reused across tasks and batches."""
    key = tuple(sorted({**PRODUCER_DEFAULTS, **config}.items()))
    if key not in _producers:
        _producers[key] = Producer({**dict(key), "logger": logging.getLogger("strait.librdkafka")})
    return _producers[key]


def _consumer(settings: WriterSettings) -> Consumer:
    """One source consumer per flow per Python worker: its connections outlive a task.

    It never joins a group nor commits: each task assigns its ranges' start offsets itself.
    """
    config = {**CONSUMER_DEFAULTS, **settings.source_consumer, **CONSUMER_FIXED, "group.id": SOURCE_GROUP}
    key = tuple(sorted(config.items()))
    if key not in _consumers:
        setup_logging()  # a Python worker's first task: its warnings go to the worker's stderr
        _consumers[key] = Consumer({**config, "logger": logging.getLogger("strait.librdkafka")})
    return _consumers[key]


class _Copied:
    """What one task copied of one source partition: offsets sent, offsets and times acknowledged.

    Acknowledgements of one target partition arrive in send order (idempotent producer), so the
    i-th acknowledged offset belongs to the i-th record sent.
    """

    __slots__ = ("topic", "partition", "remote", "start", "end", "offsets", "timestamps", "bytes", "acked", "ack_times",
                 "on_delivery", "lag")

    def __init__(self, topic: str, partition: int, remote: str, start: int | None, end: int,
                 errors: list[tuple[str, int, Any]]) -> None:
        self.topic, self.partition, self.remote, self.start, self.end = topic, partition, remote, start, end
        self.offsets: list[int] = []
        self.timestamps: list[int] = []
        self.bytes = 0
        self.acked: list[int] = []
        self.ack_times: list[float] = []
        self.lag = -1  # records on the source past the range's end when it was copied; -1: unknown
        acked, ack_times, now = self.acked.append, self.ack_times.append, time.time

        def on_delivery(err: KafkaError | None, msg: Any) -> None:
            if err is not None:
                errors.append((msg.topic(), msg.partition(), err))
                return
            acked(msg.offset())
            ack_times(now())
        self.on_delivery = on_delivery

    def left_to_read(self) -> int:
        """Offsets between the last record copied (or the start) and the end: records still to come at most."""
        return self.end - (self.offsets[-1] + 1 if self.offsets else self.start or 0)


def _produce(producer: Producer, topic: str, **kwargs: Any) -> None:
    while True:
        try:
            producer.produce(topic, **kwargs)
            return
        except BufferError:  # local queue full: let deliveries drain
            producer.poll(0.05)


def copy_ranges(ranges: list[CopyRange], settings: WriterSettings) -> list[tuple[Any, ...]]:
    """Copy each range to its remote topic, emit the offset syncs; one summary row per range."""
    started = time.monotonic()
    producer = _producer(settings.target_producer)
    errors: list[tuple[str, int, Any]] = []
    copied = {(r.topic, r.partition): _Copied(r.topic, r.partition, settings.remote_topic(r.topic), r.start, r.end,
                                              errors)
              for r in ranges if r.has_records}
    if copied:
        _read_and_send(_consumer(settings), producer, copied, settings)
    read = time.monotonic()
    _flush(producer, settings, errors)
    flushed = time.monotonic()
    rows = _emit_syncs_and_summarise(settings, list(copied.values()))
    if log.isEnabledFor(logging.DEBUG):
        log.debug("flow=%s ranges=%d records=%d read_s=%.3f flush_s=%.3f syncs_s=%.3f", settings.flow, len(copied),
                  sum(len(p.offsets) for p in copied.values()), read - started, flushed - read,
                  time.monotonic() - flushed)
    return rows


def _read_and_send(consumer: Consumer, producer: Producer, copied: dict[tuple[str, int], _Copied],
                   settings: WriterSettings) -> None:
    """Consume every range to its end and produce each record as it comes."""
    consumer.assign([TopicPartition(part.topic, part.partition, -2 if part.start is None else part.start)
                     for part in copied.values()])
    try:
        pending = dict(copied)
        deadline = time.monotonic() + settings.read_timeout
        while pending:
            # Asking for no more than what is left returns as soon as the last record arrives
            # (prefetched records past a finished range's end are not counted as progress).
            left = sum(part.left_to_read() for part in pending.values())
            messages = consumer.consume(max(1, min(CONSUME_BATCH, left)), 0.1)
            if messages:
                _send_messages(messages, producer, pending)
                deadline = time.monotonic() + settings.read_timeout
            elif time.monotonic() > deadline:
                part = next(iter(pending.values()))
                raise ReplicationReadError(
                    f"flow {settings.flow}: reading topic {part.topic} partition {part.partition} on cluster "
                    f"{settings.source_alias} stalled for {settings.read_timeout:.0f}s before offset {part.end}; "
                    f"check that its brokers are up and the partition has a leader")
            producer.poll(0)
        _note_lag(consumer, copied)
    finally:
        consumer.unassign()


def _note_lag(consumer: Consumer, copied: dict[tuple[str, int], _Copied]) -> None:
    """Each range's lag from the end offset the last fetch reported (no request to the broker)."""
    for part in copied.values():
        try:
            _low, high = consumer.get_watermark_offsets(TopicPartition(part.topic, part.partition), cached=True)
        except Exception:  # noqa: BLE001 - a lag is nice to have, never a reason to fail a copy
            continue
        if high >= 0:
            part.lag = max(0, high - part.end)


def _send_messages(messages: list[Any], producer: Producer, pending: dict[tuple[str, int], _Copied]) -> None:
    """Produce the messages of still-pending ranges; finish a range at its end."""
    produce = producer.produce
    for message in messages:
        part = pending.get((message.topic(), message.partition()))
        if part is None:  # past the end of a finished range
            continue
        offset = message.offset()
        error = message.error()
        if error is not None:
            _on_consume_error(error, offset, part, pending)
            continue
        if offset >= part.end:
            del pending[(part.topic, part.partition)]
            continue
        value, key, timestamp = message.value(), message.key(), message.timestamp()[1]
        headers = message.headers()
        try:
            produce(part.remote, value, key, part.partition, part.on_delivery, timestamp=timestamp, headers=headers)
        except BufferError:  # local queue full: let deliveries drain, then send this one
            _produce(producer, part.remote, value=value, key=key, partition=part.partition,
                     on_delivery=part.on_delivery, timestamp=timestamp, headers=headers)
        part.offsets.append(offset)
        part.timestamps.append(timestamp)
        part.bytes += len(value or b"") + len(key or b"")
        if offset >= part.end - 1:
            del pending[(part.topic, part.partition)]


def _on_consume_error(error: KafkaError, offset: int, part: _Copied,
                      pending: dict[tuple[str, int], _Copied]) -> None:
    """End of partition finishes a range whose end it reached; any other error fails the task."""
    if error.code() == KafkaError._PARTITION_EOF:
        if offset >= part.end:
            del pending[(part.topic, part.partition)]
        return
    if error.code() in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC, KafkaError._UNKNOWN_PARTITION):
        log.warning("topic=%s partition=%d is gone from the source (deleted?): its range ends at offset %d",
                    part.topic, part.partition, part.offsets[-1] + 1 if part.offsets else -1)
        del pending[(part.topic, part.partition)]
        return
    if error.fatal() or error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED:
        raise ReplicationReadError(f"reading topic {part.topic} partition {part.partition}: {error.str()} "
                                   f"({error.name()})")
    # Anything else (a broker down, a leader moving) librdkafka retries by itself; a range that
    # never moves again fails the task after the read timeout.
    log.warning("topic=%s partition=%d reading goes on after: %s", part.topic, part.partition, error.str())


def sync_points_of(source_offsets: np.ndarray, target_offsets: np.ndarray) -> list[SyncPoint]:
    """:func:`strait.offsets.sync_points`, vectorised: both batch ends and both sides of every break."""
    if len(source_offsets) != len(target_offsets):
        raise OffsetTranslationError(
            f"{len(source_offsets)} source offsets but {len(target_offsets)} target offsets")
    if len(source_offsets) == 0:
        return []
    up_steps, down_steps = np.diff(source_offsets), np.diff(target_offsets)
    disorder = np.flatnonzero((up_steps <= 0) | (down_steps <= 0))
    if len(disorder):
        i = int(disorder[0]) + 1
        raise OffsetTranslationError(
            f"offsets out of order at record {i}: {int(source_offsets[i])}->{int(target_offsets[i])}")
    linear = (up_steps == 1) & (down_steps == 1)
    keep = np.ones(len(source_offsets), dtype=bool)
    keep[1:-1] = ~(linear[:-1] & linear[1:])
    return [SyncPoint(int(up), int(down)) for up, down in zip(source_offsets[keep], target_offsets[keep])]


def _flush(producer: Producer, settings: WriterSettings, errors: list[tuple[str, int, Any]]) -> None:
    remaining = producer.flush(settings.flush_timeout)
    if errors:
        topic, partition, err = errors[0]
        raise ReplicationWriteError(
            f"flow {settings.flow}: writing to topic {topic} partition {partition} on cluster "
            f"{settings.target_alias} failed: {err.str()} ({err.name()})"
        )
    if remaining:
        raise ReplicationWriteError(
            f"flow {settings.flow}: {remaining} records not acknowledged by cluster {settings.target_alias} "
            f"within {settings.flush_timeout:.0f}s"
        )


def _emit_syncs_and_summarise(settings: WriterSettings, copied: list[_Copied]) -> list[tuple[Any, ...]]:
    """Produce the offset syncs of every range copied; one summary row per range (SUMMARY_FIELDS)."""
    syncs = _producer(settings.syncs_producer)
    sync_errors: list[tuple[str, int, Any]] = []

    def on_sync_delivery(err: KafkaError | None, msg: Any) -> None:
        if err is not None:
            sync_errors.append((msg.topic(), msg.partition(), err))
    rows = []
    for part in copied:
        offsets = np.array(part.offsets, dtype=np.int64)
        if len(part.acked) != len(offsets):
            raise ReplicationWriteError(
                f"flow {settings.flow}: {len(offsets)} records sent to {part.remote}[{part.partition}] but "
                f"{len(part.acked)} acknowledged"
            )
        points = sync_points_of(offsets, np.array(part.acked, dtype=np.int64))
        for point in points:
            record = OffsetSync(part.topic, part.partition, point.upstream, point.downstream)
            _produce(syncs, settings.syncs_topic, key=record.key_bytes(), value=record.value_bytes(),
                     partition=0, on_delivery=on_sync_delivery)
        latencies = np.array(part.ack_times) - np.array(part.timestamps, dtype=np.float64) / 1000.0
        counts = np.histogram(latencies, bins=(-np.inf, *LATENCY_BUCKETS, np.inf))[0]
        rows.append((part.topic, part.partition, part.remote, len(offsets), part.bytes,
                     int(offsets[0]) if len(offsets) else None, int(offsets[-1]) if len(offsets) else None,
                     len(points), [int(c) for c in counts], float(latencies.sum()), part.lag))
    remaining = syncs.flush(settings.flush_timeout)
    if sync_errors or remaining:
        detail = sync_errors[0][2].str() if sync_errors else f"{remaining} not acknowledged"
        raise ReplicationWriteError(
            f"flow {settings.flow}: writing offset syncs to topic {settings.syncs_topic} on cluster "
            f"{settings.syncs_alias} failed: {detail}"
        )
    return rows
