"""The compatibility matrix: strait between clusters of Kafka 2.4 and 3.9 (ZooKeeper mode) and today's
Kafka 4 (KRaft), in every direction.

Each pair runs what a migration or a disaster-recovery copy uses, through the services and the
command line: the copy (byte-identical, `strait verify`), offset syncs (a group's offsets translate
exactly), checkpoints, topic config and ACL sync, and the failover (the group's exact offsets written
on the target). `make test` runs the short form, 2.4 -> 3.9, which puts both old lines on both
sides of the work; `make test-compat` (``STRAIT_COMPAT=full``) runs all eight pairs but 4 -> 4,
which the rest of the suite covers.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AclBinding, AclOperation, AclPermissionType, ResourcePatternType, ResourceType

from strait.config import load_config
from strait.config.store import apply_config
from strait.records import Checkpoint
from strait.translation import committed_offsets
from strait_lab.clients import Record, consume_all, create_topic, produce
from strait_lab.kafka import DEFAULT_KAFKA_VERSION, KAFKA_VERSIONS, KafkaCluster
from strait_lab.services import StraitProcess
from tests.integration.compat_support import FULL
from tests.integration.test_configsync_support import acls, add_acls, overrides
from tests.support.cli import strait
from tests.support.config import flow_config, write_config
from tests.support.kafka import commit_offsets, count
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.slow, pytest.mark.compat]

PAIRS = [(s, t) for s in KAFKA_VERSIONS for t in KAFKA_VERSIONS if (s, t) != (DEFAULT_KAFKA_VERSION,) * 2] \
    if FULL else [("2.4", "3.9")]
PARTITIONS = 3
RECORDS = 300
COMMITTED = {0: 40, 1: 70, 2: 100}  # the group's offsets on the source, per partition
TOPIC_SETTING = ("retention.ms", "123456789")
READER = "User:compat-reader"


@pytest.fixture(scope="module")
def clusters(kafka_cluster_factory: Callable[..., KafkaCluster]) -> Iterator[Callable[[str, str], KafkaCluster]]:
    """``clusters(version, side)``: one source and one target cluster per Kafka version (aliases such as
    ``k39a`` and ``k39b``), started when a pair first needs it, with the ACL authorizer on."""
    started: dict[tuple[str, str], KafkaCluster] = {}

    def of(version: str, side: str) -> KafkaCluster:
        if (version, side) not in started:
            alias = f"k{version.replace('.', '')}{side}"
            started[version, side] = kafka_cluster_factory(alias, version=version, authorizer=True)
        return started[version, side]

    yield of
    for cluster in started.values():  # not kept for the rest of the session on a 2-core machine
        cluster.stop()


@pytest.mark.parametrize(("source_version", "target_version"), PAIRS, ids=[f"{s}-to-{t}" for s, t in PAIRS])
def test_strait_replicates_syncs_and_fails_over_between_kafka_versions(
    source_version: str, target_version: str, clusters: Callable[[str, str], KafkaCluster], redis_url: str,
    services: Callable[..., StraitProcess], unique_name: Callable[[str], str], tmp_path: Path,
) -> None:
    source, target = clusters(source_version, "a"), clusters(target_version, "b")
    flow = f"{source.alias}->{target.alias}"
    topic, group = unique_name("compat"), unique_name("compat-app")
    remote = f"{source.alias}.{topic}"
    create_topic(source.admin(), topic, partitions=PARTITIONS, config=dict([TOPIC_SETTING]))
    add_acls(source, [AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, READER, "*",
                                 AclOperation.READ, AclPermissionType.ALLOW)])
    now_ms = int(time.time() * 1000)  # within the topic's retention
    sent = [Record(f"k{i}".encode(), f"v{i}".encode() * (i % 7 + 1), (("trace", f"t{i}".encode()),),
                   now_ms - RECORDS + i, i % PARTITIONS) for i in range(RECORDS)]
    assert produce(source.client_config(), topic, sent) == RECORDS
    commit_offsets(source, group, [TopicPartition(topic, p, offset) for p, offset in COMMITTED.items()])

    _apply(source, target, topic, group, redis_url, tmp_path)
    for service in ("replicator", "configsync", "checkpoint"):
        services(service, "--redis-url", redis_url, *(() if service == "replicator" else ("--lease-ttl", "5")))

    wait_for(lambda: count(target, remote) == RECORDS, 180, f"{remote} copied to Kafka {target_version}")
    wait_for(lambda: overrides(target, remote).get(TOPIC_SETTING[0]) == TOPIC_SETTING[1], 60,
             "the topic's retention synced")
    wait_for(lambda: any(b.name == remote and b.principal == READER for b in acls(target)), 60, "the topic's ACL synced")
    wait_for(lambda: _checkpointed(target, source.alias, group) == COMMITTED, 90, "the group's checkpoints")

    translated = strait("offsets", "translate", "--flow", flow, "--group", group, "--json",
                        "--redis-url", redis_url, timeout=300, show=True)
    rows = json.loads(translated.stdout)["partitions"]
    assert {row["partition"]: row["downstream"] for row in rows} == COMMITTED, translated.stdout

    verified = strait("verify", "--flow", flow, "--topic", topic, "--redis-url", redis_url,
                      timeout=300, show=True)
    assert verified.returncode == 0, verified.stdout + verified.stderr

    moved = strait("failover", "--flow", flow, "--group", group, "--json", "--redis-url", redis_url,
                   timeout=300, show=True)
    assert moved.returncode == 0, moved.stdout + moved.stderr
    report = json.loads(moved.stdout)
    assert report["drained"] and report["clean"], report
    partitions = [TopicPartition(remote, p) for p in range(PARTITIONS)]
    on_target = {c.partition: c.offset for c in committed_offsets(target.client_config(), target.alias, group,
                                                                     partitions)}
    assert on_target == COMMITTED


def _apply(source: KafkaCluster, target: KafkaCluster, topic: str, group: str, redis_url: str,
           tmp_path: Path) -> None:
    schedule = {"enabled": True, "interval_seconds": 2}
    config = flow_config(source, target, [topic], redis_url=redis_url, groups={"include": [group]},
                         refresh_topics=schedule, sync_topic_configs=schedule, sync_topic_acls=schedule,
                         emit_checkpoints={"enabled": True, "interval_seconds": 1})
    apply_config(redis.Redis.from_url(redis_url), load_config(write_config(tmp_path / "strait.yaml", config)),
                 "compat")


def _checkpointed(target: KafkaCluster, source_alias: str, group: str) -> dict[int, int]:
    """The newest checkpoint's downstream offset per partition for ``group``."""
    topic = f"{source_alias}.checkpoints.internal"
    if topic not in target.admin().list_topics(timeout=10).topics:
        return {}
    newest: dict[int, int] = {}
    for record in consume_all(target.client_config(), topic):
        checkpoint = Checkpoint.from_record(record.key, record.value)
        if checkpoint.group == group:
            newest[checkpoint.partition] = checkpoint.downstream_offset
    return newest
