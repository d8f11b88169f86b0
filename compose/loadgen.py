"""The compose lab's load: keyed records with headers into cluster A, and a consumer group committing on A.

Configured by LOADGEN_* environment variables (see compose.yml). Touches /tmp/loadgen.alive after
every second of work, which the container's healthcheck reads.
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from pathlib import Path

from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

BOOTSTRAP = os.environ.get("LOADGEN_BOOTSTRAP", "kafka-a:9092")
TOPIC = os.environ.get("LOADGEN_TOPIC", "orders")
PARTITIONS = int(os.environ.get("LOADGEN_PARTITIONS", "6"))
RATE = float(os.environ.get("LOADGEN_RATE", "200"))
GROUP = os.environ.get("LOADGEN_GROUP", "orders-app")
ALIVE = Path("/tmp/loadgen.alive")


def ensure_topic() -> None:
    """Create the topic when missing (an existing one is fine)."""
    admin = AdminClient({"bootstrap.servers": BOOTSTRAP})
    future = admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])[TOPIC]
    try:
        future.result(30)
    except KafkaException as exc:
        if "TOPIC_ALREADY_EXISTS" not in str(exc):
            raise


def produce(stop: threading.Event) -> None:
    """Send RATE records per second: 1000 distinct keys, a trace id and a source header on each."""
    producer = Producer({"bootstrap.servers": BOOTSTRAP, "enable.idempotence": True, "linger.ms": 20})
    sent = 0
    while not stop.is_set():
        started = time.monotonic()
        for _ in range(max(1, int(RATE))):
            producer.produce(TOPIC, key=f"customer-{sent % 1000}".encode(),
                             value=f'{{"order": {sent}, "amount": {sent % 97}}}'.encode(),
                             headers=[("trace-id", uuid.uuid4().bytes), ("source", b"strait-loadgen")])
            sent += 1
            producer.poll(0)
        producer.flush(10)
        ALIVE.touch()
        stop.wait(max(0.0, 1.0 - (time.monotonic() - started)))
    producer.flush(30)


def consume(stop: threading.Event) -> None:
    """Read the topic as GROUP and commit every second, like an application whose offsets strait syncs."""
    consumer = Consumer({"bootstrap.servers": BOOTSTRAP, "group.id": GROUP, "auto.offset.reset": "earliest",
                         "enable.auto.commit": True, "auto.commit.interval.ms": 1000})
    consumer.subscribe([TOPIC])
    try:
        while not stop.is_set():
            consumer.poll(0.5)
    finally:
        consumer.close()


def main() -> None:
    """Create the topic, then produce and consume until the container stops."""
    ensure_topic()
    stop = threading.Event()
    threads = [threading.Thread(target=fn, args=(stop,), daemon=True) for fn in (produce, consume)]
    for thread in threads:
        thread.start()
    try:
        while all(t.is_alive() for t in threads):
            time.sleep(1)
    except KeyboardInterrupt:
        pass
    finally:
        stop.set()


if __name__ == "__main__":
    main()
