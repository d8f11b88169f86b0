"""`strait flow restart A->B` under load: every service running the flow ends its work on it and
starts it again, the replicator resumes from its own progress, and no record is lost."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest
import redis

from strait.coord.restarts import read_marks
from strait_lab.clients import create_topic
from strait_lab.kafka import KafkaCluster
from strait_lab.services import StraitProcess
from tests.support.cli import strait
from tests.support.config import flow_config, write_config
from tests.support.kafka import NumberedLoad, count, numbered_copies
from tests.support.waiting import wait_for

pytestmark = pytest.mark.slow

PARTITIONS = 3
RATE = 400
SHARDS = 2
SUPERVISED = ("configsync", "heartbeat", "checkpoint")


def test_flow_restart_restarts_every_service_on_the_flow_and_loses_nothing(
    source_cluster: KafkaCluster, target_cluster: KafkaCluster, redis_url: str,
    services: Callable[..., StraitProcess], unique_name: Callable[[str], str], tmp_path: Path,
) -> None:
    topic = unique_name("restarted")
    remote = f"A.{topic}"
    create_topic(source_cluster.admin(), topic, partitions=PARTITIONS, config={"retention.ms": "-1"})
    config = flow_config(source_cluster, target_cluster, [topic], redis_url=redis_url,
                         checkpoint_shards=SHARDS)
    assert strait("config", "apply", str(write_config(tmp_path / "strait.yaml", config)),
                  "--redis-url", redis_url, timeout=180, show=True).returncode == 0
    client = redis.Redis.from_url(redis_url)
    replicator = services("replicator", "--redis-url", redis_url)
    supervised = {name: services(name, "--redis-url", redis_url, "--lease-ttl", "5") for name in SUPERVISED}
    load = NumberedLoad(source_cluster, topic, PARTITIONS, RATE)
    try:
        wait_for(lambda: count(target_cluster, remote) > 2 * RATE, 180, "the flow copying under load")
        leases = ["configsync:A->B", "heartbeat:A->B", *(f"checkpoint:A->B#{i}/{SHARDS}" for i in range(SHARDS))]
        parts = ["replicator:A->B", *leases]
        wait_for(lambda: read_marks(client, "strait", parts).keys() == set(parts), 60,
                 "every service running its part of the flow")

        restart = strait("flow", "restart", "A->B", "--wait", "120", "--redis-url", redis_url,
                         timeout=180, show=True)
        print(restart.stdout)
        assert restart.returncode == 0, restart.stdout + restart.stderr
        for part in parts:
            assert f"{part}: started again" in restart.stdout
        assert f"every running part started again ({len(parts)})" in restart.stdout

        before = count(target_cluster, remote)
        wait_for(lambda: count(target_cluster, remote) > before + 2 * RATE, 120, "copying after the restart")
        total = load.stop()
        wait_for(lambda: count(target_cluster, remote) >= total, 120, f"{remote} to catch up")
    finally:
        load.stop()

    for name, process in supervised.items():
        assert "restart requested: ending the work, it is taken again" in process.log_text(), name
    # a restart is a fresh start: the checkpoint service reads the offset syncs again from their beginning
    assert supervised["checkpoint"].log_text().count("syncs_topic=") == 2
    log_text = replicator.log_text()
    marker = "flow=A->B restart requested: stopping its query, starting it again"
    assert marker in log_text
    after = re.findall(rf"topic={re.escape(topic)} resumes evidence=(\S+) duplicates_at_most=(\S+)",
                       log_text.split(marker, 1)[1])
    assert after and after[0] == ("strait-progress", "0"), after  # a graceful stop: its progress is exact
    status = json.loads(strait("flow", "status", "A->B", "--json", "--redis-url", redis_url,
                               timeout=180, show=True).stdout)
    assert status["restarted_at"] and status["version"] == 2

    copies = numbered_copies(target_cluster, remote)
    duplicates = 0
    for partition in range(PARTITIONS):
        got = copies.get(partition, [])
        assert set(got) == set(range(len(range(partition, total, PARTITIONS)))), f"partition {partition} lost records"
        duplicates += len(got) - len(set(got))
    print(f"{total} records produced, {duplicates} copied twice across the restart")
    assert duplicates == 0


def test_restarting_a_disabled_flow_is_refused_and_a_reapplied_file_asks_for_no_restart(
    source_cluster: KafkaCluster, target_cluster: KafkaCluster, redis_url: str, tmp_path: Path,
) -> None:
    config = flow_config(source_cluster, target_cluster, ["nothing"])
    path = write_config(tmp_path / "strait.yaml", config)
    assert strait("config", "apply", str(path), "--redis-url", redis_url,
                  timeout=180, show=True).returncode == 0

    restarted = strait("flow", "restart", "A->B", "--redis-url", redis_url, timeout=180, show=True)
    assert restarted.returncode == 0 and "configuration version 2 (was 1)" in restarted.stdout, restarted.stderr
    shown = json.loads(strait("config", "show", "--json", "--redis-url", redis_url,
                              timeout=180, show=True).stdout)
    assert shown["source"] == "strait flow restart A->B" and shown["config"]["flows"][0]["restarted_at"]

    assert strait("config", "apply", str(path), "--redis-url", redis_url,
                  timeout=180, show=True).returncode == 0
    shown = json.loads(strait("config", "show", "--json", "--redis-url", redis_url,
                              timeout=180, show=True).stdout)
    assert shown["version"] == 3 and shown["config"]["flows"][0]["restarted_at"] is None

    assert strait("flow", "disable", "A->B", "--redis-url", redis_url, timeout=180, show=True).returncode == 0
    refused = strait("flow", "restart", "A->B", "--redis-url", redis_url, timeout=180, show=True)
    assert refused.returncode == 1 and "flow A->B is disabled" in refused.stderr
    assert strait("flow", "enable", "A->B", "--redis-url", redis_url, timeout=180, show=True).returncode == 0
    nothing_runs = strait("flow", "restart", "A->B", "--wait", "5", "--redis-url", redis_url,
                          timeout=180, show=True)
    assert nothing_runs.returncode == 0 and "no part of it runs now" in nothing_runs.stdout
    bad_wait = strait("flow", "restart", "A->B", "--wait", "inf", "--redis-url", redis_url,
                      timeout=180, show=True)
    assert bad_wait.returncode == 2 and "expected a number of seconds of 0 or more, got 'inf'" in bad_wait.stderr
