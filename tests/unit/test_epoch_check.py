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
    with pytest.raises(ReplicationReadError, match=r"topic t partition 0 on cluster A made no progress .* at "
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
