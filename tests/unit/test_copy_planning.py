"""How the replicator's streaming source cuts micro-batches into offset ranges and tasks."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from strait_replicator.source import cap_batch, ranges_between, split_ranges
from strait_replicator.writer import CopyRange

keys = st.tuples(st.sampled_from(["a", "b", "c"]), st.integers(0, 5))
backlogs = st.dictionaries(keys, st.tuples(st.integers(0, 10_000), st.integers(0, 10_000)), max_size=12)


@given(backlogs, st.integers(1, 5_000))
@settings(max_examples=300, deadline=None)
def test_a_capped_batch_plans_at_most_the_limit_and_never_goes_back(
        offsets: dict[tuple[str, int], tuple[int, int]], limit: int) -> None:
    planned = {key: low for key, (low, high) in offsets.items()}
    latest = {key: max(low, high) for key, (low, high) in offsets.items()}
    capped = cap_batch(planned, latest, limit)
    assert set(capped) == set(latest)
    assert all(planned[key] <= capped[key] <= latest[key] for key in latest)
    total = sum(latest[key] - planned[key] for key in latest)
    planned_records = sum(capped[key] - planned[key] for key in latest)
    with_backlog = sum(1 for key in latest if latest[key] > planned[key])
    if total <= limit:
        assert capped == latest
    else:  # every partition with a backlog moves by at least one record, so the cap can be passed by that
        assert planned_records <= limit + with_backlog
        assert all(capped[key] > planned[key] for key in latest if latest[key] > planned[key])


def test_an_uncapped_batch_takes_everything_and_a_recreated_topic_keeps_its_lower_end() -> None:
    assert cap_batch({("t", 0): 50}, {("t", 0): 10, ("t", 1): 5}, 100) == {("t", 0): 10, ("t", 1): 5}


def test_ranges_start_where_the_last_batch_ended_and_new_partitions_at_the_earliest() -> None:
    start = {"t": {"0": 5}}
    end = {"t": {"0": 9, "1": 3}}
    assert ranges_between(start, end) == [CopyRange("t", 0, 5, 9), CopyRange("t", 1, None, 3)]


@given(st.lists(st.tuples(st.integers(0, 1_000), st.integers(-5, 1_000)), max_size=30), st.integers(1, 8))
@settings(max_examples=300, deadline=None)
def test_tasks_get_every_range_with_records_once_and_about_equal_work(
        spans: list[tuple[int, int]], tasks: int) -> None:
    ranges = [CopyRange("t", i, start, start + length) for i, (start, length) in enumerate(spans)]
    groups = split_ranges(ranges, tasks)
    assert 1 <= len(groups) <= tasks
    copied = [r for group in groups for r in group]
    assert sorted(copied, key=lambda r: r.partition) == [r for r in ranges if r.start < r.end]
    sizes = [sum(r.end - r.start for r in group) for group in groups if group]
    biggest = max((r.end - r.start for r in copied), default=0)
    assert not sizes or max(sizes) - min(sizes) <= biggest  # greedy largest-first balancing


def test_a_small_batch_goes_to_fewer_tasks() -> None:
    ranges = [CopyRange("t", p, 0, 3_000) for p in range(6)]
    assert len(split_ranges(ranges, 2, min_records_per_task=20_000)) == 1
    assert len(split_ranges(ranges, 4, min_records_per_task=5_000)) == 4
    assert len(split_ranges(ranges, 2, min_records_per_task=1)) == 2
