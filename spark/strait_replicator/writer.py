"""The executor side: copy one Spark partition (one source topic-partition range) to the target.

Runs inside ``mapInArrow``: every record goes to the same partition number of its remote topic with
key, value, headers and timestamp unchanged and in order (idempotent producer), then the exact offset
syncs for what was copied are produced, and one summary row per source partition is returned to the
driver. Any delivery error fails the task, so Spark never commits a batch that is not fully on the
target (at-least-once, nothing lost).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from confluent_kafka import KafkaError, Producer

from strait.errors import StraitError
from strait.offsets import sync_points
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


class _Deliveries:
    """Collects acknowledgements per target partition; acks of one partition arrive in send order."""

    def __init__(self) -> None:
        self.offsets: dict[tuple[str, int], list[int]] = {}
        self.ack_times: dict[tuple[str, int], list[float]] = {}
        self.error: tuple[str, int, Any] | None = None

    def on_delivery(self, err: KafkaError | None, msg: Any) -> None:
        if err is not None:
            if self.error is None:
                self.error = (msg.topic(), msg.partition(), err)
            return
        key = (msg.topic(), msg.partition())
        self.offsets.setdefault(key, []).append(msg.offset())
        self.ack_times.setdefault(key, []).append(time.time())


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


def copy_partition(batches: Iterator[pa.RecordBatch], settings: WriterSettings) -> Iterator[pa.RecordBatch]:
    """mapInArrow function: copy the records, emit offset syncs, yield one summary row per partition."""
    producer = _producer(settings.target_producer)
    deliveries = _Deliveries()
    source_offsets: dict[tuple[str, int], list[int]] = {}
    timestamps: dict[tuple[str, int], list[int]] = {}
    sizes: dict[tuple[str, int], int] = {}
    for batch in batches:
        if batch.num_rows == 0:
            continue
        ts_ms = _timestamps_ms(batch)
        columns = batch.to_pydict()
        for i, (key, value, topic, partition, offset, headers) in enumerate(zip(
            columns["key"], columns["value"], columns["topic"], columns["partition"], columns["offset"],
            columns["headers"],
        )):
            remote = settings.remote_topic(topic)
            kwargs: dict[str, Any] = {"key": key, "value": value, "partition": partition,
                                      "timestamp": int(ts_ms[i]), "on_delivery": deliveries.on_delivery}
            if headers:
                kwargs["headers"] = [(h["key"], h["value"]) for h in headers]
            _produce(producer, remote, **kwargs)
            source = (topic, partition)
            source_offsets.setdefault(source, []).append(offset)
            timestamps.setdefault(source, []).append(kwargs["timestamp"])
            sizes[source] = sizes.get(source, 0) + len(key or b"") + len(value or b"")
        producer.poll(0)
    _flush(producer, settings, deliveries)
    yield from _emit_syncs_and_summarise(settings, deliveries, source_offsets, timestamps, sizes)


def _flush(producer: Producer, settings: WriterSettings, deliveries: _Deliveries) -> None:
    remaining = producer.flush(settings.flush_timeout)
    if deliveries.error is not None:
        topic, partition, err = deliveries.error
        raise ReplicationWriteError(
            f"flow {settings.flow}: writing to topic {topic} partition {partition} on cluster "
            f"{settings.target_alias} failed: {err.str()} ({err.name()})"
        )
    if remaining:
        raise ReplicationWriteError(
            f"flow {settings.flow}: {remaining} records not acknowledged by cluster {settings.target_alias} "
            f"within {settings.flush_timeout:.0f}s"
        )


def _emit_syncs_and_summarise(
    settings: WriterSettings, deliveries: _Deliveries, source_offsets: dict[tuple[str, int], list[int]],
    timestamps: dict[tuple[str, int], list[int]], sizes: dict[tuple[str, int], int],
) -> Iterator[pa.RecordBatch]:
    syncs = _producer(settings.syncs_producer)
    sync_deliveries = _Deliveries()
    rows: dict[str, list[Any]] = {name: [] for name in (
        "topic", "partition", "remote_topic", "records", "bytes", "first_offset", "last_offset", "syncs",
        "latency_counts", "latency_sum")}
    for (topic, partition), offsets in source_offsets.items():
        remote = settings.remote_topic(topic)
        acked = deliveries.offsets.get((remote, partition), [])
        if len(acked) != len(offsets):
            raise ReplicationWriteError(
                f"flow {settings.flow}: {len(offsets)} records sent to {remote}[{partition}] but {len(acked)} acknowledged"
            )
        points = sync_points(offsets, acked)
        for point in points:
            record = OffsetSync(topic, partition, point.upstream, point.downstream)
            _produce(syncs, settings.syncs_topic, key=record.key_bytes(), value=record.value_bytes(),
                     partition=0, on_delivery=sync_deliveries.on_delivery)
        latencies = (np.array(deliveries.ack_times[(remote, partition)])
                     - np.array(timestamps[(topic, partition)], dtype=np.float64) / 1000.0)
        counts = np.histogram(latencies, bins=(-np.inf, *LATENCY_BUCKETS, np.inf))[0]
        for name, value in (("topic", topic), ("partition", partition), ("remote_topic", remote),
                            ("records", len(offsets)), ("bytes", sizes[(topic, partition)]),
                            ("first_offset", offsets[0]), ("last_offset", offsets[-1]), ("syncs", len(points)),
                            ("latency_counts", [int(c) for c in counts]), ("latency_sum", float(latencies.sum()))):
            rows[name].append(value)
    remaining = syncs.flush(settings.flush_timeout)
    if sync_deliveries.error is not None or remaining:
        detail = sync_deliveries.error[2].str() if sync_deliveries.error else f"{remaining} not acknowledged"
        raise ReplicationWriteError(
            f"flow {settings.flow}: writing offset syncs to topic {settings.syncs_topic} on cluster "
            f"{settings.syncs_alias} failed: {detail}"
        )
    if rows["topic"]:
        yield pa.RecordBatch.from_pydict(rows, schema=_SUMMARY_ARROW)
