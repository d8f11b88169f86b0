"""Progress records of a copy of many partitions are spaced, so the progress topic's readers keep up."""

from __future__ import annotations

from typing import Any

import pytest

from strait.config.model import SyncsLocation
from strait.flow_spec import FlowSpec
from strait.policy import DefaultReplicationPolicy
from strait_replicator import writer
from strait_replicator.live import PartitionReport
from strait_replicator.writer import PROGRESS_RECORDS_PER_SECOND, ProgressWriter, progress_spacing


class _Recorder:
    """Stands in for the producer: the writer's spacing is decided before anything is sent."""

    def __init__(self) -> None:
        self.keys: list[bytes] = []

    def produce(self, _topic: str, key: bytes, **_kwargs: Any) -> None:
        self.keys.append(key)


def _reports(partitions: int, acked: int) -> dict[tuple[str, int], tuple[PartitionReport, int]]:
    return {("t", p): (PartitionReport("t", p, 0, acked, acked, acked, 1, (), 0.0, 0), acked - 1)
            for p in range(partitions)}


def _writer() -> tuple[ProgressWriter, _Recorder]:
    spec = FlowSpec("A->B", "A", "B", DefaultReplicationPolicy(), syncs=SyncsLocation("A", "syncs"),
                    progress=SyncsLocation("B", "progress"))
    producer = _Recorder()
    return ProgressWriter(spec, producer, None), producer  # type: ignore[arg-type]


def test_small_copies_write_every_settle_and_wide_ones_about_the_budget() -> None:
    assert progress_spacing(12) == 0.0
    assert progress_spacing(int(PROGRESS_RECORDS_PER_SECOND * writer.SETTLE_SECONDS)) == 0.0
    assert progress_spacing(5_000) == pytest.approx(5_000 / PROGRESS_RECORDS_PER_SECOND)


def test_a_wide_copy_writes_a_moving_partition_once_per_spacing_and_all_at_the_end(
        monkeypatch: pytest.MonkeyPatch) -> None:
    clock = [100.0]
    monkeypatch.setattr(writer.time, "monotonic", lambda: clock[0])
    progress, producer = _writer()
    partitions = 2_000  # spacing 2 s
    progress.write(_reports(partitions, 1), spaced_over=partitions)
    assert len(producer.keys) == partitions
    clock[0] += 0.5
    progress.write(_reports(partitions, 2), spaced_over=partitions)
    assert len(producer.keys) == partitions  # changed, but written 0.5 s ago
    clock[0] += 2.0
    progress.write(_reports(partitions, 3), spaced_over=partitions)
    assert len(producer.keys) == 2 * partitions
    clock[0] += 0.1
    progress.write(_reports(partitions, 4), final=True)  # a copy's end writes every partition
    assert len(producer.keys) == 3 * partitions


def test_unspaced_writes_follow_every_change(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(writer.time, "monotonic", lambda: 5.0)
    progress, producer = _writer()
    for acked in (1, 2, 2, 3):
        progress.write(_reports(2_000, acked))  # exactly once: every commit's progress
    assert len(producer.keys) == 3 * 2_000
