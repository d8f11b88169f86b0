"""Exact offset translation: sync points and translation, checked against a simulated replicator."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from strait.offsets import OffsetTranslationError, PartitionTranslator, SyncPoint, sync_points


def test_contiguous_batch_needs_only_its_ends() -> None:
    assert sync_points([5, 6, 7, 8], [0, 1, 2, 3]) == [SyncPoint(5, 0), SyncPoint(8, 3)]


def test_single_record_batch() -> None:
    assert sync_points([9], [4]) == [SyncPoint(9, 4)]


def test_source_gap_gets_syncs_on_both_sides() -> None:
    # offsets 3 and 4 were compacted away upstream
    assert sync_points([1, 2, 5, 6], [10, 11, 12, 13]) == [
        SyncPoint(1, 10), SyncPoint(2, 11), SyncPoint(5, 12), SyncPoint(6, 13)
    ]


def test_target_gap_gets_syncs_on_both_sides() -> None:
    assert sync_points([1, 2, 3], [10, 11, 13]) == [SyncPoint(1, 10), SyncPoint(2, 11), SyncPoint(3, 13)]


def test_out_of_order_offsets_are_refused() -> None:
    with pytest.raises(OffsetTranslationError):
        sync_points([1, 1], [1, 2])
    with pytest.raises(OffsetTranslationError):
        sync_points([1, 2], [1])


def test_translation_through_a_compaction_hole() -> None:
    t = PartitionTranslator()
    for p in sync_points([0, 1, 2, 7, 8, 9], [0, 1, 2, 3, 4, 5]):
        t.add(p)
    assert t.translate(0) == 0
    assert t.translate(2) == 2
    assert t.translate(3) == 3  # consumed 0..2; 3..6 do not exist; next is 7 at target 3
    assert t.translate(6) == 3
    assert t.translate(7) == 3
    assert t.translate(9) == 5
    assert t.translate(10) == 6  # everything consumed: resume after the last copy
    assert t.translate(11) is None  # offset 10 is not replicated yet


def test_replayed_batch_supersedes_its_first_copy() -> None:
    t = PartitionTranslator()
    for p in sync_points(range(0, 50), range(0, 50)) + sync_points(range(50, 100), range(50, 100)):
        t.add(p)
    for p in sync_points(range(50, 100), range(100, 150)):  # the uncommitted batch, copied again
        t.add(p)
    assert t.translate(10) == 10
    assert t.translate(50) == 100
    assert t.translate(75) == 125
    assert t.translate(100) == 150


def test_replay_drops_breaks_of_the_superseded_copy() -> None:
    t = PartitionTranslator()
    for p in sync_points(range(50, 60), [50, 51, 52, 53, 54, 56, 57, 58, 59, 60]):  # a marker at 55
        t.add(p)
    for p in sync_points(range(50, 60), range(100, 110)):
        t.add(p)
    assert len(t) == 2
    assert t.translate(55) == 105


def test_an_older_copys_syncs_arriving_after_the_newer_copys_are_ignored() -> None:
    """A copier hands over while its offset syncs wait on a cluster that does not answer: they land
    after the next copier's, which re-copied from its last progress. The newer copy still wins."""
    newer = sync_points(range(950, 1100), range(1050, 1200))
    older = sync_points(range(501, 1050), range(501, 1050))
    for order in (older + newer, newer + older, newer[:1] + older + newer[1:]):
        t = PartitionTranslator()
        for p in sync_points(range(0, 501), range(0, 501)):
            t.add(p)
        for p in order:
            t.add(p)
        assert t.translate(500) == 500
        assert t.translate(950) == 1050, order
        assert t.translate(1033) == 1133
        assert t.translate(1100) == 1200


def test_empty_translator_knows_nothing() -> None:
    assert PartitionTranslator().translate(5) is None


# -- property: a simulated replicator with holes, target gaps, crashes and replays ----------------

