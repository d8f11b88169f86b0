"""The configuration's durable copy in Kafka against a real Redis and a real cluster: a Redis that lost its
data gets the configuration back with no operator action, versions never go backwards, and an
unreachable topic, or one that is not compacted, is a clear error that stores nothing."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from strait.config import load_config
from strait.config.durable import DurableConfigTopic, DurableLocation
from strait.config.store import ConfigStoreError, apply_config, read_stored_config
from strait_lab.clients import create_topic
from strait_lab.kafka import KafkaCluster
from strait_lab.ports import free_port
from strait_lab.redis import RedisServer
from strait_lab.services import StraitProcess
from tests.support.cli import strait
from tests.support.config import flow_config, write_config
from tests.support.waiting import wait_for

pytestmark = pytest.mark.slow


def _config(source: KafkaCluster, target: KafkaCluster, topic: str, path: Path) -> Any:
    return load_config(write_config(path, flow_config(source, target, [topic])))


def _stored(server: RedisServer) -> tuple[int, Any] | None:
    try:
        stored = read_stored_config(server.client())
    except ConfigStoreError:
        return None
    return stored.version, stored.config


def _durable_env(location: DurableLocation) -> dict[str, str]:
    return {"STRAIT_CONFIG_KAFKA": location.bootstrap, "STRAIT_CONFIG_TOPIC": location.topic}


def test_a_redis_that_lost_its_data_gets_the_configuration_back_and_versions_go_on(
    source_cluster: KafkaCluster, target_cluster: KafkaCluster, redis_server_factory: Callable[..., RedisServer],
    services: Callable[..., StraitProcess], unique_name: Callable[[str], str], tmp_path: Path,
) -> None:
    server = redis_server_factory()
    durable = DurableLocation(target_cluster.bootstrap_servers, unique_name("strait-config"))
    first = _config(source_cluster, target_cluster, unique_name("first"), tmp_path / "first.yaml")
    second = _config(source_cluster, target_cluster, unique_name("second"), tmp_path / "second.yaml")
    assert apply_config(server.client(), first, "first.yaml", durable=durable) == 1
    assert apply_config(server.client(), second, "second.yaml", durable=durable) == 2
    topic = DurableConfigTopic(durable)
    other = DurableConfigTopic(durable, namespace="another-deployment")
    try:
        assert sorted(topic.refresh()) == [1, 2]
        assert other.refresh() == {}  # a deployment sharing the topic never reads these versions
    finally:
        topic.close()
        other.close()

    heartbeat = services("heartbeat", "--redis-url", server.url, env=_durable_env(durable))
    wait_for(lambda: heartbeat.sample("strait_config_durable", service="heartbeat") == 1, 60,
             "the heartbeat's keeper in step with the durable topic")

    # Redis SIGKILLed and started again empty: the configuration comes back by itself, as version 2.
    assert server.process is not None
    server.process.kill()
    server.start(empty=True)
    lost_at = time.monotonic()
    wait_for(lambda: _stored(server) == (2, second), 60, "version 2 restored into the emptied Redis", interval=0.2)
    print(f"configuration restored {time.monotonic() - lost_at:.1f}s after Redis came back empty")
    assert heartbeat.process.alive()
    restarted = services("heartbeat", "--redis-url", server.url, env=_durable_env(durable))
    heartbeat.stop()
    wait_for(lambda: restarted.sample("strait_config_loaded", service="heartbeat") == 1, 60,
             "a heartbeat started after the loss adopting the configuration")

    # Emptied again while no keeper runs, then applied by a `config apply` that does not know the topic:
    # Redis numbers it 1, below the topic's 2; the next keeper stores it as version 3 in both.
    restarted.stop()
    server.process.kill()
    server.start(empty=True)
    third = _config(source_cluster, target_cluster, unique_name("third"), tmp_path / "third.yaml")
    assert apply_config(server.client(), third, "third.yaml") == 1
    keeper = services("heartbeat", "--redis-url", server.url, env=_durable_env(durable))
    wait_for(lambda: _stored(server) == (3, third), 60, "the newest apply renumbered above the topic's versions")
    wait_for(lambda: keeper.sample("strait_config_loaded", service="heartbeat") == 1, 60, "the keeper's own feed")
    assert apply_config(server.client(), first, "first.yaml", durable=durable) == 4


def test_show_falls_back_to_the_durable_copy_and_an_unreachable_topic_stores_nothing(
    source_cluster: KafkaCluster, target_cluster: KafkaCluster, redis_server_factory: Callable[..., RedisServer],
    unique_name: Callable[[str], str], tmp_path: Path,
) -> None:
    server = redis_server_factory()
    durable = DurableLocation(target_cluster.bootstrap_servers, unique_name("strait-config"))
    topic = unique_name("shown")
    path = write_config(tmp_path / "strait.yaml", flow_config(source_cluster, target_cluster, [topic]))
    applied = strait("config", "apply", str(path), "--redis-url", server.url, env=_durable_env(durable))
    assert applied.returncode == 0, applied.stderr
    server.client().flushall()

    shown = strait("config", "show", "--redis-url", server.url, env=_durable_env(durable))
    assert shown.returncode == 0, shown.stderr
    assert "Redis holds no configuration; showing the durable copy" in shown.stderr
    assert "version 1" in shown.stdout and topic in shown.stdout

    dead = DurableLocation(f"127.0.0.1:{free_port()}", "strait-config")
    started = time.monotonic()
    refused = strait("config", "apply", str(path), "--redis-url", server.url, env=_durable_env(dead))
    assert refused.returncode != 0
    assert f"topic strait-config on {dead.bootstrap}" in refused.stderr and "nothing was stored" in refused.stderr
    assert "Traceback" not in refused.stderr
    assert time.monotonic() - started < 60, "an unreachable durable topic must not hang the command"
    assert _stored(server) is None

    # A topic created beforehand with the delete policy would lose the versions with its retention
    deleting = DurableLocation(target_cluster.bootstrap_servers, unique_name("strait-config-deleting"))
    create_topic(target_cluster.admin(), deleting.topic, partitions=1, config={"cleanup.policy": "delete"})
    refused = strait("config", "apply", str(path), "--redis-url", server.url, env=_durable_env(deleting))
    assert refused.returncode != 0
    assert f"topic {deleting.topic}" in refused.stderr and "cleanup.policy=delete" in refused.stderr
    assert "cleanup.policy=compact" in refused.stderr and "nothing was stored" in refused.stderr
    assert _stored(server) is None
