"""The benchmark's report: a JSON document, a Markdown summary and a PNG plot."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from strait_bench import stats
from strait_bench.options import SYSTEMS

NAMES = {"strait": "strait", "mm2": "MirrorMaker 2", "limit": "limit", "strait-eos": "strait exactly-once",
         "mm2-eos": "MM2 exactly-once"}
SHORT = {"strait": "strait", "mm2": "MM2", "limit": "limit", "strait-eos": "strait EOS", "mm2-eos": "MM2 EOS"}
COLORS = {"strait": "#1f77b4", "mm2": "#ff7f0e", "limit": "#7f7f7f", "strait-eos": "#2ca02c",
          "mm2-eos": "#d62728"}
# the ratio columns: strait against MM2 and the limit, its exactly-once mode against its own at-least-once
# mode and against MM2's exactly-once mode
RATIOS = (("strait", "mm2"), ("strait", "limit"), ("strait-eos", "strait"), ("strait-eos", "mm2-eos"))
LATENCY_METHOD = (
    "End-to-end latency = arrival time at a consumer of the target (fetch.wait.max.ms=5, same machine "
    "clock) minus the record's CreateTime set when the bench produced it to the source at a fixed rate. "
    "Remote topics keep the source timestamps, so the target's append time cannot be read; the consumer "
    "adds a few milliseconds at most. Each window lasts --latency-seconds (75 s by default, longer than "
    "strait's 60 s epochs, so every strait window holds at least one change of epochs; the report counts "
    "them). Before each window's clock starts, the same probe producer sends --latency-warmup-seconds "
    "(10 s) of records at the window's rate; they are read but kept out of the window's figures (their "
    "count, p99 and max are in the JSON as latency.<rate>.warmup): a new producer's first seconds slowed "
    "every system alike and held most of a window's records over 250 ms, so p99 measured the probe's "
    "start. For the limit the figure is ProducerPerformance's own send-to-ack latency at the same rate."
)
CPU_METHOD = (
    "CPU-seconds and peak RSS are summed over the whole process tree of each system, sampled every 0.25 s "
    "with psutil (strait: Python driver + Spark JVM + Python workers, and on a standalone cluster also the "
    "master, the workers and their executors; MM2: its JVM; limit: each producer's and consumer's own CPU "
    "between its first and last record, both sides summed, and the larger side's summed peak RSS). Throughput "
    "and CPU use the window from the first record on the target to the last; start-up is reported apart. "
    "GB = 10^9 bytes of record values. On a standalone cluster, cores = workers of one core each (the "
    "driver, which only plans, is not limited). Peak PSS sums the same trees' proportional set sizes: a page "
    "shared by N processes (Spark's forked Python workers share their daemon's) counts 1/N in each, so the "
    "tree's memory is counted once, where the RSS sum counts shared pages once per process (not measured "
    "for the limit's workers)."
)
EOS_METHOD = (
    "The exactly-once systems write their copies in transactions: strait with the flow's exactly_once: true, "
    "MM2 with exactly.once.source.support=enabled for the target (with its internal REST server, "
    "dedicated.mode.enable.internal.rest=true, and a read_committed source consumer). A transactional "
    "copy's high watermarks also count its commit markers and open transactions, so their progress is read "
    "as a read_committed consumer sees it: the committed offsets (last stable offsets) for the first "
    "record, and every record is copied once each remote partition's last committed record is its source "
    "partition's last record (the load's keys are unique). Their latency probe reads read_committed (as "
    "every system's does): it is the time until a record is visible to such readers. After the replicator "
    "has stopped, a read_committed consumer reads both remote topics (bulk and probes) from the start: "
    "duplicates = records read - records produced."
)


def build(options: Mapping[str, Any], runs: Mapping[str, Sequence[Mapping[str, Any]]],
          scaling: Sequence[Mapping[str, Any]], machine: Mapping[str, Any]) -> dict[str, Any]:
    """The report document: every run, the medians per system, the ratios, the goals."""
    medians = {system: stats.medians(results) for system, results in runs.items() if results}
    ratios = {f"{one}/{other}": stats.ratios(medians[one], medians[other])
              for one, other in RATIOS if one in medians and other in medians}
    return {"options": dict(options), "machine": dict(machine), "latency_method": LATENCY_METHOD,
            "cpu_method": CPU_METHOD, "eos_method": EOS_METHOD, "runs": {k: list(v) for k, v in runs.items()},
            "medians": medians, "ratios": ratios,
            "goals": [g.as_dict() for g in goals(options, medians, scaling, runs)], "scaling": list(scaling)}


@dataclass(frozen=True)
class Goal:
    """One goal of issues 22 and 44: a ratio (or, with ``unit`` "records", a count) measured in this run
    against its target."""

    name: str
    ratio: float | None  # None: a side was not measured
    target: float
    comparison: str  # ">=", "<=" or "=="
    unit: str = "x"

    @property
    def met(self) -> bool | None:
        """Whether the measured value reaches its target (None when not measured)."""
        if self.ratio is None:
            return None
        if self.comparison == "==":
            return self.ratio == self.target
        return self.ratio >= self.target if self.comparison == ">=" else self.ratio <= self.target

    def as_dict(self) -> dict[str, Any]:
        """The goal as the JSON report holds it."""
        return {"name": self.name, "ratio": self.ratio, "target": self.target, "comparison": self.comparison,
                "unit": self.unit, "met": self.met}


def goals(options: Mapping[str, Any], medians: Mapping[str, Mapping[str, float]],
          scaling: Sequence[Mapping[str, Any]],
          runs: Mapping[str, Sequence[Mapping[str, Any]]] | None = None) -> list[Goal]:
    """Issue 22's goals: strait against MM2 and the limit (medians), and strait's scaling runs; then
    issue 44's: strait's exactly-once mode against its at-least-once mode and MM2's exactly-once mode,
    and its duplicates (in ``runs``)."""

    def ratio(key: str, other: str, one: str = "strait") -> float | None:
        return stats.ratios(medians.get(one, {}), medians.get(other, {})).get(key)

    rates = options.get("rates", ())
    found = [Goal("records/s vs MM2", ratio("records_per_s", "mm2"), 1.5, ">="),
             Goal("records/s vs the limit", ratio("records_per_s", "limit"), 0.7, ">="),
             Goal("CPU-s per GB vs MM2", ratio("cpu_s_per_gb", "mm2"), 0.7, "<=")]
    for rate in rates:
        found += [Goal(f"{q} latency @{rate:,}/s vs MM2", ratio(f"latency.{rate}.{q}_ms", "mm2"), 1.0, "<=")
                  for q in ("p99", "max")]
    found += [Goal("start-up to first record vs MM2", ratio("startup_s", "mm2"), 1.0, "<="),
              Goal("peak RSS vs MM2", ratio("peak_rss_mb", "mm2"), 1.0, "<="),
              Goal("peak PSS vs MM2", ratio("peak_pss_mb", "mm2"), 1.0, "<=")]
    baseline, one_core, wide = _scaling_runs(options, scaling)
    two_cores = baseline if options.get("cores") == 2 else None  # the goal is for two task slots
    found.append(Goal("records/s 1 -> 2 cores", _quotient(two_cores, one_core, "records_per_s"), 1.7, ">="))
    found.append(Goal(f"CPU-s per GB at {options.get('scaling_partitions')} vs {options.get('partitions')} "
                      "partitions", _quotient(wide, baseline, "cpu_s_per_gb"), 1.1, "<="))
    found += [Goal("exactly-once records/s vs strait at-least-once",
                   ratio("records_per_s", "strait", "strait-eos"), 0.8, ">="),
              Goal("exactly-once records/s vs MM2 exactly-once", ratio("records_per_s", "mm2-eos", "strait-eos"),
                   1.0, ">=")]
    found += [Goal(f"exactly-once p99 latency @{rate:,}/s vs MM2 exactly-once",
                   ratio(f"latency.{rate}.p99_ms", "mm2-eos", "strait-eos"), 1.0, "<=") for rate in rates]
    found.append(Goal("exactly-once duplicates", _most_duplicates((runs or {}).get("strait-eos", ())), 0, "==",
                      "records"))
    return found


def _most_duplicates(runs: Sequence[Mapping[str, Any]]) -> float | None:
    """The most duplicates any run read (one run's duplicate misses the goal), None if none counted them."""
    counts = [run["duplicates"] for run in runs if run.get("duplicates") is not None]
    return max(counts) if counts else None


def _scaling_runs(options: Mapping[str, Any], scaling: Sequence[Mapping[str, Any]]) -> tuple[Any, Any, Any]:
    """(baseline, one core, more partitions) among the scaling runs (local mode), None where missing."""
    local = [run for run in scaling if not run.get("workers")]
    baseline = next((r for r in local if r["partitions"] == options.get("partitions")
                     and r["cores"] == options.get("cores")), None)
    one_core = next((r for r in local if r["partitions"] == options.get("partitions") and r["cores"] == 1
                     and r is not baseline), None)
    wide = next((r for r in local if r["partitions"] == options.get("scaling_partitions") and r is not baseline),
                None)
    return baseline, one_core, wide


def _quotient(numerator: Mapping[str, Any] | None, denominator: Mapping[str, Any] | None,
              key: str) -> float | None:
    if not numerator or not denominator:
        return None
    return stats.ratios(stats.flatten(numerator), stats.flatten(denominator)).get(key)


def _rows(rates: Sequence[int]) -> list[tuple[str, str]]:
    rows = [("records_per_s", "records/s"), ("mb_per_s", "MB/s"), ("cpu_s_per_gb", "CPU-s per GB"),
            ("peak_rss_mb", "peak RSS (MB)"), ("peak_pss_mb", "peak PSS (MB)"),
            ("startup_s", "start-up to first record (s)"),
            ("all_copied_s", "launch to every record copied (s)"),
            ("cpu_s_per_gb_from_launch", "CPU-s per GB, launch to every record copied"),
            ("duplicates", "duplicates read on the target (records)"),
            ("ingest_records_per_s", "limit: target ingest (records/s)"),
            ("read_records_per_s", "limit: source read (records/s)"),
            ("both_at_once_records_per_s", "limit: producers and consumers at once (records/s)")]
    for rate in rates:
        rows += [(f"latency.{rate}.{q}_ms", f"latency @{rate:,}/s {q} (ms)") for q in ("p50", "p99", "max")]
        rows.append((f"latency.{rate}.epochs_ended", f"epochs ended in the @{rate:,}/s window"))
    return [*rows, ("batch_s_during_latency_runs", "strait epoch (micro-batch) duration at fixed rates (s)")]


COUNTS = ("duplicates", "epochs_ended")  # rows of whole numbers (a median of two may end in .5)


def _cell(value: float | None, key: str = "") -> str:
    if value is None:
        return "–"
    if key.endswith(COUNTS) and value == int(value):
        return f"{value:,.0f}"
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:,.2f}"


