"""One benchmark: clusters, load, every system measured ``repeats`` times, the scaling runs."""

from __future__ import annotations

import json
import logging
import shutil
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from strait_bench import limit, systems
from strait_bench.monitor import TreeMonitor
from strait_bench.options import BenchOptions, exactly_once, replicator
from strait_bench.stats import latency_summary
from strait_bench.traffic import (KEEP_FOREVER, BenchError, CommittedView, LatencyProbe, Progress, end_offsets,
                                  load_topic)
from strait_lab.clients import create_topic
from strait_lab.kafka import KafkaCluster, KafkaClusterSpec
from strait_lab.process import ManagedProcess, tail
from strait_lab.spark import SparkStandalone

log = logging.getLogger(__name__)

POLL_SECONDS = 0.2
GB = 1e9

# strait's latency runs begin once its start-up is over (:func:`_started`), and this long after. Spark's
# query start is start-up (as MM2's 10-13 s before its first record are), reported as startup_s and
# all_copied_s; measured inside the first latency window it made most of strait's slow seconds there.
STEADY_AFTER_SECONDS = 5.0


def _started(log_text: str) -> bool:
    """strait's query started and, when a head start copier copied (claimed its partitions), the head
    start ended (its copiers yielded to the query's tasks)."""
    return " query started " in log_text and (" copies partitions=" not in log_text or " ended reason=" in log_text)


def wait_started(process: ManagedProcess, timeout: float) -> float:
    """Wait until strait's start-up is over (:func:`_started`), then STEADY_AFTER_SECONDS; the seconds waited."""
    began = time.monotonic()
    deadline = began + timeout
    while not _started(process.log_path.read_text(errors="replace")):
        if not process.alive() or time.monotonic() > deadline:
            raise BenchError(f"{process.name} did not finish starting its query; log {process.log_path}:\n"
                             f"{tail(process.log_path)}")
        time.sleep(POLL_SECONDS)
    time.sleep(STEADY_AFTER_SECONDS)
    waited = time.monotonic() - began
    log.info("steady after start-up steady_after_s=%.1f", waited)
    return waited


@dataclass(frozen=True)
class Workload:
    """A loaded source topic (``last_keys``: each partition's last record's key, None if it has none)."""

    topic: str
    partitions: int
    records: int
    record_size: int
    source_ends: Progress
    last_keys: Mapping[int, bytes | None]

    @property
    def payload_bytes(self) -> int:
        """Value bytes of the topic (keys and headers add about 20 bytes per record, not counted)."""
        return self.records * self.record_size


