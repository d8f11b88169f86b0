"""Command line of the benchmark: run everything, write the report, print the Markdown."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import platform
import shutil
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from strait_bench import report, wide
from strait_bench.options import BenchOptions, parse_args
from strait_bench.runner import Bench
from strait.errors import StraitError

log = logging.getLogger(__name__)


def run(options: BenchOptions) -> dict[str, Path]:
    """Run the benchmark with ``options``; return the paths of the report files."""
    if options.wide is not None:
        return run_wide(options)
    out = options.out_dir()
    workdir = out / "work"
    machine = _machine()
    # Scratch of an earlier run in the same folder (a replicator's checkpoint, cluster data) would
    # make this run resume instead of measuring from scratch.
    shutil.rmtree(workdir, ignore_errors=True)
    bench = Bench(options, workdir)
    runs: dict[str, list[dict[str, Any]]] = {system: [] for system in options.systems}
    scaling: list[dict[str, Any]] = []

    def write() -> dict[str, Path]:
        """The report so far: rewritten after every measurement, so an interrupted run keeps its results."""
        machine["load_average_end"] = [round(x, 2) for x in os.getloadavg()]
        return report.write(report.build(_options_dict(options), runs, scaling, machine), out)

    try:
        bench.source.start(timeout=180)
        workload = bench.load(options.partitions)
        for repeat in range(options.repeats):
            for system in options.systems:
                log.info("measuring system=%s repeat=%d/%d", system, repeat + 1, options.repeats)
                runs[system].append(bench.measure(system, workload))
                write()
        if options.scaling and "strait" in options.systems:
            _scaling(bench, options, workload, runs["strait"], scaling, write)
    finally:
        bench.close()
        shutil.rmtree(workdir / "A", ignore_errors=True)
    return write()


def run_wide(options: BenchOptions) -> dict[str, Path]:
    """The wide run (:mod:`strait_bench.wide`): strait and MM2 of ``options.systems`` once each."""
    out = options.out_dir()
    workdir = out / "work"
    shutil.rmtree(workdir, ignore_errors=True)
    report: dict[str, Any] = {"options": _options_dict(options), "machine": _machine(), "runs": []}

    def write() -> dict[str, Path]:
        report["machine"]["load_average_end"] = [round(x, 2) for x in os.getloadavg()]
        out.mkdir(parents=True, exist_ok=True)
        paths = {"json": out / "wide.json", "markdown": out / "wide.md"}
        paths["json"].write_text(json.dumps(report, indent=2, default=str))
        paths["markdown"].write_text(wide.markdown(report))
        return paths

    bench = Bench(options, workdir)
    try:
        bench.source.start(timeout=180)
        runner = wide.WideRun(options, bench.source, workdir)
        load = runner.load(wide.WideShape.of(options))
        for system in (s for s in options.systems if s in ("strait", "mm2")):
            log.info("measuring the wide run system=%s", system)
            report["runs"].append(runner.measure(system, load))
            write()
    finally:
        bench.close()
        shutil.rmtree(workdir / "A", ignore_errors=True)
    return write()


def _machine() -> dict[str, Any]:
    return {"started": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "cpus": os.cpu_count(),
            "load_average": [round(x, 2) for x in os.getloadavg()], "platform": platform.platform(),
            "python": platform.python_version()}


def _scaling(bench: Bench, options: BenchOptions, workload: Any, baseline: list[dict[str, Any]],
             results: list[dict[str, Any]], checkpoint: Callable[[], object]) -> None:
    """strait at more partitions, at fewer cores, and on a Spark standalone cluster of one and of two
    one-core workers (throughput only), next to the baseline's median run.

    Appends to ``results`` run by run and calls ``checkpoint`` after each, so the report shows them.
    """
    results.append(sorted(baseline, key=lambda r: r["records_per_s"])[len(baseline) // 2])
    wide = bench.load(options.scaling_partitions)
    results.append(bench.measure("strait", wide, latency=False))
    checkpoint()
    if options.cores > 1:
        results.append(bench.measure("strait", workload, cores=1, latency=False))
        checkpoint()
    for workers in (1, 2):
        results.append(bench.measure("strait", workload, latency=False, workers=workers))
        checkpoint()


def _options_dict(options: BenchOptions) -> dict[str, Any]:
    data = dataclasses.asdict(options)
    data["out"] = str(options.out) if options.out else None
    return data


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m strait_bench`: run, write the report, print the Markdown table."""
    logging.basicConfig(level=os.environ.get("STRAIT_LOG_LEVEL", "INFO"),
                        format="%(asctime)s %(levelname)s %(name)s %(message)s")
    try:
        options = parse_args(argv)
    except ValueError as exc:
        print(f"strait bench: error: {exc}", file=sys.stderr)
        return 2
    try:
        paths = run(options)
    except StraitError as exc:
        print(f"strait bench: error: {exc}", file=sys.stderr)
        return 1
    print(paths["markdown"].read_text())
    print("report: " + ", ".join(str(p) for p in paths.values()))
    return 0
