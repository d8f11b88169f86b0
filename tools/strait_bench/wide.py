"""The wide run: thousands of small topics (2,000 x 5 partitions by default) copied by each replicator.

It measures what grows with a flow's partitions, not with its bytes: the time until every partition
is copied, the copy's records/s and CPU per GB at that width, and then, under a trickle that touches
every partition, what the replicator costs per second at rest: its CPU, the records it writes into
its internal topics on both clusters (strait's progress and offset syncs, MM2's offsets, offset syncs,
heartbeats, checkpoints...) and, for strait, Spark's planning time per micro-batch.
"""

from __future__ import annotations

import logging
import re
import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from strait.errors import StraitError
from strait.kafka.admin import TopicSpec
from strait.kafka.admin import create_topics as create_topics_on

from strait_bench import systems
from strait_bench.monitor import TreeMonitor
from strait_bench.options import BenchOptions, replicator
from strait_bench.runner import wait_started
from strait_bench.traffic import KEEP_FOREVER, BenchError, bench_producer, payloads
from strait_lab.kafka import KafkaCluster, KafkaClusterSpec
from strait_lab.process import ManagedProcess, tail

log = logging.getLogger(__name__)

PREFIX = "wide-"
POLL_SECONDS = 1.0  # reading 10,000 end offsets takes a while: poll less often than the main runs
GB = 1e9


@dataclass(frozen=True)
class WideShape:
    """How many topics, each of how many partitions."""

    topics: int
    partitions: int

    @classmethod
    def of(cls, options: BenchOptions) -> WideShape:
        """The shape ``--wide`` asked for."""
        if options.wide is None:
            raise BenchError("the wide run needs --wide TOPICSxPARTITIONS")
        return cls(*options.wide)

    @property
    def total_partitions(self) -> int:
        """Partitions of all the topics together."""
        return self.topics * self.partitions

    def names(self) -> list[str]:
        """The source topics' names (sorted)."""
        return [f"{PREFIX}{i:05d}" for i in range(self.topics)]

    def partitions_of(self, prefix: str = "") -> list[TopicPartition]:
        """Every partition of the topics, each name behind ``prefix`` (a remote topic's)."""
        return [TopicPartition(prefix + name, p) for name in self.names() for p in range(self.partitions)]


def create_topics(cluster: KafkaCluster, shape: WideShape, prefix: str = "", timeout: float = 120.0) -> None:
    """Create the shape's topics (each name behind ``prefix``) on ``cluster``, a batch per request,
    and wait until each partition has a leader."""
    admin = cluster.admin()
    names = [prefix + name for name in shape.names()]
    try:
        create_topics_on(admin, cluster.alias, [TopicSpec(name, shape.partitions, 1, KEEP_FOREVER) for name in names],
                         timeout=timeout)
    except StraitError as exc:
        raise BenchError(str(exc)) from exc
    _wait_for_leaders(admin, cluster, names, shape.partitions, timeout)


def _wait_for_leaders(admin: AdminClient, cluster: KafkaCluster, names: list[str], partitions: int,
                      timeout: float) -> None:
    """Wait until the cluster's metadata lists every partition of the topics ``names`` with a leader."""
    deadline = time.monotonic() + timeout
    wanted = set(names)
    while True:
        topics = admin.list_topics(timeout=30).topics
        led = {name for name in wanted if name in topics and len(topics[name].partitions) == partitions
               and all(p.leader >= 0 for p in topics[name].partitions.values())}
        if led == wanted:
            return
        if time.monotonic() > deadline:
            raise BenchError(f"{len(wanted - led)} of the {len(wanted)} {PREFIX}* topics on cluster "
                             f"{cluster.alias} have no leader for every partition after {timeout:.0f}s")
        time.sleep(1.0)


