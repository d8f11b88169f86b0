"""Leases with fencing tokens: at most one holder acts on a named piece of work.

A lease is a Redis hash ``<ns>:lease:<name>`` (holder, token) with a TTL. Every grant draws a
fencing token from ``<ns>:lease:<name>:fence``; all checks compare holder *and* token in Lua.

Guarantees (single Redis instance):

* **Token monotonicity.** Tokens of one lease name strictly increase across all holders:
  ``token = max(previous + 1, Redis server clock in µs)``. While Redis keeps its data the counter
  alone guarantees it. As a grant takes far longer than 1 µs, each token is in practice its grant
  time, so after Redis restarts empty (no persistence) new tokens are still above all earlier
  ones unless the Redis host's clock stepped back by more than the downtime plus the restart
  grace below. A repeated acquire by the current holder (e.g. a retry) returns its same token.
* **Local deadline.** A holder measures ``t0`` on its monotonic clock *before* sending acquire or
  renew; its lease is locally valid until ``t0 + ttl - safety_margin`` (margin: 10 % of the TTL,
  at least 20 ms). Redis starts the TTL after receiving the command, so the local deadline falls
  at least ``safety_margin`` before Redis could expire the key, as long as the two clocks run at
  rates within ``safety_margin / ttl`` of each other. A process that was paused (SIGSTOP, GC,
  swap) past its deadline fails :meth:`Lease.ensure_valid` on resume before talking to Redis.
* **Restart grace.** When the fence counter is gone (Redis lost its data) a lease is granted
  only once Redis has been up for the lease's TTL, so a holder from before the restart has
  passed its local deadline by then. Holders of one lease name must use the same TTL for this.
* **Fenced writes.** :meth:`Leases.fenced_set` applies only while Redis shows the caller's holder
  and token; downstream systems can also reject writes carrying a token lower than one seen.

The window between a successful ``ensure_valid`` and the action itself is the caller's: actions
with outside effects should carry the token so that their target can fence them.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import threading
import time
from collections.abc import Callable, Iterable
import redis

from strait.coord.redis_client import LUA_PRELUDE, CoordinationError, redis_errors, text

log = logging.getLogger(__name__)

_ACQUIRE = LUA_PRELUDE + """
local holder, ttl_ms, grace_s = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local cur = redis.call('HMGET', KEYS[1], 'holder', 'token')
if cur[1] then
  if cur[1] ~= holder then return {'busy', cur[1], cur[2]} end
  redis.call('PEXPIRE', KEYS[1], ttl_ms)
  return {'granted', cur[2]}
end
if not redis.call('GET', KEYS[2]) then
  local up = tonumber(string.match(redis.call('INFO', 'server'), 'uptime_in_seconds:(%d+)'))
  if up < grace_s then return {'grace', tostring(grace_s - up)} end
end
local token = BUMP(KEYS[2])
redis.call('HSET', KEYS[1], 'holder', holder, 'token', token)
redis.call('PEXPIRE', KEYS[1], ttl_ms)
return {'granted', token}
"""

_HELD = """
local cur = redis.call('HMGET', KEYS[1], 'holder', 'token')
local held = cur[1] == ARGV[1] and cur[2] == ARGV[2]
"""

_RENEW = _HELD + """
if not held then return {0, cur[1] or '', cur[2] or ''} end
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[3]))
return {1, '', ''}
"""

_RELEASE = _HELD + """
if not held then return 0 end
redis.call('DEL', KEYS[1])
return 1
"""

_FENCED_SET = _HELD + """
if not held then return {0, cur[1] or '', cur[2] or ''} end
if ARGV[4] ~= '' then
  redis.call('SET', KEYS[2], ARGV[3], 'PX', tonumber(ARGV[4]))
else
  redis.call('SET', KEYS[2], ARGV[3])
