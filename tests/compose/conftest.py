"""Fixtures of the compose lab's tests: a Docker host (set up when missing) and one booted lab."""

from __future__ import annotations

import socket
import time
import uuid
from collections.abc import Iterator

import pytest

from tests.compose.engine import DockerHost, EngineUnavailable, base_images, docker_host
from tests.compose.lab import ComposeLab
from tests.support.machine import MachineShare
from tests.support.summary import add_summary



@pytest.fixture(scope="session")
def docker() -> Iterator[DockerHost]:
    """An engine and the Compose v2 CLI; skipped, with the reason printed, when neither runs nor can be started."""
    began = time.monotonic()
    try:
        host = docker_host()
        host.setup_seconds = time.monotonic() - began
    except EngineUnavailable as exc:
        print(f"compose lab not started: {exc}")
        pytest.skip(str(exc))
    try:
        yield host
    finally:
        host.stop()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture(scope="module")
def compose_lab(docker: DockerHost, machine: MachineShare) -> Iterator[ComposeLab]:
    """The compose lab built and booted with `up --wait` (every service but Grafana), taken down after.

    Built, booted and checked beside other tests, but in a shared span of the machine: no other
    worker's timed region (a drill, a stop bound) starts while the lab's containers run. The one
    timed check of the lab (a lease taken over within one TTL) runs alone."""
    began = time.monotonic()
    bases = base_images(docker)
    lab = ComposeLab(docker, f"strait-test-{uuid.uuid4().hex[:6]}",
                     {**bases, "PROMETHEUS_PORT": str(_free_port()), "LOADGEN_RATE": "100"})
    lab.timings["engine and compose CLI"] = docker.setup_seconds
    lab.timings["base images"] = time.monotonic() - began
    try:
        lab.timed("build", "build")
        # From boot on no timed region of another worker runs: the lab's containers would load it.
        # The last test takes the lab down itself, inside this span.
        with machine.shared_span("compose lab"):
            lab.timed("boot", "up", "--detach", "--wait", "--wait-timeout", "600", *lab.services())
            add_summary("strait compose lab", _describe(lab))
            yield lab
    except Exception:
        print(lab.logs())
        raise
    finally:
        lab.down()


def _describe(lab: ComposeLab) -> list[str]:
    """What the closing note and README quote: timings, `docker compose ps`, the images' sizes."""
    images = lab.host.run("images", "--format", "{{.Repository}}:{{.Tag}} {{.Size}}", timeout=60).stdout
    return ["timings: " + ", ".join(f"{k} {v:.0f}s" for k, v in lab.timings.items()),
            lab.compose("ps", "-a", "--format", "table {{.Service}}\t{{.Image}}\t{{.Status}}", timeout=60).stdout,
            "images:", *sorted(line for line in images.splitlines() if line.startswith("strait"))]

