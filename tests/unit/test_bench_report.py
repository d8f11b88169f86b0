"""Pure parts of the benchmark: percentiles, medians, ratios, options and the rendered report."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from strait.config.document import config_from_dict
from strait_bench import limit, report, runner, systems
from strait_bench.options import SYSTEMS, BenchOptions, exactly_once, parse_args, replicator
from strait_bench.stats import latency_summary, medians, percentile, ratios
from strait_bench.traffic import slow_seconds
from strait_lab.kafka import KafkaCluster, KafkaClusterSpec


@given(st.lists(st.floats(-1e6, 1e6), min_size=1, max_size=50), st.floats(0, 100))
def test_percentile_matches_numpy(values: list[float], q: float) -> None:
    assert percentile(values, q) == pytest.approx(float(np.percentile(values, q)), rel=1e-9, abs=1e-6)


def test_percentile_rejects_nothing_and_bad_q() -> None:
    with pytest.raises(ValueError):
        percentile([], 50)
    with pytest.raises(ValueError):
        percentile([1.0], 101)


def test_latency_summary() -> None:
    summary = latency_summary([float(v) for v in range(1, 101)])
    assert summary == {"p50_ms": 50.5, "p99_ms": 99.01, "max_ms": 100.0, "count": 100}


def test_medians_over_runs_use_dotted_paths_and_skip_missing() -> None:
    runs = [{"records_per_s": 10, "latency": {"5000": {"p99_ms": 3.0}}, "system": "strait"},
            {"records_per_s": 30, "latency": {}},
            {"records_per_s": 20, "latency": {"5000": {"p99_ms": 5.0}}}]
    assert medians(runs) == {"records_per_s": 20.0, "latency.5000.p99_ms": 4.0}


def test_ratios_skip_zero_and_one_sided_metrics() -> None:
    assert ratios({"a": 3.0, "b": 1.0, "c": 2.0}, {"a": 1.5, "b": 0.0}) == {"a": 2.0}


def test_quick_preset_and_explicit_overrides() -> None:
    options = parse_args(["--quick", "--records", "1234", "--rates", "10,20", "--skip-scaling",
                          "--compression", "lz4"])
    assert (options.records, options.partitions, options.repeats, options.rates, options.scaling) == \
        (1234, 6, 1, (10, 20), False)
    assert options.tuning.java()["compression.type"] == "lz4"


def test_quick_skips_scaling_unless_asked() -> None:
    assert parse_args(["--quick"]).scaling is False
    assert parse_args(["--quick", "--scaling"]).scaling is True
    assert parse_args([]).scaling is True


def test_unknown_system_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown systems"):
        parse_args(["--systems", "strait,kafka-streams"])


def _run(system: str, rps: float, cpu: float, p99: float) -> dict:
    return {"system": system, "records_per_s": rps, "mb_per_s": rps / 1000, "cpu_s_per_gb": cpu,
            "peak_rss_mb": 500.0, "peak_pss_mb": 400.0 if system == "strait" else 500.0, "peak_rss_at_s": 21.5,
            "peak_rss_parts_mb": {"java": 300.0, "python strait": 200.0}, "latency": {"5000": {"p50_ms": p99 / 2, "p99_ms": p99, "max_ms": p99 * 2}}}


def test_report_medians_ratios_goals_and_files(tmp_path: Path) -> None:
    runs = {"strait": [_run("strait", r, 40, 30) for r in (900, 1100, 1000)],
            "mm2": [_run("mm2", 500, 50, 20)],
            "limit": [{**_run("limit", 2000, 10, 5), "both_at_once_records_per_s": 1250.0}]}
    scaling = [{"partitions": 12, "cores": 2, "records_per_s": 1000, "mb_per_s": 1.0, "cpu_s_per_gb": 40,
                "peak_rss_mb": 500},
               {"partitions": 48, "cores": 2, "records_per_s": 1500, "mb_per_s": 1.5, "cpu_s_per_gb": 45,
                "peak_rss_mb": 700},
               {"partitions": 12, "cores": 1, "records_per_s": 550, "mb_per_s": 0.55, "cpu_s_per_gb": 41,
                "peak_rss_mb": 400},
               {"partitions": 12, "cores": 1, "workers": 1, "records_per_s": 9, "mb_per_s": 0.1,
                "cpu_s_per_gb": 1, "peak_rss_mb": 1}]
    document = report.build({"records": 10, "record_size": 1024, "partitions": 12, "cores": 2, "repeats": 3,
                             "rates": (5000,), "scaling_partitions": 48}, runs, scaling,
                            {"cpus": 2, "load_average": [1.0]})
    assert document["medians"]["strait"]["records_per_s"] == 1000
    assert document["ratios"]["strait/mm2"]["records_per_s"] == 2.0
    assert document["ratios"]["strait/limit"]["cpu_s_per_gb"] == 4.0
    assert [(g["name"], g["ratio"], g["met"]) for g in document["goals"]] == [
        ("records/s vs MM2", 2.0, True),
        ("records/s vs the limit", 0.5, False),
        ("CPU-s per GB vs MM2", 0.8, False),
        ("p99 latency @5,000/s vs MM2", 1.5, False),
        ("max latency @5,000/s vs MM2", 1.5, False),
        ("start-up to first record vs MM2", None, None),  # not in the runs above
        ("peak RSS vs MM2", 1.0, True),
        ("peak PSS vs MM2", 0.8, True),
        ("records/s 1 -> 2 cores", 1.818, True),
        ("CPU-s per GB at 48 vs 12 partitions", 1.125, False),
        ("exactly-once records/s vs strait at-least-once", None, None),  # no exactly-once runs
        ("exactly-once records/s vs MM2 exactly-once", None, None),
        ("exactly-once p99 latency @5,000/s vs MM2 exactly-once", None, None),
        ("exactly-once duplicates", None, None),
    ]
    text = report.markdown(document)
    assert "| records/s | 1,000 | 500 | 2,000 | 2.00x | 0.50x |" in text
    assert "| latency @5,000/s p99 (ms) | 30.00 | 20.00 | 5.00 | 1.50x | 6.00x |" in text
    assert "| records/s 1 -> 2 cores | 1.82x | >= 1.70x | met |" in text
    assert "| CPU-s per GB vs MM2 | 0.80x | <= 0.70x | **missed** |" in text
    assert "| start-up to first record vs MM2 | – | <= 1.00x | not measured |" in text
    assert "| 48 | 2 | 1,500 |" in text
    assert "| strait | 2 | 1,100 | 40.00 | 500 | 400 | – | 30.00 / 60.00 |" in text  # every repeat, not only medians
    assert "| strait | 3 | 21.50 | java 300, python strait 200 |" in text  # where each peak RSS was
    assert "strait's records/s are 0.80x the limit's producers and consumers run at once (1,250 records/s)" in text
    paths = report.write(document, tmp_path)
    assert paths["plot"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_exactly_once_systems_run_by_default_after_the_others() -> None:
    assert parse_args([]).systems == SYSTEMS == ("strait", "mm2", "limit", "strait-eos", "mm2-eos")
    assert [(exactly_once(s), replicator(s)) for s in SYSTEMS] == [
        (False, "strait"), (False, "mm2"), (False, "limit"), (True, "strait"), (True, "mm2")]
    assert parse_args(["--quick"]).eos_latency is True
    assert parse_args(["--quick", "--no-eos-latency", "--systems", "strait-eos,mm2-eos"]).eos_latency is False


def test_mm2_properties_from_the_command_line_are_kept_and_named_in_the_method() -> None:
    options = parse_args(["--mm2-property", "plugin.discovery=service_load", "--mm2-property", "a.b = c=d"])
    assert options.mm2_properties == (("plugin.discovery", "service_load"), ("a.b", "c=d"))
    with pytest.raises(ValueError, match="KEY=VALUE"):
        parse_args(["--mm2-property", "plugin.discovery"])
    document = report.build({"records": 1, "record_size": 1, "partitions": 1, "cores": 1, "repeats": 1,
                             "mm2_properties": [["plugin.discovery", "service_load"]]}, {}, [], {})
    assert "added to the generated ones: plugin.discovery=service_load." in report.markdown(document)


def _eos_runs(duplicates: tuple[int, ...] = (0, 0, 0)) -> dict[str, list[dict]]:
    """strait at 1,000 records/s and MM2 at 500; their exactly-once modes at 850 and 400, p99 40 and 50 ms."""
    return {"strait": [_run("strait", 1000, 40, 30)], "mm2": [_run("mm2", 500, 50, 20)],
            "strait-eos": [{**_run("strait-eos", r, 45, 40), "duplicates": d}
                           for r, d in zip((800, 850, 900), duplicates)],
            "mm2-eos": [{**_run("mm2-eos", 400, 60, 50), "duplicates": 0}]}


def test_the_exactly_once_columns_ratios_and_goals(tmp_path: Path) -> None:
    options = {"records": 10, "record_size": 1024, "partitions": 12, "cores": 2, "repeats": 3, "rates": (5000,),
               "scaling_partitions": 48}
    document = report.build(options, _eos_runs(), [], {"cpus": 2, "load_average": [1.0]})
    assert set(document["ratios"]) == {"strait/mm2", "strait-eos/strait", "strait-eos/mm2-eos"}  # no limit
    assert document["ratios"]["strait-eos/strait"]["records_per_s"] == 0.85
    assert document["ratios"]["strait-eos/mm2-eos"]["latency.5000.p99_ms"] == 0.8
    assert [(g["name"], g["ratio"], g["comparison"], g["met"]) for g in document["goals"][-4:]] == [
        ("exactly-once records/s vs strait at-least-once", 0.85, ">=", True),
        ("exactly-once records/s vs MM2 exactly-once", 2.125, ">=", True),
        ("exactly-once p99 latency @5,000/s vs MM2 exactly-once", 0.8, "<=", True),
        ("exactly-once duplicates", 0, "==", True),
    ]
    text = report.markdown(document)
    assert ("| metric (median) | strait | MirrorMaker 2 | strait exactly-once | MM2 exactly-once | strait/mm2 | "
            "strait-eos/strait | strait-eos/mm2-eos |") in text
    assert "| records/s | 1,000 | 500 | 850 | 400 | 2.00x | 0.85x | 2.12x |" in text
    assert "| exactly-once duplicates | 0 | == 0 | met |" in text
    assert "| duplicates read on the target (records) | – | – | 0 | 0 | – | – | – |" in text
    assert "| exactly-once records/s vs strait at-least-once | 0.85x | >= 0.80x | met |" in text
    assert "| strait EOS | 3 | 900 |" in text and "| MM2 EOS | 1 | 400 |" in text
    assert "exactly.once.source.support=enabled" in text and "last stable offsets" in text
    assert report.write(document, tmp_path)["plot"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_one_duplicate_in_any_exactly_once_run_misses_the_goal() -> None:
    options = {"partitions": 12, "cores": 2, "scaling_partitions": 48, "rates": ()}
    runs = _eos_runs(duplicates=(0, 3, 0))
    found = {g.name: g for g in report.goals(options, {s: medians(r) for s, r in runs.items()}, [], runs)}
    duplicates = found["exactly-once duplicates"]
    assert (duplicates.ratio, duplicates.met, duplicates.as_dict()["unit"]) == (3, False, "records")
    slower = {**runs, "strait-eos": [{**run, "records_per_s": 700} for run in runs["strait-eos"]]}
    found = {g.name: g for g in report.goals(options, {s: medians(r) for s, r in slower.items()}, [], slower)}
    assert found["exactly-once records/s vs strait at-least-once"].met is False  # 0.7x of at-least-once


def test_the_exactly_once_systems_configure_each_replicator_s_mode(tmp_path: Path) -> None:
    source = KafkaCluster(KafkaClusterSpec("A"), tmp_path / "A")  # never started: only aliases and ports
    target = KafkaCluster(KafkaClusterSpec("B"), tmp_path / "B")
    options = BenchOptions()
    flows = {flow.name: flow.exactly_once for flow in config_from_dict(
        systems.strait_config(source, target, ["t"], options, exactly_once=True), "bench").flows}
    assert flows == {"A->B": True}
    assert "exactly_once" not in systems.strait_config(source, target, ["t"], options)["flows"][0]
    added = systems.mm2_exactly_once_properties(source, target, 8083)
    assert added == {"B.exactly.once.source.support": "enabled", "dedicated.mode.enable.internal.rest": "true",
                     "listeners": "http://127.0.0.1:8083", "A->B.consumer.isolation.level": "read_committed"}
    assert not set(added) & set(systems.mm2_properties(source, target, ["t"], options)), "added, not overridden"


@given(st.integers(1, 8), st.integers(1, 64), st.integers(0, 10_000))
def test_limit_workers_split_partitions_and_records_without_overlap(workers: int, partitions: int,
                                                                    records: int) -> None:
    shares = [limit.partitions_of(w, workers, partitions) for w in range(workers)]
    assert sorted(p for share in shares for p in share) == list(range(partitions))
    counts = [limit.records_of(w, workers, records) for w in range(workers)]
    assert sum(counts) == records and max(counts) - min(counts) <= 1


def test_limit_is_the_lower_of_ingest_and_read_over_the_span_of_all_workers() -> None:
    # two workers at once, 100 records each: 200 records from t=10 to t=12
    ingest = limit.combined_rate([limit.WorkerResult(100, 10.0, 11.0, 0.5, 1),
                                  limit.WorkerResult(100, 10.5, 12.0, 0.5, 1)])
    assert ingest == 100.0
    rates = limit.LimitRates(ingest_records_per_s=ingest, read_records_per_s=400.0)
    assert rates.records_per_s == 100.0


def test_scaling_goals_need_the_runs_they_compare() -> None:
    options = {"partitions": 12, "cores": 2, "scaling_partitions": 12, "rates": ()}
    baseline = {"partitions": 12, "cores": 2, "records_per_s": 100, "cpu_s_per_gb": 10}
    by_name = {g.name: g for g in report.goals(options, {}, [baseline])}
    assert by_name["CPU-s per GB at 12 vs 12 partitions"].met is None, "the baseline is not its own wider run"
    assert by_name["records/s 1 -> 2 cores"].met is None
    four = report.goals({**options, "cores": 4}, {}, [{**baseline, "cores": 4}, {**baseline, "cores": 1}])
    assert {g.name: g.ratio for g in four}["records/s 1 -> 2 cores"] is None, "1 -> 4 cores is another goal"


def test_the_slow_seconds_of_a_latency_run_are_listed_worst_first_with_their_counts() -> None:
    created = [1_000_000, 1_000_500, 1_001_000, 1_002_100, 1_002_900]  # ms: seconds 1000, 1001, 1002
    latencies = [100.0, 300.0, 900.0, 260.0, 400.0]
    assert slow_seconds(created, latencies) == [
        f"{time.strftime('%H:%M:%S', time.gmtime(1001))} max=900ms slow=1",
        f"{time.strftime('%H:%M:%S', time.gmtime(1002))} max=400ms slow=2",
        f"{time.strftime('%H:%M:%S', time.gmtime(1000))} max=300ms slow=1"]
    assert slow_seconds(created, [1.0] * 5) == []


def test_strait_latency_runs_wait_for_the_query_and_for_its_head_start_to_end() -> None:
    query = "flow=A->B query started topics=2 epoch_seconds=60 records_per_second=unlimited\n"
    head = "flow=A->B head start copier=c1 copies partitions=12 until the query's tasks take them\n"
    unclaimed = "flow=A->B head start copier=c2 not claimed: the query's tasks copy its partitions\n"
    ended = "flow=A->B head start copier=c1 ended reason=yield\n"
    assert not runner._started(head)
    assert not runner._started(head + query), "the query started, its tasks have not yet taken over"
    assert runner._started(head + query + ended)
    assert runner._started(query), "no head start: the query's start is the end of start-up"
    assert runner._started(unclaimed + query), "a head start that never copied ends nothing"
