"""Parity of a source partition and its copies: clean runs, replayed blocks, gaps, field mismatches."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import replace

import pytest

from strait.config.model import FlowConfig, Selection
from strait.offsets import SyncPoint, sync_points
from strait.translation import PartitionHistory
from strait.verify import (
    KafkaRecord,
    PartitionParity,
    PartitionRef,
    VerifyError,
    compare_partition,
    record_bytes,
    selected_topics,
)

pytestmark = pytest.mark.unit

REF = PartitionRef("orders", 0, "A.orders")


def _source(offsets: Sequence[int]) -> list[KafkaRecord]:
    return [KafkaRecord(o, f"k{o}".encode(), f"v{o}".encode(), (("h", f"{o}".encode()),), 1_700_000_000_000 + o)
            for o in offsets]


class _Replicator:
    """Copies source records to a target log the way the replicator does and records its syncs."""

    def __init__(self, source: list[KafkaRecord]) -> None:
        self.source = {r.offset: r for r in source}
        self.target: list[KafkaRecord] = []
        self.history = PartitionHistory(complete=True)

    def _append(self, record: KafkaRecord, skip: int = 0) -> int:
        offset = (self.target[-1].offset + 1 if self.target else 0) + skip  # skip: transaction markers
        self.target.append(replace(record, offset=offset))
        return offset

    def dark(self, offsets: Sequence[int]) -> None:
        """Copied, then a crash before any sync: the copies stay as older copies."""
        for o in offsets:
            self._append(self.source[o])

    def batch(self, offsets: Sequence[int], markers_before: int = 0) -> None:
        """Copied and synced."""
        targets = [self._append(self.source[o], markers_before if i == 0 else 0) for i, o in enumerate(offsets)]
        for point in sync_points(list(offsets), targets):
            self.history.add(point)


def _compare(source: list[KafkaRecord], replicator: _Replicator, later: Iterable[KafkaRecord] = ()) -> PartitionParity:
    """Compare as `strait verify` reads the target: up to the last copy, and the tail after it apart."""
    last = replicator.history.translator.last_copied()
    end = -1 if last is None else last.downstream
    return compare_partition(REF, source, [r for r in replicator.target if r.offset <= end], replicator.history,
                             tail=[r for r in replicator.target if r.offset > end], later=later)


def test_clean_copy_with_holes_and_markers_is_in_parity() -> None:
    offsets = [0, 1, 2, 5, 6, 7, 9, 12, 13]  # compaction holes on the source
    source = _source(offsets)
    replicator = _Replicator(source)
    replicator.batch(offsets[:4])
    replicator.batch(offsets[4:], markers_before=2)

    result = _compare(source, replicator)

    assert result.ok and result.first_mismatch is None
    assert (result.source_records, result.target_records, result.matched) == (9, 9, 9)
    assert (result.source_start, result.source_end, result.target_start, result.target_end) == (0, 13, 0, 10)
    assert result.source_sha256 == result.target_sha256
    assert (result.duplicates, result.missing, result.pending, result.unexpected) == (0, 0, 0, 0)


def test_dark_copy_before_a_replay_counts_as_duplicates_not_mismatch() -> None:
    source = _source(range(20))
    replicator = _Replicator(source)
    replicator.batch(range(10))
    replicator.dark(range(10, 15))  # crash mid-batch: 5 records copied, no syncs
    replicator.batch(range(10, 20))  # the batch again

    result = _compare(source, replicator)

    assert result.ok
    assert (result.matched, result.duplicates, result.target_records) == (20, 5, 20)
    assert (result.target_start, result.target_end) == (0, 24)
    assert result.source_sha256 == result.target_sha256


def test_replay_of_a_synced_batch_counts_its_first_copy_as_duplicates() -> None:
    source = _source(range(30))
    replicator = _Replicator(source)
    replicator.batch(range(10))
    replicator.batch(range(10, 20))  # synced, but the batch was not committed
    replicator.batch(range(10, 20))  # replayed after the restart
    replicator.batch(range(20, 30))

    result = _compare(source, replicator)

    assert result.ok and (result.matched, result.duplicates) == (30, 10)


def test_every_older_copy_of_a_record_counts_as_a_duplicate() -> None:
    """Copies handed over again and again while their offset syncs could not be written: three copies
    of the same records, the newest synced."""
    source = _source(range(30))
    replicator = _Replicator(source)
    replicator.batch(range(10))
    replicator.dark(range(10, 20))
    replicator.dark(range(10, 20))
    replicator.batch(range(10, 30))

    result = _compare(source, replicator)

    assert result.ok and (result.matched, result.duplicates, result.unexpected, result.missing) == (30, 20, 0, 0)


def test_deleted_copy_is_missing_with_its_offsets() -> None:
    source = _source(range(10))
    replicator = _Replicator(source)
    replicator.batch(range(10))
    del replicator.target[3]

    result = _compare(source, replicator)

    assert not result.ok and (result.missing, result.matched) == (1, 9)
    mismatch = result.first_mismatch
    assert mismatch is not None and (mismatch.kind, mismatch.source_offset, mismatch.target_offset) == \
        ("missing", 3, 3)
    assert result.source_sha256 != result.target_sha256


def test_copies_below_the_target_low_watermark_are_missing() -> None:
    source = _source(range(10))
    replicator = _Replicator(source)
    replicator.batch(range(10))

    result = compare_partition(REF, source, replicator.target[4:], replicator.history)  # delete_records(4)

    assert (result.missing, result.matched) == (4, 6)
    assert result.first_mismatch is not None and result.first_mismatch.source_offset == 0


@pytest.mark.parametrize(("changed", "detail"), [
    ({"key": b"other"}, "key: source 2 bytes"),
    ({"value": None}, "value: source 2 bytes"),
    ({"headers": (("h", b"x"), ("extra", None))}, "headers: source ['h']"),
    ({"timestamp": 42}, "timestamp: source 1700000000004, target 42"),
])
def test_first_differing_field_is_reported_with_both_offsets(changed: dict[str, object], detail: str) -> None:
    source = _source(range(10))
    replicator = _Replicator(source)
    replicator.batch(range(10), markers_before=3)
    replicator.target[4] = replace(replicator.target[4], **changed)  # type: ignore[arg-type]
    replicator.target[7] = replace(replicator.target[7], value=b"later")

    result = _compare(source, replicator)

    assert not result.ok and (result.mismatched, result.matched) == (2, 8)
    mismatch = result.first_mismatch
    assert mismatch is not None
    assert (mismatch.kind, mismatch.source_offset, mismatch.target_offset) == (next(iter(changed)), 4, 7)
    assert mismatch.detail.startswith(detail)
    assert b"v4" not in mismatch.detail.encode()  # contents are summarised, never printed


def test_records_after_the_last_sync_are_pending() -> None:
    source = _source(range(15))
    replicator = _Replicator(source)
    replicator.batch(range(10))
    replicator.dark(range(10, 12))  # in flight: copied, syncs not written yet

    result = _compare(source, replicator)

    assert not result.ok and (result.matched, result.pending, result.unexpected) == (10, 5, 0)
    assert result.first_mismatch is None


def test_records_appended_after_the_last_copy_by_someone_else_are_unexpected_in_the_tail() -> None:
    source = _source(range(10))
    replicator = _Replicator(source)
    replicator.batch(range(10))
    replicator.target += [KafkaRecord(10, b"stranger", b"x", (), 1), KafkaRecord(12, b"other", b"y", (), 2)]

    result = _compare(source, replicator)

    assert not result.ok and (result.matched, result.pending, result.unexpected, result.duplicates) == (10, 0, 0, 0)
    assert (result.unexpected_tail, result.unexpected_tail_start, result.unexpected_tail_end) == (2, 10, 12)
    mismatch = result.first_mismatch
    assert mismatch is not None and (mismatch.kind, mismatch.source_offset, mismatch.target_offset) == \
        ("unexpected", None, 10)
    assert mismatch.detail == "2 target record(s) after the last copy equal no source record, at target offsets 10..12"
    assert result.source_sha256 == result.target_sha256  # the copies themselves are complete and equal


def test_a_tail_of_unsynced_copies_and_replays_is_explained_by_the_source() -> None:
    source = _source(range(12))
    replicator = _Replicator(source)
    replicator.batch(range(10))
    replicator.dark([6, 7, 8, 9, 10])  # a replay from offset 6, its syncs not written yet, then record 10
    replicator.dark([6, 7])  # and the replay of that replay

    result = _compare(source, replicator)

    assert (result.matched, result.pending, result.unexpected, result.unexpected_tail) == (10, 2, 0, 0)
    assert result.first_mismatch is None and result.unexpected_tail_start is None


def test_a_stranger_among_unsynced_copies_is_found_with_its_offset() -> None:
    source = _source(range(10))
    replicator = _Replicator(source)
    replicator.batch(range(8))
    replicator.dark([8])
    replicator.target.append(KafkaRecord(9, b"k9", b"not v9", (), 0))  # looks like a copy, is none
    replicator.dark([9])

    result = _compare(source, replicator)

    assert (result.pending, result.unexpected_tail, result.unexpected_tail_start) == (2, 1, 9)


def _counting(records: list[KafkaRecord], taken: list[int]) -> Iterator[KafkaRecord]:
    for record in records:
        taken.append(record.offset)
        yield record


def test_copies_of_records_written_since_the_plan_are_explained_by_reading_on() -> None:
    source = _source(range(14))
    replicator = _Replicator(source)
    replicator.batch(range(10))
    replicator.dark([10, 11])  # copied after the plan read the source's watermarks (up to offset 10)
    taken: list[int] = []

    result = _compare(source[:10], replicator, later=_counting(source[10:], taken))

    assert result.ok and result.unexpected_tail == 0 and result.pending == 0
    assert taken == [10, 11]  # read only as far as needed


def test_records_since_the_plan_are_not_read_when_the_tail_is_explained() -> None:
    source = _source(range(12))
    replicator = _Replicator(source)
    replicator.batch(range(10))
    replicator.dark([9])
    taken: list[int] = []

    result = _compare(source[:10], replicator, later=_counting(source[10:], taken))

    assert result.ok and taken == []


def test_records_on_a_partition_never_replicated_are_unexpected_in_the_tail() -> None:
    source = _source(range(3))
    copy = replace(source[1], offset=0)  # a copy made before any sync: explained
    stranger = KafkaRecord(1, b"x", b"y", (), 0)

    result = compare_partition(REF, source, [], None, tail=[copy, stranger])

    assert (result.pending, result.unexpected_tail, result.unexpected_tail_start) == (3, 1, 1)


def test_partition_never_replicated_is_all_pending() -> None:
    result = compare_partition(REF, _source(range(3)), [], None)
    assert not result.ok and result.pending == 3 and result.source_records == 0


def test_source_records_before_the_first_sync_were_never_copied() -> None:
    source = _source(range(10))
    replicator = _Replicator(source)
    replicator.batch(range(4, 10))

    result = _compare(source, replicator)

    assert (result.missing, result.matched) == (4, 6)
    assert result.first_mismatch is not None and (result.first_mismatch.kind, result.first_mismatch.target_offset) \
        == ("missing", None)


def test_records_copied_before_the_first_sync_are_missing_with_where_that_sync_points() -> None:
    source = _source(range(10))
    replicator = _Replicator(source)
    replicator.dark(range(4))  # on the target, but no sync explains them
    replicator.batch(range(4, 10))

    result = _compare(source, replicator)

    assert (result.missing, result.matched) == (4, 6)
    assert result.first_mismatch is not None and result.first_mismatch.detail.endswith(
        "(source offset 4 at target offset 4)")


def test_a_record_the_replicator_never_wrote_is_unexpected() -> None:
    source = _source(range(10))
    replicator = _Replicator(source)
    replicator.batch(range(5))
    replicator.target.append(KafkaRecord(5, b"stranger", b"x", (), 1))  # produced by someone else
    replicator.batch(range(5, 10))

    result = _compare(source, replicator)

    assert not result.ok and (result.matched, result.unexpected, result.duplicates) == (10, 1, 0)
    assert result.first_mismatch is not None and (result.first_mismatch.kind, result.first_mismatch.target_offset) \
        == ("unexpected", 5)


def test_copy_out_of_order_is_a_mismatch() -> None:
    """Record 1's copy before record 0's. With another writer's syncs, taken as they come, it is out
    of order. A strait sync that goes back reads as an older copy's (a replay appends after what it
    repeats): record 1 is then not copied yet as far as the syncs tell. Parity fails either way."""
    source = _source(range(2))
    for exact in (False, True):
        history = PartitionHistory(complete=True)
        history.add(SyncPoint(0, 5), exact=exact)
        history.add(SyncPoint(1, 3), exact=exact)
        target = [replace(r, offset=t) for r, t in zip(source, (5, 3))]

        result = compare_partition(REF, source, sorted(target, key=lambda r: r.offset), history)

        assert not result.ok
        if exact:
            assert result.pending == 1
        else:
            assert result.first_mismatch is not None
            assert (result.first_mismatch.kind, result.first_mismatch.source_offset) == ("order", 1)


def test_compacted_syncs_leave_the_older_range_unchecked() -> None:
    source = _source(range(20))
    history = PartitionHistory(complete=False)  # the syncs topic lost syncs before this partition's first
    target = [replace(r, offset=r.offset) for r in source]
    for point in sync_points(range(10, 20), range(10, 20)):
        history.add(point)

    result = compare_partition(REF, source, target[10:], history)

    assert result.ok and result.unchecked_below == 10 and (result.source_start, result.matched) == (10, 10)


def test_progress_is_reported_per_source_record() -> None:
    source = _source(range(7))
    replicator = _Replicator(source)
    replicator.batch(range(7))
    steps: list[int] = []
    compare_partition(REF, source, replicator.target, replicator.history, steps.append)
    assert sum(steps) == 7


def test_record_encoding_is_unambiguous() -> None:
    assert record_bytes(KafkaRecord(0, b"a", b"bc")) != record_bytes(KafkaRecord(0, b"ab", b"c"))
    assert record_bytes(KafkaRecord(0, None, b"")) != record_bytes(KafkaRecord(0, b"", b""))
    assert record_bytes(KafkaRecord(0, b"k", b"v")) == record_bytes(KafkaRecord(9, b"k", b"v"))


def test_topics_are_selected_by_source_or_remote_name() -> None:
    flow = FlowConfig("A", "B", topics=Selection(("orders", "payments"), ()))
    counts = {"orders": 2, "payments": 1, "other": 3}
    assert [t.source for t in selected_topics(flow, counts)] == ["orders", "payments"]
    assert [t.remote for t in selected_topics(flow, counts, ["A.payments"])] == ["A.payments"]
    with pytest.raises(VerifyError, match="flow A->B: topic\\(s\\) other not replicated"):
        selected_topics(flow, counts, ["other"])
