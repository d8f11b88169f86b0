"""The replicator process: one streaming query per enabled flow, live-controlled from Redis.

The configuration comes from Redis (the versioned document written by `strait config apply`), and
every new version takes effect without a restart: flows start, stop, re-plan and change their rate
limit. With ``--config FILE`` it runs from a file instead (no live control). If Redis goes away, the
flows keep running on the last configuration.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from dataclasses import dataclass
from pathlib import Path

from strait.config import load_config
from strait.config.model import StraitConfig
from strait.config.store import load_stored_config, watch_config
from strait.coord.redis_client import connect
from strait.metrics import SERVICE_UP, serve_metrics
from strait.paths import cache_dir
from strait_replicator import metrics
from strait_replicator.flow import FlowRunner
from strait_replicator.session import build_session

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ReplicatorOptions:
    """How the replicator process runs."""

    redis_url: str | None = None
    config_file: Path | None = None
    state_dir: Path | None = None
    master: str | None = None
    metrics_port: int = 0
    trigger_seconds: float = 0.25
    flows: tuple[str, ...] = ()  # only these flows (all enabled ones when empty)


class Replicator:
    """Keeps one FlowRunner per enabled flow in step with the current configuration."""

    def __init__(self, options: ReplicatorOptions) -> None:
        self.options = options
        self.state_dir = options.state_dir or Path(os.environ.get("STRAIT_STATE_DIR", cache_dir() / "replicator"))
        self.spark = build_session(options.master)
        self.runners: dict[str, FlowRunner] = {}
        self._config: StraitConfig | None = None
        self._changed = threading.Event()
        self._lock = threading.Lock()

    def set_config(self, config: StraitConfig) -> None:
        """Adopt a new configuration (called by the Redis watcher thread)."""
        with self._lock:
            self._config = config
        self._changed.set()

    def step(self) -> None:
        """One control-loop pass: reconcile every flow, export progress."""
        with self._lock:
            config = self._config
        if config is None:
            return
        force = self._changed.is_set()
        self._changed.clear()
        wanted = {f.name: f for f in config.flows
                  if f.enabled and (not self.options.flows or f.name in self.options.flows)}
        for name in list(self.runners):
            if name not in wanted:
                log.info("flow=%s disabled or removed: stopping its query", name)
                self.runners.pop(name).stop(state="disabled")
        for name, flow in wanted.items():
            runner = self.runners.get(name)
            if runner is None:
                runner = self.runners[name] = FlowRunner(self.spark, name, self.state_dir / _dirname(name),
                                                         self.options.trigger_seconds)
            try:
                runner.reconcile(config, flow, force=force)
                runner.observe()
            except Exception:  # the control loop must outlive any one flow's trouble
                log.exception("flow=%s control step failed", name)
                metrics.ERRORS.labels(service=metrics.SERVICE, flow=name, kind="control").inc()

    def run(self, stop: threading.Event) -> None:
        """Run until ``stop`` is set, then stop every query and the session."""
        watcher = None
        if self.options.config_file is not None:
            self.set_config(load_config(self.options.config_file))
        else:
            client = connect(self.options.redis_url or os.environ.get("STRAIT_REDIS_URL", "redis://127.0.0.1:19079/0"))
            _version, config = load_stored_config(client)
            self.set_config(config)
            watcher = watch_config(client, self.set_config, poll_interval=2.0)
        SERVICE_UP.labels(service=metrics.SERVICE).set(1)
        try:
            while not stop.is_set():
                self.step()
                self._changed.wait(1.0)
        finally:
            if watcher is not None:
                watcher.stop()
            for runner in self.runners.values():
                runner.stop()
            self.spark.stop()
            SERVICE_UP.labels(service=metrics.SERVICE).set(0)


def _dirname(flow: str) -> str:
    return flow.replace("->", "_to_")


def main(options: ReplicatorOptions) -> int:
    """Run the replicator until SIGINT or SIGTERM."""
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    port = serve_metrics(options.metrics_port)
    print(f"replicator metrics on http://127.0.0.1:{port}/metrics", flush=True)
    Replicator(options).run(stop)
    return 0
