"""The executor side: copy one Spark partition (one source topic-partition range) to the target.

Runs inside ``mapInArrow``: every record goes to the same partition number of its remote topic with
key, value, headers and timestamp unchanged and in order (idempotent producer), then the exact offset
syncs for what was copied are produced, and one summary row per source partition is returned to the
driver. Any delivery error fails the task, so Spark never commits a batch that is not fully on the
target (at-least-once, nothing lost).
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
import pyarrow as pa
import pyarrow.compute as pc
from confluent_kafka import KafkaError, Producer

from strait.errors import StraitError
from strait.offsets import OffsetTranslationError, SyncPoint
from strait.policy import ReplicationPolicy
from strait.records import OffsetSync

log = logging.getLogger(__name__)

# Seconds; replication latency = target acknowledgement time - source record timestamp.
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)

SUMMARY_SCHEMA = (
    "topic string, partition int, remote_topic string, records long, bytes long, "
    "first_offset long, last_offset long, syncs int, latency_counts array<long>, latency_sum double"
)
_SUMMARY_ARROW = pa.schema([
    ("topic", pa.string()), ("partition", pa.int32()), ("remote_topic", pa.string()), ("records", pa.int64()),
    ("bytes", pa.int64()), ("first_offset", pa.int64()), ("last_offset", pa.int64()), ("syncs", pa.int32()),
    ("latency_counts", pa.list_(pa.int64())), ("latency_sum", pa.float64()),
])

PRODUCER_DEFAULTS = {
    "enable.idempotence": "true",  # keeps per-partition order across retries
    "acks": "all",
    "linger.ms": "5",
    "batch.size": "1048576",
    "message.max.bytes": "104857600",  # let the target broker judge record sizes, not the client
    "queue.buffering.max.kbytes": "262144",
}


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
    flush_timeout: float = 120.0
    remote_names: Mapping[str, str] = field(default_factory=dict)

    def remote_topic(self, topic: str) -> str:
        """The remote topic name of a source topic."""
        return self.remote_names.get(topic) or self.policy.format_remote_topic(self.source_alias, topic)


_producers: dict[tuple[tuple[str, str], ...], Producer] = {}


def _producer(config: Mapping[str, str]) -> Producer:
    """One producer per configuration per Python worker, reused across tasks and batches."""
    key = tuple(sorted({**PRODUCER_DEFAULTS, **config}.items()))
    if key not in _producers:
        _producers[key] = Producer({**dict(key), "logger": logging.getLogger("strait.librdkafka")})
    return _producers[key]


class _Copied:
    """What one task copied of one source partition: offsets sent, offsets and times acknowledged.

    Acknowledgements of one target partition arrive in send order (idempotent producer), so the
    i-th acknowledged offset belongs to the i-th record sent.
    """

    __slots__ = ("topic", "partition", "remote", "offsets", "timestamps", "bytes", "acked", "ack_times",
                 "on_delivery")

    def __init__(self, topic: str, partition: int, remote: str, errors: list[tuple[str, int, Any]]) -> None:
        self.topic, self.partition, self.remote = topic, partition, remote
        self.offsets: list[np.ndarray] = []
        self.timestamps: list[np.ndarray] = []
        self.bytes = 0
        self.acked: list[int] = []
        self.ack_times: list[float] = []
        acked, ack_times, now = self.acked.append, self.ack_times.append, time.time

        def on_delivery(err: KafkaError | None, msg: Any) -> None:
            if err is not None:
                errors.append((msg.topic(), msg.partition(), err))
                return
            acked(msg.offset())
            ack_times(now())
        self.on_delivery = on_delivery

    def source_offsets(self) -> np.ndarray:
        """Every source offset sent, in send order."""
        return np.concatenate(self.offsets)


def _produce(producer: Producer, topic: str, **kwargs: Any) -> None:
    while True:
        try:
            producer.produce(topic, **kwargs)
            return
        except BufferError:  # local queue full: let deliveries drain
            producer.poll(0.05)


def _timestamps_ms(batch: pa.RecordBatch) -> np.ndarray:
    column = batch.column("timestamp")
    micros = pc.cast(column.cast(pa.timestamp("us")), pa.int64())
    return (micros.to_numpy(zero_copy_only=False) // 1000).astype(np.int64)


def _headers(column: pa.ListArray) -> list[list[tuple[str, bytes | None]] | None]:
    """Each row's headers as confluent-kafka wants them (None for none), without a dict per header."""
    offsets = column.offsets.to_numpy(zero_copy_only=False)
    if len(column) == 0 or offsets[0] == offsets[-1]:
        return [None] * len(column)
    first, last = int(offsets[0]), int(offsets[-1])
    values = column.values.slice(first, last - first)
    pairs = list(zip(values.field("key").to_pylist(), values.field("value").to_pylist()))
    counts = np.diff(offsets)
    if len(counts) and (counts == counts[0]).all():  # the usual case: every record has as many headers
        chunks = iter(pairs)
        return [list(chunk) for chunk in zip(*[chunks] * int(counts[0]))]
    bounds = (offsets - first).tolist()
    return [pairs[bounds[i]:bounds[i + 1]] or None for i in range(len(column))]


