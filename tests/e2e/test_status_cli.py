"""`strait status` end to end: configsync publishes drift in Redis, the command shows it (text and
--json) without touching Kafka; a new configuration version is acted on at once, not at the next interval."""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from strait import cli
from strait.cli import status
from strait_lab.clients import create_topic
from strait_lab.kafka import KafkaCluster
from tests.integration.test_configsync_support import ConfigSyncProcess, partitions, sync_flow
from tests.support.config import cluster_entry, strait_config, write_config
from tests.support.waiting import wait_for

SLOW = 60.0  # intervals far beyond the test's waits: only a configuration change explains a quick sync


def _status(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """`strait status ARGV` in this process (the command group on its own parser)."""
    parser = argparse.ArgumentParser(prog="strait")
    status.register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["status", *argv])
    capsys.readouterr()
    assert args.handler(args) == 0
    return capsys.readouterr().out


def _apply(path: Path, config: dict[str, Any], redis_url: str) -> None:
    write_config(path, config)
    assert cli.main(["config", "apply", str(path), "--redis-url", redis_url]) == 0


def test_status_shows_drift_and_config_changes_apply_at_once(
    source_cluster: KafkaCluster, target_cluster: KafkaCluster, configsync: Callable[..., ConfigSyncProcess],
    unique_name: Callable[[str], str], redis_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    prefix = unique_name("st")
    clusters = {"A": cluster_entry(source_cluster), "B": cluster_entry(target_cluster)}
    config = strait_config(clusters, [sync_flow("A", "B", [f"{prefix}-a-.*"], interval=SLOW)], redis_url)
    _apply(tmp_path / "v1.yaml", config, redis_url)

    before = json.loads(_status(capsys, "--redis-url", redis_url, "--json"))
    assert before == {"flows": [{"flow": "A->B", "enabled": True, "state": "unknown", "report": None}],
                      "topology": {}}
    assert "is `strait run configsync` running?" in _status(capsys, "--redis-url", redis_url)

    create_topic(source_cluster.admin(), f"{prefix}-a-1", partitions=2)
    create_topic(source_cluster.admin(), f"{prefix}-a-wide", partitions=1)
    create_topic(target_cluster.admin(), f"A.{prefix}-a-wide", partitions=3)
    configsync("--redis-url", redis_url, "--lease-ttl", "5")

    def reported() -> dict[str, Any] | None:
        flows = json.loads(_status(capsys, "--redis-url", redis_url, "--json"))["flows"]
        flow = flows[0]["report"]
        return flows[0] if flow and flow["partition_mismatch_count"] == 1 else None

    row = wait_for(reported, 30, "a drift report in `strait status --json`")
    assert row["state"] == "drift" and row["report"]["missing_count"] == 0
    assert row["report"]["partition_mismatch"] == [{"topic": f"A.{prefix}-a-wide", "source": 1, "target": 3}]
    assert partitions(target_cluster, f"A.{prefix}-a-1") == 2
    text = _status(capsys, "--redis-url", redis_url)
    assert text.splitlines()[0].split() == ["FLOW", "STATE", "IN", "SYNC", "MISSING", "PARTITIONS", "CONFIG",
                                            "DRIFT", "ACL", "DRIFT", "AGE"]
    assert text.splitlines()[1].split()[:2] == ["A->B", "drift"]
    assert f"A->B: A.{prefix}-a-wide has 3 partitions, source has 1" in text

    create_topic(source_cluster.admin(), f"{prefix}-b-1")
    config["flows"][0]["topics"]["include"].append(f"{prefix}-b-.*")
    changed = time.monotonic()
    _apply(tmp_path / "v2.yaml", config, redis_url)
    wait_for(lambda: partitions(target_cluster, f"A.{prefix}-b-1") == 1, 15, "the new version acted on",
             interval=0.2)
    assert time.monotonic() - changed < SLOW / 4
