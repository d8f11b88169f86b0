"""Reading, producing and committing on the test clusters."""

from __future__ import annotations

import threading
import time
import uuid

from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, KafkaError, KafkaException, Producer, TopicPartition

from strait.errors import StraitError
from strait_lab.clients import Record, consume_all
from strait_lab.kafka import KafkaCluster
from strait_replicator.writer import produce_when_ready


def records_by_partition(cluster: KafkaCluster, topic: str) -> dict[int, list[Record]]:
    """Every record of the topic, grouped by partition, in offset order."""
    grouped: dict[int, list[Record]] = {}
    for record in consume_all({**cluster.client_config(), "fetch.message.max.bytes": "10485760"}, topic):
        grouped.setdefault(record.partition or 0, []).append(record)
    for records in grouped.values():
        records.sort(key=lambda r: r.offset or 0)
    return grouped


def count(cluster: KafkaCluster, topic: str) -> int:
    """Records in the topic (from the low to the high watermark of each partition). A topic just
    created may have no leaders yet: its watermarks are asked for again, for up to 10 s."""
    deadline = time.monotonic() + 10
    while True:
        try:
            return _count(cluster, topic)
        except KafkaException as exc:
            error = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
            passing = error is not None and (error.retriable() or error.code() in _NO_LEADER_YET)
            if not passing or time.monotonic() > deadline:
                raise
            time.sleep(0.2)


_NO_LEADER_YET = (KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE,
                  KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_PARTITION)


def _count(cluster: KafkaCluster, topic: str) -> int:
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


def committed_records(cluster: KafkaCluster, topic: str) -> int:
    """Records a read_committed consumer reads in the topic (0 before it exists): an exactly-once
    copy's offsets also count its commit markers, so :func:`count` overstates it."""
    try:
        return sum(len(records) for records in records_by_partition(cluster, topic).values())
    except StraitError:
        return 0


def offsets_end(cluster: KafkaCluster, topic: str, partition: int = 0) -> int:
    """The high watermark of one partition (transaction markers and open transactions included)."""
    consumer = Consumer({**cluster.client_config(), "group.id": "strait-counter"})
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)[1]
    finally:
        consumer.close()


def last_values(cluster: KafkaCluster, topic: str) -> dict[int, bytes | None]:
    """The value of the last record of each non-empty partition."""
    consumer = Consumer({**cluster.client_config(), "group.id": "strait-tail", "enable.auto.commit": False})
    try:
        metadata = consumer.list_topics(topic, timeout=10).topics.get(topic)
        if metadata is None or metadata.error is not None:
            return {}
        values: dict[int, bytes | None] = {}
        for p in metadata.partitions:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            if high <= low:
                continue
            # a few records back: a partition written in transactions ends with a commit marker
            consumer.assign([TopicPartition(topic, p, max(low, high - 20))])
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                message = consumer.poll(0.2)
                if message is not None and not message.error():
                    values[p] = message.value()
                if consumer.position([TopicPartition(topic, p)])[0].offset >= high:
                    break
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
        key, value = f"k{i}".encode(), f"{partition}:{i // partitions}".encode()
        # a partition just added: this producer's metadata may not have it yet
        produce_when_ready(producer, topic, key=key, value=value, partition=partition)
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


class NumberedLoad:
    """:func:`produce_numbered` at ``rate`` in a thread until :meth:`stop`, which says how many it sent."""

    def __init__(self, cluster: KafkaCluster, topic: str, partitions: int, rate: float,
                 first: int = 0) -> None:
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


def commit_offsets(cluster: KafkaCluster, group: str, partitions: list[TopicPartition],
                   timeout: float = 120.0) -> None:
    """Commit a group's offsets (with their metadata) through the admin API, asking again while the
    coordinator is not there yet: a fresh cluster creates its offsets topic on the first group's request,
    and a ZooKeeper-mode broker on a loaded machine took over 30 s to answer it (CI, Kafka 2.4)."""
    admin = cluster.admin()  # kept alive while its futures run
    deadline = time.monotonic() + timeout
    while True:
        future = admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(group, partitions)],
                                                    request_timeout=15)[group]
        try:
            errors: list[object] = [tp.error for tp in future.result(timeout=20).topic_partitions
                                    if tp.error is not None]
        except (KafkaException, TimeoutError) as exc:
            errors = [exc]
        if not errors:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"committing offsets of {group} on {cluster.alias} for {timeout:.0f} s: {errors[0]!r}")
        time.sleep(0.5)


def consume_and_commit(cluster: KafkaCluster, group: str, topics: list[str], records: int,
                       timeout: float) -> int:
    """A real member of ``group``, like an application: read about ``records`` records of ``topics`` from
    the earliest (for ``timeout`` seconds at the most), commit its position when it read any, and leave;
    how many it read."""
    consumer = Consumer({**cluster.client_config(), "group.id": group, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})
    read = 0
    try:
        consumer.subscribe(topics)
        deadline = time.monotonic() + timeout
        while read < records and time.monotonic() < deadline:
            read += sum(1 for m in consumer.consume(10, timeout=1) if not m.error())
        if read:
            consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    return read


def group_offsets(cluster: KafkaCluster, group: str, topic: str, partitions: int) -> dict[int, int]:
    """The group's committed offset on each partition of ``topic`` that has one."""
    admin = cluster.admin()  # kept alive while its future runs
    request = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p) for p in range(partitions)])
    result = admin.list_consumer_group_offsets([request])[group].result(timeout=30)
    return {tp.partition: tp.offset for tp in result.topic_partitions if tp.offset >= 0}


def produce_transactions(cluster: KafkaCluster, topic: str, partitions: int) -> None:
    """30 transactions into ``topic``, every third aborted: commit markers and aborted records leave
    gaps in its offsets."""
    producer = Producer({**cluster.client_config(), "transactional.id": f"tx-{uuid.uuid4().hex[:8]}"})
    producer.init_transactions(30)
    for txn in range(30):
        producer.begin_transaction()
        for i in range(1 + txn % 7):
            producer.produce(topic, key=f"t{txn}".encode(), value=f"txn{txn}-{i}".encode(), partition=(txn + i) % partitions)
        if txn % 3 == 1:
            # Delivered before the abort, so the aborted records really are in the log; aborting
            # unsent records can also end in a fatal INVALID_TXN_STATE (librdkafka issue 4849).
            assert producer.flush(30) == 0
            producer.abort_transaction(30)
        else:
            producer.commit_transaction(30)
