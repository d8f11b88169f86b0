"""strait's own components as lab processes (`strait run COMPONENT`), with their /metrics."""

from __future__ import annotations

import os
import sys
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from strait_lab import class_archive
from strait_lab.ports import free_port
from strait_lab.process import ManagedProcess
from strait.settings import STOP_GRACE_SECONDS

KILL_AFTER_GRACE_SECONDS = 5.0  # SIGKILL this long after the grace in which a process exits by itself


class StraitProcess:
    """One `strait run COMPONENT` process.

    Args:
        component: replicator, configsync, heartbeat or checkpoint.
        args: extra command-line arguments.
        workdir: folder for its log.
        env: extra environment variables.
        name: process name in messages (defaults to the component).
        metrics_port: fixed port of its /metrics (a free one when None).
    """

    def __init__(self, component: str, args: Sequence[str], workdir: Path,
                 env: Mapping[str, str] | None = None, name: str | None = None,
                 metrics_port: int | None = None) -> None:
        self.component = component
        self.metrics_port = metrics_port or free_port()
        argv = [sys.executable, "-m", "strait.cli", "run", component,
                "--metrics-port", str(self.metrics_port), *args]
        if component == "replicator" and class_archive.ARCHIVE_VARIABLE not in os.environ:
            env = {**class_archive.spark_archive_env(), **(env or {})}  # its Spark driver maps the lab's archive
        self.process = ManagedProcess(name or f"strait {component}", argv, workdir / f"{name or component}.log",
                                      env=env)

    @property
    def metrics_address(self) -> str:
        """host:port of its /metrics."""
        return f"127.0.0.1:{self.metrics_port}"

    def start(self, timeout: float = 60.0) -> None:
        """Start and wait until /metrics answers."""
        self.process.start()
        self.process.wait_until(lambda: bool(self.scrape_text()), timeout, "/metrics")

    def scrape_text(self) -> str:
        """The raw /metrics page."""
        with urllib.request.urlopen(f"http://{self.metrics_address}/metrics", timeout=5) as resp:
            return resp.read().decode()

    def sample(self, name: str, **labels: str) -> float | None:
        """The value of one sample (summed over samples matching the labels), or None when absent."""
        total, found = 0.0, False
        for family in text_string_to_metric_families(self.scrape_text()):
            for sample in family.samples:
                if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                    total += sample.value
                    found = True
        return total if found else None

    def log_text(self) -> str:
        """The process's log so far."""
        return self.process.log_path.read_text(errors="replace")

    def kill(self) -> None:
        """SIGKILL (fault drills)."""
        self.process.kill()

    def terminate(self) -> None:
        """SIGTERM its main process, without waiting (see :meth:`stop`)."""
        self.process.terminate(group=False)

    def stop(self) -> None:
        """SIGTERM its main process, as Docker and Kubernetes do, then SIGKILL what is left.

        Only the main process gets SIGTERM: a replicator's Spark JVM, in the same process group,
        must outlive it until the running epoch is committed. The process ends by itself within
        ``STRAIT_STOP_GRACE_SECONDS``; SIGKILL comes a few seconds after that.
        """
        grace = float(self.process.env.get("STRAIT_STOP_GRACE_SECONDS", STOP_GRACE_SECONDS))
        self.process.stop(timeout=grace + KILL_AFTER_GRACE_SECONDS, group=False)
