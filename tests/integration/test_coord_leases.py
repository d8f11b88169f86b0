"""Leases and fencing tokens against a real redis-server, including restarts and a paused process."""

from __future__ import annotations

import dataclasses
import math
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import redis
from strait.coord.leases import Lease, LeaseKeeper, LeaseLostError, Leases
from strait.coord.redis_client import CoordinationUnavailableError, connect
from strait_lab.redis import RedisServer
from tests.support.waiting import wait_for

pytestmark = pytest.mark.usefixtures("alone_in_module")  # sub-second TTLs

HELPER = Path(__file__).with_name("coord_member_proc.py")


@pytest.fixture
def leases(redis_url: str) -> Leases:
    return Leases(connect(redis_url))


def take(leases: Leases, name: str, holder: str, ttl: float) -> Lease:
    """Acquire, waiting out the grace of a Redis that has just started."""
    lease = leases.acquire(name, holder, ttl, wait=ttl + 3)
    assert lease is not None, f"{holder} could not acquire {name}"
    return lease


# --- grants and tokens ----------------------------------------------------------------------------


def test_lease_is_exclusive_and_tokens_increase_across_holders(leases: Leases) -> None:
    a = take(leases, "flow:A->B", "a", 5)
    assert leases.acquire("flow:A->B", "b", 5) is None
    assert leases.owner("flow:A->B").holder == "a"  # type: ignore[union-attr]
    assert leases.release(a)
    b = take(leases, "flow:A->B", "b", 5)
    assert b.token > a.token
    assert not leases.release(a), "a stale holder cannot release someone else's lease"
    assert leases.owner("flow:A->B").token == b.token  # type: ignore[union-attr]


def test_acquire_by_the_current_holder_keeps_its_token(leases: Leases) -> None:
    first = take(leases, "g", "a", 5)
    again = take(leases, "g", "a", 5)
    assert again.token == first.token


def test_renew_extends_the_local_deadline_and_redis_ttl(leases: Leases) -> None:
    lease = take(leases, "g", "a", 1.0)
    time.sleep(0.6)
    renewed = leases.renew(lease)
    assert renewed.expires_at_monotonic > lease.expires_at_monotonic
    time.sleep(0.6)  # past the first TTL, within the renewed one
    leases.check(renewed)
    assert leases.owner("g").ttl_remaining > 0.2  # type: ignore[union-attr]


def test_expired_lease_is_taken_over_with_a_higher_token(leases: Leases) -> None:
    old = take(leases, "flow:A->B", "old", 0.5)
    assert leases.acquire("flow:A->B", "new", 0.5) is None
    time.sleep(0.6)
    new = take(leases, "flow:A->B", "new", 5)
    assert new.token > old.token
    with pytest.raises(LeaseLostError, match="local deadline"):
        old.ensure_valid()
    with pytest.raises(LeaseLostError, match="Redis shows holder=new"):
        leases.renew(old)
    with pytest.raises(LeaseLostError):
        leases.check(old)
    leases.check(new)


def test_stale_holder_fenced_write_is_rejected(leases: Leases, redis_url: str) -> None:
    raw = redis.Redis.from_url(redis_url)
    old = take(leases, "offsets:g1", "old", 0.5)
    leases.fenced_set(old, "strait:test:offsets", "old-1")
    time.sleep(0.6)
    new = take(leases, "offsets:g1", "new", 5)
    leases.fenced_set(new, "strait:test:offsets", "new-1")
    # A stale holder is refused locally first...
    with pytest.raises(LeaseLostError, match="local deadline"):
        leases.fenced_set(old, "strait:test:offsets", "old-2")
    # ...and by Redis even if its local clock lied about the deadline.
    lying = dataclasses.replace(old, expires_at_monotonic=math.inf)
    with pytest.raises(LeaseLostError, match="Redis shows holder=new"):
        leases.fenced_set(lying, "strait:test:offsets", "old-3")
    assert raw.get("strait:test:offsets") == b"new-1"


def test_fenced_write_fails_once_the_lease_expired_unclaimed(leases: Leases, redis_url: str) -> None:
    lease = take(leases, "x", "a", 0.3)
    time.sleep(0.4)
    with pytest.raises(LeaseLostError, match="nobody"):
        leases.fenced_set(dataclasses.replace(lease, expires_at_monotonic=math.inf), "strait:test:x", "v")
    assert redis.Redis.from_url(redis_url).get("strait:test:x") is None


# --- keeper ---------------------------------------------------------------------------------------


def test_keeper_holds_the_lease_well_past_its_ttl_and_releases_it(leases: Leases) -> None:
    lease = take(leases, "k", "a", 0.6)
    with LeaseKeeper(leases, lease) as keeper:
        time.sleep(2.0)
        current = keeper.ensure_valid()
        assert current.token == lease.token
        leases.check(current)
    assert leases.owner("k") is None


