"""A service started before any configuration is stored waits for one instead of exiting (no crash
loop under a supervisor), says so, and picks up the first `strait config apply` without a restart."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest
import redis

from strait_lab.kafka import KafkaCluster
from strait_lab.services import StraitProcess
from tests.support.cli import strait
from tests.support.config import flow_config, write_config
from tests.support.waiting import wait_for

pytestmark = pytest.mark.slow


def test_a_service_started_without_a_configuration_waits_then_follows_the_first_apply(
    source_cluster: KafkaCluster, target_cluster: KafkaCluster, redis_url: str,
    services: Callable[..., StraitProcess], unique_name: Callable[[str], str], tmp_path: Path,
) -> None:
    heartbeat = services("heartbeat", "--redis-url", redis_url, "--lease-ttl", "3")
    time.sleep(3)  # it would have exited by now
    assert heartbeat.process.alive(), "the heartbeat service exited without a configuration"
    assert heartbeat.sample("strait_config_loaded", service="heartbeat") == 0
    assert "waiting for a configuration: no configuration is stored yet" in heartbeat.log_text()
    status = strait("status", "--redis-url", redis_url)
    assert "no flows configured" in status.stdout

    config = flow_config(source_cluster, target_cluster, [unique_name("nothing")], redis_url=redis_url)
    strait("config", "apply", "--redis-url", redis_url, str(write_config(tmp_path / "strait.yaml", config)),
           check=True)
    wait_for(lambda: heartbeat.sample("strait_config_loaded", service="heartbeat") == 1, 30,
             "the heartbeat service adopting the applied configuration")
    client = redis.Redis.from_url(redis_url)
    wait_for(lambda: client.hget("strait:lease:heartbeat:A->B", "holder"), 30,
             "the heartbeat service taking flow A->B")
    assert heartbeat.process.alive()
