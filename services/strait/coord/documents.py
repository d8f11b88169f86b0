"""Versioned documents in Redis with change notification (the config store's storage).

A document ``<ns>:doc:<name>`` keeps its latest version number, a *generation* (the Redis server
time in µs when the document was first stored in this Redis's lifetime) and the id of the last
put; ``<ns>:doc:<name>:versions`` keeps the last ``keep`` bodies. Every put publishes
``<generation>:<version>`` on the channel ``<ns>:doc:<name>``.

Watchers subscribe for speed and poll as a fallback, and after every (re)subscription they read
what they missed, so a lost message or a Redis restart never loses a version. Redis without
persistence forgets documents when it restarts: the next version is stored under a new generation,
and watchers deliver it as new. A put can be given a floor (a version kept elsewhere) and a copy kept
elsewhere can be restored at its own version, so versions need not start again at 1
(:mod:`strait.config.durable`).
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

import redis

from strait.coord.redis_client import LUA_PRELUDE, CoordinationError, redis_errors, text

log = logging.getLogger(__name__)

DEFAULT_KEEP = 50
"""Versions kept per document."""

# KEYS: meta hash, versions hash. ARGV: body, put id, keep, channel, floor, exact, expected.
# exact = '': the next version above max(latest, floor). exact = N: version N, only if above latest.
# Either way only while the latest is still ``expected`` ('0': none; '': not checked).
_PUT = LUA_PRELUDE + """
local meta = redis.call('HMGET', KEYS[1], 'latest', 'gen', 'last_put')
local gen = meta[2] or INT(NOW_US)
if meta[3] and meta[3] == ARGV[2] then return {gen, meta[1]} end
local latest = tonumber(meta[1] or '0')
if ARGV[7] ~= '' and tonumber(ARGV[7]) ~= latest then return {gen, INT(latest), 'refused'} end
local version = math.max(latest, tonumber(ARGV[5])) + 1
if ARGV[6] ~= '' then
  version = tonumber(ARGV[6])
  if version <= latest then return {gen, INT(latest), 'refused'} end
end
redis.call('HSET', KEYS[2], INT(version), ARGV[1])
redis.call('HSET', KEYS[1], 'latest', INT(version), 'gen', gen, 'last_put', ARGV[2])
local expired = version - tonumber(ARGV[3])
for _, kept in ipairs(redis.call('HKEYS', KEYS[2])) do
  if tonumber(kept) <= expired then redis.call('HDEL', KEYS[2], kept) end
end
redis.call('PUBLISH', ARGV[4], gen .. ':' .. INT(version))
return {gen, INT(version)}
"""

# ARGV: version ('' for the latest). Returns {version, body} or {}.
_GET = """
local version = ARGV[1]
if version == '' then version = redis.call('HGET', KEYS[1], 'latest') end
if not version then return {} end
local body = redis.call('HGET', KEYS[2], version)
if not body then return {} end
return {version, body}
"""

# What a watcher missed. ARGV: generation it knows ('' = none yet), last version it delivered
# (-1 = deliver only the latest). A different generation means Redis lost the document: deliver
# every kept version of the new one. Returns {gen, v1, body1, v2, body2, ...} or {}.
_SINCE = """
local meta = redis.call('HMGET', KEYS[1], 'latest', 'gen')
if not meta[1] then return {} end
local latest, after = tonumber(meta[1]), tonumber(ARGV[2])
if ARGV[1] ~= '' and ARGV[1] ~= meta[2] then after = 0 end
if after < 0 then after = latest - 1 end
local out = {meta[2]}
for v = after + 1, latest do
  local body = redis.call('HGET', KEYS[2], tostring(v))
  if body then table.insert(out, tostring(v)); table.insert(out, body) end
