"""The lab's cluster options for real: 3 brokers, StandardAuthorizer with ACLs, SCRAM users, restarts."""

from __future__ import annotations

import logging
from collections.abc import Callable

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

from strait_lab import class_archive
from strait_lab.clients import Record, consume_all, create_topic, produce
from strait_lab.kafka import KafkaCluster
from tests.support.waiting import wait_for

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def secured_cluster(kafka_cluster_factory: Callable[..., KafkaCluster]) -> KafkaCluster:
    return kafka_cluster_factory(
        "S", brokers=3, authorizer=True, sasl=True,
        scram_users={"admin": "admin-secret", "alice": "alice-secret"},
    )


def test_three_brokers_replicate_a_topic(secured_cluster: KafkaCluster, unique_name: Callable[[str], str]) -> None:
    topic = unique_name("rf3")
    admin = secured_cluster.admin()
    create_topic(admin, topic, partitions=3, replication_factor=3)
    # every broker learns of the topic a moment after creation returns
    metadata = wait_for(lambda: (m := admin.list_topics(topic, timeout=10).topics[topic]).partitions and m, 30,
                        "the topic's metadata on every broker")
    assert len(metadata.partitions) == 3
    assert all(len(p.replicas) == 3 for p in metadata.partitions.values())


def test_every_broker_maps_the_class_archive_make_deps_recorded(secured_cluster: KafkaCluster) -> None:
    archive = class_archive.archive_path("kafka")
    assert archive.exists(), f"`make deps` recorded no class archive at {archive}"
    for pid in secured_cluster.pids():
        with open(f"/proc/{pid}/maps", encoding="utf-8") as maps:
            assert str(archive) in maps.read(), f"broker pid {pid} did not map {archive}"


def test_acls_are_enforced_for_scram_users(secured_cluster: KafkaCluster, unique_name: Callable[[str], str]) -> None:
    topic = unique_name("acl")
    admin = secured_cluster.admin()
    create_topic(admin, topic, partitions=1, replication_factor=3)
    produce(secured_cluster.client_config(), topic, [Record(b"k", b"v")])
    alice = secured_cluster.client_config("alice")

    with pytest.raises(Exception, match="(?i)authoriz"):
        consume_all(alice, topic, timeout=15)

    binding = AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, "User:alice", "*",
                         AclOperation.READ, AclPermissionType.ALLOW)
    group_binding = AclBinding(ResourceType.GROUP, "strait-reader-", ResourcePatternType.PREFIXED, "User:alice",
                               "*", AclOperation.READ, AclPermissionType.ALLOW)
    for future in admin.create_acls([binding, group_binding]).values():
        future.result(timeout=15)
    # Each broker applies the new ACLs from the metadata log on its own: one may still refuse for a moment
    records = wait_for(lambda: _consumed_or_refused(alice, topic), 30, "the ACL to reach every broker")
    assert [(r.key, r.value) for r in records] == [(b"k", b"v")]

    with pytest.raises(Exception):
        produce(alice, topic, [Record(b"k2", b"denied")], timeout=10)


def _consumed_or_refused(config: dict[str, str], topic: str) -> list[Record] | None:
    """Every record of ``topic``, or None while a broker still refuses the principal."""
    try:
        return consume_all(config, topic, timeout=30)
    except Exception as exc:  # noqa: BLE001 - only an authorization refusal is retried
        if "authoriz" not in str(exc).lower():
            raise
        return None


def test_admin_user_is_a_super_user_over_sasl(secured_cluster: KafkaCluster) -> None:
    admin = AdminClient({**secured_cluster.client_config("admin"), "logger": _silent()})
    assert len(admin.describe_cluster(request_timeout=10).result(timeout=15).nodes) == 3


def test_wrong_password_is_rejected(secured_cluster: KafkaCluster) -> None:
    admin = AdminClient({**secured_cluster.client_config("alice", "wrong"), "logger": _silent()})
    with pytest.raises(KafkaException):
        admin.describe_cluster(request_timeout=5).result(timeout=10)


def test_a_restarted_node_rejoins(secured_cluster: KafkaCluster, unique_name: Callable[[str], str]) -> None:
    topic = unique_name("restart")
    create_topic(secured_cluster.admin(), topic, partitions=3, replication_factor=3)
    produce(secured_cluster.client_config(), topic, [Record(b"k", str(i).encode(), partition=i % 3) for i in range(30)])
    secured_cluster.restart_node(2)
    assert len(consume_all(secured_cluster.client_config(), topic)) == 30


def _silent() -> logging.Logger:
    silent = logging.getLogger("tests.silent-librdkafka")
    silent.setLevel(logging.CRITICAL)
    return silent
