"""Group membership with TTL: who is alive in a service group, and an epoch that changes with it.

A group (``checkpoint``, ``configsync``...) is a sorted set ``<ns>:members:<group>`` of member ids
scored by their expiry on the Redis server's clock (milliseconds), plus a hash of each member's
metadata. Every heartbeat and every read first removes the expired members, so a dead member is
noticed by whoever looks next. The epoch ``<ns>:members:<group>:epoch`` changes whenever the
member set changes (join, leave, expiry); like fencing tokens it is ``max(previous + 1, server
clock in µs)``, so it still moves forward after Redis restarts empty.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import redis

from strait.coord.redis_client import LUA_PRELUDE, CoordinationError, redis_errors, text

log = logging.getLogger(__name__)

# KEYS: members zset, metadata hash, epoch counter. Leaves CHANGED set when someone expired.
_REAP = LUA_PRELUDE + """
local CHANGED = false
for _, id in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', INT(NOW_MS))) do
  redis.call('ZREM', KEYS[1], id)
  redis.call('HDEL', KEYS[2], id)
  CHANGED = true
end
local function EPOCH()
  if CHANGED then return BUMP(KEYS[3]) end
  return redis.call('GET', KEYS[3]) or '0'
end
"""

_HEARTBEAT = _REAP + """
local joined = redis.call('ZADD', KEYS[1], INT(NOW_MS + tonumber(ARGV[2])), ARGV[1])
if ARGV[3] ~= '' then redis.call('HSET', KEYS[2], ARGV[1], ARGV[3]) end
if joined == 1 then CHANGED = true end
return {EPOCH(), joined}
"""

_LEAVE = _REAP + """
local left = redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
if left == 1 then CHANGED = true end
return {EPOCH(), left}
"""

_VIEW = _REAP + """
local ids = redis.call('ZRANGE', KEYS[1], 0, -1)
local meta = {}
if #ids > 0 then meta = redis.call('HMGET', KEYS[2], unpack(ids)) end
return {EPOCH(), ids, meta}
"""


@dataclass(frozen=True)
class Member:
    """A live member of a group and the metadata it registered (host, pid, metrics port...)."""

    id: str
    metadata: Mapping[str, str] = field(default_factory=dict, hash=False)


@dataclass(frozen=True)
class GroupView:
    """A group's live members, sorted by id, and the epoch they belong to."""

    group: str
    epoch: int
    members: tuple[Member, ...]

    @property
    def member_ids(self) -> tuple[str, ...]:
        """The live members' ids, sorted."""
        return tuple(member.id for member in self.members)


@dataclass(frozen=True)
class Heartbeat:
    """What one heartbeat learnt: the group's epoch and whether this member (re)joined."""

    epoch: int
    joined: bool


class Membership:
    """Register, heartbeat, leave and list members of service groups.

    Args:
        client: from :func:`strait.coord.redis_client.connect`.
        namespace: key prefix shared by every strait process of one deployment.
    """

    def __init__(self, client: redis.Redis, namespace: str = "strait") -> None:
        self._client = client
        self._ns = namespace
        self._heartbeat = client.register_script(_HEARTBEAT)
        self._leave = client.register_script(_LEAVE)
        self._view = client.register_script(_VIEW)

    def heartbeat(
        self, group: str, member_id: str, ttl: float, metadata: Mapping[str, str] | None = None
    ) -> Heartbeat:
        """Join ``group`` or stay in it for another ``ttl`` seconds.

        Args:
            metadata: stored with the member; None keeps what an earlier heartbeat stored.

        Raises:
            CoordinationUnavailableError: Redis is down.
        """
        meta = "" if metadata is None else json.dumps(dict(metadata), sort_keys=True)
        with redis_errors(self._client, f"heartbeat group={group} member={member_id}"):
            epoch, joined = self._heartbeat(
                keys=self._keys(group), args=[member_id, max(1, round(ttl * 1000)), meta]
            )
        if joined:
            log.info("member joined group=%s member=%s epoch=%s", group, member_id, int(epoch))
        return Heartbeat(int(epoch), bool(joined))

    def leave(self, group: str, member_id: str) -> bool:
        """Leave ``group`` now (rather than after the TTL); False if the member was not in it."""
        with redis_errors(self._client, f"leave group={group} member={member_id}"):
            epoch, left = self._leave(keys=self._keys(group), args=[member_id])
        log.info("member left group=%s member=%s epoch=%s was_member=%s",
                 group, member_id, int(epoch), bool(left))
        return bool(left)

    def view(self, group: str) -> GroupView:
        """The live members of ``group`` and its epoch (expired members are removed first)."""
        with redis_errors(self._client, f"list group={group}"):
            epoch, ids, metas = self._view(keys=self._keys(group))
        members = tuple(
            Member(text(member_id), json.loads(meta) if meta else {})
            for member_id, meta in zip(ids, metas, strict=True)
        )
        return GroupView(group, int(epoch), tuple(sorted(members, key=lambda m: m.id)))

    def live_members(self, group: str) -> tuple[Member, ...]:
        """The live members of ``group``, sorted by id."""
        return self.view(group).members

    def _keys(self, group: str) -> list[str]:
        base = f"{self._ns}:members:{group}"
        return [base, f"{base}:meta", f"{base}:epoch"]


