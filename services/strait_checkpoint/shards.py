"""The shards of one flow a checkpoint process serves, and the lease every write for a group is made under.

Shards join and leave only between two steps of the flow's checkpointer thread: a detached shard's
lease is never used after :meth:`HeldShards.detach` returned.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TypeVar

from strait.coord.assignment import ShardItem
from strait.coord.leases import LeaseKeeper, LeaseLostError

log = logging.getLogger(__name__)

DETACH_POLL_SECONDS = 0.1  # how often a detach waiting for its step looks whether the thread still runs

T = TypeVar("T")
Held = dict[str, tuple[ShardItem, LeaseKeeper]]


class HeldShards:
    """The held shards of one flow, the ones attached but not loaded yet, and the ones leaving.

    ``step_lock`` is held by the checkpointer through each step; ``on_dropped`` runs (in a step, or
    after the thread ended) once shards were dropped, to forget their groups' state.
    """

    def __init__(self, flow: str, wake: threading.Event, thread_alive: Callable[[], bool],
                 on_dropped: Callable[[], None]) -> None:
        self.flow = flow
        self._wake, self._thread_alive, self._on_dropped = wake, thread_alive, on_dropped
        self._held: Held = {}  # checkpoints loaded: served
        self._joining: Held = {}  # attached, checkpoints not loaded yet
        self._leaving: dict[str, threading.Event] = {}  # detached, set once no step uses the shard
        self._attached: set[str] = set()  # attached and not detached since, whatever their loading's state
        self._idle_since: float | None = None  # when the last attached shard was detached (monotonic)
        self._closed = False  # no shard attaches any more: the checkpointer ends
        self._lock = threading.Lock()  # guards _joining, _leaving, _attached, _idle_since and _closed
        self.step_lock = threading.Lock()  # held through a step: a detached shard is never used after

    def __len__(self) -> int:
        return len(self._held)

    def attached(self) -> int:
        """How many shards are attached and not detached since (loaded or not)."""
        with self._lock:
            return len(self._attached)

    def attach(self, shard: ShardItem, keeper: LeaseKeeper) -> bool:
        """Serve ``shard`` (its lease held by ``keeper``) from the next step on; False once closed."""
        with self._lock:
            if self._closed:
                return False
            self._joining[shard.name] = (shard, keeper)
            self._attached.add(shard.name)
            self._idle_since = None
        self._wake.set()
        return True

    def close_if_idle(self, seconds: float) -> bool:
        """Accept no shard any more if none was attached for ``seconds``; whether closed."""
        with self._lock:
            if not self._closed and self._idle_since is not None and time.monotonic() - self._idle_since >= seconds:
                self._closed = True
            return self._closed

    def detach(self, shard: ShardItem) -> None:
        """Stop serving ``shard``; returns once no step uses its lease any more.

        The thread drops the shard between two steps, with every other shard detached meanwhile: a
        process stopping detaches all its shards at once, and each waits for one step at most
        (taking the step lock instead, each would wait for its own turn, one step after another).
        """
        released = threading.Event()
        with self._lock:
            self._joining.pop(shard.name, None)
            self._leaving[shard.name] = released
            self._attached.discard(shard.name)
            if not self._attached:
                self._idle_since = time.monotonic()
        self._wake.set()
        while not released.wait(DETACH_POLL_SECONDS):
            if not self._thread_alive():  # the thread ended: no step runs any more
                with self.step_lock:
                    self.drop_leaving()

    def drop_leaving(self) -> None:
        """Stop serving the shards detached since the last call (between steps) and release their detach."""
        with self._lock:
            leaving, self._leaving = self._leaving, {}
            for name in leaving:
                self._joining.pop(name, None)  # put back by an admission that failed meanwhile
        if not leaving:
            return
        for name in sorted(leaving):
            if self._held.pop(name, None) is not None:
                log.info("flow=%s shard=%s detached shards_left=%d", self.flow, name, len(self._held))
        self._on_dropped()
        for released in leaving.values():
            released.set()

    def take_joining(self) -> Held:
        """The shards attached since the last call (to load, then :meth:`admit`)."""
        with self._lock:
            joining, self._joining = self._joining, {}
        return joining

    def put_back(self, joining: Held) -> None:
        """Shards whose loading failed: admitted at a later step."""
        with self._lock:
            self._joining = {**joining, **self._joining}

    def admit(self, joining: Held) -> None:
        """Serve the loaded shards."""
        self._held.update(joining)
        log.info("flow=%s shards attached=%s held=%d", self.flow, ",".join(sorted(joining)), len(self._held))

    def keeper_for(self, group: str) -> LeaseKeeper | None:
        """The lease of the held shard ``group`` falls in; None when this process does not hold it."""
        for shard, keeper in self._held.values():
            if shard.owns(group):
                return keeper
        return None

    def owns(self, group: str) -> bool:
        """Whether ``group`` falls in a shard held here."""
        return self.keeper_for(group) is not None

    def as_holder(self, group: str, doing: str, write: Callable[[LeaseKeeper], T]) -> T | None:
        """``write(keeper)`` under the lease of the group's shard; None when that lease is not held (any more)."""
        keeper = self.keeper_for(group)
        if keeper is None:
            return None
        try:
            return write(keeper)
        except LeaseLostError as exc:
            log.warning("flow=%s group=%s not %s, its shard's lease is lost: %s", self.flow, group, doing, exc)
            return None
