"""The lab's older Kafka release lines (ZooKeeper mode), which compatibility tests run strait against.

One 1-broker cluster per version, with SCRAM users and the ACL authorizer of its era (and TLS where
the version reads PEM stores), started once for the module's tests of that version, with
`make test-compat` only. Today's KRaft clusters are covered by test_lab_clusters.py.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from confluent_kafka.admin import AclBinding, AclOperation, AclPermissionType, ResourcePatternType, ResourceType

from strait_lab.clients import Record, consume_all, create_topic, produce
from strait_lab.errors import LabError
from strait_lab.kafka import (
    ACL_AUTHORIZER,
    DEFAULT_KAFKA_VERSION,
    KAFKA_VERSIONS,
    KafkaCluster,
    KafkaClusterSpec,
    kafka_version,
)
from tests.integration.compat_support import FULL

pytestmark = pytest.mark.compat

OLD_VERSIONS = [v for v in KAFKA_VERSIONS if kafka_version(v).zookeeper]
USERS = {"admin": "admin-secret", "alice": "alice-secret"}
# Properties only KRaft-era brokers know: an older broker must not be given them.
_KRAFT_ONLY = ("process.roles", "node.id", "controller.", "share.")


@pytest.fixture(scope="module", params=OLD_VERSIONS)
def old_cluster(request: pytest.FixtureRequest,
                kafka_cluster_factory: Callable[..., KafkaCluster]) -> Iterator[KafkaCluster]:
    if not FULL:
        pytest.skip("the old clusters' own checks run with `make test-compat` (STRAIT_COMPAT=full); in make test "
                    "the compatibility matrix starts 2.4 and 3.9 clusters and replicates between them")
    version: str = request.param
    cluster = kafka_cluster_factory(f"K{version.replace('.', '')}", version=version, sasl=True, authorizer=True,
                                    tls=kafka_version(version).pem_stores, scram_users=USERS)
    yield cluster
    cluster.stop()  # the next version's cluster starts on a machine free of this one


def test_the_default_is_todays_kraft_kafka_and_old_lines_run_zookeeper() -> None:
    assert KafkaClusterSpec("A").version == DEFAULT_KAFKA_VERSION == KAFKA_VERSIONS[0]
    assert not kafka_version(DEFAULT_KAFKA_VERSION).zookeeper
    assert {"3.9", "2.4"} <= set(OLD_VERSIONS)


def test_an_unknown_version_is_refused_naming_the_known_ones() -> None:
    with pytest.raises(LabError, match=r"unknown Kafka version '2\.0'.*known: 4, 3\.9, 2\.4"):
        KafkaClusterSpec("A", version="2.0")


def test_tls_is_refused_for_a_version_without_pem_stores() -> None:
    with pytest.raises(LabError, match="Kafka 2.4 cannot read PEM key stores"):
        KafkaClusterSpec("A", version="2.4", tls=True)


def test_brokers_run_in_zookeeper_mode_with_their_eras_settings(old_cluster: KafkaCluster) -> None:
    assert old_cluster.zookeeper and old_cluster.zookeeper_server is not None
    props = dict(line.split("=", 1) for line in
                 (old_cluster.workdir / "node1" / "server.properties").read_text().splitlines())
    assert props["broker.id"] == "1"
    assert props["zookeeper.connect"] == old_cluster.zookeeper_connect
    assert props["authorizer.class.name"] == ACL_AUTHORIZER
    assert props["super.users"] == "User:admin;User:ANONYMOUS"
    assert [key for key in props if key.startswith(_KRAFT_ONLY)] == []
    assert old_cluster.zookeeper_server.process is not None
    assert old_cluster.zookeeper_server.process.pid in old_cluster.pids()
    assert old_cluster.log_paths()[-1] == old_cluster.zookeeper_server.log_path


def test_broker_logs_at_info_through_one_slf4j_binding(old_cluster: KafkaCluster) -> None:
    broker_log = old_cluster.log_paths()[0].read_text(errors="replace")
    assert "INFO [KafkaServer id=1] started (kafka.server.KafkaServer)" in broker_log
    assert "SLF4J:" not in broker_log  # no "multiple bindings" nor "no binding" notice
    assert " INFO " in old_cluster.log_paths()[-1].read_text(errors="replace")


def test_keyed_records_with_headers_round_trip(old_cluster: KafkaCluster, unique_name: Callable[[str], str]) -> None:
    topic = unique_name("round-trip")
    create_topic(old_cluster.admin(), topic, partitions=2)
    sent = [Record(f"k{i}".encode(), f"v{i}".encode(), (("h", f"{i}".encode()), ("empty", None)), partition=i % 2)
            for i in range(10)]
    produce(old_cluster.client_config(), topic, sent)
    received = consume_all(old_cluster.client_config(), topic)
    assert sorted((r.key, r.value, r.headers, r.partition) for r in received) == sorted(
        (r.key, r.value, r.headers, r.partition) for r in sent)


def test_acls_are_enforced_for_scram_users(old_cluster: KafkaCluster, unique_name: Callable[[str], str]) -> None:
    topic = unique_name("acl")
    admin = old_cluster.admin()
    create_topic(admin, topic)
    produce(old_cluster.client_config(), topic, [Record(b"k", b"v")])
    alice = old_cluster.client_config("alice")

    with pytest.raises(Exception, match="(?i)authoriz"):
        consume_all(alice, topic, timeout=15)

    bindings = [AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, "User:alice", "*",
                           AclOperation.READ, AclPermissionType.ALLOW),
                AclBinding(ResourceType.GROUP, "strait-reader-", ResourcePatternType.PREFIXED, "User:alice", "*",
                           AclOperation.READ, AclPermissionType.ALLOW)]
    for future in admin.create_acls(bindings).values():
        future.result(timeout=15)
    assert [(r.key, r.value) for r in consume_all(alice, topic, timeout=30)] == [(b"k", b"v")]
    with pytest.raises(Exception):
        produce(alice, topic, [Record(b"k2", b"denied")], timeout=10)


def test_tls_listeners_where_the_version_reads_pem(old_cluster: KafkaCluster,
                                                   unique_name: Callable[[str], str]) -> None:
    if not old_cluster.spec.tls:
        pytest.skip(f"Kafka {old_cluster.spec.version} cannot read PEM stores; its clusters run without TLS")
    topic = unique_name("tls")
    create_topic(old_cluster.admin(), topic)
    produce(old_cluster.client_config(tls=True), topic, [Record(b"k", b"over-ssl")])
    records = consume_all(old_cluster.client_config("admin", tls=True), topic)
    assert [(r.key, r.value) for r in records] == [(b"k", b"over-ssl")]


def test_a_restarted_node_rejoins(old_cluster: KafkaCluster, unique_name: Callable[[str], str]) -> None:
    topic = unique_name("restart")
    create_topic(old_cluster.admin(), topic, partitions=3)
    produce(old_cluster.client_config(), topic, [Record(b"k", str(i).encode(), partition=i % 3) for i in range(30)])
    zookeeper_pid = old_cluster.zookeeper_server.process.pid  # type: ignore[union-attr]
    old_cluster.restart_node(0)
    assert len(consume_all(old_cluster.client_config(), topic)) == 30
    assert len(consume_all(old_cluster.client_config("admin"), topic)) == 30  # SCRAM users survive too
    assert old_cluster.zookeeper_server.process.pid == zookeeper_pid  # type: ignore[union-attr]
