"""Which restart of a flow each running part serves, for `strait flow restart --wait`.

Every running part of a flow (the replicator's query, each configsync, heartbeat and checkpoint
work item under its lease name) keeps a short-lived key saying the ``restarted_at`` mark of the
configuration it started its work under ("" before any restart). The key expires when the part
stops refreshing it, so only parts that run now are seen; a part has restarted for a request once
its key holds that request's mark.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping

import redis

from strait.coord.redis_client import redis_errors, text

log = logging.getLogger(__name__)

MARK_TTL_SECONDS = 15.0
REFRESH_SECONDS = 5.0  # how often a running part refreshes its mark (well within the TTL)


def replicator_part(flow: str) -> str:
    """The part name of the replicator's query of ``flow`` (supervised parts use their lease names)."""
    return f"replicator:{flow}"


def _key(namespace: str, part: str) -> str:
    return f"{namespace}:restart-mark:{part}"


def publish_marks(client: redis.Redis, namespace: str, marks: Mapping[str, str]) -> None:
    """Say which restart mark each of these running parts serves (refreshes their expiry)."""
    if not marks:
        return
    with redis_errors(client, f"publish {len(marks)} restart marks"):
        pipe = client.pipeline(transaction=False)
        for part, mark in marks.items():
            pipe.set(_key(namespace, part), mark, px=int(MARK_TTL_SECONDS * 1000))
        pipe.execute()


def read_marks(client: redis.Redis, namespace: str, parts: Iterable[str]) -> dict[str, str]:
    """The restart mark of each of these parts that runs now (parts not running are left out)."""
    parts = list(parts)
    with redis_errors(client, f"read {len(parts)} restart marks"):
        values = client.mget([_key(namespace, part) for part in parts]) if parts else []
    return {part: text(value) for part, value in zip(parts, values, strict=True) if value is not None}


class MarkPublisher:
    """A process's restart marks, refreshed every :data:`REFRESH_SECONDS` (at once after :meth:`soon`).

    Trouble publishing is only logged: nothing but `strait flow restart --wait` reads the marks.
    """

    def __init__(self, client: redis.Redis, namespace: str) -> None:
        self.client, self.namespace = client, namespace
        self._due = 0.0

    def soon(self) -> None:
        """Publish at the next :meth:`refresh` (a part started or restarted)."""
        self._due = 0.0

    def refresh(self, marks: Callable[[], Mapping[str, str]]) -> None:
        """Publish ``marks()`` (part -> the restart mark it serves) when due."""
        now = time.monotonic()
        if now < self._due:
            return
        self._due = now + REFRESH_SECONDS
        try:
            publish_marks(self.client, self.namespace, marks())
        except Exception as exc:  # noqa: BLE001 - a mark is never a reason to disturb the work
            log.debug("restart marks not published namespace=%s: %s", self.namespace, exc)
