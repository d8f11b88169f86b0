"""The measured systems as processes: strait's replicator and MirrorMaker 2 (each also in its exactly-once
mode), ProducerPerformance for the limit."""

from __future__ import annotations

import re
import shutil
import sys
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path

import yaml
from prometheus_client.parser import text_string_to_metric_families

from strait_bench.options import BenchOptions
from strait_bench.traffic import BenchError
from strait_lab import deps
from strait_lab.kafka import KafkaCluster
from strait_lab.ports import free_port
from strait_lab.process import ManagedProcess, console_log4j2, tail
from strait_lab.spark import SPARK_ENV

METRICS_URL_ENV = "STRAIT_BENCH_METRICS_URL"  # where the bench finds the replicator's /metrics again
MM2_MAIN = "org.apache.kafka.connect.mirror.MirrorMaker"
PERF_MAIN = "org.apache.kafka.tools.ProducerPerformance"


def remote_topic(topic: str, source: KafkaCluster) -> str:
    """The remote topic both replicators write (DefaultReplicationPolicy)."""
    return f"{source.alias}.{topic}"


def strait_config(source: KafkaCluster, target: KafkaCluster, topics: Sequence[str],
                  options: BenchOptions, exactly_once: bool = False) -> dict:
    """strait's YAML config: one flow source->target over the given topics, the shared producer tuning;
    the flow copies in transactions with ``exactly_once``."""
    flow = {"source": source.alias, "target": target.alias, "topics": {"include": list(topics)},
            "replication_factor": 1}
    if exactly_once:
        flow["exactly_once"] = True
    return {
        "clusters": {
            source.alias: {"bootstrap_servers": source.bootstrap_servers},
            target.alias: {"bootstrap_servers": target.bootstrap_servers, "producer": options.tuning.java()},
        },
        "flows": [flow],
    }


def batch_seconds(metrics_url: str) -> tuple[float, float]:
    """(sum, count) of the replicator's epoch (micro-batch) durations so far, from its /metrics page."""
    return histogram_totals(metrics_url, "strait_replicator_batch_duration_seconds")


def histogram_totals(metrics_url: str, name: str) -> tuple[float, float]:
    """(sum, count) of the histogram ``name`` (all its label sets) on a /metrics page."""
    with urllib.request.urlopen(metrics_url, timeout=10) as response:
        text = response.read().decode()
    found = {sample.name: sample.value for family in text_string_to_metric_families(text)
             for sample in family.samples if sample.name in (f"{name}_sum", f"{name}_count")}
    return found.get(f"{name}_sum", 0.0), found.get(f"{name}_count", 0.0)


def start_strait(source: KafkaCluster, target: KafkaCluster, topics: Sequence[str], options: BenchOptions,
                 cores: int, workdir: Path, master: str | None = None,
                 exactly_once: bool = False) -> ManagedProcess:
    """`strait run replicator --config FILE` on ``local[cores]`` or a standalone ``master``, as users run it
    (metrics URL in its env); the flow in its exactly-once mode with ``exactly_once``."""
    workdir.mkdir(parents=True, exist_ok=True)
    config = workdir / "strait.yaml"
    document = strait_config(source, target, topics, options, exactly_once)
    config.write_text(yaml.safe_dump(document, sort_keys=False))
    port = free_port()
    argv = [sys.executable, "-m", "strait.cli", "run", "replicator", "--config", str(config),
            "--state-dir", str(workdir / "state"), "--master", master or f"local[{cores}]",
            "--metrics-port", str(port), "--epoch-seconds", str(options.epoch_seconds)]
    if not options.head_start:
        argv.append("--no-head-start")
    process = ManagedProcess("strait replicator", argv, workdir / "replicator.log",
                             env={**(SPARK_ENV if master else {}), METRICS_URL_ENV: f"http://127.0.0.1:{port}/metrics"})
    process.start()
    return process


def mm2_properties(source: KafkaCluster, target: KafkaCluster, topics: Sequence[str],
                   options: BenchOptions) -> dict[str, str]:
    """MM2's dedicated-mode properties: A->B only, tasks = cores, the same producer tuning as strait.

    Connect's worker producer defaults to one request in flight; strait's writer uses the idempotent
    producer with five, so MM2 gets the same (order is kept either way). Heartbeats and checkpoints
    stay on (MM2's defaults): they cost MM2 a little CPU that strait spends in other processes.
    """
    a, b = source.alias, target.alias
    props = {
        "clusters": f"{a}, {b}",
        f"{a}.bootstrap.servers": source.bootstrap_servers,
        f"{b}.bootstrap.servers": target.bootstrap_servers,
        f"{a}->{b}.enabled": "true",
        f"{a}->{b}.topics": ", ".join(topics),
        f"{b}->{a}.enabled": "false",
        "tasks.max": str(options.cores),
        "replication.factor": "1",
        "sync.topic.acls.enabled": "false",
        # Flow-scoped: the source task reads connector-level consumer.* (cluster-scoped ones miss it).
        f"{a}->{b}.consumer.auto.offset.reset": "earliest",
        f"{a}->{b}.consumer.max.poll.records": "10000",  # strait's copier consumes 10,000 at a time
        f"{b}.producer.enable.idempotence": "true",
        f"{b}.producer.max.in.flight.requests.per.connection": "5",
        f"{b}.producer.buffer.memory": str(256 * 1024 * 1024),  # librdkafka's queue in strait's writer
    }
    for name in ("checkpoints", "heartbeats", "offset-syncs"):
        props[f"{name}.topic.replication.factor"] = "1"
    for name in ("offset", "status", "config"):
        props[f"{name}.storage.replication.factor"] = "1"
    props.update({f"{b}.producer.{k}": v for k, v in options.tuning.java().items()})
    return props


