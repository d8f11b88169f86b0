"""The lab's port allocation: ports outside the kernel's ephemeral range, in the worker's shard."""

from __future__ import annotations

from pathlib import Path

import pytest

from strait_lab import ports


def _kernel_range(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, low: int, high: int) -> None:
    path = tmp_path / "ip_local_port_range"
    path.write_text(f"{low}\t{high}\n")
    monkeypatch.setattr(ports, "_EPHEMERAL_RANGE_FILE", str(path))


def test_ports_come_from_below_the_ephemeral_range_and_the_workers_shard(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _kernel_range(monkeypatch, tmp_path, 32768, 60999)
    monkeypatch.setenv("STRAIT_PORT_SHARD", "1/2")
    handed = [ports.free_port() for _ in range(50)]
    assert all(20000 <= p < 32768 for p in handed)
    assert all((p // 2) % 2 == 1 for p in handed)
    assert len(set(handed)) == len(handed)


def test_without_room_below_the_ephemeral_range_the_kernel_chooses(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _kernel_range(monkeypatch, tmp_path, 1024, 65535)
    monkeypatch.setenv("STRAIT_PORT_SHARD", "0/1")
    assert 1024 <= ports.free_port() <= 65535


def test_an_unreadable_range_counts_as_linuxs_default(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(ports, "_EPHEMERAL_RANGE_FILE", str(tmp_path / "missing"))
    monkeypatch.setenv("STRAIT_PORT_SHARD", "0/1")
    assert 20000 <= ports.free_port() < 32768