class MemberKeeper:
    """Keeps one member registered in a group from a background thread.

    Heartbeats every ``ttl / 3``; while Redis is down it logs and retries with backoff, and
    after Redis restarts empty the next heartbeat registers the member again (a new epoch).

    Args:
        membership: the :class:`Membership` to heartbeat through.
        group: the service group.
        member_id: unique per process.
        ttl: others consider this member dead this long after its last heartbeat.
        metadata: registered with the member.
        on_epoch: called from the keeper thread with each new epoch it sees.
    """

    def __init__(
        self,
        membership: Membership,
        group: str,
        member_id: str,
        ttl: float,
        metadata: Mapping[str, str] | None = None,
        on_epoch: Callable[[int], None] | None = None,
    ) -> None:
        self._membership = membership
        self.group = group
        self.member_id = member_id
        self._ttl = ttl
        self._metadata = dict(metadata or {})
        self._on_epoch = on_epoch
        self._epoch: int | None = None
        self._last_ok: float | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"member-{group}-{member_id}", daemon=True)

    @property
    def epoch(self) -> int | None:
        """The group epoch seen by the last successful heartbeat."""
        return self._epoch

    @property
    def last_heartbeat_age(self) -> float | None:
        """Seconds since the last successful heartbeat, None before the first."""
        return None if self._last_ok is None else time.monotonic() - self._last_ok

    def start(self) -> MemberKeeper:
        """Register now if Redis answers (otherwise keep trying in the background); returns self."""
        self._beat()
        self._thread.start()
        return self

    def stop(self, *, leave: bool = True) -> None:
        """Stop heartbeating and, unless told otherwise, leave the group at once."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=self._ttl + 5)
        if leave:
            try:
                self._membership.leave(self.group, self.member_id)
            except CoordinationError as exc:
                log.warning("leave failed group=%s member=%s error=%s", self.group, self.member_id, exc)

    def __enter__(self) -> MemberKeeper:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _run(self) -> None:
        interval = self._ttl / 3
        backoff = interval / 8
        wait = interval
        while not self._stop.wait(wait):
            if self._beat():
                backoff, wait = interval / 8, interval
            else:
                wait, backoff = backoff, min(backoff * 2, interval)

    def _beat(self) -> bool:
        try:
            beat = self._membership.heartbeat(self.group, self.member_id, self._ttl, self._metadata)
        except CoordinationError as exc:
            log.warning("heartbeat failed, retrying group=%s member=%s error=%s",
                        self.group, self.member_id, exc)
            return False
        self._last_ok = time.monotonic()
        if beat.epoch != self._epoch:
            self._epoch = beat.epoch
            if self._on_epoch is not None:
                try:
                    self._on_epoch(beat.epoch)
                except Exception:
                    log.exception("on_epoch callback failed group=%s member=%s", self.group, self.member_id)
        return True