end
return {1, '', ''}
"""


class LeaseLostError(CoordinationError):
    """This holder no longer holds the lease (or cannot prove it does) and must not act on it."""


def default_safety_margin(ttl: float) -> float:
    """The part of a TTL a holder gives up to clock drift and pauses: 10 %, at least 20 ms."""
    return max(0.02, 0.1 * ttl)


@dataclasses.dataclass(frozen=True)
class Lease:
    """A lease as granted to one holder.

    Attributes:
        name: what the lease protects (e.g. ``checkpoint:A->B``).
        holder: the holder's id, unique per process.
        token: fencing token, strictly increasing per lease name.
        expires_at_monotonic: local deadline on ``time.monotonic()``; past it the holder must stop.
        ttl: seconds Redis keeps the lease after each grant or renewal.
    """

    name: str
    holder: str
    token: int
    expires_at_monotonic: float
    ttl: float

    def remaining(self) -> float:
        """Seconds left before the local deadline (negative once passed)."""
        return self.expires_at_monotonic - time.monotonic()

    def is_valid(self) -> bool:
        """Whether the local deadline is still ahead (no Redis round trip)."""
        return self.remaining() > 0

    def ensure_valid(self) -> None:
        """Raise :class:`LeaseLostError` when the local deadline has passed; call before acting."""
        left = self.remaining()
        if left <= 0:
            raise LeaseLostError(
                f"lease {self.name} holder={self.holder} token={self.token} passed its local "
                f"deadline {-left:.3f}s ago; stop acting and acquire it again"
            )


@dataclasses.dataclass(frozen=True)
class LeaseOwner:
    """Who holds a lease according to Redis."""

    holder: str
    token: int
    ttl_remaining: float


class Leases:
    """Acquire, renew, release and check leases, and write under a lease's fence.

    Args:
        client: from :func:`strait.coord.redis_client.connect`.
        namespace: key prefix shared by every strait process of one deployment.
        safety_margin: seconds cut from each TTL for the local deadline, as a function of the TTL.
    """

    def __init__(
        self,
        client: redis.Redis,
        namespace: str = "strait",
        safety_margin: Callable[[float], float] = default_safety_margin,
    ) -> None:
        self._client = client
        self._ns = namespace
        self._margin = safety_margin
        self._acquire = client.register_script(_ACQUIRE)
        self._renew = client.register_script(_RENEW)
        self._release = client.register_script(_RELEASE)
        self._fenced_set = client.register_script(_FENCED_SET)

    def acquire(self, name: str, holder: str, ttl: float, *, wait: float = 0.0) -> Lease | None:
        """Take the lease if it is free (or already ours); None if another holder has it.

        Args:
            wait: keep trying for up to this many seconds before giving up.

        Raises:
            CoordinationUnavailableError: Redis is down; no new lease while it is.
        """
        margin = self._checked_margin(ttl)
        give_up = time.monotonic() + wait
        while True:
            started = time.monotonic()
            with redis_errors(self._client, f"acquire lease {name}"):
                reply = self._acquire(
                    keys=[self._key(name), self._key(name) + ":fence"],
                    args=[holder, _ms(ttl), math.ceil(ttl)],
                )
            status, *rest = [text(part) for part in reply]
            if status == "granted":
                lease = Lease(name, holder, int(rest[0]), started + ttl - margin, ttl)
                log.info("lease acquired name=%s holder=%s token=%s ttl=%s", name, holder, lease.token, ttl)
                return lease
            log.debug("lease not granted name=%s holder=%s reason=%s detail=%s", name, holder, status, rest)
            if time.monotonic() >= give_up:
                return None
            time.sleep(min(max(ttl / 10, 0.05), max(0.0, give_up - time.monotonic())))

    def renew(self, lease: Lease) -> Lease:
        """Extend the lease by its TTL if Redis still shows this holder and token.

        Raises:
            LeaseLostError: another holder or token holds it, or it expired in Redis.
            CoordinationUnavailableError: Redis is down; the lease stays valid locally until its deadline.
        """
        started = time.monotonic()
        with redis_errors(self._client, f"renew lease {lease.name}"):
            ok, holder, token = self._renew(
                keys=[self._key(lease.name)], args=[lease.holder, lease.token, _ms(lease.ttl)]
            )
        if not ok:
            raise self._lost(lease, text(holder), text(token))
        deadline = started + lease.ttl - self._margin(lease.ttl)
        return dataclasses.replace(lease, expires_at_monotonic=deadline)

    def release(self, lease: Lease) -> bool:
        """Give the lease up if still held by this holder and token; False if it was not."""
        with redis_errors(self._client, f"release lease {lease.name}"):
            released = bool(self._release(keys=[self._key(lease.name)], args=[lease.holder, lease.token]))
        log.info("lease released name=%s holder=%s token=%s held=%s",
                 lease.name, lease.holder, lease.token, released)
        return released

    def owner(self, name: str) -> LeaseOwner | None:
        """The current holder according to Redis, or None when the lease is free."""
        with redis_errors(self._client, f"read lease {name}"):
            pipe = self._client.pipeline(transaction=True)
            pipe.hmget(self._key(name), "holder", "token")
            pipe.pttl(self._key(name))
            (holder, token), pttl = pipe.execute()
        if holder is None or token is None:
            return None
        return LeaseOwner(text(holder), int(token), max(pttl, 0) / 1000)

    def holders(self, names: Iterable[str]) -> dict[str, str]:
        """Who holds each named lease now (name -> holder), in one round trip; free ones are left out."""
        names = list(names)
        with redis_errors(self._client, f"read {len(names)} leases"):
            pipe = self._client.pipeline(transaction=False)
            for name in names:
                pipe.hget(self._key(name), "holder")
            replies = pipe.execute()
        return {name: text(holder) for name, holder in zip(names, replies, strict=True) if holder is not None}

    def check(self, lease: Lease) -> None:
        """Raise :class:`LeaseLostError` unless the local deadline is ahead and Redis agrees."""
        lease.ensure_valid()
        current = self.owner(lease.name)
        if current is None or (current.holder, current.token) != (lease.holder, lease.token):
            raise self._lost(lease, current.holder if current else "", str(current.token) if current else "")

    def fenced_set(self, lease: Lease, key: str, value: str | bytes, *, ttl: float | None = None) -> None:
        """SET ``key`` to ``value`` only while this lease (holder and token) is current.

        Raises:
            LeaseLostError: the local deadline passed, or Redis shows another holder or token;
                nothing was written.
        """
        lease.ensure_valid()
        with redis_errors(self._client, f"fenced write to {key} under lease {lease.name}"):
            ok, holder, token = self._fenced_set(
                keys=[self._key(lease.name), key],
                args=[lease.holder, lease.token, value, "" if ttl is None else _ms(ttl)],
            )
        if not ok:
            raise self._lost(lease, text(holder), text(token))

    def _key(self, name: str) -> str:
        return f"{self._ns}:lease:{name}"

    def _checked_margin(self, ttl: float) -> float:
        margin = self._margin(ttl)
        if ttl < 0.1 or not 0 <= margin < ttl / 2:
            raise ValueError(f"lease ttl={ttl} must be >= 0.1 s and its safety margin ({margin}) below ttl/2")
        return margin

    @staticmethod
    def _lost(lease: Lease, holder: str, token: str) -> LeaseLostError:
        now = f"holder={holder} token={token}" if holder else "nobody (expired)"
        return LeaseLostError(
            f"lease {lease.name} is no longer held by holder={lease.holder} token={lease.token}; "
            f"Redis shows {now}"
        )


class LeaseKeeper:
    """Renews a held lease in a background thread every ``ttl / 3`` and flags its loss.

    While Redis is unreachable the keeper retries with backoff and the lease stays usable until
    its local deadline; then the keeper declares it lost. Loss is final for this lease object:
    acquire again (a new grant gets a new token).

    Args:
        leases: the :class:`Leases` that granted ``lease``.
        lease: the lease to keep.
        on_lost: called once from the keeper thread with the lease and the reason.
    """

    def __init__(
        self, leases: Leases, lease: Lease, *, on_lost: Callable[[Lease, str], None] | None = None
    ) -> None:
        self._leases = leases
        self._lease = lease
        self._on_lost = on_lost
        self._lost_reason: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"lease-keeper-{lease.name}", daemon=True)

    def start(self) -> LeaseKeeper:
        """Start renewing; returns self."""
        self._thread.start()
        return self

    @property
    def lease(self) -> Lease:
        """The lease with its latest local deadline."""
        return self._lease

    @property
    def lost(self) -> bool:
        """Whether the keeper has declared the lease lost."""
        return self._lost_reason is not None

    def ensure_valid(self) -> Lease:
        """The current lease, or :class:`LeaseLostError` if it is lost or past its local deadline."""
        if self._lost_reason is not None:
            raise LeaseLostError(self._lost_reason)
        lease = self._lease
        lease.ensure_valid()
        return lease

    def stop(self, *, release: bool = True) -> None:
        """Stop renewing and, unless lost or told otherwise, release the lease."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=self._lease.ttl + 5)
        if release and not self.lost:
            try:
                self._leases.release(self._lease)
            except CoordinationError as exc:
                log.warning("lease release failed name=%s error=%s", self._lease.name, exc)

    def __enter__(self) -> LeaseKeeper:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _run(self) -> None:
        interval = self._lease.ttl / 3
        backoff = interval / 8
        wait = interval
        while not self._stop.wait(wait):
            if not self._lease.is_valid():
                self._mark_lost(
                    f"lease {self._lease.name} passed its local deadline before a renewal succeeded"
                )
                return
            try:
                self._lease = self._leases.renew(self._lease)
            except LeaseLostError as exc:
                self._mark_lost(str(exc))
                return
            except CoordinationError as exc:
                wait = min(backoff, max(0.01, self._lease.remaining()))
                backoff = min(backoff * 2, interval)
                log.warning("lease renewal failed, retrying name=%s retry_in=%.2fs error=%s",
                            self._lease.name, wait, exc)
                continue
            backoff = interval / 8
            wait = interval

    def _mark_lost(self, reason: str) -> None:
        self._lost_reason = reason
        log.warning("lease lost name=%s holder=%s token=%s reason=%s",
                    self._lease.name, self._lease.holder, self._lease.token, reason)
        if self._on_lost is not None:
            try:
                self._on_lost(self._lease, reason)
            except Exception:
                log.exception("lease on_lost callback failed name=%s", self._lease.name)


def _ms(seconds: float) -> int:
    return max(1, round(seconds * 1000))