def mm2_exactly_once_properties(source: KafkaCluster, target: KafkaCluster, rest_port: int) -> dict[str, str]:
    """What MM2's exactly-once mode (KIP-618, KIP-710) adds to :func:`mm2_properties`.

    The herders into the target get ``exactly.once.source.support=enabled``; in dedicated mode the
    herder's leader hands out task configs and fences the tasks' earlier producers through the internal
    REST server, here on ``rest_port``; MirrorSourceConnector supports the mode only with a
    read_committed source consumer.
    """
    a, b = source.alias, target.alias
    return {f"{b}.exactly.once.source.support": "enabled",
            "dedicated.mode.enable.internal.rest": "true",
            "listeners": f"http://127.0.0.1:{rest_port}",
            f"{a}->{b}.consumer.isolation.level": "read_committed"}


def _java(heap: str, log_config: Path, classpath: str, main: str, *args: str) -> list[str]:
    deps.ensure_java()
    return [shutil.which("java") or "java", f"-Xmx{heap}", "-XX:+UseG1GC", "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={log_config}", "-cp", classpath, main, *args]


def start_mm2(source: KafkaCluster, target: KafkaCluster, topics: Sequence[str], options: BenchOptions,
              workdir: Path, overrides: Mapping[str, str] | None = None,
              exactly_once: bool = False) -> ManagedProcess:
    """`connect-mirror-maker` (MirrorMaker's main class) with a generated properties file (``overrides``
    replace or add properties, e.g. replication factors for a multi-broker drill), in MM2's exactly-once
    mode with ``exactly_once``."""
    workdir.mkdir(parents=True, exist_ok=True)
    props = workdir / "mm2.properties"
    settings = mm2_properties(source, target, topics, options)
    if exactly_once:
        settings.update(mm2_exactly_once_properties(source, target, free_port()))
    settings.update(overrides or {})
    props.write_text("".join(f"{k} = {v}\n" for k, v in settings.items()))
    log_config = workdir / "log4j2.properties"
    log_config.write_text(console_log4j2())
    deps.ensure_jars("mm2")
    argv = _java(options.jvm_heap, log_config, deps.classpath("mm2"), MM2_MAIN, str(props))
    process = ManagedProcess("MirrorMaker 2", argv, workdir / "mm2.log")
    process.start()
    return process


def start_producer_performance(target: KafkaCluster, topic: str, records: int, options: BenchOptions,
                               throughput: int, workdir: Path) -> ManagedProcess:
    """Kafka's ProducerPerformance writing ``records`` records of the bench's size to ``topic``."""
    workdir.mkdir(parents=True, exist_ok=True)
    log_config = workdir / "log4j2.properties"
    log_config.write_text(console_log4j2("WARN"))
    props = {"bootstrap.servers": target.bootstrap_servers, "enable.idempotence": "true",
             "buffer.memory": str(256 * 1024 * 1024), **options.tuning.java()}
    argv = _java("1g", log_config, deps.classpath("kafka"), PERF_MAIN, "--topic", topic,
                 "--num-records", str(records), "--record-size", str(options.record_size),
                 "--throughput", str(throughput), "--producer-props", *(f"{k}={v}" for k, v in props.items()))
    process = ManagedProcess(f"ProducerPerformance {topic}", argv, workdir / f"perf-{topic}.log")
    process.start()
    return process


_SUMMARY = re.compile(
    r"(?P<records>\d+) records sent, (?P<rps>[\d.]+) records/sec \((?P<mbps>[\d.]+) MB/sec\), "
    r"(?P<avg>[\d.]+) ms avg latency, (?P<max>[\d.]+) ms max latency, (?P<p50>\d+) ms 50th, "
    r"(?P<p95>\d+) ms 95th, (?P<p99>\d+) ms 99th")


def producer_performance_summary(log_path: Path) -> dict[str, float]:
    """The final summary line of a ProducerPerformance run (records/s, MB/s, latencies)."""
    text = log_path.read_text(errors="replace")
    matches = list(_SUMMARY.finditer(text))
    if not matches:
        raise BenchError(f"ProducerPerformance printed no summary; log {log_path}:\n{tail(log_path)}")
    found = matches[-1]
    return {"records": int(found["records"]), "records_per_s": float(found["rps"]),
            "mb_per_s_mib": float(found["mbps"]), "p50_ms": float(found["p50"]),
            "p99_ms": float(found["p99"]),
            "max_ms": float(found["max"])}