def produce_round_robin(cluster: KafkaCluster, shape: WideShape, records: int, size: int,
                        first_key: int = 0, rate: float | None = None) -> float:
    """Produce ``records`` keyed records, one partition after another over every partition of the
    shape (at ``rate`` records/s when given); the seconds it took."""
    partitions = shape.partitions_of()
    values = payloads(size)
    producer = bench_producer(cluster)
    step = max(1, min(1000, int(rate / 100))) if rate else 1000
    started = time.monotonic()
    for i in range(records):
        where = partitions[(first_key + i) % len(partitions)]
        deadline = None
        while True:
            try:
                producer.produce(where.topic, key=b"key-%d" % (first_key + i), value=values[i % len(values)],
                                 partition=where.partition)
                break
            except BufferError:
                producer.poll(0.05)
            except KafkaException as exc:  # a topic just created, not yet in the producer's metadata
                if exc.args[0].code() not in (KafkaError._UNKNOWN_TOPIC, KafkaError._UNKNOWN_PARTITION):
                    raise
                deadline = deadline or time.monotonic() + 60
                if time.monotonic() > deadline:
                    raise BenchError(f"producing to {where.topic} on cluster {cluster.alias}: {exc}") from exc
                producer.poll(0.2)
        if i % step == 0:
            producer.poll(0)
            if rate:
                ahead = started + i / rate - time.monotonic()
                if ahead > 0:
                    time.sleep(ahead)
    if producer.flush(300):
        raise BenchError(f"producing to the {shape.topics} {PREFIX}* topics on cluster {cluster.alias}: "
                         f"records still unacknowledged after 300s")
    return time.monotonic() - started


def end_offsets(cluster: KafkaCluster, partitions: Sequence[TopicPartition],
                timeout: float = 60.0) -> dict[tuple[str, int], int]:
    """The end offset of each partition (-1 for one not readable yet: a topic not created yet)."""
    admin = cluster.admin()
    futures = admin.list_offsets({tp: OffsetSpec.latest() for tp in partitions}, request_timeout=timeout)
    ends = {}
    for tp, future in futures.items():
        try:
            ends[(tp.topic, tp.partition)] = future.result(timeout=timeout).offset
        except Exception:  # noqa: BLE001 - unknown topic or no leader yet: not copied yet
            ends[(tp.topic, tp.partition)] = -1
    return ends


def internal_ends(cluster: KafkaCluster) -> dict[str, int]:
    """Records at the end of every topic on ``cluster`` that is neither a workload topic nor its copy:
    the replicators' own topics (and Kafka's)."""
    admin: AdminClient = cluster.admin()
    topics = admin.list_topics(timeout=30).topics
    names = [name for name in topics if not _is_workload(name)]
    partitions = [TopicPartition(name, p) for name in names for p in topics[name].partitions]
    ends = end_offsets(cluster, partitions)
    totals: dict[str, int] = {}
    for (topic, _p), end in ends.items():
        totals[topic] = totals.get(topic, 0) + max(end, 0)
    return totals


def _is_workload(name: str) -> bool:
    """A wide topic or its copy (``A.wide-00042``)."""
    return name.rsplit(".", 1)[-1].startswith(PREFIX)


def _planning(metrics_url: str | None) -> tuple[float, float] | None:
    """(sum, count) of strait's planning times per micro-batch so far; None for MM2."""
    return systems.histogram_totals(metrics_url, "strait_replicator_planning_seconds") if metrics_url else None


@dataclass(frozen=True)
class WideLoad:
    """The loaded wide topics: their shape and each partition's end offset on the source."""

    shape: WideShape
    records: int
    record_size: int
    source_ends: Mapping[tuple[str, int], int]


