"""What every strait service process shares: its configuration feed and its run-until-signal frame.

A process runs either from a file (fixed configuration) or from Redis, where every new version of
the configuration stored by `strait config apply` is adopted live, without a restart.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis

from strait.config import load_config
from strait.config.model import StraitConfig
from strait.config.store import load_stored_config, watch_config
from strait.metrics import SERVICE_UP, serve_metrics

log = logging.getLogger(__name__)


class ConfigFeed:
    """The newest configuration and an event raised each time a new one arrives."""

    def __init__(self) -> None:
        self._config: StraitConfig | None = None
        self._lock = threading.Lock()
        self.changed = threading.Event()

    def set(self, config: StraitConfig) -> None:
        """Adopt a configuration (called from the Redis watcher thread)."""
        with self._lock:
            self._config = config
        self.changed.set()

    def current(self) -> StraitConfig | None:
        """The newest configuration, or None before the first."""
        with self._lock:
            return self._config


def follow_config(feed: ConfigFeed, config_file: Path | None, client: redis.Redis | None,
                  namespace: str = "strait") -> Any:
    """Feed the file's configuration, or the stored one and every later version; returns the watcher
    (``stop()`` it at the end) or None for a file."""
    if config_file is not None:
        feed.set(load_config(config_file))
        return None
    assert client is not None, "a Redis client is needed without a config file"
    version, config = load_stored_config(client, None, namespace)
    feed.set(config)
    return watch_config(client, feed.set, poll_interval=2.0, namespace=namespace, after_version=version)


def run_service(service: str, metrics_port: int, body: Callable[[threading.Event, int], None]) -> int:
    """Serve /metrics, then run ``body(stop, metrics_port)`` until SIGINT or SIGTERM sets ``stop``."""
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    # In containers Prometheus scrapes from another host: STRAIT_METRICS_ADDR=0.0.0.0 there.
    port = serve_metrics(metrics_port, addr=os.environ.get("STRAIT_METRICS_ADDR", "127.0.0.1"))
    print(f"{service} metrics on http://127.0.0.1:{port}/metrics", flush=True)
    SERVICE_UP.labels(service=service).set(1)
    try:
        body(stop, port)
    finally:
        SERVICE_UP.labels(service=service).set(0)
    return 0
