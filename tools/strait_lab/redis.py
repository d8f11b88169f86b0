"""A real redis-server from the OS packages, on loopback, with optional password."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import redis

from strait_lab import deps
from strait_lab.ports import claim_port, free_port
from strait_lab.process import ManagedProcess

log = logging.getLogger(__name__)


class RedisServer:
    """A redis-server process of the lab.

    Args:
        workdir: folder for its log and, when persistent, its append-only file.
        port: fixed port, or None for a free one.
        password: require this password (``requirepass``) when set.
        persistent: keep data across restarts in an append-only file, fsynced every second, as the
            compose lab's Redis does; otherwise every start is empty.
    """

    def __init__(self, workdir: Path, port: int | None = None, password: str | None = None,
                 persistent: bool = False) -> None:
        self.workdir = workdir
        self.port = claim_port(port, "Redis") if port is not None else free_port()
        self.password = password
        self.persistent = persistent
        self.process: ManagedProcess | None = None

    @property
    def url(self) -> str:
        """redis:// URL, with the password when one is set."""
        auth = f":{self.password}@" if self.password else ""
        return f"redis://{auth}127.0.0.1:{self.port}/0"

    def client(self) -> redis.Redis:
        """A client for this server."""
        return redis.Redis.from_url(self.url, socket_timeout=5)

    def start(self, timeout: float = 30.0, empty: bool = False) -> None:
        """Start redis-server and wait until it answers PING; ``empty``: its kept data is deleted first
        (a flushed instance, a new endpoint)."""
        binary = deps.ensure_binary("redis-server")
        data = self.workdir / "data"
        if empty:
            shutil.rmtree(data, ignore_errors=True)
        data.mkdir(parents=True, exist_ok=True)
        argv = [
            binary, "--bind", "127.0.0.1", "--port", str(self.port), "--dir", str(data),
            "--save", "", "--appendonly", "yes" if self.persistent else "no", "--appendfsync", "everysec",
            "--daemonize", "no", "--protected-mode", "no",
        ]
        if self.password:
            argv += ["--requirepass", self.password]
        self.process = ManagedProcess("Redis", argv, self.workdir / "redis.log")
        self.process.start()
        client = self.client()
        self.process.wait_until(lambda: bool(client.ping()), timeout, "PING")
        log.info("redis ready url=redis://127.0.0.1:%s", self.port)

    def stop(self) -> None:
        """Stop redis-server."""
        if self.process:
            self.process.stop()

    def restart(self, timeout: float = 30.0, empty: bool = False) -> None:
        """Stop and start again on the same port (with its data if persistent and not ``empty``)."""
        self.stop()
        self.start(timeout, empty=empty)

    def pids(self) -> list[int]:
        """The running server's pid, if any."""
        return [self.process.pid] if self.process and self.process.alive() and self.process.pid else []