class Bench:
    """Runs the whole benchmark in ``workdir``; every process it starts is stopped by :meth:`close`.

    Args:
        options: sizes and switches.
        workdir: scratch folder for cluster data and logs.
    """

    def __init__(self, options: BenchOptions, workdir: Path) -> None:
        self.options = options
        self.workdir = workdir
        self.source = KafkaCluster(KafkaClusterSpec("A", heap=options.broker_heap), workdir / "A")
        self._runs = 0

    def close(self) -> None:
        """Stop the source cluster."""
        self.source.stop()

    def load(self, partitions: int) -> Workload:
        """Create and fill a source topic with ``partitions`` partitions."""
        topic = f"bench-{partitions}p"
        seconds = load_topic(self.source, topic, partitions, self.options.records, self.options.record_size)
        ends = end_offsets(self.source, topic, partitions)
        if ends.total != self.options.records:
            raise BenchError(f"topic {topic} holds {ends.total} records after loading {self.options.records}")
        log.info("workload topic=%s partitions=%d load_seconds=%.1f", topic, partitions, seconds)
        view = CommittedView(self.source, topic, partitions)
        try:  # an exactly-once copy is complete when each partition ends with these records
            last_keys = view.last_keys(ends.ends)
        finally:
            view.close()
        return Workload(topic, partitions, self.options.records, self.options.record_size, ends, last_keys)

    # -- one measurement ---------------------------------------------------------------------------

    def measure(self, system: str, workload: Workload, cores: int | None = None,
                latency: bool = True, workers: int = 0) -> dict[str, Any]:
        """One measurement of ``system`` on a fresh target cluster; strait on a Spark standalone cluster
        of ``workers`` workers of one core each when ``workers`` is set."""
        self._runs += 1
        folder = self.workdir / f"run{self._runs:02d}-{system}-{workload.partitions}p"
        target = KafkaCluster(KafkaClusterSpec("B", heap=self.options.broker_heap), folder / "B")
        spark = SparkStandalone(folder / "spark") if workers else None
        target.start(timeout=180)
        try:
            if system == "limit":
                return self._measure_limit(target, workload, folder)
            if spark is not None:
                spark.start(workers, cores=1)
                cores = workers
            latency = latency and (self.options.eos_latency or not exactly_once(system))
            result = self._measure_replicator(system, target, workload, cores or self.options.cores, folder,
                                              latency, spark)
            return {**result, "workers": workers} if workers else result
        finally:
            if spark is not None:
                spark.stop()
            target.stop()
            shutil.rmtree(folder / "B", ignore_errors=True)  # the copy is the bulk of the disk use

    def _start(self, system: str, target: KafkaCluster, topics: list[str], cores: int,
               folder: Path, spark: SparkStandalone | None) -> ManagedProcess:
        if replicator(system) == "strait":
            return systems.start_strait(self.source, target, topics, self.options, cores, folder,
                                        spark.url if spark else None, exactly_once=exactly_once(system))
        if replicator(system) == "mm2":
            tuned = replace(self.options, cores=cores)
            return systems.start_mm2(self.source, target, topics, tuned, folder,
                                     dict(self.options.mm2_properties), exactly_once=exactly_once(system))
        raise BenchError(f"unknown system {system}")

    def _measure_replicator(self, system: str, target: KafkaCluster, workload: Workload, cores: int,
                            folder: Path, latency: bool, spark: SparkStandalone | None = None) -> dict[str, Any]:
        remote = systems.remote_topic(workload.topic, self.source)
        # Each run probes latency on a topic of its own: the bulk topic must stay as loaded, and a
        # later run must not see (and time) an earlier run's probes.
        probes = f"probe-{self._runs:02d}"
        create_topic(self.source.admin(), probes, workload.partitions, config=KEEP_FOREVER)
        # a copy in transactions is watched as its read_committed users see it
        view = CommittedView(target, remote, workload.partitions) if exactly_once(system) else None
        try:
            process = self._start(system, target, [workload.topic, probes], cores, folder, spark)
            try:
                result = self._observe(system, process, target, workload, probes, cores, latency, spark, view)
            finally:
                process.stop(timeout=60)
            if view is not None:  # the replicator stopped: outside the timed and the CPU windows
                result["duplicates"] = self._committed_duplicates(target, view, probes, workload,
                                                                  result["latency"])
        finally:
            if view is not None:
                view.close()
        result.update(system=system, partitions=workload.partitions, cores=cores, log=str(process.log_path))
        return result

    def _observe(self, system: str, process: ManagedProcess, target: KafkaCluster, workload: Workload,
                 probes: str, cores: int, latency: bool, spark: SparkStandalone | None,
                 view: CommittedView | None) -> dict[str, Any]:
        """Time and sample the running replicator: the bulk copy, then the latency runs."""
        remote = systems.remote_topic(workload.topic, self.source)
        started = time.monotonic()

        def read() -> Progress:
            return view.ends() if view else end_offsets(target, remote, workload.partitions)

        def complete(progress: Progress) -> bool:
            if view is None:
                return _complete(progress, workload)
            return view.holds_all(progress, workload.source_ends.ends, workload.last_keys)

        # on a cluster, the executors are the workers' children
        with TreeMonitor(process.pid or 0, more=tuple(spark.pids()) if spark else ()) as monitor:
            first = self._wait(process, remote, workload, read, lambda p: p.total > 0, "the first record")
            cpu_first, first_at = monitor.sample(), time.monotonic()
            self._wait(process, remote, workload, read, complete, "every record")
            cpu_done, done_at = monitor.sample(), time.monotonic()
            result = _throughput(workload, done_at - first_at, cpu_done - cpu_first)
            result["startup_s"] = round(first_at - started, 2)
            # A head start copies before Spark is up, slower than the tasks: the rate above then counts
            # its seconds too; the time from launch to the last record does not depend on when the first came
            result["all_copied_s"] = round(done_at - started, 2)
            # likewise the CPU: from launch, the start-up's CPU counts for both systems
            result["cpu_s_per_gb_from_launch"] = round(cpu_done / (workload.payload_bytes / GB), 2)
            if latency and replicator(system) == "strait":
                result["latency_waited_s"] = round(self._steady(process), 2)
            batches = _batch_seconds(process)
            result["latency"] = self._latencies(process, target, workload, probes) if latency else {}
            if batches is not None and latency:
                after = _batch_seconds(process) or batches
                total, count = after[0] - batches[0], after[1] - batches[1]
                result["batch_s_during_latency_runs"] = round(total / count, 3) if count else None
            final = read()
            result["copied"] = workload.records if complete(final) else 0
            if view is None:
                probed = end_offsets(target, systems.remote_topic(probes, self.source), workload.partitions)
                result["duplicates"] = final.total - workload.records + probed.total - _probe_records(
                    result["latency"])
            result.update(monitor.peak_report())
            result["cpu_seconds_total"] = round(monitor.sample(), 2)  # start-up and latency runs included
            log.info("measured system=%s partitions=%d cores=%d first=%d result=%s", system,
                     workload.partitions, cores, first.total, result)
        return result

    def _committed_duplicates(self, target: KafkaCluster, view: CommittedView, probes: str, workload: Workload,
                              latency: dict[str, Any]) -> int:
        """Records a read_committed consumer reads on the remote topics (bulk and probes) beyond those
        produced to the source: 0 for an exact copy."""
        probed = CommittedView(target, systems.remote_topic(probes, self.source), workload.partitions)
        try:
            read = view.count() + probed.count()
        finally:
            probed.close()
        produced = workload.records + _probe_records(latency)
        log.info("read_committed topic=%s read=%d produced=%d", view.topic, read, produced)
        return read - produced

    def _wait(self, process: ManagedProcess, remote: str, workload: Workload, read: Callable[[], Progress],
              done: Callable[[Progress], bool], what: str) -> Progress:
        deadline = time.monotonic() + self.options.timeout_seconds
        progress = Progress({})
        while time.monotonic() < deadline:
            if not process.alive():
                raise BenchError(f"{process.name} exited while waiting for {what} on {remote}; "
                                 f"log {process.log_path}:\n{tail(process.log_path)}")
            progress = read()
            if done(progress):
                return progress
            time.sleep(POLL_SECONDS)
        raise BenchError(f"{process.name} did not copy {what} of {workload.topic} within "
                         f"{self.options.timeout_seconds:.0f}s: end offsets {progress.total} for "
                         f"{workload.records} records on {remote}; log {process.log_path}")

    def _steady(self, process: ManagedProcess) -> float:
        """Wait until strait's start-up is over (:func:`wait_started`); the seconds waited."""
        return wait_started(process, self.options.timeout_seconds)

    def _latencies(self, process: ManagedProcess, target: KafkaCluster, workload: Workload,
                   probes: str) -> dict[str, Any]:
        """Latency at each fixed rate; for strait also how many epochs ended inside each window."""
        remote = systems.remote_topic(probes, self.source)
        probe = LatencyProbe(self.source, target, probes, remote, workload.partitions,
                             workload.record_size)
        summaries = {}
        for rate in self.options.rates:
            before: list[tuple[float, float] | None] = []
            summary: dict[str, Any] = latency_summary(probe.measure(
                rate, self.options.latency_seconds, self.options.latency_warmup_seconds,
                on_clock_start=lambda: before.append(_batch_seconds(process))))
            after = _batch_seconds(process)
            if before and before[0] is not None and after is not None:
                summary["epochs_ended"] = int(after[1] - before[0][1])
            summary["slow_seconds"] = probe.slow_seconds
            summary["warmup"] = _warmup_summary(probe.warmup_latencies)
            log.info("latency rate=%d slowest seconds (UTC, as in the system's log): %s", rate,
                     "; ".join(probe.slow_seconds) or "none over 250 ms")
            summaries[str(rate)] = summary
        return summaries

    def _measure_limit(self, target: KafkaCluster, workload: Workload, folder: Path) -> dict[str, Any]:
        """The target's ingest and the source's read rate with as many producers and consumers at once
        as strait has copy tasks (one per core, at most one per partition); the limit is the lower."""
        # The fixed-rate runs come first: they warm the fresh target broker up as the replicators'
        # start-up (internal topics, first writes) does before their first record.
        latency: dict[str, Any] = {}
        for rate in self.options.rates:
            count = max(1, int(rate * self.options.latency_seconds))
            rated = f"limit-{rate}"
            create_topic(target.admin(), rated, workload.partitions)
            perf = systems.start_producer_performance(target, rated, count, self.options, rate, folder)
            _wait_exit(perf, self.options.timeout_seconds)
            fixed = systems.producer_performance_summary(perf.log_path)
            latency[str(rate)] = {"p50_ms": fixed["p50_ms"], "p99_ms": fixed["p99_ms"], "max_ms": fixed["max_ms"],
                                  "count": count}
        workers = min(self.options.cores, workload.partitions)
        topic = "limit"
        create_topic(target.admin(), topic, workload.partitions)

        def produce_jobs(into: str) -> list[LimitJob]:
            return [LimitJob("produce", target, into, {
                "partitions": limit.partitions_of(w, workers, workload.partitions),
                "records": limit.records_of(w, workers, workload.records), "size": workload.record_size,
                "producer": self.options.tuning.java(), "timeout": self.options.timeout_seconds})
                for w in range(workers)]

        consume_jobs = [LimitJob("consume", self.source, workload.topic, {
            "ends": {p: workload.source_ends.ends[p] for p in limit.partitions_of(w, workers, workload.partitions)},
            "timeout": self.options.timeout_seconds}) for w in range(workers)]
        ingest, cpu_in, rss_in = self._run_limit_workers(produce_jobs(topic), folder)
        ends = end_offsets(target, topic, workload.partitions)
        if ends.total != workload.records:
            raise BenchError(f"the limit's producers wrote {ends.total} of {workload.records} records to {topic}")
        read, cpu_out, rss_out = self._run_limit_workers(consume_jobs, folder)
        # A copy reads and writes at once, on the same cores as both brokers: the same workers run together,
        # the producers into a fresh topic while the consumers read the source again
        create_topic(target.admin(), "limit-both", workload.partitions)
        both, _cpu, _rss = self._run_limit_workers([*produce_jobs("limit-both"), *consume_jobs], folder, "both-")
        rates = limit.LimitRates(limit.combined_rate(ingest), limit.combined_rate(read))
        # a replicator reads and writes every record: the limit's CPU is both sides'; the workers timed
        # themselves, so no polling interval floors the time
        result = _throughput(workload, workload.records / rates.records_per_s, cpu_in + cpu_out, polled=False)
        result.update(copied=ends.total, cpu_seconds_total=round(cpu_in + cpu_out, 2),
                      peak_rss_mb=round(max(rss_in, rss_out) / 1e6, 1), workers=workers,
                      ingest_records_per_s=round(rates.ingest_records_per_s, 1),
                      read_records_per_s=round(rates.read_records_per_s, 1),
                      both_at_once_records_per_s=round(limit.both_at_once_rate(both, workload.records), 1),
                      latency=latency)
        log.info("limit workers=%d ingest=%.0f read=%.0f records/s", workers, rates.ingest_records_per_s,
                 rates.read_records_per_s)
        result.update(system="limit", partitions=workload.partitions, cores=None, log=str(folder / "limit"))
        return result

    def _run_limit_workers(self, jobs: list[LimitJob], folder: Path,
                           name: str = "") -> tuple[list[limit.WorkerResult], float, int]:
        """Run one limit worker per job at once; (their results, CPU-seconds between each one's first and
        last record, summed peak RSS bytes)."""
        processes = []
        for index, job in enumerate(jobs):
            path = folder / "limit" / f"{name}{job.mode}-{index}.json"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(job.spec))
            processes.append(ManagedProcess(
                f"limit {name}{job.mode}r {index}",
                [sys.executable, "-m", "strait_bench.limit", job.mode, "--bootstrap", job.cluster.bootstrap_servers,
                 "--topic", job.topic, "--spec", str(path)], path.with_suffix(".log")))
        try:
            for process in processes:
                process.start()
            for process in processes:
                _wait_exit(process, self.options.timeout_seconds)
        finally:
            for process in processes:
                process.stop()
        results = [_worker_result(p) for p in processes]
        # each worker's own CPU and RSS: a process that has exited is gone from a sampled tree
        return results, sum(r.cpu_seconds for r in results), sum(r.peak_rss_bytes for r in results)


