"""`make bench` end to end at a tiny size: every system copies every record, the report is written; the
exactly-once systems' copies are read read_committed, each record once."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from strait_bench.cli import run
from strait_bench.options import BenchOptions

pytestmark = pytest.mark.slow


@pytest.mark.timeout(1200)  # six clusters, Spark and MM2 start-ups: about 80 s idle, 10 minutes on a loaded box
def test_bench_measures_every_system_and_writes_the_report(tmp_path: Path) -> None:
    # plugin.discovery=service_load, as MM2's log advises, for its start-up and each herder (per target
    # cluster): each otherwise scans the classpath by reflection, 2-15 s apiece here, in two MM2 runs
    discovery = tuple((f"{scope}plugin.discovery", "service_load") for scope in ("", "A.", "B."))
    options = replace(BenchOptions(), partitions=2, records=5_000, repeats=1, rates=(200,),
                      latency_seconds=2.0, latency_warmup_seconds=1.0, scaling=False, out=tmp_path / "report",
                      broker_heap="512m", jvm_heap="1g", timeout_seconds=400.0, mm2_properties=discovery)

    paths = run(options)

    assert {name: path.exists() and path.stat().st_size > 0 for name, path in paths.items()} == \
        {"json": True, "markdown": True, "plot": True}
    report = json.loads(paths["json"].read_text())
    assert list(report["runs"]) == ["strait", "mm2", "limit", "strait-eos", "mm2-eos"]
    for system, runs in report["runs"].items():
        assert len(runs) == 1, system
        run_result = runs[0]
        assert run_result["copied"] == 5_000, system  # the harness verified the counts on the target
        # 5,000 records may land between two polls, so the copy window's CPU may round to 0
        assert run_result["records_per_s"] > 0 and run_result["cpu_seconds_total"] > 0, system
        assert run_result["peak_rss_mb"] > 0, system
        assert run_result["latency"]["200"]["count"] == 400, system
        if system != "limit":  # the probe's warm-up records are read, and kept out of the window
            assert run_result["latency"]["200"]["warmup"]["count"] == 200, system
    for system in ("strait", "mm2"):
        assert report["runs"][system][0]["duplicates"] >= 0
        # shared pages split between the tree's processes: never more than the RSS sum
        assert 0 < report["runs"][system][0]["peak_pss_mb"] <= report["runs"][system][0]["peak_rss_mb"]
        parts = report["runs"][system][0]["peak_rss_parts_mb"]  # where the peak was: the parts add up to it
        assert "java" in parts and sum(parts.values()) == pytest.approx(report["runs"][system][0]["peak_rss_mb"], 0.01)
        assert report["runs"][system][0]["latency"]["200"]["p99_ms"] > 0
    limit = report["runs"]["limit"][0]
    assert limit["workers"] == min(options.cores, 2)  # as many producers and consumers as strait's copy tasks
    assert min(limit["ingest_records_per_s"], limit["read_records_per_s"]) == limit["records_per_s"]
    assert limit["both_at_once_records_per_s"] > 0  # the same producers and consumers, run together
    assert "epochs_ended" in report["runs"]["strait"][0]["latency"]["200"]  # counted for strait's windows
    for system in ("strait-eos", "mm2-eos"):  # read read_committed from the start after the replicator stopped
        assert report["runs"][system][0]["duplicates"] == 0, system
    # each in its exactly-once mode: strait's flow setting, MM2's source tasks' transactional producers
    assert "exactly_once: true" in (Path(report["runs"]["strait-eos"][0]["log"]).parent / "strait.yaml").read_text()
    assert "transactionalId=A-mm2-MirrorSourceConnector-0" in Path(report["runs"]["mm2-eos"][0]["log"]).read_text()
    assert set(report["ratios"]) == {"strait/mm2", "strait/limit", "strait-eos/strait", "strait-eos/mm2-eos"}
    goals = {g["name"]: g for g in report["goals"]}
    assert goals["records/s 1 -> 2 cores"]["met"] is None  # no scaling runs
    assert goals["exactly-once duplicates"]["met"] is True
    assert goals["exactly-once records/s vs MM2 exactly-once"]["ratio"] > 0
    markdown = paths["markdown"].read_text()
    assert "| records/s |" in markdown and "strait/mm2" in markdown
    assert "strait exactly-once | MM2 exactly-once" in markdown