@st.composite
def replication_runs(draw: st.DrawFn) -> tuple[list[int], list[list[int]], list[dict]]:
    """Source offsets with holes, batches of them, and what happens to each attempt of a batch."""
    gaps = draw(st.lists(st.integers(0, 3), min_size=1, max_size=60))
    offsets, current = [], draw(st.integers(0, 5))
    for gap in gaps:
        current += gap
        offsets.append(current)
        current += 1
    sizes = draw(st.lists(st.integers(1, 12), min_size=1, max_size=20))
    batches, i = [], 0
    for size in sizes:
        if i >= len(offsets):
            break
        batches.append(offsets[i:i + size])
        i += size
    if i < len(offsets):
        batches.append(offsets[i:])
    attempts = [
        draw(st.fixed_dictionaries({
            "failures": st.lists(st.tuples(st.sampled_from(["dark", "partial-syncs"]), st.floats(0, 1)),
                                 max_size=2),
            "seed": st.integers(0, 2**32 - 1),
        }))
        for b in batches
    ]
    return offsets, batches, attempts


def _valid(target_log: list[tuple[int, int]], source: list[int], committed: int, position: int) -> bool:
    """No record before ``committed`` at or after ``position``; every later record has a copy there."""
    after = [s for t, s in target_log if t >= position]
    return all(s >= committed for s in after) and {s for s in source if s >= committed} <= set(after)


@settings(max_examples=300, deadline=None)
@given(replication_runs())
def test_translation_is_exact_under_holes_gaps_and_replays(run: tuple[list[int], list[list[int]], list[dict]]) -> None:
    source, batches, attempts = run
    target_log: list[tuple[int, int]] = []  # (target offset, source offset)
    next_target = 0
    translator = PartitionTranslator()
    copied: list[int] = []
    dark = False  # some copy on the target lacks syncs: a crash mid-copy, or before all its syncs were written

    def copy(records: list[int], rng: random.Random) -> list[int]:
        nonlocal next_target
        targets = []
        for s in records:
            next_target += rng.choice((0, 0, 0, 1, 2))  # transaction markers or other non-data offsets
            target_log.append((next_target, s))
            targets.append(next_target)
            next_target += 1
        return targets

    for batch, attempt in zip(batches, attempts):
        rng = random.Random(attempt["seed"])  # each attempt meets different target gaps
        for kind, fraction in attempt["failures"]:
            cut = int(len(batch) * fraction)
            if kind == "dark":  # crash mid-copy: some records on the target, no syncs
                copy(batch[:cut], rng)
                dark = dark or cut > 0
            else:  # every record copied, crash while emitting syncs
                points = sync_points(batch, copy(batch, rng))
                emitted = points[:int(len(points) * fraction)]
                for p in emitted:
                    translator.add(p)
                dark = dark or len(emitted) < len(points)
            _check_never_wrong(translator, target_log, source, copied)
        for p in sync_points(batch, copy(batch, rng)):
            translator.add(p)
        copied.extend(batch)
        _check_never_wrong(translator, target_log, source, copied)

    newest = {s: t for t, s in target_log}  # each record's newest copy (later copies come later)
    for committed in range(source[0], source[-1] + 2):
        position = translator.translate(committed)
        assert position is not None, f"no translation for {committed} after a clean run"
        following = [s for s in source if s >= committed]
        # Exact when every copy on the target had its syncs: next comes the newest copy of the next
        # record, nothing is read twice. (Dark copies, written with no sync or only some of theirs,
        # can pass for a linear stretch between two syncs: then records are read twice, never skipped.)
        if following and not dark:
            expected = newest[following[0]]
            skipped = [t for t, _s in target_log if position <= t < expected]  # offsets between may be markers
            assert position <= expected and not skipped, (committed, position, expected)


def _check_never_wrong(translator: PartitionTranslator, target_log: list[tuple[int, int]],
                       source: list[int], copied: list[int]) -> None:
    if not copied:
        return
    for committed in range(source[0], copied[-1] + 2):
        position = translator.translate(committed)
        if position is not None:
            replicated = [s for s in source if s <= copied[-1]]
            assert _valid(target_log, replicated, committed, position), (committed, position)


# -- MirrorMaker 2's syncs, then strait taking over ------------------------------------------------

