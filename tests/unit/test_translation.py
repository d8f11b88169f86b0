"""The shared translation pieces: sync index with compaction holes, group translation, naming."""

from __future__ import annotations

import time

import pytest

from strait.config.model import FlowConfig, Selection
from strait.records import EXACT_SYNC_HEADER, OffsetSync
from strait.translation import (
    CommittedOffset,
    SyncIndex,
    TailProbe,
    translate_group,
    translate_offset,
)

FLOW = FlowConfig("A", "B", topics=Selection(("orders", "B\\..*"), ()))


def _record(topic: str, partition: int, up: int, down: int) -> tuple[bytes, bytes]:
    sync = OffsetSync(topic, partition, up, down)
    return sync.key_bytes(), sync.value_bytes()


class _Probe:
    """Answers as a source would: offsets in ``records`` hold records the replicator copies."""

    def __init__(self, records: set[int], end: int) -> None:
        self.records, self.end, self.asked = records, end, []

    def empty_between(self, topic: str, partition: int, start: int, end: int) -> bool:
        self.asked.append((start, end))
        return self.end >= end and not any(start <= o < end for o in self.records)


def _index(*syncs: tuple[int, str, int, int, int]) -> SyncIndex:
    index = SyncIndex()
    for offset, topic, partition, up, down in syncs:
        index.add_record(offset, *_record(topic, partition, up, down))
    return index


def test_complete_history_translates_from_the_first_copy() -> None:
    # source 0..9 copied to 0..9, then a hole at 10..14 (compaction), 15..19 copied to 10..14
    index = _index((0, "orders", 0, 0, 0), (1, "orders", 0, 9, 9), (2, "orders", 0, 15, 10), (3, "orders", 0, 19, 14))
    history = index.history("orders", 0)
    assert history is not None and history.complete
    assert [history.translate(c) for c in (0, 5, 10, 12, 15, 17, 20)] == [0, 5, 10, 10, 10, 12, 15]
    assert history.translate(21) is None


def test_history_cut_by_compaction_answers_only_from_its_floor() -> None:
    # offsets 0..4 of the syncs topic were compacted away: older syncs of every partition may be lost
    index = _index((5, "orders", 0, 100, 90), (6, "orders", 0, 150, 140), (7, "orders", 1, 7, 7))
    history = index.history("orders", 0)
    assert history is not None and not history.complete
    assert history.translate(99) is None
    assert history.translate(100) == 90 and history.translate(120) == 110
    result = translate_offset(FLOW, index, CommittedOffset("orders", 0, 50))
    assert result.downstream is None and "compaction" in result.reason


def test_partitions_first_seen_after_the_last_hole_are_still_cut() -> None:
    index = _index((0, "orders", 0, 0, 0), (2, "orders", 1, 3, 3))
    assert index.history("orders", 0).complete
    assert not index.history("orders", 1).complete


def test_corrupt_syncs_are_counted_and_skipped() -> None:
    index = SyncIndex()
    assert index.add_record(0, b"\x00", b"short") is None
    index.add_record(1, *_record("orders", 0, 0, 0))
    assert index.corrupt == 1 and index.partitions() == [("orders", 0)]


def test_tail_gap_is_translated_only_when_the_source_proves_it_empty() -> None:
    index = _index((0, "orders", 0, 0, 0), (1, "orders", 0, 9, 9))
    # a group past the final commit marker at offset 10: nothing to copy in between
    proven = translate_offset(FLOW, index, CommittedOffset("orders", 0, 11, "m"), _Probe(set(), 11))
    assert (proven.downstream, proven.lag_records, proven.metadata) == (10, 0, "m")
    # a record at 10 that is not copied yet: no answer, one record of lag
    pending = translate_offset(FLOW, index, CommittedOffset("orders", 0, 11), _Probe({10}, 11))
    assert pending.downstream is None and pending.lag_records == 1
    assert translate_offset(FLOW, index, CommittedOffset("orders", 0, 11)).downstream is None


def test_group_translation_skips_other_topics_and_reports_missing_syncs() -> None:
    index = _index((0, "orders", 0, 0, 0), (1, "orders", 0, 4, 4))
    offsets = [CommittedOffset("orders", 0, 3), CommittedOffset("orders", 1, 2), CommittedOffset("local", 0, 1)]
    result = translate_group(FLOW, index, offsets)
    assert [(t.remote_topic, t.partition, t.downstream) for t in result] == [("A.orders", 0, 3), ("A.orders", 1, None)]
    assert "not replicated" in result[1].reason


@pytest.mark.parametrize(("topic", "expected"), [("orders", "A.orders"), ("B.orders", "orders"),
                                                 ("C.orders", "A.C.orders")])
def test_checkpoint_topic_names_follow_mm2(topic: str, expected: str) -> None:
    assert FLOW.topic_names().checkpointed(topic) == expected


def test_offset_syncs_topic_location() -> None:
    assert FLOW.topic_names().offset_syncs.__dict__ == {"alias": "A", "topic": "mm2-offset-syncs.B.internal"}
    target = FlowConfig("A", "B", offset_syncs_topic_location="target")
    assert target.topic_names().offset_syncs.__dict__ == {"alias": "B", "topic": "mm2-offset-syncs.A.internal"}


def test_strait_syncs_are_told_from_mm2_syncs_by_their_header() -> None:
    # source 0..4 and 10..14 copied to 0..9 (5..9 compacted away); synced at 0 and after the break at 10
    tagged, untagged = SyncIndex(), SyncIndex()
    for offset, (up, down) in enumerate(((0, 0), (10, 5))):
        tagged.add_record(offset, *_record("orders", 0, up, down), headers=[(EXACT_SYNC_HEADER, b"1")])
        untagged.add_record(offset, *_record("orders", 0, up, down))
    # strait syncs both sides of a break: nothing exists between its two syncs, resume in the newest copy
    assert tagged.history("orders", 0).translate(7) == 5
    # MM2 syncs only after a break: records 1..4 may lie between, so resume right after the older sync
    assert untagged.history("orders", 0).translate(7) == 1


def test_a_partition_the_probe_could_not_read_is_not_read_again_for_a_pause() -> None:
    """A dead leader costs one probe timeout per pause, not one per checkpoint pass."""
    probe = TailProbe({"bootstrap.servers": "127.0.0.1:1"}, timeout=0.3, unreadable_pause=60.0)
    try:
        started = time.monotonic()
        assert not probe.empty_between("orders", 0, 5, 9)
        assert time.monotonic() - started >= 0.3
        started = time.monotonic()
        assert not probe.empty_between("orders", 0, 5, 12)
        assert time.monotonic() - started < 0.1
        started = time.monotonic()
        assert not probe.empty_between("orders", 1, 5, 9)  # another partition is still read
        assert time.monotonic() - started >= 0.3
    finally:
        probe.close()