def _binary_bytes(column: pa.Array) -> int:
    total = pc.sum(pc.binary_length(column)).as_py()
    return int(total or 0)


def _groups(batch: pa.RecordBatch) -> list[tuple[str, int, np.ndarray | slice]]:
    """Rows per source topic-partition; a Spark partition of the Kafka source holds exactly one."""
    topics, partitions = batch.column("topic"), batch.column("partition")
    if pc.count_distinct(topics).as_py() == 1 and pc.count_distinct(partitions).as_py() == 1:
        return [(topics[0].as_py(), partitions[0].as_py(), slice(0, batch.num_rows))]
    rows: dict[tuple[str, int], list[int]] = {}
    for i, key in enumerate(zip(topics.to_pylist(), partitions.to_pylist())):
        rows.setdefault(key, []).append(i)
    return [(topic, partition, np.array(indices)) for (topic, partition), indices in rows.items()]


def _send_batch(producer: Producer, batch: pa.RecordBatch, settings: WriterSettings,
                copied: dict[tuple[str, int], _Copied], errors: list[tuple[str, int, Any]]) -> None:
    """Produce every row of one Arrow batch to its remote topic's same partition."""
    keys, values = batch.column("key").to_pylist(), batch.column("value").to_pylist()
    headers = _headers(batch.column("headers"))
    timestamps = _timestamps_ms(batch)
    ts_list = timestamps.tolist()
    offsets = batch.column("offset").to_numpy(zero_copy_only=False)
    produce = producer.produce
    for topic, partition, rows in _groups(batch):
        part = copied.get((topic, partition))
        if part is None:
            part = _Copied(topic, partition, settings.remote_topic(topic), errors)
            copied[(topic, partition)] = part
        remote, on_delivery = part.remote, part.on_delivery
        indices = range(rows.start, rows.stop) if isinstance(rows, slice) else rows.tolist()
        for i in indices:
            try:
                produce(remote, value=values[i], key=keys[i], partition=partition, on_delivery=on_delivery,
                        timestamp=ts_list[i], headers=headers[i])
            except BufferError:  # local queue full: let deliveries drain, then send this one
                _produce(producer, remote, value=values[i], key=keys[i], partition=partition,
                         on_delivery=on_delivery, timestamp=ts_list[i], headers=headers[i])
        part.offsets.append(offsets[rows])
        part.timestamps.append(timestamps[rows])
        subset = batch if isinstance(rows, slice) else batch.take(pa.array(rows))
        part.bytes += _binary_bytes(subset.column("key")) + _binary_bytes(subset.column("value"))


def copy_partition(batches: Iterator[pa.RecordBatch], settings: WriterSettings) -> Iterator[pa.RecordBatch]:
    """mapInArrow function: copy the records, emit offset syncs, yield one summary row per partition."""
    producer = _producer(settings.target_producer)
    errors: list[tuple[str, int, Any]] = []
    copied: dict[tuple[str, int], _Copied] = {}
    for batch in batches:
        if batch.num_rows == 0:
            continue
        _send_batch(producer, batch, settings, copied, errors)
        producer.poll(0)
    _flush(producer, settings, errors)
    yield from _emit_syncs_and_summarise(settings, copied)


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


def _emit_syncs_and_summarise(settings: WriterSettings,
                              copied: dict[tuple[str, int], _Copied]) -> Iterator[pa.RecordBatch]:
    syncs = _producer(settings.syncs_producer)
    sync_errors: list[tuple[str, int, Any]] = []

    def on_sync_delivery(err: KafkaError | None, msg: Any) -> None:
        if err is not None:
            sync_errors.append((msg.topic(), msg.partition(), err))
    rows: dict[str, list[Any]] = {name: [] for name in _SUMMARY_ARROW.names}
    for part in copied.values():
        offsets = part.source_offsets()
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
        latencies = np.array(part.ack_times) - np.concatenate(part.timestamps).astype(np.float64) / 1000.0
        counts = np.histogram(latencies, bins=(-np.inf, *LATENCY_BUCKETS, np.inf))[0]
        for name, value in (("topic", part.topic), ("partition", part.partition),
                            ("remote_topic", part.remote),
                            ("records", len(offsets)), ("bytes", part.bytes),
                            ("first_offset", int(offsets[0])), ("last_offset", int(offsets[-1])),
                            ("syncs", len(points)), ("latency_counts", [int(c) for c in counts]),
                            ("latency_sum", float(latencies.sum()))):
            rows[name].append(value)
    remaining = syncs.flush(settings.flush_timeout)
    if sync_errors or remaining:
        detail = sync_errors[0][2].str() if sync_errors else f"{remaining} not acknowledged"
        raise ReplicationWriteError(
            f"flow {settings.flow}: writing offset syncs to topic {settings.syncs_topic} on cluster "
            f"{settings.syncs_alias} failed: {detail}"
        )
    if rows["topic"]:
        yield pa.RecordBatch.from_pydict(rows, schema=_SUMMARY_ARROW)