def mm2_sync_points(source_offsets: list[int], target_offsets: list[int], max_lag: int) -> list[SyncPoint]:
    """The syncs MM2's OffsetSyncWriter emits for one task lifetime: the first record, the record after
    every upstream skip, and whenever translation would lag ``max_lag`` records (nothing before a skip)."""
    points: list[SyncPoint] = []
    previous_up = None
    for up, down in zip(source_offsets, target_offsets):
        lagged = bool(points) and down - (points[-1].downstream + 1) >= max_lag
        skipped = previous_up is not None and up - previous_up != 1
        if not points or lagged or skipped:
            points.append(SyncPoint(up, down))
        previous_up = up
    return points


def test_a_break_between_two_mm2_syncs_re_reads_instead_of_skipping() -> None:
    t = PartitionTranslator()
    # source 0..9 then 20..29 (compacted away in between), copied to target 0..19; MM2 synced
    # 0 and the record after the skip, 20, not 9.
    for p in mm2_sync_points(list(range(10)) + list(range(20, 30)), list(range(20)), max_lag=100):
        t.add(p, exact=False)
    assert len(t) == 2
    assert t.translate(5) == 1  # right after the sync of 0: re-reads 1..4, never skips 5..9
    assert t.translate(20) == 10  # exactly at a sync
    assert t.translate(21) == 11
    assert t.translate(25) is None  # past the newest sync + 1: not known to be copied


@settings(max_examples=300, deadline=None)
@given(gaps=st.lists(st.integers(0, 4), min_size=2, max_size=80), max_lag=st.integers(1, 12),
       committed_at=st.floats(0, 1), batch=st.integers(1, 9))
def test_translation_never_skips_over_mm2_syncs_and_strait_taking_over(
    gaps: list[int], max_lag: int, committed_at: float, batch: int,
) -> None:
    source, current = [], 0
    for gap in gaps:
        current += gap
        source.append(current)
        current += 1
    copied_by_mm2 = source[:max(1, int(len(source) * committed_at))]
    target_log = list(enumerate(copied_by_mm2))  # (target offset, source offset)
    translator = PartitionTranslator()
    for p in mm2_sync_points(copied_by_mm2, list(range(len(copied_by_mm2))), max_lag):
        translator.add(p, exact=False)
    # strait starts right after MM2's newest sync (the anchor of strait.progress), copying again
    # what MM2 copied after it, in batches with its own syncs.
    anchor = translator.last_copied()
    assert anchor is not None
    rest = [s for s in source if s > anchor.upstream]
    for i in range(0, len(rest), batch):
        records = rest[i:i + batch]
        targets = list(range(len(target_log), len(target_log) + len(records)))
        target_log.extend(zip(targets, records))
        for p in sync_points(records, targets):
            translator.add(p)
    for committed in range(source[0], source[-1] + 2):
        position = translator.translate(committed)
        assert position is not None, committed
        after = {s for t, s in target_log if t >= position}
        assert {s for s in source if s >= committed} <= after, f"committed {committed} resumes at {position}"


def test_mm2_syncs_around_a_truncated_target_never_point_into_the_dead_log() -> None:
    t = PartitionTranslator()
    for p in (SyncPoint(0, 0), SyncPoint(500, 500), SyncPoint(520, 0), SyncPoint(600, 80)):
        t.add(p, exact=False)  # MM2 syncs when the target topic went back (re-created)
    assert t.translate(510) == 0


def test_a_replay_over_a_transaction_marker_stays_exact_for_strait_syncs() -> None:
    t = PartitionTranslator()
    for p in sync_points(range(0, 9), range(0, 9)):  # source 0..8; 9 is a transaction marker
        t.add(p)
    for p in sync_points(range(10, 19), range(9, 18)):  # copied, syncs written, progress not
        t.add(p)
    for p in sync_points(range(10, 19), range(18, 27)):  # the replay after a crash
        t.add(p)
    assert t.translate(9) == 18  # the newest copy of record 10: nothing is read twice
    assert t.translate(10) == 18
