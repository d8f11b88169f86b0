"""`strait lab up` in a real terminal (tmux) shows the live replication-health view."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from strait_lab.health import flow_health
from strait_lab.runtime import pid_alive
from tests.e2e.test_lab_cli import _free_base_port

pytestmark = pytest.mark.slow

STRAIT = str(Path(sys.executable).parent / "strait")


def test_flow_rows_from_metric_samples() -> None:
    samples = [
        ("strait_flow_state", {"flow": "A->B", "state": "running", "service": "replicator"}, 1.0),
        ("strait_flow_state", {"flow": "A->B", "state": "error", "service": "replicator"}, 0.0),
        ("strait_replicated_records_total", {"flow": "A->B", "topic": "t"}, 42.0),
        ("strait_source_lag_records", {"flow": "A->B", "topic": "t", "partition": "0"}, 3.0),
        ("strait_source_lag_records", {"flow": "A->B", "topic": "t", "partition": "1"}, 4.0),
        ("strait_heartbeat_age_seconds", {"flow": "A->B"}, 1.5),
        ("strait_topics_in_sync", {"flow": "A->B"}, 2.0),
    ]
    [row] = flow_health(samples)
    assert (row.flow, row.state, row.records_total, row.lag_records, row.heartbeat_age, row.topics_in_sync,
            row.checkpoint_age) == ("A->B", "running", 42.0, 7.0, 1.5, 2.0, None)


@pytest.fixture
def tmux_session(tmp_path: Path) -> Iterator[tuple[str, dict[str, str]]]:
    if shutil.which("tmux") is None:
        pytest.skip("tmux is not installed")
    name = f"strait-{uuid.uuid4().hex[:8]}"
    env = {**os.environ, "STRAIT_LAB_DIR": str(tmp_path / "lab"), "STRAIT_LAB_BASE_PORT": str(_free_base_port())}
    yield name, env
    subprocess.run(["tmux", "kill-session", "-t", name], capture_output=True)
    subprocess.run([STRAIT, "lab", "down", "--timeout", "20"], env=env, capture_output=True, timeout=90)


def test_live_view_in_a_terminal_and_ctrl_c(tmux_session: tuple[str, dict[str, str]]) -> None:
    name, env = tmux_session
    exports = " ".join(f"{k}={v}" for k, v in env.items() if k.startswith("STRAIT_"))
    subprocess.run(["tmux", "new-session", "-d", "-s", name, "-x", "200", "-y", "50",
                    f"env {exports} {STRAIT} lab up; sleep 30"], check=True, env=env)
    deadline, screen = time.monotonic() + 240, ""
    while time.monotonic() < deadline:
        screen = subprocess.run(["tmux", "capture-pane", "-p", "-t", name], capture_output=True, text=True).stdout
        if "replication health" in screen and "A->B" in screen:
            break
        time.sleep(2)
    assert "replication health" in screen and "A->B" in screen, screen
    state = Path(env["STRAIT_LAB_DIR"]) / "state.json"
    import json

    pids = [json.loads(state.read_text())["supervisor_pid"], *json.loads(state.read_text())["pids"]]
    subprocess.run(["tmux", "send-keys", "-t", name, "C-c"], check=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and any(pid_alive(p) for p in pids):
        time.sleep(1)
    assert not any(pid_alive(p) for p in pids)
