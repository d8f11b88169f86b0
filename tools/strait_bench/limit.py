"""The limit a replicator is measured against: the target's ingest and the source's read rate.

A replicator with ``n`` copy tasks runs ``n`` producers into the target and ``n`` consumers on the
source at once, so the limit runs as many: ``n`` producer processes writing the workload's record
count to a fresh topic on the target (same record size, keys, headers and producer settings as
strait's copy tasks), then ``n`` consumer processes reading the loaded source topic (strait's
consumer settings). The limit is the lower of the two rates. Each worker is a process of its own
(``python -m strait_bench.limit produce|consume ...``) using the librdkafka client strait's tasks
use, and prints one JSON line: its record count and the wall-clock times of its first and last
record, so process start-up is not counted in the rate.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import resource
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from strait_bench.traffic import HEADERS, payloads
from strait_replicator.writer import CONSUME_BATCH, CONSUMER_DEFAULTS, CONSUMER_FIXED, producer_settings


@dataclass(frozen=True)
class WorkerResult:
    """What one producer or consumer process did: records, its first and last record's wall-clock time,
    the CPU-seconds of the whole process (librdkafka's threads too) in between, and its peak RSS."""

    records: int
    started: float
    finished: float
    cpu_seconds: float
    peak_rss_bytes: int


@dataclass(frozen=True)
class LimitRates:
    """The concurrent producers' and consumers' rates and the limit, the lower of the two."""

    ingest_records_per_s: float
    read_records_per_s: float

    @property
    def records_per_s(self) -> float:
        """The limit: a replicator cannot copy faster than it can read or write."""
        return min(self.ingest_records_per_s, self.read_records_per_s)


def partitions_of(worker: int, workers: int, partitions: int) -> list[int]:
    """The partitions worker ``worker`` of ``workers`` handles (round-robin, like Spark's task groups)."""
    return list(range(worker, partitions, workers))


def records_of(worker: int, workers: int, records: int) -> int:
    """Worker ``worker``'s share of ``records`` (the first ones take the remainder)."""
    return records // workers + (1 if worker < records % workers else 0)


def _span(results: Sequence[WorkerResult]) -> float:
    """Seconds from the first worker's first record to the last one's last (at least a millisecond)."""
    return max(max(r.finished for r in results) - min(r.started for r in results), 1e-3)


def combined_rate(results: Sequence[WorkerResult]) -> float:
    """Records per second of workers that ran at once: all their records over the span of all of them."""
    return sum(r.records for r in results) / _span(results)


def both_at_once_rate(results: Sequence[WorkerResult], records: int) -> float:
    """Records per second of producers writing ``records`` while consumers read as many, all at once: what
    a copy of them that read and wrote with these clients on these cores would reach."""
    return records / _span(results)


def produce(bootstrap: str, topic: str, partitions: list[int], records: int, size: int,
            tuning: dict[str, str], timeout: float) -> WorkerResult:
    """Write ``records`` keyed records with headers round-robin to ``partitions`` with strait's copy
    producer settings under ``tuning``; wait (at most ``timeout`` seconds) for every ack."""
    producer = Producer({**producer_settings(tuning), "bootstrap.servers": bootstrap})
    producer.list_topics(topic, timeout=30)  # metadata before the clock starts
    values = payloads(size)
    failed: list[KafkaError] = []

    def delivered(error: KafkaError | None, _message: object) -> None:
        if error is not None:
            failed.append(error)

    started, cpu_before = time.time(), time.process_time()
    for i in range(records):
        key = b"key-%d" % i
        while True:
            try:
                producer.produce(topic, values[i % len(values)], key, partitions[i % len(partitions)], delivered,
                                 headers=HEADERS)
                break
            except BufferError:
                producer.poll(0.01)
        if i % 1000 == 0:
            producer.poll(0)
    left = producer.flush(timeout)
    finished = time.time()
    if left or failed:
        raise SystemExit(f"topic {topic}: {left} records unacknowledged, {len(failed)} failed "
                         f"({failed[:1]})")
    return WorkerResult(records, started, finished, time.process_time() - cpu_before, _peak_rss())


def consume(bootstrap: str, topic: str, ends: dict[int, int], timeout: float) -> WorkerResult:
    """Read every partition in ``ends`` from offset 0 to its end, ``CONSUME_BATCH`` records at a time,
    within ``timeout`` seconds."""
    consumer = Consumer({**CONSUMER_DEFAULTS, **CONSUMER_FIXED, "bootstrap.servers": bootstrap,
                         "group.id": "strait-bench-limit"})
    consumer.assign([TopicPartition(topic, p, 0) for p in ends])
    left = {p: end for p, end in ends.items() if end > 0}
    records, started, cpu_before = 0, 0.0, 0.0
    deadline = time.monotonic() + timeout
    while left and time.monotonic() < deadline:
        for message in consumer.consume(CONSUME_BATCH, 1.0):
            if message.error() is not None:
                continue  # end of partition; the loop ends on offsets
            if not started:
                started, cpu_before = time.time(), time.process_time()
            records += 1
            len(message.value() or b"")  # the copy loop touches every value
            if message.offset() >= left.get(message.partition(), sys.maxsize) - 1:
                del left[message.partition()]
    finished, cpu = time.time(), time.process_time() - cpu_before
    consumer.close()
    if left:
        raise SystemExit(f"topic {topic}: partitions {sorted(left)} not read to their end in {timeout:.0f}s")
    return WorkerResult(records, started or finished, finished, cpu, _peak_rss())


def _peak_rss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB


def main(argv: Sequence[str] | None = None) -> int:
    """One worker: ``produce`` or ``consume``; prints its :class:`WorkerResult` as JSON."""
    parser = argparse.ArgumentParser(prog="python -m strait_bench.limit")
    parser.add_argument("mode", choices=("produce", "consume"))
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--spec", type=Path, required=True,
                        help="JSON: produce {partitions, records, size, producer}; consume {ends}")
    args = parser.parse_args(argv)
    spec = json.loads(args.spec.read_text())
    if args.mode == "produce":
        result = produce(args.bootstrap, args.topic, spec["partitions"], spec["records"], spec["size"],
                         spec["producer"], spec["timeout"])
    else:
        result = consume(args.bootstrap, args.topic, {int(p): e for p, e in spec["ends"].items()}, spec["timeout"])
    print(json.dumps(dataclasses.asdict(result)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