def _batch_seconds(process: ManagedProcess) -> tuple[float, float] | None:
    """strait's epoch (micro-batch) duration totals; None for other systems."""
    url = process.env.get(systems.METRICS_URL_ENV)
    return systems.batch_seconds(url) if url else None


@dataclass(frozen=True)
class LimitJob:
    """One limit worker: ``produce`` into or ``consume`` from ``topic`` on ``cluster``, as ``spec`` says."""

    mode: str
    cluster: KafkaCluster
    topic: str
    spec: dict[str, Any]


def _worker_result(process: ManagedProcess) -> limit.WorkerResult:
    for line in reversed(process.log_path.read_text(errors="replace").splitlines()):
        if line.startswith("{"):
            data = json.loads(line)
            return limit.WorkerResult(**data)
    raise BenchError(f"{process.name} printed no result; log {process.log_path}:\n{tail(process.log_path)}")


def _complete(progress: Progress, workload: Workload) -> bool:
    return all(progress.ends.get(p, 0) >= end for p, end in workload.source_ends.ends.items())


def _probe_records(latency: dict[str, Any]) -> int:
    return sum(int(summary["count"]) + int((summary.get("warmup") or {}).get("count", 0))
               for summary in latency.values())


def _warmup_summary(latencies: list[float]) -> dict[str, Any]:
    """The warm-up records' count, p99 and max: kept in the report, never in the window's figures."""
    if not latencies:
        return {"count": 0}
    full = latency_summary(latencies)
    return {"count": full["count"], "p99_ms": full["p99_ms"], "max_ms": full["max_ms"]}


def _throughput(workload: Workload, seconds: float, cpu_seconds: float, polled: bool = True) -> dict[str, Any]:
    if polled:  # completion is polled: never claim more than the poll resolves
        seconds = max(seconds, POLL_SECONDS)
    return {
        "records": workload.records,
        "seconds": round(seconds, 2),
        "records_per_s": round(workload.records / seconds, 1),
        "mb_per_s": round(workload.payload_bytes / 1e6 / seconds, 2),
        "cpu_seconds": round(cpu_seconds, 2),
        "cpu_s_per_gb": round(cpu_seconds / (workload.payload_bytes / GB), 2),
    }


def _wait_exit(process: ManagedProcess, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while process.alive():
        if time.monotonic() > deadline:
            process.stop()
            raise BenchError(f"{process.name} still running after {timeout:.0f}s; log {process.log_path}")
        time.sleep(POLL_SECONDS)
    if process.returncode() != 0:
        raise BenchError(f"{process.name} failed with code {process.returncode()}; log {process.log_path}:\n"
                         f"{tail(process.log_path)}")
