"""Versioned documents and their watchers on a real Redis: order, lost messages, restarts."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest
import redis
from strait.coord.documents import Document, VersionedDocuments
from strait.coord.redis_client import CoordinationUnavailableError, connect
from strait_lab.redis import RedisServer


class Seen:
    """What a watcher delivered, thread-safe."""

    def __init__(self) -> None:
        self.documents: list[Document] = []
        self._changed = threading.Condition()

    def __call__(self, document: Document) -> None:
        with self._changed:
            self.documents.append(document)
            self._changed.notify_all()

    def wait_for(self, condition: Callable[[list[Document]], bool], timeout: float = 5.0) -> None:
        with self._changed:
            if not self._changed.wait_for(lambda: condition(self.documents), timeout):
                raise AssertionError(f"watcher delivered {[(d.version, d.body) for d in self.documents]}")

    @property
    def bodies(self) -> list[bytes]:
        return [document.body for document in self.documents]


class SilentDocuments(VersionedDocuments):
    """A writer whose notifications go nowhere, as if every pub/sub message were lost."""

    def channel(self, name: str) -> str:
        return f"nowhere:{name}"


@pytest.fixture
def docs(redis_url: str) -> VersionedDocuments:
    return VersionedDocuments(connect(redis_url))


def test_put_numbers_versions_and_get_reads_any_kept_one(redis_url: str) -> None:
    docs = VersionedDocuments(connect(redis_url), keep=3)
    assert docs.get("config") is None
    assert [docs.put("config", f"v{i}".encode()) for i in range(1, 6)] == [1, 2, 3, 4, 5]
    assert docs.get("config") == Document("config", 5, b"v5")
    assert docs.get("config", 3) == Document("config", 3, b"v3")
    assert docs.get("config", 2) is None, "only the last 3 versions are kept"
    assert docs.get("config", 9) is None
    assert docs.get("other") is None


def test_bodies_are_bytes_exactly(docs: VersionedDocuments) -> None:
    body = bytes(range(256)) + "ünïcode: ✓".encode()
    docs.put("blob", body)
    assert docs.get("blob").body == body  # type: ignore[union-attr]


def test_watcher_delivers_the_current_version_then_every_new_one_in_order(docs: VersionedDocuments) -> None:
    docs.put("config", b"before-1")
    docs.put("config", b"before-2")
    seen = Seen()
    with docs.watch("config", seen, poll_interval=30):
        seen.wait_for(lambda d: len(d) == 1)
        for i in range(1, 41):
            docs.put("config", f"new-{i}".encode())
        seen.wait_for(lambda d: len(d) == 41)
    assert [d.version for d in seen.documents] == list(range(2, 43))
    assert seen.bodies == [b"before-2"] + [f"new-{i}".encode() for i in range(1, 41)]


def test_watcher_from_a_known_version_and_on_a_missing_document(docs: VersionedDocuments) -> None:
    for i in range(1, 4):
        docs.put("config", f"v{i}".encode())
    seen, fresh = Seen(), Seen()
    with docs.watch("config", seen, poll_interval=30, after_version=1), docs.watch("absent", fresh, 30) as w:
        seen.wait_for(lambda d: len(d) == 2)
        assert w.wait_ready(5)
        for i in range(1, 4):
            docs.put("absent", f"a{i}".encode())
        fresh.wait_for(lambda d: len(d) == 3)
    assert seen.bodies == [b"v2", b"v3"]
    assert fresh.bodies == [b"a1", b"a2", b"a3"], "the first version of a new document counts too"


def test_watcher_survives_a_failing_callback(docs: VersionedDocuments) -> None:
    seen = Seen()

    def flaky(document: Document) -> None:
        seen(document)
        if document.version == 1:
            raise RuntimeError("boom")

    with docs.watch("config", flaky, poll_interval=30) as watcher:
        assert watcher.wait_ready(5)
        docs.put("config", b"1")
        docs.put("config", b"2")
        seen.wait_for(lambda d: len(d) == 2)


def test_lost_notifications_are_caught_up_by_polling(redis_url: str, docs: VersionedDocuments) -> None:
    silent = SilentDocuments(connect(redis_url))
    seen = Seen()
    with docs.watch("config", seen, poll_interval=0.3) as watcher:
        assert watcher.wait_ready(5)
        silent.put("config", b"quiet-1")
        silent.put("config", b"quiet-2")
        seen.wait_for(lambda d: len(d) == 2, timeout=3)
    assert seen.bodies == [b"quiet-1", b"quiet-2"]


def test_killed_subscription_reconnects_and_catches_up(redis_url: str, docs: VersionedDocuments) -> None:
    seen = Seen()
    raw = redis.Redis.from_url(redis_url)
    with docs.watch("config", seen, poll_interval=60) as watcher:
        assert watcher.wait_ready(5)
        docs.put("config", b"1")
        seen.wait_for(lambda d: len(d) == 1)
        raw.client_kill_filter(_type="pubsub")
        docs.put("config", b"2")  # published while nobody listens
        docs.put("config", b"3")
        seen.wait_for(lambda d: len(d) == 3, timeout=5)  # far sooner than the 60 s poll
    assert seen.bodies == [b"1", b"2", b"3"]


def test_watcher_sees_every_version_across_a_redis_restart(
    redis_server_factory: Callable[..., RedisServer],
) -> None:
    server = redis_server_factory()
    docs = VersionedDocuments(connect(server.url))
    seen = Seen()
    with docs.watch("config", seen, poll_interval=0.5) as watcher:
        assert watcher.wait_ready(5)
        docs.put("config", b"old-1")
        docs.put("config", b"old-2")
        seen.wait_for(lambda d: len(d) == 2)
        server.stop()
        with pytest.raises(CoordinationUnavailableError, match=f"127.0.0.1:{server.port}"):
            docs.put("config", b"lost")
        time.sleep(0.5)  # the watcher retries meanwhile
        server.start()  # empty: the document is gone
        assert docs.get("config") is None
        docs.put("config", b"new-1")
        docs.put("config", b"new-2")
        seen.wait_for(lambda d: len(d) == 4, timeout=10)
    assert [(d.version, d.body) for d in seen.documents] == [
        (1, b"old-1"), (2, b"old-2"), (1, b"new-1"), (2, b"new-2"),
    ]


def test_a_floor_numbers_above_a_version_kept_elsewhere_and_old_versions_expire(redis_url: str) -> None:
    docs = VersionedDocuments(connect(redis_url), keep=2)
    assert docs.put("cfg", b"one") == 1
    assert docs.put("cfg", b"seven", floor=6) == 7
    assert docs.put("cfg", b"eight", floor=3) == 8  # a floor below the latest changes nothing
    assert docs.get("cfg", 1) is None  # more than `keep` below the latest, jump or not
    assert [docs.get("cfg", v).body for v in (7, 8)] == [b"seven", b"eight"]  # type: ignore[union-attr]


def test_restore_stores_an_exact_version_only_above_the_latest_and_over_what_was_read(redis_url: str) -> None:
    docs = VersionedDocuments(connect(redis_url))
    assert docs.restore("cfg", 5, b"five", expected=None)
    assert docs.get("cfg") == Document("cfg", 5, b"five")
    assert not docs.restore("cfg", 5, b"again")  # not above the latest
    assert not docs.restore("cfg", 9, b"nine", expected=4)  # the latest is no longer what the caller read
    assert docs.restore("cfg", 9, b"nine", expected=5)
    assert docs.put("cfg", b"next") == 10
