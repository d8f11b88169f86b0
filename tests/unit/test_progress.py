"""Where a partition's copy starts after lost state: the progress record's format and the evidence order."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from strait.progress import (
    EVIDENCE, PartitionEvidence, Progress, Resume, ResumeError, decide_start, decide_starts, progress_record,
    summarize,
)
from strait.offsets import PartitionTranslator, SyncPoint
from strait.records import MIRROR_SOURCE_CONNECTOR, RecordFormatError, SourceOffset

offsets = st.integers(0, 10**9)


def test_the_key_is_byte_for_byte_what_connect_writes_for_mirrormaker() -> None:
    record = SourceOffset(MIRROR_SOURCE_CONNECTOR, "A", "orders", 2, 41)
    assert record.key_bytes() == b'["MirrorSourceConnector",{"cluster":"A","partition":2,"topic":"orders"}]'
    assert record.value_bytes() == b'{"offset":41}'
    assert record.next_offset == 42


@given(st.text(min_size=1, max_size=20), st.text(min_size=1, max_size=20), st.integers(0, 2**31 - 1), offsets)
def test_source_offsets_round_trip(cluster: str, topic: str, partition: int, offset: int) -> None:
    record = SourceOffset(MIRROR_SOURCE_CONNECTOR, cluster, topic, partition, offset)
    assert SourceOffset.from_record(record.key_bytes(), record.value_bytes()) == record


def test_progress_records_carry_the_target_offset_mirrormaker_ignores() -> None:
    key, value = progress_record("A", "orders", 0, Progress(100, 57))
    assert json.loads(value) == {"offset": 99, "target_offset": 57}
    assert SourceOffset.from_record(key, value) == SourceOffset(MIRROR_SOURCE_CONNECTOR, "A", "orders", 0, 99)


def test_a_tombstone_reads_as_no_progress_and_other_records_are_refused() -> None:
    key = SourceOffset(MIRROR_SOURCE_CONNECTOR, "A", "t", 0, 1).key_bytes()
    assert SourceOffset.from_record(key, None) is None
    with pytest.raises(RecordFormatError, match="not a MirrorSourceConnector offset record"):
        SourceOffset.from_record(b'["other",{"filename":"x"}]', b'{"position":3}')


evidence = st.builds(
    PartitionEvidence,
    remote_start=st.integers(0, 100), remote_end=st.integers(0, 10_000),
    progress=st.none() | st.builds(Progress, offsets, st.integers(-1, 10_000)),
    mm2_next=st.none() | offsets,
    newest_sync=st.none() | st.tuples(offsets, st.integers(0, 10_000)),
    sync_below_mm2=st.none() | st.tuples(offsets, st.integers(0, 10_000)),
    target_match=st.none() | offsets,
    earliest=st.integers(0, 100), latest=st.integers(100, 1000),
    siblings_copied=st.booleans(), shared_with=st.none() | st.just("B->C"),
)


@given(evidence, st.sampled_from([None, "earliest", "latest", "from-target"]), st.booleans())
def test_the_strongest_evidence_decides_and_an_unexplained_remote_copy_needs_a_choice(
        found: PartitionEvidence, start: str | None, exactly_once: bool) -> None:
    resume = decide_start(("t", 0), found, start, exactly_once)
    held = found.remote_end - found.remote_start
    if found.progress is not None:
        assert resume is not None and (resume.offset, resume.evidence) == (found.progress.next_offset, "strait-progress")
    elif found.mm2_next is not None:
        anchored = found.mm2_next if found.sync_below_mm2 is None or exactly_once else found.sync_below_mm2[0] + 1
        assert resume is not None and (resume.offset, resume.evidence) == (anchored, "mm2-offsets")
    elif found.newest_sync is not None:
        assert resume is not None and (resume.offset, resume.evidence) == (found.newest_sync[0] + 1, "offset-syncs")
    elif found.siblings_copied:  # a partition added to a topic a repartitioning flow copies: all of it
        assert resume == Resume(found.earliest, "shared-remote", 0)
    elif held <= 0:
        assert resume == Resume(found.latest if start == "latest" else found.earliest, "empty-remote", 0)
    elif found.shared_with is not None:  # others' copies, or its own had its progress been lost: bound
        assert resume == Resume(found.latest if start == "latest" else found.earliest, "shared-remote", held)
    elif start is None or (start == "from-target" and found.target_match is None):
        assert resume is None, "a non-empty remote partition with no evidence is never copied again silently"
    elif start == "from-target":
        assert resume == Resume(found.target_match, "from-target", 0)
    else:
        assert resume is not None and resume.evidence == f"start-{start}"
    if resume is not None:
        assert resume.duplicates <= max(0, held) and resume.duplicates >= -1


def test_duplicates_are_bounded_by_what_the_target_holds_past_the_evidence() -> None:
    # strait's progress names the target offset of its last record: exactly what follows is copied again
    exact = decide_start(("t", 0), PartitionEvidence(remote_end=1000, progress=Progress(900, 994)), None)
    assert exact == Resume(900, "strait-progress", 5)
    # MM2 committed offset 799 (next 800); its newest sync says source 750 is target 750: at most 249 again
    mm2 = decide_start(("t", 0), PartitionEvidence(remote_end=1000, mm2_next=800, newest_sync=(750, 750)), None)
    assert mm2 == Resume(800, "mm2-offsets", 249)
    # a sync past the commit: the records 800..850 on the target are copies too
    ahead = decide_start(("t", 0), PartitionEvidence(remote_end=1000, mm2_next=800, newest_sync=(850, 850)), None)
    assert ahead == Resume(800, "mm2-offsets", 200)
    # with MM2's last sync below its commit, the copy goes on right after that sync: exact translation
    # across the switch, for the price of the records between sync and commit
    anchored = decide_start(("t", 0), PartitionEvidence(remote_end=1000, mm2_next=800, newest_sync=(850, 850),
                                                        sync_below_mm2=(700, 700)), None)
    assert anchored == Resume(701, "mm2-offsets", 299)
    # an exactly-once flow starts at MM2's commit: read_committed readers must find no record twice
    exact_copy = decide_start(("t", 0), PartitionEvidence(remote_end=1000, mm2_next=800, newest_sync=(700, 700),
                                                          sync_below_mm2=(700, 700)), None, exactly_once=True)
    assert exact_copy == Resume(800, "mm2-offsets", 299)


def test_the_error_names_the_remote_topics_and_says_how_to_choose() -> None:
    found = {("orders", 0): PartitionEvidence(remote_end=10), ("orders", 1): PartitionEvidence(remote_end=5),
             ("fresh", 0): PartitionEvidence()}
    with pytest.raises(ResumeError) as caught:
        decide_starts("A->B", found, None, {"orders": "A.orders"})
    message = str(caught.value)
    assert "A.orders (partitions 0, 1, 15 records)" in message and "start: earliest" in message
    assert "fresh" not in message


def test_from_target_names_the_remote_partitions_no_source_record_matches() -> None:
    found = {("orders", 0): PartitionEvidence(remote_end=10, target_match=4),
             ("orders", 1): PartitionEvidence(remote_end=5)}
    with pytest.raises(ResumeError, match=r"no source record equals the last record of A.orders\[1\]"):
        decide_starts("A->B", found, "from-target", {"orders": "A.orders"})
    assert decide_starts("A->B", {("orders", 0): found[("orders", 0)]}, "from-target", {}) == {
        ("orders", 0): Resume(4, "from-target", 0)}


def test_a_topic_reports_its_weakest_evidence_and_the_total_bound() -> None:
    decided = {("t", 0): Resume(5, "strait-progress", 2), ("t", 1): Resume(0, "empty-remote", 0),
               ("u", 0): Resume(3, "mm2-offsets", -1)}
    assert summarize(decided) == {"t": ("empty-remote", 2), "u": ("mm2-offsets", -1)}
    assert EVIDENCE.index("strait-progress") == 0


@given(st.lists(st.integers(0, 1000), unique=True, max_size=30), st.integers(0, 1100))
def test_the_sync_below_an_offset_is_the_greatest_one_under_it(upstreams: list[int], limit: int) -> None:
    translator = PartitionTranslator()
    for i, upstream in enumerate(sorted(upstreams)):
        translator.add(SyncPoint(upstream, i))
    below = [u for u in upstreams if u < limit]
    found = translator.last_below(limit)
    assert (found.upstream if found else None) == (max(below) if below else None)
