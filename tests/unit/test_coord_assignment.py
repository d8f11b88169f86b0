"""Deterministic assignment: partition, balance, order independence and the movement bound."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from strait.coord.assignment import ShardItem, assign, home, item_flow, shard_of

names = st.text("abcdefghijklmnopqrstuvwxyz0123456789-.>", min_size=1, max_size=12)
item_sets = st.sets(names, max_size=80)
member_sets = st.sets(names, min_size=1, max_size=12)


def owners(assignment: dict[str, frozenset[str]]) -> dict[str, str]:
    return {item: member for member, items in assignment.items() for item in items}


def off_home(assignment: dict[str, frozenset[str]]) -> set[str]:
    """Items not on their rendezvous home: the ones spilled to keep the balance."""
    members = list(assignment)
    return {item for item, member in owners(assignment).items() if member != home(item, members)}


def moved(before: dict[str, frozenset[str]], after: dict[str, frozenset[str]]) -> set[str]:
    new_owner = owners(after)
    return {item for item, member in owners(before).items() if new_owner.get(item) != member}


# --- edge cases -----------------------------------------------------------------------------------


def test_no_members_assigns_nothing() -> None:
    assert assign(["flow-a", "flow-b"], []) == {}


def test_fewer_items_than_members_gives_at_most_one_each() -> None:
    result = assign(["t1", "t2"], ["m1", "m2", "m3", "m4"])
    assert sorted(len(items) for items in result.values()) == [0, 0, 1, 1]
    assert set().union(*result.values()) == {"t1", "t2"}


def test_single_member_gets_everything() -> None:
    assert assign(["a", "b", "c"], ["only"]) == {"only": frozenset({"a", "b", "c"})}


def test_known_answer_is_stable_across_versions() -> None:
    # Replicas of different strait versions must agree: pin one answer of the hash.
    assert assign([f"topic-{i}" for i in range(6)], ["m1", "m2", "m3"]) == {
        "m1": frozenset({"topic-1", "topic-2"}),
        "m2": frozenset({"topic-3", "topic-5"}),
        "m3": frozenset({"topic-0", "topic-4"}),
    }


# --- properties -----------------------------------------------------------------------------------


@given(item_sets, member_sets)
@settings(max_examples=300, deadline=None)
def test_every_item_goes_to_exactly_one_live_member(items: set[str], members: set[str]) -> None:
    result = assign(items, members)
    assert set(result) == members
    flat = [item for held in result.values() for item in held]
    assert sorted(flat) == sorted(items)


@given(item_sets, member_sets)
@settings(max_examples=300, deadline=None)
def test_loads_are_balanced(items: set[str], members: set[str]) -> None:
    loads = [len(held) for held in assign(items, members).values()]
    base = len(items) // len(members)
    assert set(loads) <= {base, base + 1}
    assert max(loads) - min(loads) <= 1


@given(item_sets, member_sets, st.randoms(use_true_random=False))
@settings(max_examples=200, deadline=None)
def test_result_ignores_order_and_duplicates(items: set[str], members: set[str], rnd: random.Random) -> None:
    shuffled_items = list(items) * 2
    shuffled_members = list(members) + list(members)[:1]
    rnd.shuffle(shuffled_items)
    rnd.shuffle(shuffled_members)
    assert assign(shuffled_items, shuffled_members) == assign(sorted(items), sorted(members))


@given(item_sets, member_sets, names)
@settings(max_examples=300, deadline=None)
def test_join_or_leave_moves_only_homed_or_spilled_items(items: set[str], members: set[str], x: str) -> None:
    """The guaranteed bound: moved <= homed(x) + spilled(before) + spilled(after)."""
    larger, smaller = members | {x}, members - {x}
    if not smaller:
        return
    with_x, without_x = assign(items, larger), assign(items, smaller)
    homed_on_x = {item for item in items if home(item, sorted(larger)) == x}
    allowed = homed_on_x | off_home(with_x) | off_home(without_x)
    assert moved(with_x, without_x) <= allowed  # leave
    assert moved(without_x, with_x) <= allowed  # join


@given(item_sets, member_sets, names)
@settings(max_examples=200, deadline=None)
def test_surviving_items_on_their_home_stay_put(items: set[str], members: set[str], x: str) -> None:
    larger, smaller = members | {x}, members - {x}
    if not smaller:
        return
    with_x, without_x = assign(items, larger), assign(items, smaller)
    settled = {
        item for item, member in owners(with_x).items()
        if member != x and member == home(item, sorted(larger))
    } - off_home(without_x)
    after = owners(without_x)
    assert all(after[item] == owners(with_x)[item] for item in settled)


def test_movement_stays_close_to_the_optimum_over_a_fixed_sample() -> None:
    """Measured, not proved: across 300 fixed joins/leaves, total moves stay within 1.5x the optimum.

    The optimum is the leaver's items (or the joiner's new items); it is a lower bound for any
    assignment, so the ratio measures the price of exact balance without history.
    """
    rnd = random.Random(20260)
    total_moved = total_optimal = 0
    for _ in range(300):
        items = [f"topic-{rnd.randrange(10**9)}" for _ in range(rnd.choice([20, 60, 150]))]
        members = [f"member-{rnd.randrange(10**9)}" for _ in range(rnd.randint(3, 10))]
        x = rnd.choice(members)
        before, after = assign(items, members), assign(items, [m for m in members if m != x])
        total_moved += len(moved(before, after))
        total_optimal += len(before[x])
    assert total_moved <= 1.5 * total_optimal


@pytest.mark.parametrize("count", [0, 1, 7, 100])
def test_items_change_moves_little(count: int) -> None:
    members = [f"m{i}" for i in range(5)]
    items = [f"t{i}" for i in range(count)]
    before, after = assign(items, members), assign([*items, "new-topic"], members)
    # The new item lands somewhere; at most the spills around it move besides.
    assert len(moved(before, after)) <= 1 + len(off_home(before)) + len(off_home(after))


# --- stickiness: the current holders keep their items ---------------------------------------------


holder_maps = st.dictionaries(names, names, max_size=40)


@given(item_sets, member_sets, holder_maps)
@settings(max_examples=300, deadline=None)
def test_any_holders_still_give_a_balanced_partition(items: set[str], members: set[str],
                                                     holders: dict[str, str]) -> None:
    result = assign(items, members, holders)
    assert set(result) == members
    assert sorted(item for held in result.values() for item in held) == sorted(items)
    loads = [len(held) for held in result.values()]
    assert max(loads) - min(loads) <= 1


@given(item_sets, member_sets, holder_maps)
@settings(max_examples=300, deadline=None)
def test_the_assignment_is_a_fixed_point_once_held(items: set[str], members: set[str],
                                                   holders: dict[str, str]) -> None:
    """Once every member holds what it was given, nobody computes a move."""
    settled = assign(items, members, holders)
    assert assign(items, members, owners(settled)) == settled


@given(item_sets, member_sets, names)
@settings(max_examples=300, deadline=None)
def test_a_leaver_moves_only_its_own_items(items: set[str], members: set[str], x: str) -> None:
    larger, smaller = members | {x}, members - {x}
    if not smaller:
        return
    before = assign(items, larger)
    after = assign(items, smaller, owners(before))  # x's leases are gone or ignored: it is not live
    assert moved(before, after) == set(before[x])


@given(item_sets, member_sets, names)
@settings(max_examples=300, deadline=None)
def test_a_joiner_only_takes_items_and_only_what_its_quota_needs(items: set[str], members: set[str],
                                                                 x: str) -> None:
    smaller = members - {x}
    if not smaller:
        return
    before = assign(items, smaller)
    after = assign(items, smaller | {x}, owners(before))
    assert moved(before, after) == set(after[x])
    assert len(after[x]) == len(items) // (len(smaller) + 1)


def test_three_flows_over_three_replicas_a_killed_holder_moves_only_its_flow() -> None:
    """The configsync/heartbeat/checkpoint case: survivors never give up a flow they hold."""
    flows = ["A1->B", "A2->B", "A3->B"]
    rnd = random.Random(7)
    for _ in range(500):
        replicas = [f"host-{rnd.randrange(10**6)}-{rnd.randrange(16**6):06x}" for _ in range(3)]
        before = owners(assign(flows, replicas))
        victim = before["A2->B"]
        after = owners(assign(flows, [r for r in replicas if r != victim], before))
        assert {f: after[f] for f in flows if f != "A2->B"} == {f: before[f] for f in flows if f != "A2->B"}


# -- shards: a flow's keys (consumer groups) split into leased work items -------------------------

flows = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_-]{0,8}->[A-Za-z0-9][A-Za-z0-9_-]{0,8}", fullmatch=True)


@given(flows, st.integers(1, 256), st.data())
def test_shard_item_names_round_trip_and_name_their_flow(flow: str, count: int, data: st.DataObject) -> None:
    shard = ShardItem(flow, data.draw(st.integers(0, count - 1)), count)
    assert ShardItem.parse(shard.name) == shard
    assert item_flow(shard.name) == flow and item_flow(flow) == flow


@given(flows, st.integers(1, 64), st.sets(st.text(min_size=1, max_size=30), max_size=50))
def test_every_key_falls_in_exactly_one_shard_of_a_count(flow: str, count: int, keys: set[str]) -> None:
    shards = ShardItem.all_of(flow, count)
    assert len({s.name for s in shards}) == count
    for key in keys:
        assert [s.index for s in shards if s.owns(key)] == [shard_of(key, count)]


def test_shard_of_is_stable_and_spreads_keys() -> None:
    assert [shard_of(f"group-{i}", 6) for i in range(6)] == [shard_of(f"group-{i}", 6) for i in range(6)]
    counts = [0] * 6
    for i in range(6000):
        counts[shard_of(f"orders-consumer-{i}", 6)] += 1
    assert min(counts) > 850 and max(counts) < 1150, counts


@pytest.mark.parametrize("name", ["A->B", "A->B#", "A->B#1", "A->B#6/6", "A->B#x/6", "#0/1", "A->B#-1/6"])
def test_names_that_are_not_shard_items_are_refused(name: str) -> None:
    with pytest.raises(ValueError, match="not a shard item name"):
        ShardItem.parse(name)


def test_shards_of_one_flow_spread_evenly_over_replicas() -> None:
    items = [s.name for s in ShardItem.all_of("A->B", 6)]
    for members in (["r1"], ["r1", "r2"], ["r1", "r2", "r3"]):
        sizes = sorted(len(mine) for mine in assign(items, members).values())
        assert sizes == [6 // len(members)] * len(members)