class WideRun:
    """Loads the wide topics on ``source`` and measures each replicator on a fresh target.

    Args:
        options: the bench's options (records, record size, cores, heaps, epoch length).
        source: the started source cluster.
        workdir: scratch folder for the targets and the replicators' logs.
    """

    def __init__(self, options: BenchOptions, source: KafkaCluster, workdir: Path) -> None:
        self.options, self.source, self.workdir = options, source, workdir
        self._runs = 0

    def load(self, shape: WideShape) -> WideLoad:
        """Create the topics and fill every partition evenly."""
        began = time.monotonic()
        create_topics(self.source, shape)
        created = time.monotonic()
        produce_round_robin(self.source, shape, self.options.wide_records, self.options.wide_record_size)
        ends = end_offsets(self.source, shape.partitions_of())
        total = sum(ends.values())
        if total != self.options.wide_records:
            raise BenchError(f"the {shape.topics} {PREFIX}* topics hold {total} records after loading "
                             f"{self.options.wide_records}")
        log.info("wide load topics=%d partitions=%d create_s=%.1f load_s=%.1f", shape.topics,
                 shape.total_partitions, created - began, time.monotonic() - created)
        return WideLoad(shape, self.options.wide_records, self.options.wide_record_size, ends)

    def measure(self, system: str, load: WideLoad) -> dict[str, Any]:
        """One replicator over the wide topics: the bulk copy, then the trickle."""
        self._runs += 1
        folder = self.workdir / f"wide{self._runs:02d}-{system}"
        target = KafkaCluster(KafkaClusterSpec("B", heap=self.options.broker_heap), folder / "B")
        target.start(timeout=180)
        try:
            pattern = [f"{re.escape(PREFIX)}.*"]
            if replicator(system) == "strait":
                process = systems.start_strait(self.source, target, pattern, self.options, self.options.cores,
                                               folder)
            else:
                # MM2 4.3 creates every remote topic in one CreateTopics request, which KRaft refuses at
                # this width ("Excessively large number of partitions per request"): it then copies
                # nothing. The bench creates them first, as its operator would have to.
                create_topics(target, load.shape, prefix=self._remote_prefix)
                process = systems.start_mm2(self.source, target, pattern, self.options, folder,
                                            dict(self.options.mm2_properties))
            try:
                result = self._observe(system, process, target, load)
            finally:
                process.stop(timeout=60)
            result.update(system=system, topics=load.shape.topics, partitions=load.shape.total_partitions,
                          remote_topics_created_by="the bench" if replicator(system) == "mm2" else system,
                          log=str(process.log_path))
            log.info("wide measured system=%s result=%s", system, result)
            return result
        finally:
            target.stop()
            shutil.rmtree(folder / "B", ignore_errors=True)

    def _observe(self, system: str, process: ManagedProcess, target: KafkaCluster,
                 load: WideLoad) -> dict[str, Any]:
        remotes = load.shape.partitions_of(self._remote_prefix)
        wanted = self._remote_ends(load.source_ends)
        started = time.monotonic()
        with TreeMonitor(process.pid or 0) as monitor:
            self._wait(process, target, remotes, lambda ends: any(e > 0 for e in ends.values()), "the first record")
            cpu_first, first_at = monitor.sample(), time.monotonic()
            self._wait(process, target, remotes, lambda ends: _holds(ends, wanted), "every partition")
            cpu_done, done_at = monitor.sample(), time.monotonic()
            payload_gb = load.records * load.record_size / GB
            seconds = max(done_at - first_at, POLL_SECONDS)
            result: dict[str, Any] = {
                "records": load.records, "startup_s": round(first_at - started, 2),
                "all_copied_s": round(done_at - started, 2), "seconds": round(seconds, 2),
                "records_per_s": round(load.records / seconds, 1),
                "cpu_s_per_gb": round((cpu_done - cpu_first) / payload_gb, 2),
                "cpu_s_per_gb_from_launch": round(cpu_done / payload_gb, 2),
            }
            if replicator(system) == "strait":  # the trickle measures it at rest, not its query's start
                result["steady_after_s"] = round(wait_started(process, self.options.timeout_seconds), 1)
            result.update(self._trickle(process, target, load, monitor, remotes))
            result.update(monitor.peak_report())
        return result

    def _trickle(self, process: ManagedProcess, target: KafkaCluster, load: WideLoad, monitor: TreeMonitor,
                 remotes: list[TopicPartition]) -> dict[str, Any]:
        """A steady trickle over every partition: the replicator's cost per second at this width, and
        how long after the trickle's last record every partition held it."""
        rate, seconds = self.options.wide_trickle_rate, self.options.wide_trickle_seconds
        metrics_url = process.env.get(systems.METRICS_URL_ENV)
        internal_before = {"source": internal_ends(self.source), "target": internal_ends(target)}
        planning_before = _planning(metrics_url)
        cpu_before, began = monitor.sample(), time.monotonic()
        count = int(rate * seconds)
        produce_round_robin(self.source, load.shape, count, load.record_size, first_key=load.records, rate=rate)
        produced_at = time.monotonic()
        now_wanted = self._remote_ends(end_offsets(self.source, load.shape.partitions_of()))
        self._wait(process, target, remotes, lambda ends: _holds(ends, now_wanted), "the trickle")
        caught_up_at = time.monotonic()
        elapsed = caught_up_at - began
        cpu = monitor.sample() - cpu_before
        internal_after = {"source": internal_ends(self.source), "target": internal_ends(target)}
        internal = {f"{side}:{topic}": round((end - internal_before[side].get(topic, 0)) / elapsed, 1)
                    for side, ends in internal_after.items() for topic, end in sorted(ends.items())
                    if end > internal_before[side].get(topic, 0)}
        result: dict[str, Any] = {
            "trickle_records_per_s": rate, "trickle_seconds": round(produced_at - began, 1),
            "trickle_caught_up_s": round(caught_up_at - produced_at, 2),
            "steady_cpu_per_s": round(cpu / elapsed, 3),
            "internal_records_per_s": internal,
        }
        planning_after = _planning(metrics_url)
        if planning_before is not None and planning_after is not None:
            total, batches = planning_after[0] - planning_before[0], planning_after[1] - planning_before[1]
            result["planning_s_per_batch"] = round(total / batches, 3) if batches else None
            result["batches"] = int(batches)
            if planning_after[1]:
                result["planning_s_per_batch_all"] = round(planning_after[0] / planning_after[1], 3)
        return result

    @property
    def _remote_prefix(self) -> str:
        return f"{self.source.alias}."  # DefaultReplicationPolicy, both replicators

    def _remote_ends(self, source_ends: Mapping[tuple[str, int], int]) -> dict[tuple[str, int], int]:
        """The end offset each remote partition must reach to hold its source partition's records."""
        return {(self._remote_prefix + topic, p): end for (topic, p), end in source_ends.items()}

    def _wait(self, process: ManagedProcess, target: KafkaCluster, remotes: list[TopicPartition],
              done: Callable[[dict[tuple[str, int], int]], bool], what: str) -> None:
        deadline = time.monotonic() + self.options.timeout_seconds
        ends: dict[tuple[str, int], int] = {}
        while time.monotonic() < deadline:
            if not process.alive():
                raise BenchError(f"{process.name} exited while waiting for {what} of the wide topics; "
                                 f"log {process.log_path}:\n{tail(process.log_path)}")
            ends = end_offsets(target, remotes)
            if done(ends):
                return
            time.sleep(POLL_SECONDS)
        missing = sum(1 for end in ends.values() if end <= 0)
        raise BenchError(f"{process.name} did not copy {what} of the wide topics within "
                         f"{self.options.timeout_seconds:.0f}s: {missing} of {len(remotes)} remote partitions "
                         f"still empty; log {process.log_path}")


