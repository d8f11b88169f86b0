"""Shared helpers of the configsync tests: secured clusters, processes, reading topics and ACLs.

Holds no tests itself; its fixtures live in tests/conftest.py.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

import redis
from confluent_kafka.admin import (
    AclBinding,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    ResourceType,
)

from strait.kafka.acls import ALL_ACLS, exact_filter
from strait_lab.kafka import KafkaCluster
from strait_lab.services import StraitProcess
from tests.conftest import SCRAM_USERS

INTERVAL = 2.0


ConfigSyncProcess = StraitProcess  # `strait run configsync ARGS` as a real process (tests/conftest.py starts it)
STRAIT_USER, STRAIT_PASSWORD = "strait", SCRAM_USERS["strait"]


def sync_flow(source: str, target: str, include: list[str], groups: list[str] | None = None,
              interval: float = INTERVAL, **extra: Any) -> dict[str, Any]:
    """One flow of a configsync test config: unique topic/group patterns, short intervals, RF 1."""
    schedule = {"enabled": True, "interval_seconds": interval}
    return {"source": source, "target": target, "topics": {"include": include},
            "groups": {"include": groups or ["none-.*"]}, "replication_factor": 1,
            "refresh_topics": schedule, "sync_topic_configs": schedule, "sync_topic_acls": schedule, **extra}


def topic_config(cluster: KafkaCluster, topic: str) -> dict[str, tuple[str | None, ConfigSource]]:
    """Every config entry of a topic: name -> (value, source)."""
    admin = cluster.admin()
    resource = ConfigResource(ResourceType.TOPIC, topic)
    entries = admin.describe_configs([resource])[resource].result(timeout=30)
    return {name: (entry.value, ConfigSource(entry.source)) for name, entry in entries.items()}


def overrides(cluster: KafkaCluster, topic: str) -> dict[str, str | None]:
    """The configs set on the topic itself."""
    return {k: v for k, (v, source) in topic_config(cluster, topic).items()
            if source == ConfigSource.DYNAMIC_TOPIC_CONFIG}


def alter(cluster: KafkaCluster, topic: str, set_: Mapping[str, str] | None = None,
          delete: Iterable[str] = ()) -> None:
    """Incrementally alter a topic's config through the super-user door."""
    entries = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in (set_ or {}).items()]
    entries += [ConfigEntry(k, None, incremental_operation=AlterConfigOpType.DELETE) for k in delete]
    resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=entries)
    admin = cluster.admin()  # must outlive its futures
    admin.incremental_alter_configs([resource])[resource].result(timeout=30)


def partitions(cluster: KafkaCluster, topic: str) -> int | None:
    """The topic's partition count, None when it does not exist."""
    metadata = cluster.admin().list_topics(timeout=30).topics.get(topic)
    return None if metadata is None or metadata.error is not None else len(metadata.partitions)


def acls(cluster: KafkaCluster) -> set[AclBinding]:
    """Every ACL binding of the cluster."""
    admin = cluster.admin()
    return set(admin.describe_acls(ALL_ACLS).result(timeout=30))


def add_acls(cluster: KafkaCluster, bindings: Iterable[AclBinding]) -> None:
    """Create ACL bindings through the super-user door."""
    admin = cluster.admin()
    for future in admin.create_acls(list(bindings)).values():
        future.result(timeout=30)


def remove_acls(cluster: KafkaCluster, bindings: Iterable[AclBinding]) -> None:
    """Delete exactly these bindings."""
    admin = cluster.admin()
    for future in admin.delete_acls([exact_filter(b) for b in bindings]).values():
        future.result(timeout=30)


def report(redis_url: str, flow: str) -> dict[str, Any] | None:
    """The flow's drift report as configsync published it, or None."""
    body = redis.Redis.from_url(redis_url).get(f"strait:configsync:report:{flow}")
    return None if body is None else json.loads(body)
