"""The lab's process messages: a failed server's log shows its cause, not only its shutdown."""

from __future__ import annotations

from pathlib import Path

from strait_lab.process import tail


def test_the_tail_of_a_failed_start_leads_with_its_first_errors(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    cause = "ERROR Exiting Kafka due to fatal exception during startup. (kafka.Kafka$)"
    shutdown = [f"INFO shutting down {i}" for i in range(30)]
    log.write_text("\n".join(["INFO starting", cause, *shutdown]) + "\n")
    lines = tail(log, lines=20).splitlines()
    assert lines[:3] == ["first errors:", cause, "last lines:"]
    assert lines[3:] == [f"INFO shutting down {i}" for i in range(10, 30)]


def test_a_tail_holding_the_error_is_shown_alone(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text("INFO one\nFATAL two\n")
    assert tail(log).splitlines() == ["INFO one", "FATAL two"]
    assert tail(tmp_path / "missing") == "(no log written)"