end
return out
"""


class DocumentChangedError(CoordinationError):
    """A conditional store found another version than the one its change was made from."""


@dataclass(frozen=True)
class Document:
    """One version of a named document."""

    name: str
    version: int
    body: bytes


class VersionedDocuments:
    """Store, read and watch versioned documents.

    Args:
        client: from :func:`strait.coord.redis_client.connect`.
        namespace: key prefix shared by every strait process of one deployment.
        keep: versions kept per document; older ones are dropped.
    """

    def __init__(self, client: redis.Redis, namespace: str = "strait", *, keep: int = DEFAULT_KEEP) -> None:
        if keep < 1:
            raise ValueError(f"keep must be at least 1, got {keep}")
        self._client = client
        self._ns = namespace
        self._keep = keep
        self._put = client.register_script(_PUT)
        self._get = client.register_script(_GET)
        self._since = client.register_script(_SINCE)

    def put(self, name: str, body: bytes, *, floor: int = 0, expected: int | None = None) -> int:
        """Store ``body`` as the next version of ``name`` (1, 2, ...), notify watchers, return it.

        ``floor``: the new version is above it too (a version a durable copy already holds, so a
        Redis that lost its data never numbers a new version below an older one). ``expected``: store
        only while the latest version is still that one (a read-change-write that must not undo a
        change made in between). Safe to retry: a repeated request (same put id, after a lost reply)
        stores nothing new.

        Raises:
            CoordinationUnavailableError: Redis is down; nothing was stored.
            DocumentChangedError: the latest version is no longer ``expected``; nothing was stored.
        """
        check = "" if expected is None else str(expected)
        with redis_errors(self._client, f"store document {name}"):
            reply = self._put(keys=self._keys(name),
                              args=[body, uuid.uuid4().hex, self._keep, self.channel(name), floor, "", check])
        if len(reply) > 2:
            raise DocumentChangedError(f"document {name} is at version {int(reply[1])}, not {expected}: another "
                                       "change was stored in between; nothing was stored")
        version = int(reply[1])
        log.info("document stored name=%s version=%s bytes=%d", name, version, len(body))
        return version

    def restore(self, name: str, version: int, body: bytes, expected: int | None | str = "") -> bool:
        """Store ``body`` as exactly ``version`` of ``name`` (a copy kept elsewhere coming back into a
        Redis that lost it) if that is above the latest and, when ``expected`` is given (None: nothing
        stored), the latest is still that; False when Redis refused."""
        check = "" if expected == "" else str(expected or 0)
        with redis_errors(self._client, f"restore document {name}"):
            reply = self._put(keys=self._keys(name),
                              args=[body, uuid.uuid4().hex, self._keep, self.channel(name), 0, version, check])
        restored = len(reply) < 3
        if restored:
            log.info("document restored name=%s version=%d bytes=%d", name, version, len(body))
        return restored

    def get(self, name: str, version: int | None = None) -> Document | None:
        """A version of ``name`` (the latest when None), or None if absent or no longer kept."""
        with redis_errors(self._client, f"read document {name}"):
            reply = self._get(keys=self._keys(name), args=["" if version is None else version])
        if not reply:
            return None
        return Document(name, int(reply[0]), bytes(reply[1]))

    def watch(
        self,
        name: str,
        on_change: Callable[[Document], None],
        poll_interval: float = 5.0,
        *,
        after_version: int | None = None,
    ) -> Watcher:
        """Call ``on_change`` from a background thread once per new version of ``name``, in order.

        Args:
            poll_interval: seconds between reads that catch anything pub/sub missed.
            after_version: deliver every kept version above this one first; by default the
                current latest version (if any) is delivered first, so a reader that called
                :meth:`get` before watching misses nothing (it may see that version twice).
        """
        return Watcher(self, name, on_change, poll_interval, after_version).start()

    def channel(self, name: str) -> str:
        """The pub/sub channel announcing new versions of ``name``."""
        return f"{self._ns}:doc:{name}"

    def _missed(self, name: str, generation: str, after: int) -> tuple[str | None, list[Document]]:
        """The generation (None if the document does not exist) and the versions after ``after``."""
        with redis_errors(self._client, f"read document {name}"):
            reply = self._since(keys=self._keys(name), args=[generation, after])
        if not reply:
            return None, []
        pairs = reply[1:]
        documents = [Document(name, int(pairs[i]), bytes(pairs[i + 1])) for i in range(0, len(pairs), 2)]
        return text(reply[0]), documents

    def _pubsub(self) -> redis.client.PubSub:
        return self._client.pubsub(ignore_subscribe_messages=False)

    def _keys(self, name: str) -> list[str]:
        base = f"{self._ns}:doc:{name}"
        return [base, f"{base}:versions"]


class Watcher:
    """A background thread delivering new versions of one document; see :meth:`VersionedDocuments.watch`.

    Redis failures are logged and retried with backoff (up to ``poll_interval``); the watcher
    catches up as soon as Redis answers again.
    """

    def __init__(
        self,
        documents: VersionedDocuments,
        name: str,
        on_change: Callable[[Document], None],
        poll_interval: float,
        after_version: int | None,
    ) -> None:
        self._documents = documents
        self.name = name
        self._on_change = on_change
        self._poll_interval = poll_interval
        self._generation = ""
        self._last = -1 if after_version is None else after_version
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._pubsub: redis.client.PubSub | None = None
        self._thread = threading.Thread(target=self._run, name=f"doc-watcher-{name}", daemon=True)

    @property
    def last_version(self) -> int | None:
        """The last version delivered, None before the first."""
        return self._last if self._last > 0 else None

    def start(self) -> Watcher:
        """Start the thread; returns self."""
        self._thread.start()
        return self

    def wait_ready(self, timeout: float | None = None) -> bool:
        """Wait until the watcher is subscribed and has read the current state; False on timeout."""
        return self._ready.wait(timeout)

    def stop(self) -> None:
        """Stop watching and wait for the thread (a running ``on_change`` finishes first)."""
        self._stop.set()
        self._thread.join(timeout=10)
        self._close()

    def __enter__(self) -> Watcher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _run(self) -> None:
        backoff = 0.1
        while not self._stop.is_set():
            try:
                pubsub = self._subscribe()
                self._catch_up()
                self._ready.set()
                backoff = 0.1
                self._listen(pubsub)
            except Exception as exc:  # the thread must outlive any failure; it logs and retries
                self._close()
                expected = isinstance(exc, CoordinationError | redis.RedisError)
                log.warning("document watch interrupted, retrying name=%s retry_in=%.1fs error=%r",
                            self.name, backoff, exc, exc_info=not expected)
                self._stop.wait(backoff)
                backoff = min(backoff * 2, max(self._poll_interval, 0.1))

    def _subscribe(self) -> redis.client.PubSub:
        self._pubsub = pubsub = self._documents._pubsub()
        pubsub.subscribe(self._documents.channel(self.name))
        deadline = time.monotonic() + 5.0
        while time.monotonic() < deadline:
            message = pubsub.get_message(timeout=0.5)
            if message and message["type"] == "subscribe":
                return pubsub
        raise CoordinationError(f"no subscription confirmation for {self._documents.channel(self.name)}")

    def _listen(self, pubsub: redis.client.PubSub) -> None:
        next_poll = time.monotonic() + self._poll_interval
        while not self._stop.is_set():
            message = pubsub.get_message(timeout=min(0.5, max(0.0, next_poll - time.monotonic())))
            # A later "subscribe" means redis-py reconnected and resubscribed on its own: the
            # messages of the gap are lost, so read what was missed like after any notification.
            if (message is not None and message["type"] in ("message", "subscribe")) or (
                time.monotonic() >= next_poll
            ):
                self._catch_up()
                next_poll = time.monotonic() + self._poll_interval

    def _catch_up(self) -> None:
        generation, documents = self._documents._missed(self.name, self._generation, self._last)
        if generation is None:
            # Absent: every version stored from now on is new to us, the first one included.
            self._last = max(self._last, 0)
            return
        if self._generation and generation != self._generation:
            log.warning("document generation changed (Redis lost its data?) name=%s old=%s new=%s",
                        self.name, self._generation, generation)
        for document in documents:
            if self._stop.is_set():
                return
            if generation == self._generation and document.version != self._last + 1 and self._last > 0:
                log.warning("document versions no longer kept were skipped name=%s from=%d to=%d",
                            self.name, self._last + 1, document.version - 1)
            self._deliver(document)
            self._generation, self._last = generation, document.version
        if not documents:
            self._generation = generation

    def _deliver(self, document: Document) -> None:
        log.info("document changed name=%s version=%d", document.name, document.version)
        try:
            self._on_change(document)
        except Exception:
            log.exception("document on_change failed name=%s version=%d", document.name, document.version)

    def _close(self) -> None:
        if self._pubsub is not None:
            try:
                self._pubsub.close()
            except (redis.RedisError, OSError):
                pass
            self._pubsub = None