def markdown(report: Mapping[str, Any]) -> str:
    """The Markdown summary: the medians table with ratios, goals, the scaling runs, the method."""
    options, medians, ratios = report["options"], report["medians"], report["ratios"]
    systems = [s for s in SYSTEMS if s in medians]
    header = ["metric (median)", *(NAMES[s] for s in systems), *ratios]
    lines = [f"# strait benchmark ({report['machine'].get('started', '')})", "",
             f"{options['records']:,} records of {options['record_size']:,} B with keys and headers, "
             f"{options['partitions']} partitions, {options['cores']} cores, {options['repeats']} repeat(s); "
             f"machine: {report['machine'].get('cpus')} CPUs, load average at start "
             f"{report['machine'].get('load_average')}.", "",
             "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for key, label in _rows(options.get("rates", ())):
        cells = [_cell(medians[s].get(key), key) for s in systems]
        cells += [f"{r[key]:.2f}x" if key in r else "–" for r in ratios.values()]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    lines += ["", "## Goals", "", "| goal | measured | target | met |", "|---|---|---|---|"]
    for goal in report["goals"]:
        met = {True: "met", False: "**missed**", None: "not measured"}[goal["met"]]
        lines.append(f"| {goal['name']} | {_goal_value(goal, goal['ratio'])} | {goal['comparison']} "
                     f"{_goal_value(goal, goal['target'])} | {met} |")
    lines.append("")
    lines += _both_at_once(medians)
    lines += _per_repeat(report["runs"], options.get("rates", ()))
    lines += _peak_parts(report["runs"])
    if report["scaling"]:
        lines += ["## Scaling (strait)", "",
                  "| Spark | partitions | cores | records/s | MB/s | CPU-s per GB | peak RSS (MB) |",
                  "|---|---|---|---|---|---|---|"]
        for run in report["scaling"]:
            workers = run.get("workers")
            spark = f"standalone, {workers} worker{'s' if workers > 1 else ''}" if workers else "local"
            lines.append(f"| {spark} | {run['partitions']} | {run['cores']} | {_cell(run['records_per_s'])} | "
                         f"{_cell(run['mb_per_s'])} | {_cell(run['cpu_s_per_gb'])} | "
                         f"{_cell(run['peak_rss_mb'])} |")
        lines.append("")
    lines += ["## Method", "", report["cpu_method"], "", report["latency_method"], "",
              "MM2 runs with heartbeats and checkpoints on (its defaults). The limit runs as many producers "
              "into a fresh topic of the target, then as many consumers of the loaded source topic, as strait "
              "has copy tasks (one per core, at most one per partition), each a process with strait's "
              "librdkafka settings, the same record size, keys and headers; its records/s is the lower of "
              "the two rates (each: all records over the span from the first worker's first record to the "
              "last one's last). All systems use the same acks, compression, batch.size and linger.ms. "
              "Numbers come from one shared machine and are noisy.", "",
              report.get("eos_method", EOS_METHOD), "", *_mm2_extra(options),
              "![latency and throughput](bench.png)", ""]
    return "\n".join(lines)


def _mm2_extra(options: Mapping[str, Any]) -> list[str]:
    """The Method's line on MM2 properties given on the command line (none: no line)."""
    extra = options.get("mm2_properties") or ()
    if not extra:
        return []
    return ["MM2 runs with these properties added to the generated ones: "
            + ", ".join(f"{key}={value}" for key, value in extra) + ".", ""]


def _goal_value(goal: Mapping[str, Any], value: float | None) -> str:
    """A goal's measured value or target as the Markdown shows it: a ratio, or a count of records."""
    if value is None:
        return "–"
    return f"{value:,.0f}" if goal.get("unit") == "records" else f"{value:.2f}x"


def _both_at_once(medians: Mapping[str, Mapping[str, float]]) -> list[str]:
    """Beside the goals: strait's records/s against the limit's producers and consumers run at once, which
    share the cores with both brokers as a copy does (the limit's goal takes the lower of the two run apart)."""
    both = medians.get("limit", {}).get("both_at_once_records_per_s")
    copied = medians.get("strait", {}).get("records_per_s")
    if not both or not copied:
        return []
    return [f"Beside the goals: strait's records/s are {copied / both:.2f}x the limit's producers and consumers "
            f"run at once ({both:,.0f} records/s), which share the cores with both brokers as a copy does.", ""]


def _per_repeat(runs: Mapping[str, Sequence[Mapping[str, Any]]], rates: Sequence[int]) -> list[str]:
    """Every measurement of the medians above, one row each."""
    latency = [f"p99 / max @{rate:,}/s (ms)" for rate in rates]
    lines = ["## Per repeat", "", "| system | repeat | records/s | CPU-s per GB | peak RSS (MB) | peak PSS (MB) | "
             "start-up (s) | " + " | ".join(latency) + (" |" if latency else "|"), "|" + "---|" * (7 + len(latency))]
    for system in SYSTEMS:
        for number, run in enumerate(runs.get(system, ()), start=1):
            measured = run.get("latency", {})
            cells = [_cell(run.get(key)) for key in ("records_per_s", "cpu_s_per_gb", "peak_rss_mb", "peak_pss_mb",
                                                     "startup_s")]
            cells += [f"{_cell(measured[str(r)]['p99_ms'])} / {_cell(measured[str(r)]['max_ms'])}"
                      if str(r) in measured else "–" for r in rates]
            lines.append(f"| {SHORT[system]} | {number} | " + " | ".join(cells) + " |")
    return [*lines, ""]


def _peak_parts(runs: Mapping[str, Sequence[Mapping[str, Any]]]) -> list[str]:
    """Where each run's peak RSS was: seconds after launch, and the RSS of its biggest parts."""
    rows = [f"| {SHORT[system]} | {number} | {_cell(run['peak_rss_at_s'])} | " +
            ", ".join(f"{name} {size:,.0f}" for name, size in list(run["peak_rss_parts_mb"].items())[:5]) + " |"
            for system in SYSTEMS for number, run in enumerate(runs.get(system, ()), start=1)
            if run.get("peak_rss_parts_mb")]
    if not rows:
        return []
    return ["## Where the peak RSS was", "", "| system | repeat | seconds after launch | RSS of its parts (MB) |",
            "|---|---|---|---|", *rows, ""]


def plot(report: Mapping[str, Any], path: Path) -> None:
    """Throughput and latency per system as a PNG (matplotlib's Agg backend, no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    medians = report["medians"]
    systems = [s for s in SYSTEMS if s in medians]
    rates = report["options"].get("rates", ())
    figure, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    left.bar([SHORT[s] for s in systems], [medians[s].get("mb_per_s", 0) for s in systems],
             color=[COLORS[s] for s in systems])
    left.set_ylabel("MB/s (median)")
    left.set_title("Throughput")
    width = 0.8 / max(1, 2 * len(systems))
    for i, system in enumerate(systems):
        for j, q in enumerate(("p50", "p99")):
            values = [medians[system].get(f"latency.{r}.{q}_ms", 0) for r in rates]
            offsets = [k + (2 * i + j) * width for k in range(len(rates))]
            right.bar(offsets, values, width, label=f"{SHORT[system]} {q}", color=COLORS[system],
                      alpha=1.0 if q == "p99" else 0.45)
    right.set_xticks([k + width * (len(systems) - 0.5) for k in range(len(rates))],
                     [f"{r:,}/s" for r in rates])
    right.set_ylabel("ms (median of runs)")
    if any(medians[s].get(f"latency.{r}.p50_ms", 0) > 0 for s in systems for r in rates):
        right.set_yscale("log")
    right.set_title("End-to-end latency at fixed rates")
    right.legend(fontsize=7, ncol=2)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def write(report: Mapping[str, Any], folder: Path) -> dict[str, Path]:
    """Write bench.json, bench.md and bench.png into ``folder``; return their paths."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = {"json": folder / "bench.json", "markdown": folder / "bench.md", "plot": folder / "bench.png"}
    paths["json"].write_text(json.dumps(report, indent=2, default=str))
    paths["markdown"].write_text(markdown(report))
    plot(report, paths["plot"])
    return paths
