"""The compose lab driven through the real `docker compose` CLI, as a user drives it."""

from __future__ import annotations

import json
import logging
import subprocess
import time
from dataclasses import dataclass, field
from typing import Any

from tests.compose.engine import DockerHost, compose_file

log = logging.getLogger(__name__)

# Grafana's image is on no registry this machine reaches and cannot be stood in for from Debian:
# the lab boots without it; the dashboards are proven by their queries on a live Prometheus.
WITHOUT = ("grafana",)


@dataclass
class ComposeLab:
    """One project of the compose lab (a unique name per test run) on a Docker host."""

    host: DockerHost
    project: str
    env: dict[str, str]
    timings: dict[str, float] = field(default_factory=dict)

    def compose(self, *args: str, timeout: float = 900.0, check: bool = True) -> subprocess.CompletedProcess[str]:
        """``docker compose -f compose/compose.yml -p PROJECT ARGS`` with the lab's variables."""
        return self.host.run("compose", "-f", str(compose_file()), "-p", self.project, *args, timeout=timeout,
                             check=check, env=self.env)

    def services(self) -> list[str]:
        """Every service of the default profile but those that cannot run here."""
        listed = self.compose("config", "--services", timeout=60).stdout.split()
        return [name for name in listed if name not in WITHOUT]

    def timed(self, what: str, *args: str, timeout: float = 1800.0) -> subprocess.CompletedProcess[str]:
        """A compose command whose wall time is kept in ``timings``."""
        began = time.monotonic()
        result = self.compose(*args, timeout=timeout)
        self.timings[what] = time.monotonic() - began
        return result

    def ps(self) -> list[dict[str, Any]]:
        """``docker compose ps -a`` as records (Service, Name, State, Health, ExitCode, ...)."""
        out = self.compose("ps", "-a", "--format", "json", timeout=60).stdout.strip()
        if out.startswith("["):
            return list(json.loads(out))
        return [json.loads(line) for line in out.splitlines() if line.strip()]

    def exec(self, service: str, *command: str, timeout: float = 120.0,
             check: bool = False) -> subprocess.CompletedProcess[str]:
        """Run a command in the service's first container."""
        return self.compose("exec", "-T", service, *command, timeout=timeout, check=check)

    def containers(self, service: str) -> list[dict[str, Any]]:
        """The service's running containers."""
        return [c for c in self.ps() if c["Service"] == service and c["State"] == "running"]

    def logs(self, tail: int = 60) -> str:
        """The last lines of every container's output (for a failure's message)."""
        return self.compose("logs", "--no-color", "--tail", str(tail), check=False, timeout=120).stdout

    def leftovers(self) -> dict[str, list[str]]:
        """Containers, networks and volumes still labelled with this project."""
        label = f"label=com.docker.compose.project={self.project}"
        found = {
            "containers": self.host.run("ps", "-aq", "--filter", label, timeout=60).stdout.split(),
            "networks": self.host.run("network", "ls", "-q", "--filter", label, timeout=60).stdout.split(),
            "volumes": self.host.run("volume", "ls", "-q", "--filter", label, timeout=60).stdout.split(),
        }
        return {kind: ids for kind, ids in found.items() if ids}

    def down(self) -> None:
        """``down -v --remove-orphans``: containers, networks and volumes of the project go."""
        self.compose("down", "-v", "--remove-orphans", "--timeout", "20", timeout=600, check=False)
