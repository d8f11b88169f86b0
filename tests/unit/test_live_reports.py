"""Live progress of running epoch tasks: carried whole in progress records, counted once per run."""

from __future__ import annotations

import json
import time

from strait.progress import Progress
from strait_replicator import metrics
from strait_replicator.flow import LiveMetrics
from strait_replicator.live import (ControlRecords, Hold, LiveRun, PartitionReport, RunReport, hold_record, live_value,
                                    release_record, run_report, stop_record)

BUCKETS = len(metrics.LATENCY.buckets) + 1


def _part(start: int | None, acked: int, records: int = 0, topic: str = "t", partition: int = 0,
          lag: int = -1) -> PartitionReport:
    counts = tuple([records] + [0] * (BUCKETS - 1))
    return PartitionReport(topic, partition, start, acked, records, records * 10, records // 2, counts,
                           records * 0.01, lag)


def _record(run: LiveRun, report: PartitionReport, final: bool = False) -> Progress:
    """The progress record as the topic's reader gets it back."""
    written = Progress(report.acked, 3, live_value(run, report, final))
    value = json.loads(written.value_bytes())
    return Progress(value["offset"] + 1, value["target_offset"], value["live"])


def test_a_report_travels_whole_in_a_progress_record_mirrormaker_can_read() -> None:
    run = LiveRun(4)
    report = _part(0, 20, 20, lag=5)
    value = json.loads(Progress(20, 3, live_value(run, report, True)).value_bytes())
    assert value["offset"] == 19, "MM2 reads the last offset done"
    back = run_report(("t", 0), _record(run, report, final=True))
    assert back is not None and (back.epoch, back.task, back.final, back.partition) == (4, run.task, True, report)


def test_records_without_a_live_report_are_no_run() -> None:
    assert run_report(("t", 0), Progress(5)) is None  # MM2's, or a hand-over's
    assert run_report(("t", 0), Progress(5, -1, {"epoch": "x"})) is None  # garbage: logged, skipped


def test_live_metrics_count_what_each_run_grew_by_once() -> None:
    flow = f"live-{time.time_ns()}"
    live = LiveMetrics(flow)
    first, carried = LiveRun(1), LiveRun(2)
    live._note(("t", 0), _record(first, _part(5, 10, 5, lag=7)))
    live._note(("t", 0), _record(first, _part(5, 30, 25, lag=3), final=True))
    live._note(("t", 0), _record(first, _part(5, 30, 25, lag=3), final=True))  # read twice: counted once
    live._note(("t", 0), _record(carried, _part(30, 31, 1, lag=0)))
    assert metrics.RECORDS.labels(flow=flow, topic="t")._value.get() == 25 + 1
    assert metrics.BYTES.labels(flow=flow, topic="t")._value.get() == 260
    assert metrics.SOURCE_LAG.labels(flow=flow, topic="t", partition=0)._value.get() == 0
    later = LiveRun(3)
    live._note(("t", 0), _record(later, _part(31, 32, 1, lag=0)))
    assert {key[0] for key in live._counted} == {carried.task, later.task}, "epoch 1 reports no more once 3 runs"
    assert isinstance(live._counted[(carried.task, ("t", 0))], RunReport)
    live._note(("t", 0), _record(carried, _part(30, 33, 3, lag=0), final=True))  # epoch 2's last word, late
    assert metrics.RECORDS.labels(flow=flow, topic="t")._value.get() == 25 + 3 + 1, "counted what it grew by"


def test_control_records_say_which_query_stopped_and_which_copiers_hold_per_flow() -> None:
    control = ControlRecords()
    mine = Hold("A->B", "c1", frozenset({("t", 0)}), "q1", -1, 100.0)
    other = Hold("A->C", "c2", frozenset({("t", 0)}), "q9", -1, 100.0)
    for offset, (key, value) in enumerate([hold_record(mine), hold_record(other), stop_record("A->B", "q1"),
                                           (b"not a control record", b"{}"), (None, None)]):
        control.note(key, value, offset)
    assert control.stopped("A->B", "q1") and not control.stopped("A->C", "q1") and not control.stopped("A->B", "q2")
    assert list(control.holds_of("A->B")) == ["c1"] and control.holds_of("A->B")["c1"].since == 0  # a claim: its offset
    assert list(control.holds_of("A->C")) == ["c2"]
    control.note(*release_record("A->B", "c1"), 5)
    assert control.holds_of("A->B") == {} and control.released == {"c1"} and list(control.holds_of("A->C")) == ["c2"]
