"""Loopback port allocation for lab processes."""

from __future__ import annotations

import os
import random
import socket
import threading
from pathlib import Path

from strait_lab.errors import PortInUseError

_lock = threading.Lock()
_handed_out: set[int] = set()
_EPHEMERAL_RANGE_FILE = "/proc/sys/net/ipv4/ip_local_port_range"
_LAB_PORTS_FROM = 20000
_random = random.SystemRandom()  # a forked child must not draw the same ports as its parent


def _shard() -> tuple[int, int]:
    """(index, count) from ``STRAIT_PORT_SHARD=i/n``: labs started side by side (parallel test workers)
    each take only ports p with (p // 2) % n == i, so none hands out a port another is about to bind."""
    index, _, count = os.environ.get("STRAIT_PORT_SHARD", "0/1").partition("/")
    return int(index), max(1, int(count or 1))


def _ephemeral_range() -> tuple[int, int]:
    """The kernel's range for the local ports of connect() and bind(0), (32768, 60999) if unknown."""
    try:
        low, high = (int(p) for p in Path(_EPHEMERAL_RANGE_FILE).read_text().split())
    except (OSError, ValueError):
        return 32768, 60999
    return low, high


def _lab_range() -> range:
    """Where lab ports come from: below the ephemeral range when there is room for it. A lab server's
    port is free while a drill has its node down; in the ephemeral range any process's bind(0) (a Spark
    driver's, a JVM's) or outgoing connection could take it then, and the node could not come back."""
    low, _ = _ephemeral_range()
    if low - _LAB_PORTS_FROM >= 4096:
        return range(_LAB_PORTS_FROM, low)
    return range(0)  # no room below: the kernel's choice, as bind(0)


def _candidate(ports: range) -> int:
    if not ports:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", 0))
            return sock.getsockname()[1]
    return _random.randrange(ports.start, ports.stop)


def free_port() -> int:
    """A loopback port that is free now, not yet handed out by this process, and in its shard."""
    index, count = _shard()
    ports = _lab_range()
    with _lock:
        while True:
            port = _candidate(ports)
            if port not in _handed_out and (port // 2) % count == index % count and port_is_free(port):
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
