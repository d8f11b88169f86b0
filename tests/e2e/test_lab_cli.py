"""`strait lab` end to end through the console script: up, status, down, Ctrl-C, start-up failures."""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from strait_lab.ports import port_is_free
from strait_lab.runtime import pid_alive

pytestmark = pytest.mark.slow

STRAIT = str(Path(sys.executable).parent / "strait")
LAB_PORT_OFFSETS = (79, 90, 91, 92, 93, 94, 95, 100, 101, 200, 201)


def _free_base_port() -> int:
    for _ in range(200):
        base = random.randrange(20000, 32000, 100)  # below the ephemeral ports that free_port() hands out
        if all(port_is_free(base + offset) for offset in LAB_PORT_OFFSETS):
            return base
    raise RuntimeError("no free block of lab ports")


@contextlib.contextmanager
def _listening_on_a_lab_port(offset: int) -> Iterator[int]:
    """A base port whose lab port ``base + offset`` this test listens on (another worker may take a
    free-looking port between the look and the bind: then another block is tried)."""
    for _ in range(20):
        base = _free_base_port()
        with socket.socket() as blocker:
            try:
                blocker.bind(("127.0.0.1", base + offset))
            except OSError:
                continue
            blocker.listen()
            yield base
            return
    raise RuntimeError("no lab port could be bound")


@pytest.fixture
def lab_env(tmp_path: Path) -> Iterator[dict[str, str]]:
    env = {**os.environ, "STRAIT_LAB_DIR": str(tmp_path / "lab"), "STRAIT_LAB_BASE_PORT": str(_free_base_port())}
    yield env
    subprocess.run([STRAIT, "lab", "down", "--timeout", "20"], env=env, capture_output=True, timeout=60)


def _lab_pids(env: dict[str, str]) -> list[int]:
    state = json.loads((Path(env["STRAIT_LAB_DIR"]) / "state.json").read_text())
    return [state["supervisor_pid"], *state["pids"]]


def test_help_lists_the_commands() -> None:
    out = subprocess.run([STRAIT, "--help"], capture_output=True, text=True, check=True).stdout
    assert "lab" in out
    out = subprocess.run([STRAIT, "lab", "--help"], capture_output=True, text=True, check=True).stdout
    for command in ("up", "down", "status"):
        assert command in out


def test_detached_lab_reports_endpoints_and_down_leaves_nothing(lab_env: dict[str, str]) -> None:
    up = subprocess.run([STRAIT, "lab", "up", "--detach", "--json"], env=lab_env, capture_output=True,
                        text=True, timeout=240)
    assert up.returncode == 0, up.stderr
    description = json.loads(up.stdout)
    base = int(lab_env["STRAIT_LAB_BASE_PORT"])
    assert description["clusters"]["A"]["bootstrap_servers"] == f"127.0.0.1:{base + 100}"
    assert description["clusters"]["B"]["bootstrap_servers"] == f"127.0.0.1:{base + 200}"
    assert description["redis_url"] == f"redis://127.0.0.1:{base + 79}/0"
    assert description["prometheus_url"] == f"http://127.0.0.1:{base + 90}"
    assert description["metrics_endpoints"]["lab"] == f"http://127.0.0.1:{base + 91}/metrics"
    assert description["metrics_endpoints"]["configsync"] == f"http://127.0.0.1:{base + 92}/metrics"
    assert description["metrics_endpoints"]["replicator"] == f"http://127.0.0.1:{base + 93}/metrics"
    assert description["metrics_endpoints"]["heartbeat"] == f"http://127.0.0.1:{base + 94}/metrics"
    assert description["metrics_endpoints"]["checkpoint"] == f"http://127.0.0.1:{base + 95}/metrics"

    status = subprocess.run([STRAIT, "lab", "status", "--json"], env=lab_env, capture_output=True, text=True)
    assert status.returncode == 0
    assert json.loads(status.stdout)["status"] == "ready"
    pids = _lab_pids(lab_env)
    # supervisor, 2 brokers, Redis, Prometheus, configsync, replicator, heartbeat, checkpoint
    assert len(pids) == 9 and all(pid_alive(p) for p in pids)

    down = subprocess.run([STRAIT, "lab", "down"], env=lab_env, capture_output=True, text=True, timeout=90)
    assert down.returncode == 0
    assert "killed" not in down.stdout  # everything stopped cleanly, nothing needed SIGKILL
    assert not any(pid_alive(p) for p in pids)
    after = subprocess.run([STRAIT, "lab", "status"], env=lab_env, capture_output=True, text=True)
    assert after.returncode == 1


def test_ctrl_c_on_a_foreground_lab_leaves_nothing(lab_env: dict[str, str]) -> None:
    lab = subprocess.Popen([STRAIT, "lab", "up"], env=lab_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True)
    try:
        assert lab.stdout is not None
        deadline = time.monotonic() + 180
        for line in lab.stdout:
            if "press Ctrl-C" in line or time.monotonic() > deadline:
                break
        pids = _lab_pids(lab_env)
        assert all(pid_alive(p) for p in pids)
        lab.send_signal(signal.SIGINT)
        assert lab.wait(timeout=90) == 0
        assert not any(pid_alive(p) for p in pids)
    finally:
        if lab.poll() is None:
            lab.kill()


def test_taken_port_gives_one_clear_line(lab_env: dict[str, str]) -> None:
    with _listening_on_a_lab_port(90) as base:
        taken = base + 90
        env = {**lab_env, "STRAIT_LAB_BASE_PORT": str(base)}
        result = subprocess.run([STRAIT, "lab", "up", "--detach"], env=env, capture_output=True, text=True,
                                timeout=240)
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert lines == [f"strait: error: port {taken} for Prometheus is already in use by another process: "
                     "stop that process or choose other ports with STRAIT_LAB_BASE_PORT"]


def test_missing_java_gives_one_clear_line(lab_env: dict[str, str], tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"  # a PATH with the lab's other binaries but no java
    bin_dir.mkdir()
    for tool in ("redis-server", "prometheus"):
        os.symlink(shutil.which(tool), bin_dir / tool)
    env = {**lab_env, "PATH": str(bin_dir)}
    result = subprocess.run([STRAIT, "lab", "up", "--detach"], env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        "strait: error: Java is not installed, and Kafka brokers need Java 17 or newer: "
        "run `apt-get install openjdk-17-jre-headless` or `make deps`"
    ]


def test_unreachable_maven_gives_one_clear_line(tmp_path: Path) -> None:
    settings = tmp_path / "settings.xml"
    settings.write_text(f"""<settings>
  <localRepository>{tmp_path / 'm2'}</localRepository>
  <mirrors><mirror><id>nowhere</id><mirrorOf>*</mirrorOf><url>http://127.0.0.1:9/maven2</url></mirror></mirrors>
</settings>""")
    env = {**os.environ, "STRAIT_CACHE_DIR": str(tmp_path / "cache"), "STRAIT_MAVEN_SETTINGS": str(settings)}
    result = subprocess.run([sys.executable, "-m", "strait_lab.deps", "kafka"], env=env, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 1
    errors = [line for line in result.stderr.splitlines() if line.startswith("strait: error:")]
    assert len(errors) == 1
    assert "Maven could not resolve the kafka jars" in errors[0]
    assert "Maven Central is reachable" in errors[0]
