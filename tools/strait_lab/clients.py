"""Small produce/consume helpers on confluent-kafka for tests, smoke checks and load generation."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from strait.errors import StraitError

Headers = tuple[tuple[str, bytes | None], ...]

# librdkafka logs through Python logging (captured by pytest), not straight to stderr.
librdkafka_log = logging.getLogger("strait_lab.librdkafka")


@dataclass(frozen=True)
class Record:
    """One Kafka record as replication must preserve it."""

    key: bytes | None
    value: bytes | None
    headers: Headers = ()
    timestamp_ms: int | None = None
    partition: int | None = None
    offset: int | None = None


def create_topic(
    admin: AdminClient, name: str, partitions: int = 1, replication_factor: int = 1,
    config: Mapping[str, str] | None = None, timeout: float = 30.0,
) -> None:
    """Create a topic and wait until it exists."""
    futures = admin.create_topics(
        [NewTopic(name, partitions, replication_factor, config=dict(config or {}))], operation_timeout=timeout
    )
    futures[name].result(timeout=timeout)


def produce(config: Mapping[str, str], topic: str, records: Iterable[Record], timeout: float = 60.0) -> int:
    """Produce records (to their partition when set) and wait for every delivery; returns the count."""
    producer = Producer({**config, "linger.ms": 5, "enable.idempotence": True, "logger": librdkafka_log})
    errors: list[str] = []

    def on_delivery(err: object, _msg: object) -> None:
        if err is not None:
            errors.append(str(err))

    count = 0
    for record in records:
        kwargs: dict[str, object] = {"key": record.key, "value": record.value, "on_delivery": on_delivery}
        if record.headers:
            kwargs["headers"] = list(record.headers)
        if record.timestamp_ms is not None:
            kwargs["timestamp"] = record.timestamp_ms
        if record.partition is not None:
            kwargs["partition"] = record.partition
        while True:
            try:
                producer.produce(topic, **kwargs)
                break
            except BufferError:
                producer.poll(0.1)
        count += 1
        producer.poll(0)
    remaining = producer.flush(timeout)
    if remaining or errors:
        raise StraitError(f"producing to topic {topic}: {remaining} undelivered, errors: {errors[:3]}")
    return count


def consume_all(
    config: Mapping[str, str], topic: str, partitions: Sequence[int] | None = None, timeout: float = 60.0,
) -> list[Record]:
    """Read every record of a topic from the start up to the end offsets seen at call time."""
    consumer = Consumer({**config, "group.id": f"strait-reader-{time.monotonic_ns()}", "logger": librdkafka_log,
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        if partitions is None:
            metadata = consumer.list_topics(topic, timeout=10).topics[topic]
            if metadata.error is not None:
                raise StraitError(f"topic {topic}: {metadata.error}")
            partitions = sorted(metadata.partitions)
        ends: dict[int, int] = {}
        starts: dict[int, int] = {}
        for p in partitions:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            starts[p], ends[p] = low, high
        pending = {p for p in partitions if ends[p] > starts[p]}
        consumer.assign([TopicPartition(topic, p, starts[p]) for p in pending])
        records: list[Record] = []
        deadline = time.monotonic() + timeout
        while pending:
            if time.monotonic() > deadline:
                raise StraitError(f"reading topic {topic}: partitions {sorted(pending)} not read to the end in {timeout}s")
            for msg in consumer.consume(1000, timeout=0.5):
                if msg.error():
                    raise KafkaException(msg.error())
                if msg.partition() in pending and msg.offset() < ends[msg.partition()]:
                    records.append(Record(msg.key(), msg.value(), tuple(msg.headers() or ()),
                                          msg.timestamp()[1], msg.partition(), msg.offset()))
            # Positions, not the last record's offset: a partition may end with a transaction marker.
            for tp in consumer.position([TopicPartition(topic, p) for p in pending]):
                if tp.offset >= ends[tp.partition]:
                    pending.discard(tp.partition)
        return records
    finally:
        consumer.close()