def test_keeper_flags_loss_when_redis_shows_another_holder(leases: Leases, redis_url: str) -> None:
    lost: list[str] = []
    lease = take(leases, "k", "a", 0.6)
    keeper = LeaseKeeper(leases, lease, on_lost=lambda _lease, reason: lost.append(reason)).start()
    redis.Redis.from_url(redis_url).delete("strait:lease:k")  # as after data loss
    thief = take(leases, "k", "b", 5)
    wait_for(lambda: keeper.lost, 2, "the keeper to notice", interval=0.02)
    assert len(lost) == 1 and "holder=b" in lost[0]
    with pytest.raises(LeaseLostError):
        keeper.ensure_valid()
    keeper.stop()
    assert leases.owner("k").token == thief.token  # type: ignore[union-attr]


# --- Redis restarts and outages -------------------------------------------------------------------


def test_tokens_stay_monotonic_across_a_redis_restart(
    redis_server_factory: Callable[..., RedisServer],
) -> None:
    server = redis_server_factory()
    leases = Leases(connect(server.url))
    tokens = []
    for holder in ("a", "b", "c"):
        lease = take(leases, "flow:A->B", holder, 1.0)
        tokens.append(lease.token)
        leases.release(lease)
    before = take(leases, "flow:A->B", "d", 1.0)
    server.restart()  # no persistence: the lease and its counter are gone
    # A holder from before the restart may still be within its local deadline: grace first.
    assert leases.acquire("flow:A->B", "e", 1.0) is None
    with pytest.raises(LeaseLostError):
        leases.fenced_set(dataclasses.replace(before, expires_at_monotonic=math.inf), "k", "v")
    after = take(leases, "flow:A->B", "e", 1.0)
    assert after.token > max(*tokens, before.token)


def test_redis_down_keeps_current_lease_until_its_deadline_and_grants_none(
    redis_server_factory: Callable[..., RedisServer],
) -> None:
    server = redis_server_factory()
    leases = Leases(connect(server.url))
    lease = take(leases, "work", "a", 1.5)
    lost = threading.Event()
    keeper = LeaseKeeper(leases, lease, on_lost=lambda *_: lost.set()).start()
    server.stop()
    try:
        keeper.ensure_valid()  # current work goes on
        with pytest.raises(CoordinationUnavailableError, match=f"127.0.0.1:{server.port}"):
            leases.acquire("other-work", "a", 1.5)
        assert lost.wait(3), "the keeper must give the lease up at its local deadline"
        with pytest.raises(LeaseLostError, match="local deadline"):
            keeper.ensure_valid()
    finally:
        keeper.stop(release=False)
        server.start()


# --- a paused process -----------------------------------------------------------------------------


class HelperProcess:
    """The lease-holding helper process, with its output lines and when they arrived."""

    def __init__(self, args: list[str]) -> None:
        self.lines: list[tuple[float, str]] = []
        self.proc = subprocess.Popen(
            [sys.executable, str(HELPER), *args],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append((time.monotonic(), line.rstrip("\n")))

    def lines_since(self, moment: float, prefix: str) -> list[str]:
        return [line for at, line in self.lines if at >= moment and line.startswith(prefix)]

    def output(self) -> str:
        return "\n".join(line for _, line in self.lines)


@pytest.mark.parametrize(
    ("mode", "refusals"),
    # Checked: the local deadline refuses, unless the keeper's first renewal after SIGCONT already
    # learnt from Redis that the lease moved (a race between two correct refusals).
    [("checked", ("local deadline", "Redis shows holder=taker")), ("unchecked", ("Redis shows holder=taker",))],
)
def test_process_paused_past_its_ttl_does_not_act_after_resuming(
    redis_url: str, leases: Leases, mode: str, refusals: tuple[str, ...]
) -> None:
    ttl, key = 1.0, "strait:test:acted"
    helper = HelperProcess([redis_url, "job", key, "paused", str(ttl), mode])
    raw = redis.Redis.from_url(redis_url)
    try:
        wait_for(lambda: len(helper.lines_since(0, "ACTED")) >= 3, 20, "the helper to act", interval=0.02)
        stale_token = int(helper.lines_since(0, "ACQUIRED")[0].split()[1])
        os.kill(helper.proc.pid, signal.SIGSTOP)
        time.sleep(ttl + 0.3)  # the lease expires in Redis while the holder is frozen
        taker = take(leases, "job", "taker", 10)
        assert taker.token > stale_token
        leases.fenced_set(taker, key, "taker")
        resumed = time.monotonic()
        os.kill(helper.proc.pid, signal.SIGCONT)
        assert helper.proc.wait(timeout=15) == 0, helper.output()
    finally:
        if helper.proc.poll() is None:
            os.kill(helper.proc.pid, signal.SIGCONT)
            helper.proc.kill()
    refused = helper.lines_since(resumed, "REFUSED")
    assert refused and all(any(r in line for r in refusals) for line in refused), helper.output()
    # Any write after the take-over would have replaced the taker's value.
    assert raw.get(key) == b"taker", helper.output()
    assert leases.owner("job").holder == "taker"  # type: ignore[union-attr]
