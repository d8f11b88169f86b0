"""Membership with TTL and re-assignment of work as members join, leave and die, on a real Redis."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from strait.coord.assignment import Share, ShareTracker, assign
from strait.coord.membership import MemberKeeper, Membership
from strait.coord.redis_client import connect
from strait_lab.redis import RedisServer
from tests.support.waiting import wait_for

pytestmark = pytest.mark.usefixtures("alone_in_module")  # sub-second TTLs

ITEMS = [f"topic-{i}" for i in range(30)]


@pytest.fixture
def membership(redis_url: str) -> Membership:
    return Membership(connect(redis_url))


def test_join_heartbeat_leave_and_epochs(membership: Membership) -> None:
    first = membership.heartbeat("checkpoint", "a", 5, {"host": "h1", "metrics": "9101"})
    assert first.joined
    again = membership.heartbeat("checkpoint", "a", 5)
    assert not again.joined and again.epoch == first.epoch
    second = membership.heartbeat("checkpoint", "b", 5, {"host": "h2"})
    assert second.joined and second.epoch > first.epoch
    view = membership.view("checkpoint")
    assert view.member_ids == ("a", "b") and view.epoch == second.epoch
    assert dict(view.members[0].metadata) == {"host": "h1", "metrics": "9101"}, "None keeps the metadata"
    assert membership.leave("checkpoint", "b")
    assert not membership.leave("checkpoint", "b")
    after = membership.view("checkpoint")
    assert after.member_ids == ("a",) and after.epoch > second.epoch
    assert membership.view("heartbeat").member_ids == (), "groups are separate"


def test_member_without_heartbeat_is_dead_after_its_ttl(membership: Membership) -> None:
    membership.heartbeat("configsync", "short", 0.3)
    membership.heartbeat("configsync", "long", 10)
    epoch = membership.view("configsync").epoch
    time.sleep(0.4)
    view = membership.view("configsync")
    assert view.member_ids == ("long",)
    assert view.epoch > epoch, "an expiry changes the epoch like a leave"
    rejoin = membership.heartbeat("configsync", "short", 0.3)
    assert rejoin.joined and rejoin.epoch > view.epoch


def test_keeper_stays_registered_past_its_ttl_and_leaves_on_stop(membership: Membership) -> None:
    epochs: list[int] = []
    with MemberKeeper(membership, "heartbeat", "m1", ttl=0.6, metadata={"pid": "1"}, on_epoch=epochs.append):
        time.sleep(1.8)
        assert membership.view("heartbeat").member_ids == ("m1",)
    assert membership.view("heartbeat").member_ids == ()
    assert len(epochs) == 1


def _shares(trackers: dict[str, ShareTracker]) -> dict[str, Share]:
    return {member: tracker.refresh(ITEMS) for member, tracker in trackers.items()}


def _assert_partition(shares: dict[str, Share]) -> None:
    held = [item for share in shares.values() for item in share.items]
    assert sorted(held) == sorted(ITEMS), "every item has exactly one owner"
    loads = [len(share.items) for share in shares.values()]
    assert max(loads) - min(loads) <= 1


def test_members_joining_leaving_and_dying_rebalance_the_work(membership: Membership) -> None:
    ttl = 0.6
    keepers = {m: MemberKeeper(membership, "checkpoint", m, ttl).start() for m in ("m1", "m2", "m3")}
    trackers = {m: ShareTracker(membership, "checkpoint", m) for m in keepers}
    shares = _shares(trackers)
    _assert_partition(shares)
    assert {share.epoch for share in shares.values()} == {membership.view("checkpoint").epoch}

    # m3 leaves cleanly: its items are spread, and here the survivors keep all of theirs.
    keepers.pop("m3").stop()
    left = {m: trackers[m].refresh(ITEMS) for m in ("m1", "m2")}
    _assert_partition(left)
    assert trackers["m3"].refresh(ITEMS).items == frozenset()
    assert all(shares[m].items <= left[m].items for m in left)
    assert left == _shares({m: trackers[m] for m in left}), "no change without a new epoch"

    # m4 joins: it takes a balanced share from the others.
    keepers["m4"] = MemberKeeper(membership, "checkpoint", "m4", ttl).start()
    trackers["m4"] = ShareTracker(membership, "checkpoint", "m4")
    joined = {m: trackers[m].refresh(ITEMS) for m in ("m1", "m2", "m4")}
    _assert_partition(joined)
    assert len(joined["m4"].items) == 10

    # m2 dies (stops heartbeating without leaving): after its TTL the others take its work over.
    keepers.pop("m2").stop(leave=False)
    time.sleep(ttl + 0.2)
    survivors = {m: trackers[m].refresh(ITEMS) for m in ("m1", "m4")}
    _assert_partition(survivors)
    assert survivors["m1"].members == ("m1", "m4")
    expected = assign(ITEMS, ["m1", "m4"])
    assert {m: s.items for m, s in survivors.items()} == expected
    for keeper in keepers.values():
        keeper.stop()


def test_share_tracker_reports_changes_and_recomputes_on_new_items(membership: Membership) -> None:
    changes: list[tuple[frozenset[str], frozenset[str] | None]] = []
    membership.heartbeat("g", "solo", 5)
    tracker = ShareTracker(membership, "g", "solo", on_change=lambda new, old: changes.append(
        (new.items, old.items if old else None)))
    assert tracker.refresh(["a", "b"]).items == {"a", "b"}
    assert tracker.refresh(["b", "a"]).items == {"a", "b"}
    assert tracker.refresh(["a", "b", "c"]).items == {"a", "b", "c"}
    assert changes == [({"a", "b"}, None), ({"a", "b", "c"}, {"a", "b"})]


def test_keepers_rejoin_after_a_redis_restart_with_a_newer_epoch(
    redis_server_factory: Callable[..., RedisServer],
) -> None:
    server = redis_server_factory()
    membership = Membership(connect(server.url))
    keeper = MemberKeeper(membership, "checkpoint", "m1", ttl=0.9).start()
    tracker = ShareTracker(membership, "checkpoint", "m1")
    try:
        before = tracker.refresh(ITEMS)
        assert before.items == frozenset(ITEMS)
        server.stop()
        time.sleep(0.5)  # heartbeats fail meanwhile; nothing crashes
        stale = tracker.refresh(ITEMS)
        assert stale.stale and stale.items == before.items, "work goes on with the last share"
        server.start()
        wait_for(lambda: membership.view("checkpoint").member_ids == ("m1",), 5, "m1 to register again",
                 interval=0.02)
        after = tracker.refresh(ITEMS)
        assert not after.stale and after.items == frozenset(ITEMS)
        assert after.epoch > before.epoch, "the epoch moves forward although Redis lost its counter"
    finally:
        keeper.stop()
