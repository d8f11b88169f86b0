"""Live reports of running epoch tasks: written whole, read back, chained into resume points, counted once."""

from __future__ import annotations

import time
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from strait_replicator import metrics
from strait_replicator.flow import LiveMetrics
from strait_replicator.live import (
    LiveReporter, PartitionReport, TaskReport, read_reports, remove_reports, resume_points,
)

BUCKETS = len(metrics.LATENCY.buckets) + 1


def _part(start: int | None, acked: int, records: int = 0, topic: str = "t", partition: int = 0,
          lag: int = -1) -> PartitionReport:
    counts = tuple([records] + [0] * (BUCKETS - 1))
    return PartitionReport(topic, partition, start, acked, records, records * 10, records // 2, counts,
                           records * 0.01, lag)


def test_a_report_is_written_whole_and_read_back_per_epoch(tmp_path: Path) -> None:
    first, second = LiveReporter(tmp_path, 4), LiveReporter(tmp_path, 5)
    first.write([_part(0, 10, 10)])
    first.write([_part(0, 20, 20)], final=True)  # replaces the run's earlier report
    second.write([_part(20, 25, 5)])
    (tmp_path / "e000000000004-garbage.json").write_text("{not json")
    reports = read_reports(tmp_path, 4)
    assert [(r.task, r.final, r.partitions) for r in reports] == [(first.task, True, (_part(0, 20, 20),))]
    assert [r.epoch for r in read_reports(tmp_path)] == [4, 5]
    remove_reports(tmp_path, before_epoch=5)
    assert [r.epoch for r in read_reports(tmp_path)] == [5]
    assert not list(tmp_path.glob("*.tmp"))


def test_a_report_that_cannot_be_written_never_fails_the_copy(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    LiveReporter(tmp_path / "file" / "live", 1).write([_part(0, 1)])  # a folder under a file: logged only


def _run(start: int | None, acked: int) -> TaskReport:
    return TaskReport(1, f"run-{start}-{acked}", time.time(), False, (_part(start, acked),))


def test_runs_chain_from_the_epochs_start_and_never_jump_a_hole() -> None:
    starts = {("t", 0): 100}
    assert resume_points([_run(100, 150), _run(150, 170)], starts) == {("t", 0): 170}
    assert resume_points([_run(120, 170)], starts) == {("t", 0): 100}  # [100, 120) was never reported copied
    assert resume_points([_run(100, 150), _run(100, 130)], starts) == {("t", 0): 150}
    assert resume_points([_run(None, 50), _run(100, -1)], starts) == {("t", 0): 100}
    assert resume_points([_run(100, 150)], {}) == {}  # a partition the task does not copy


spans = st.lists(st.tuples(st.integers(0, 60), st.integers(0, 60)), max_size=8)


@given(spans, st.integers(0, 60))
def test_a_resume_point_is_covered_by_reported_runs_from_the_start(runs: list[tuple[int, int]], start: int) -> None:
    point = resume_points([_run(a, b) for a, b in runs], {("t", 0): start})[("t", 0)]
    covered = {o for a, b in runs for o in range(a, b)}
    assert point >= start
    assert all(offset in covered for offset in range(start, point))
    assert point not in covered or point == start and start not in covered


def test_live_metrics_count_what_grew_and_what_an_earlier_process_counted_only_once(tmp_path: Path) -> None:
    flow = f"live-{time.time_ns()}"
    earlier = LiveReporter(tmp_path, 1)
    earlier.write([_part(0, 5, 5)])  # counted by the process before this one
    live = LiveMetrics(flow, tmp_path)
    reporter = LiveReporter(tmp_path, 1)
    reporter.write([_part(5, 10, 5, lag=7)])
    live.poll()
    reporter.write([_part(5, 30, 25, lag=3)], final=True)
    earlier.write([_part(0, 6, 6)])
    live.poll()
    live.poll()
    assert metrics.RECORDS.labels(flow=flow, topic="t")._value.get() == 25 + 1
    assert metrics.BYTES.labels(flow=flow, topic="t")._value.get() == 260
    assert metrics.SOURCE_LAG.labels(flow=flow, topic="t", partition=0)._value.get() == 3
    live.forget(before_epoch=2)
    assert read_reports(tmp_path) == []
