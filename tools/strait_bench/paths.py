"""Benchmark of two copy paths of the replicator (`make bench-paths`).

Spark's own Kafka sink cannot write record timestamps nor report target offsets (checked on the
pinned pyspark: its writer takes key, value, headers, topic and partition only), so strait's Spark
tasks copy offset ranges with confluent-kafka instead. This measures the same records copied by
(a) Spark's Kafka source and sink and (b) strait's copier in Spark tasks, as batch jobs on two local
clusters; ``--profile`` runs strait's copier alone in this process under cProfile.
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

from strait.config.model import SyncsLocation
from strait.flow_spec import FlowSpec
from strait.policy import DefaultReplicationPolicy
from strait_bench.bounded import copy_ranges
from strait_lab.clients import Record, consume_all, create_topic, produce
from strait_lab.deps import spark_kafka_jars
from strait_lab.kafka import KafkaCluster, KafkaClusterSpec
from strait_replicator.planner import assign_partitions
from strait_replicator.session import build_session
from strait_replicator.writer import CopyRange, EpochLimits

# Bounded copies end at their ranges' ends; a source that stops answering ends them after this long.
COPY_SECONDS = 600.0


def _copy_all(records: int, partitions: int) -> tuple[list[CopyRange], dict[tuple[str, int], int]]:
    """Every partition of the loaded topic from its start, and how many records each holds."""
    counts = {("bench", p): len(range(p, records, partitions)) for p in range(partitions)}
    return [CopyRange("bench", p, 0) for p in range(partitions)], counts


def _copy_group(group: list[CopyRange], settings: FlowSpec,
                counts: dict[tuple[str, int], int]) -> list[tuple[object, ...]]:
    """Copy a group's partitions until all their records are copied (the loaded topic gets no more)."""
    cap = sum(counts[(r.topic, r.partition)] for r in group)
    return copy_ranges(group, settings, EpochLimits(seconds=COPY_SECONDS, max_records=cap))


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
        spark = build_session("local[2]", jars=spark_kafka_jars())
        frame = (spark.read.format("kafka").option("kafka.bootstrap.servers", source.bootstrap_servers)
                 .option("subscribe", "bench").option("includeHeaders", "true").load())
        results: dict[str, list[float]] = {"spark_kafka_sink": [], "strait_copier": []}
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
                    settings = _settings(source, target, remote)
                    ranges, counts = _copy_all(records, partitions)
                    groups = assign_partitions(ranges, counts, spark.sparkContext.defaultParallelism)
                    (spark.sparkContext.parallelize(groups, len(groups))
                     .flatMap(partial(_copy_group, settings=settings, counts=counts)).collect())
                results[path].append(time.monotonic() - started)
        sample = consume_all(target.client_config(), "strait_copier-0", partitions=[0])[:1]
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
        "strait_copier": bool(sample) and sample[0].timestamp_ms == 1_700_000_000_000,
        "spark_kafka_sink": bool(spark_sample) and spark_sample[0].timestamp_ms == 1_700_000_000_000,
    }
    return report


def _settings(source: KafkaCluster, target: KafkaCluster, remote: str) -> FlowSpec:
    return FlowSpec(
        flow="A->B", source_alias="A", target_alias="B", policy=DefaultReplicationPolicy(),
        target_producer={"bootstrap.servers": target.bootstrap_servers},
        syncs_producer={"bootstrap.servers": source.bootstrap_servers},
        source_consumer={"bootstrap.servers": source.bootstrap_servers},
        syncs=SyncsLocation("A", "bench-syncs"), remote_names={"bench": remote})


def profile_copier(records: int, size: int, partitions: int, top: int = 25) -> dict[str, object]:
    """Run ``copy_ranges`` in this process (no Spark) under cProfile between two lab clusters.

    What the copy loop costs per record in Python, without Spark around it.
    """
    workdir = Path(tempfile.mkdtemp(prefix="strait-profile-"))
    source = KafkaCluster(KafkaClusterSpec("A", heap="1g"), workdir / "A")
    target = KafkaCluster(KafkaClusterSpec("B", heap="1g"), workdir / "B")
    source.start()
    target.start()
    try:
        _load(source, "bench", records, size, partitions)
        create_topic(source.admin(), "bench-syncs", 1, config={"cleanup.policy": "compact"})
        create_topic(target.admin(), "A.bench", partitions)
        ranges, counts = _copy_all(records, partitions)
        profiler = cProfile.Profile()
        started = time.monotonic()
        profiler.enable()
        summary = _copy_group(ranges, _settings(source, target, "A.bench"), counts)
        profiler.disable()
        seconds = time.monotonic() - started
    finally:
        source.stop()
        target.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(top)
    copied = sum(row[3] for row in summary)
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
                        help="profile strait's copier alone (cProfile, no Spark) instead of comparing paths")
    args = parser.parse_args()
    if args.profile:
        result = profile_copier(args.records, args.size, args.partitions)
        print(result.pop("profile"))
        print(json.dumps(result, indent=2))
        return
    print(json.dumps(run(args.records, args.size, args.partitions, args.repeats), indent=2))


if __name__ == "__main__":
    main()
