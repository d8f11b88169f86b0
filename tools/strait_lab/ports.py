"""Loopback port allocation for lab processes."""

from __future__ import annotations

import os
import socket
import threading

from strait_lab.errors import PortInUseError

_lock = threading.Lock()
_handed_out: set[int] = set()


def _shard() -> tuple[int, int]:
    """(index, count) from ``STRAIT_PORT_SHARD=i/n``: labs started side by side (parallel test workers)
    each take only ports p with (p // 2) % n == i, so none hands out a port another is about to bind
    (by pairs: Linux hands out even ports to bind(0) and keeps the odd ones for connect())."""
    index, _, count = os.environ.get("STRAIT_PORT_SHARD", "0/1").partition("/")
    return int(index), max(1, int(count or 1))


def free_port() -> int:
    """A loopback port that is free now, not yet handed out by this process, and in its shard."""
    index, count = _shard()
    with _lock:
        while True:
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
                sock.bind(("127.0.0.1", 0))
                port = sock.getsockname()[1]
            if port not in _handed_out and (port // 2) % count == index % count:
                _handed_out.add(port)
                return port


def port_is_free(port: int) -> bool:
    """True when nothing listens on 127.0.0.1:port and it can be bound."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # Like the servers themselves: a port whose old connections linger in TIME_WAIT is free.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def claim_port(port: int, owner: str) -> int:
    """Check that a fixed port is free; raise naming its would-be owner when it is not."""
    if not port_is_free(port):
        raise PortInUseError(
            f"port {port} for {owner} is already in use by another process: stop that process "
            f"or choose other ports with STRAIT_LAB_BASE_PORT"
        )
    with _lock:
        _handed_out.add(port)
    return port
