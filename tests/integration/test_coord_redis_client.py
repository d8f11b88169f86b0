"""Connecting to the coordination Redis: clear errors that never show the password."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from strait.coord.documents import VersionedDocuments
from strait.coord.redis_client import CoordinationUnavailableError, connect
from strait_lab.ports import free_port
from strait_lab.redis import RedisServer


def test_connect_answers_with_short_timeouts(redis_url: str) -> None:
    client = connect(redis_url)
    assert client.ping()
    assert client.connection_pool.connection_kwargs["socket_timeout"] == 2.0


def test_stopped_redis_is_reported_by_url_without_password(
    redis_server_factory: Callable[..., RedisServer],
) -> None:
    server = redis_server_factory(password="s3cret-pw")
    docs = VersionedDocuments(connect(server.url))
    server.stop()
    try:
        with pytest.raises(CoordinationUnavailableError) as caught:
            docs.get("config")
        assert f"redis://127.0.0.1:{server.port}/0" in str(caught.value)
        assert "s3cret" not in str(caught.value)
    finally:
        server.start()


def test_nothing_listening_fails_at_connect() -> None:
    port = free_port()
    with pytest.raises(CoordinationUnavailableError, match=f"127.0.0.1:{port}.*is unavailable") as caught:
        connect(f"redis://:hunter2@127.0.0.1:{port}/0")
    assert "hunter2" not in str(caught.value)


def test_wrong_password_is_reported_without_it(redis_server_factory: Callable[..., RedisServer]) -> None:
    server = redis_server_factory(password="right-one")
    with pytest.raises(CoordinationUnavailableError) as caught:
        connect(f"redis://:wrong-one@127.0.0.1:{server.port}/0")
    assert "wrong-one" not in str(caught.value) and "right-one" not in str(caught.value)
