"""The driver's one stall check: a partition with records on the source that copies none for the
read timeout, across epochs, fails the query (its flow then reports ``error``)."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest

from strait_replicator.flow import EpochCheck
from strait_replicator.state import EpochOffsets
from strait_replicator.writer import SUMMARY_FIELDS, ReplicationReadError


class _OffsetsLog:
    """Spark's offsets log as :class:`strait_replicator.state.CheckpointLog` reads it: batch -> epoch."""

    def __init__(self) -> None:
        self.epochs: dict[int, EpochOffsets] = {}

    def epoch(self, batch_id: int) -> EpochOffsets | None:
        return self.epochs.get(batch_id)


def _row(partition: int, start: int, next_offset: int) -> SimpleNamespace:
    """A task's summary row of one partition (what foreachBatch collects)."""
    row = dict.fromkeys(SUMMARY_FIELDS, 0)
    copied = next_offset - start
    row.update(topic="t", partition=partition, records=copied, first_offset=start if copied else -1,
               next_offset=next_offset, start_offset=start)
    return SimpleNamespace(**row)


def _check(read_timeout: float) -> tuple[EpochCheck, _OffsetsLog]:
    offsets_log = _OffsetsLog()
    return EpochCheck("A->B", "A", (), offsets_log, read_timeout), offsets_log  # type: ignore[arg-type]


def test_a_partition_that_copies_nothing_while_its_source_has_records_fails_after_the_read_timeout() -> None:
    check, offsets_log = _check(read_timeout=0.3)
    offsets_log.epochs[0] = EpochOffsets(0, {("t", 0): 5, ("t", 1): 7}, {("t", 0): 10, ("t", 1): 7})
    assert check.after_epoch(0, [_row(0, 5, 5), _row(1, 7, 7)]) == 0  # the clock starts
    time.sleep(0.4)
    offsets_log.epochs[1] = EpochOffsets(1, {("t", 0): 5, ("t", 1): 7}, {("t", 0): 12, ("t", 1): 7})
    with pytest.raises(ReplicationReadError, match=r"topic t partition 0 from cluster A made no progress .* at "
                                                   r"offset 5 \(the source has records up to 12\)"):
        check.after_epoch(1, [_row(0, 5, 5), _row(1, 7, 7)])


def test_progress_or_a_partition_at_its_end_is_no_stall() -> None:
    check, offsets_log = _check(read_timeout=0.3)
    offsets_log.epochs[0] = EpochOffsets(0, {("t", 0): 5}, {("t", 0): 10})
    check.after_epoch(0, [_row(0, 5, 5)])
    time.sleep(0.4)
    offsets_log.epochs[1] = EpochOffsets(1, {("t", 0): 5}, {("t", 0): 10})
    check.after_epoch(1, [_row(0, 5, 6)])  # one record copied: the clock starts again
    offsets_log.epochs[2] = EpochOffsets(2, {("t", 0): 10}, {("t", 0): 10})
    time.sleep(0.4)
    check.after_epoch(2, [_row(0, 10, 10)])  # nothing to copy is no stall
    assert check.stalled_since == {}


def test_a_head_starts_copies_are_checked_for_losses_and_recreated_topics(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """No epoch's rows hold what the driver's head start copied: its own rows are checked the same way."""
    check, _ = _check(read_timeout=60.0)
    monkeypatch.setattr(check, "_listed", lambda keys, which: {("t", 0): 25} if which == "earliest" else {("t", 1): 2})
    lost: list[tuple[object, ...]] = []
    monkeypatch.setattr(check, "_report_lost", lambda batch, key, start, end, why: lost.append((batch, key, start, end)))

    def head_row(partition: int, start: int, first: int, next_offset: int) -> tuple[object, ...]:
        row = {**dict.fromkeys(SUMMARY_FIELDS, 0), "topic": "t", "partition": partition, "records": next_offset - first,
               "first_offset": first, "next_offset": next_offset, "start_offset": start}
        return tuple(row[name] for name in SUMMARY_FIELDS)
    # t-0 started at 10, but the source had deleted up to 25; t-1 was re-created below where it started
    check.after_head_start({("t", 0): 10, ("t", 1): 3}, [head_row(0, 10, 25, 30), head_row(1, 3, 0, 2)])
    assert lost == [(None, ("t", 0), 10, 25)]
    assert "offsets went back from 3 to 2 (topic deleted and re-created)" in caplog.text
