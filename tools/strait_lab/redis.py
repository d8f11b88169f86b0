"""A real redis-server from the OS packages, on loopback, with optional password."""

from __future__ import annotations

import logging
from pathlib import Path

import redis

from strait_lab import deps
from strait_lab.ports import claim_port, free_port
from strait_lab.process import ManagedProcess

log = logging.getLogger(__name__)


class RedisServer:
    """A redis-server process of the lab.

    Args:
        workdir: folder for its log (no persistence: the lab's Redis starts empty).
        port: fixed port, or None for a free one.
        password: require this password (``requirepass``) when set.
    """

    def __init__(self, workdir: Path, port: int | None = None, password: str | None = None) -> None:
        self.workdir = workdir
        self.port = claim_port(port, "Redis") if port is not None else free_port()
        self.password = password
        self.process: ManagedProcess | None = None

    @property
    def url(self) -> str:
        """redis:// URL, with the password when one is set."""
        auth = f":{self.password}@" if self.password else ""
        return f"redis://{auth}127.0.0.1:{self.port}/0"

    def client(self) -> redis.Redis:
        """A client for this server."""
        return redis.Redis.from_url(self.url, socket_timeout=5)

    def start(self, timeout: float = 30.0) -> None:
        """Start redis-server and wait until it answers PING."""
        binary = deps.ensure_binary("redis-server")
        self.workdir.mkdir(parents=True, exist_ok=True)
        argv = [
            binary, "--bind", "127.0.0.1", "--port", str(self.port), "--dir", str(self.workdir),
            "--save", "", "--appendonly", "no", "--daemonize", "no", "--protected-mode", "no",
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

    def restart(self, timeout: float = 30.0) -> None:
        """Stop and start again on the same port (its data is gone: no persistence)."""
        self.stop()
        self.start(timeout)

    def pids(self) -> list[int]:
        """The running server's pid, if any."""
        return [self.process.pid] if self.process and self.process.alive() and self.process.pid else []
