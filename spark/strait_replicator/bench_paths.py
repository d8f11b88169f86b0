"""Benchmark of the two candidate write paths of the replicator (`make bench-paths`).

Spark's own Kafka sink cannot write record timestamps nor report target offsets (checked on the
pinned pyspark: its writer takes key, value, headers, topic and partition only), so strait produces
from ``mapInArrow`` with confluent-kafka instead. This measures what that costs: the same records
copied by (a) Spark's Kafka sink and (b) strait's writer, as batch jobs on two local clusters.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import shutil
import tempfile
import time
from functools import partial
from pathlib import Path


import pyarrow as pa

from strait.lab.clients import Record, consume_all, create_topic, produce
from strait.lab.kafka import KafkaCluster, KafkaClusterSpec
from strait.policy import DefaultReplicationPolicy
from strait_replicator.session import build_session
from strait_replicator.writer import SUMMARY_SCHEMA, WriterSettings, copy_partition


def _load(cluster: KafkaCluster, topic: str, records: int, size: int, partitions: int) -> None:
    create_topic(cluster.admin(), topic, partitions, config={"retention.ms": "-1"})
    payload = b"x" * size
    produce(cluster.client_config(), topic, (
        Record(f"key-{i}".encode(), payload, (("h", b"v"),), 1_700_000_000_000 + i, i % partitions)
        for i in range(records)))


def run(records: int, size: int, partitions: int, repeats: int) -> dict[str, object]:
    """Copy ``records`` records with each path ``repeats`` times; return the measurements."""
    workdir = Path(tempfile.mkdtemp(prefix="strait-bench-"))
    source = KafkaCluster(KafkaClusterSpec("A", heap="1g"), workdir / "A")
    target = KafkaCluster(KafkaClusterSpec("B", heap="1g"), workdir / "B")
    source.start()
    target.start()
    try:
        _load(source, "bench", records, size, partitions)
        create_topic(source.admin(), "bench-syncs", 1, config={"cleanup.policy": "compact"})
        spark = build_session("local[2]")
        frame = (spark.read.format("kafka").option("kafka.bootstrap.servers", source.bootstrap_servers)
                 .option("subscribe", "bench").option("includeHeaders", "true").load())
        results: dict[str, list[float]] = {"spark_kafka_sink": [], "strait_writer": []}
        for attempt in range(repeats):
            for path in results:
                remote = f"{path}-{attempt}"
                create_topic(target.admin(), remote, partitions, config={"retention.ms": "-1"})
                started = time.monotonic()
                if path == "spark_kafka_sink":
                    (frame.selectExpr("key", "value", "headers", "partition", f"'{remote}' AS topic")
                     .write.format("kafka").option("kafka.bootstrap.servers", target.bootstrap_servers)
                     .option("kafka.linger.ms", "5").option("kafka.batch.size", "1048576").save())
                else:
                    settings = WriterSettings(
                        flow="A->B", source_alias="A", target_alias="B", policy=DefaultReplicationPolicy(),
                        target_producer={"bootstrap.servers": target.bootstrap_servers},
                        syncs_producer={"bootstrap.servers": source.bootstrap_servers},
                        syncs_topic="bench-syncs", syncs_alias="A", remote_names={"bench": remote})
                    frame.mapInArrow(partial(copy_partition, settings=settings), SUMMARY_SCHEMA).collect()
                results[path].append(time.monotonic() - started)
        sample = consume_all(target.client_config(), "strait_writer-0", partitions=[0])[:1]
        spark_sample = consume_all(target.client_config(), "spark_kafka_sink-0", partitions=[0])[:1]
        spark.stop()
    finally:
        source.stop()
        target.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    megabytes = records * size / 1e6
    report: dict[str, object] = {"records": records, "value_bytes": size, "partitions": partitions}
    for path, seconds in results.items():
        median = sorted(seconds)[len(seconds) // 2]
        report[path] = {"seconds": [round(s, 2) for s in seconds], "records_per_second": round(records / median),
                        "mb_per_second": round(megabytes / median, 1)}
    report["timestamp_preserved"] = {
        "strait_writer": bool(sample) and sample[0].timestamp_ms == 1_700_000_000_000,
        "spark_kafka_sink": bool(spark_sample) and spark_sample[0].timestamp_ms == 1_700_000_000_000,
    }
    return report


# The Arrow schema Spark's Kafka source hands to mapInArrow (with includeHeaders).
KAFKA_ARROW = pa.schema([
    ("key", pa.binary()), ("value", pa.binary()), ("topic", pa.string()), ("partition", pa.int32()),
    ("offset", pa.int64()), ("timestamp", pa.timestamp("us", tz="UTC")), ("timestampType", pa.int32()),
    ("headers", pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))),
])


def arrow_batches(topic: str, partition: int, records: int, size: int,
                  per_batch: int = 10_000) -> list[pa.RecordBatch]:
    """Record batches shaped like Spark's Kafka source output for one topic-partition."""
    payload = b"x" * size
    batches = []
    for start in range(0, records, per_batch):
        n = min(per_batch, records - start)
        batches.append(pa.RecordBatch.from_pydict({
            "key": [f"key-{start + i}".encode() for i in range(n)], "value": [payload] * n,
            "topic": [topic] * n,
            "partition": [partition] * n, "offset": list(range(start, start + n)),
            "timestamp": [1_700_000_000_000_000 + start + i for i in range(n)], "timestampType": [0] * n,
            "headers": [[{"key": "h", "value": b"v"}]] * n,
        }, schema=KAFKA_ARROW))
    return batches


def profile_writer(records: int, size: int, top: int = 25) -> dict[str, object]:
    """Run ``copy_partition`` in this process (no Spark) under cProfile against a lab cluster.

    What the writer costs per record in Python, without Spark's JVM and Arrow transfer around it.
    """
    workdir = Path(tempfile.mkdtemp(prefix="strait-profile-"))
    cluster = KafkaCluster(KafkaClusterSpec("B", heap="1g"), workdir / "B")
    cluster.start()
    try:
        create_topic(cluster.admin(), "A.bench", 1)
        create_topic(cluster.admin(), "bench-syncs", 1, config={"cleanup.policy": "compact"})
        settings = WriterSettings(
            flow="A->B", source_alias="A", target_alias="B", policy=DefaultReplicationPolicy(),
            target_producer={"bootstrap.servers": cluster.bootstrap_servers},
            syncs_producer={"bootstrap.servers": cluster.bootstrap_servers},
            syncs_topic="bench-syncs", syncs_alias="B")
        batches = arrow_batches("bench", 0, records, size)
        profiler = cProfile.Profile()
        started = time.monotonic()
        profiler.enable()
        summary = list(copy_partition(iter(batches), settings))
        profiler.disable()
        seconds = time.monotonic() - started
    finally:
        cluster.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(top)
    copied = sum(batch.column("records")[0].as_py() for batch in summary)
    return {"records": copied, "seconds": round(seconds, 2), "records_per_second": round(copied / seconds),
            "profile": text.getvalue()}


def main() -> None:
    """Command line of the benchmark; prints a JSON report."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--profile", action="store_true",
                        help="profile strait's writer alone (cProfile, no Spark) instead of comparing paths")
    args = parser.parse_args()
    if args.profile:
        result = profile_writer(args.records, args.size)
        print(result.pop("profile"))
        print(json.dumps(result, indent=2))
        return
    print(json.dumps(run(args.records, args.size, args.partitions, args.repeats), indent=2))


if __name__ == "__main__":
    main()