def _holds(ends: Mapping[tuple[str, int], int], wanted: Mapping[tuple[str, int], int]) -> bool:
    return all(ends.get(key, -1) >= end for key, end in wanted.items())


def markdown(report: Mapping[str, Any]) -> str:
    """The wide run's summary: one column per replicator."""
    options, runs = report["options"], report["runs"]
    topics, partitions = options["wide"]
    names = [run["system"] for run in runs]
    rows = [("startup_s", "start-up to first record (s)"), ("all_copied_s", "launch to every partition copied (s)"),
            ("records_per_s", "records/s (first record to last)"), ("cpu_s_per_gb", "CPU-s per GB (same window)"),
            ("cpu_s_per_gb_from_launch", "CPU-s per GB from launch"), ("peak_rss_mb", "peak RSS (MB)"),
            ("peak_pss_mb", "peak PSS (MB)"), ("trickle_caught_up_s", "trickle's last record copied after (s)"),
            ("steady_cpu_per_s", "CPU-s per s under the trickle"),
            ("planning_s_per_batch", "planning per micro-batch under the trickle (s)"),
            ("planning_s_per_batch_all", "planning per micro-batch, whole run (s)")]
    lines = [f"# strait wide run ({report['machine'].get('started', '')})", "",
             f"{topics:,} topics x {partitions} partitions ({topics * partitions:,} partitions), "
             f"{options['wide_records']:,} records of {options['wide_record_size']} B loaded, then "
             f"{options['wide_trickle_rate']:,} records/s round-robin over every partition for "
             f"{options['wide_trickle_seconds']:.0f} s; {options['cores']} cores, strait's epochs "
             f"{options['epoch_seconds']:.0f} s.", "",
             "| metric | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    for key, label in rows:
        lines.append(f"| {label} | " + " | ".join(_value(run.get(key)) for run in runs) + " |")
    lines.append("| remote topics created by | " + " | ".join(str(run.get("remote_topics_created_by", "–"))
                                                          for run in runs) + " |")
    lines += ["", "Records/s written into internal topics under the trickle (cluster:topic):", ""]
    for run in runs:
        internal = run.get("internal_records_per_s") or {}
        lines.append(f"- {run['system']}: " + (", ".join(f"{k} {v:,.1f}" for k, v in internal.items()) or "none"))
    lines.append("")
    return "\n".join(lines)


def _value(value: Any) -> str:
    if value is None:
        return "–"
    return f"{value:,.0f}" if isinstance(value, (int, float)) and abs(value) >= 100 else f"{value}"
