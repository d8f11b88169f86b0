"""configsync on real clusters with StandardAuthorizer: topics, partitions, configs, ACLs, internal topics."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    NewPartitions,
    ResourcePatternType,
    ResourceType,
)

from strait_lab.clients import create_topic
from strait_lab.kafka import KafkaCluster
from tests.integration.test_configsync_support import (
    INTERVAL,
    ConfigSyncProcess,
    acls,
    add_acls,
    alter,
    overrides,
    partitions,
    remove_acls,
    report,
    sync_flow,
    topic_config,
)
from tests.support.config import cluster_entry, strait_config, write_config
from tests.support.waiting import slack, wait_for

TOPIC, GROUP, BROKER = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.BROKER
LIT, PRE = ResourcePatternType.LITERAL, ResourcePatternType.PREFIXED
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
OP = AclOperation
FLOW = "S->T"


def acl(restype: ResourceType, name: str, principal: str, op: AclOperation,
        perm: AclPermissionType = ALLOW, pattern: ResourcePatternType = LIT) -> AclBinding:
    return AclBinding(restype, name, pattern, principal, "*", op, perm)


def _start(configsync: Callable[..., ConfigSyncProcess], tmp_path: Path, source: KafkaCluster,
           target: KafkaCluster, prefix: str, redis_url: str, *args: str) -> ConfigSyncProcess:
    config = strait_config({"S": cluster_entry(source), "T": cluster_entry(target)},
                           [sync_flow("S", "T", [f"{prefix}-.*"], groups=[f"{prefix}-.*"])], redis_url)
    return configsync("--config", str(write_config(tmp_path / "strait.yaml", config)), "--lease-ttl", "5", *args)


def test_topics_partitions_and_configs_follow_the_source(
    secured_clusters: tuple[KafkaCluster, KafkaCluster], configsync: Callable[..., ConfigSyncProcess],
    unique_name: Callable[[str], str], redis_url: str, tmp_path: Path,
) -> None:
    source, target = secured_clusters
    prefix = unique_name("cfg")
    orders, pay, wide = f"{prefix}-orders", f"{prefix}-pay", f"{prefix}-wide"
    create_topic(source.admin(), orders, partitions=3, config={
        "retention.ms": "3600000", "max.message.bytes": "200000", "message.timestamp.type": "LogAppendTime"})
    create_topic(source.admin(), pay, partitions=1)
    create_topic(source.admin(), wide, partitions=2)
    create_topic(target.admin(), f"S.{wide}", partitions=4)  # more partitions than its source: reported
    process = _start(configsync, tmp_path, source, target, prefix, redis_url)

    wait_for(lambda: partitions(target, f"S.{orders}") == 3 and partitions(target, f"S.{pay}") == 1, 30,
             "remote topics with the source's partitions")
    remote = overrides(target, f"S.{orders}")
    assert remote["retention.ms"] == "3600000" and remote["max.message.bytes"] == "200000"
    assert "message.timestamp.type" not in remote, "an excluded property was propagated"
    assert "segment.bytes" not in remote, "use.defaults.from=target (MM2's default): the target's defaults apply"

    # internal topics of the flow, with MM2's settings
    for cluster, name in ((target, "heartbeats"), (target, "S.checkpoints.internal"),
                          (source, "heartbeats"), (source, "mm2-offset-syncs.T.internal")):
        wait_for(lambda c=cluster, n=name: partitions(c, n) == 1, 20, f"internal topic {name} on {cluster.alias}")
        assert topic_config(cluster, name)["cleanup.policy"][0] == "compact"

    # a target-only override is kept while the source's retention change arrives within one interval
    alter(target, f"S.{orders}", {"segment.ms": "86400000"})
    alter(source, orders, {"retention.ms": "7200000"})
    changed = time.monotonic()
    wait_for(lambda: overrides(target, f"S.{orders}").get("retention.ms") == "7200000", 10,
             "retention.ms change on the remote topic", interval=0.2)
    assert time.monotonic() - changed < INTERVAL + slack(2.0)
    assert overrides(target, f"S.{orders}")["segment.ms"] == "86400000"

    # a property the source stops setting is removed on the target (strait set it), the override stays
    alter(source, orders, delete=["max.message.bytes"])
    wait_for(lambda: "max.message.bytes" not in overrides(target, f"S.{orders}"), 10, "max.message.bytes reset")
    assert overrides(target, f"S.{orders}")["segment.ms"] == "86400000"

    # partition growth is followed; a remote topic with more partitions is reported, never shrunk
    admin = source.admin()
    admin.create_partitions([NewPartitions(orders, 5)])[orders].result(timeout=30)
    wait_for(lambda: partitions(target, f"S.{orders}") == 5, 10, "partition growth on the remote topic")
    # in sync: orders, pay and S.heartbeats (heartbeats are replicated whatever the topic filter says)
    drift = wait_for(lambda: (r := report(redis_url, FLOW)) and r["partition_mismatch_count"] == 1 and
                     r["topics_in_sync"] == 3 and r, 10, "drift report")
    assert drift["partition_mismatch"] == [{"topic": f"S.{wide}", "source": 2, "target": 4}]
    assert partitions(target, f"S.{wide}") == 4
    assert process.sample("strait_topics_in_sync", flow=FLOW) == 3
    assert process.sample("strait_topics_partition_mismatch", flow=FLOW) == 1
    assert process.sample("strait_topics_missing", flow=FLOW) == 0
    assert process.sample("strait_topic_config_drift", flow=FLOW) == 0
    assert process.sample("strait_leader", service="configsync", item=FLOW) == 1
    assert process.sample("strait_service_up", service="configsync") == 1
    assert process.sample("strait_flow_state", flow=FLOW, state="running", service="configsync") == 1


def test_acls_follow_mm2_rules_plus_prefixed_and_group_acls(
    secured_clusters: tuple[KafkaCluster, KafkaCluster], configsync: Callable[..., ConfigSyncProcess],
    unique_name: Callable[[str], str], redis_url: str, tmp_path: Path,
) -> None:
    source, target = secured_clusters
    prefix = unique_name("acl")
    topic, group = f"{prefix}-orders", f"{prefix}-app"
    create_topic(source.admin(), topic)
    add_acls(source, [
        acl(TOPIC, topic, "User:reader", OP.READ),
        acl(TOPIC, topic, "User:writer", OP.WRITE),
        acl(TOPIC, topic, "User:owner", OP.ALL),
        acl(TOPIC, topic, "User:blocked", OP.READ, DENY),
        acl(TOPIC, f"{prefix}-", "User:team", OP.READ, pattern=PRE),
        acl(TOPIC, f"{prefix}-", "User:team", OP.WRITE, pattern=PRE),
        acl(GROUP, group, "User:reader", OP.READ),
        acl(GROUP, f"{prefix}-", "User:team", OP.READ, pattern=PRE),
        acl(GROUP, group, "User:reader", OP.DELETE),
        acl(BROKER, "kafka-cluster", f"User:{prefix}", OP.ALTER),
    ])
    expected = {
        acl(TOPIC, f"S.{topic}", "User:reader", OP.READ),
        acl(TOPIC, f"S.{topic}", "User:owner", OP.READ),
        acl(TOPIC, f"S.{topic}", "User:blocked", OP.READ, DENY),
        acl(TOPIC, f"S.{prefix}-", "User:team", OP.READ, pattern=PRE),
        acl(GROUP, group, "User:reader", OP.READ),
        acl(GROUP, f"{prefix}-", "User:team", OP.READ, pattern=PRE),
    }

    def ours() -> set[AclBinding]:
        return {b for b in acls(target) if prefix in b.name or prefix in b.principal}

    process = _start(configsync, tmp_path, source, target, prefix, redis_url)
    wait_for(lambda: ours() == expected, 20, "target ACLs by the sync rules")

    # deleted on the source: reported, kept on the target (no --delete-acls)
    remove_acls(source, [acl(TOPIC, topic, "User:reader", OP.READ)])
    gone = "ALLOW User:reader READ on TOPIC S." + topic + " (LITERAL) from *"
    wait_for(lambda: (r := report(redis_url, FLOW)) and r["acls_deleted_on_source"] == [gone], 10,
             "ACL deleted on the source in the drift report")
    assert process.sample("strait_acl_drift", flow=FLOW) == 1
    assert ours() == expected


def test_acls_deleted_on_the_source_are_removed_with_delete_acls(
    secured_clusters: tuple[KafkaCluster, KafkaCluster], configsync: Callable[..., ConfigSyncProcess],
    unique_name: Callable[[str], str], redis_url: str, tmp_path: Path,
) -> None:
    source, target = secured_clusters
    prefix = unique_name("del")
    topic = f"{prefix}-orders"
    create_topic(source.admin(), topic)
    reader, team = acl(TOPIC, topic, "User:reader", OP.READ), acl(TOPIC, topic, "User:team", OP.DESCRIBE)
    add_acls(source, [reader, team])
    operator_own = acl(TOPIC, f"S.{topic}", "User:ops", OP.DESCRIBE)  # made on the target alone: never touched
    add_acls(target, [operator_own])
    _start(configsync, tmp_path, source, target, prefix, redis_url, "--delete-acls")
    remote_reader = acl(TOPIC, f"S.{topic}", "User:reader", OP.READ)
    wait_for(lambda: remote_reader in acls(target), 20, "ACL copied to the target")

    remove_acls(source, [reader])
    wait_for(lambda: remote_reader not in acls(target), 10, "ACL removed from the target")
    assert {acl(TOPIC, f"S.{topic}", "User:team", OP.DESCRIBE), operator_own} <= acls(target)
    wait_for(lambda: (r := report(redis_url, FLOW)) and r["acl_drift"] == 0, 10, "no ACL drift")


def test_use_defaults_from_source_sets_the_source_defaults_on_the_remote_topic(
    secured_clusters: tuple[KafkaCluster, KafkaCluster], configsync: Callable[..., ConfigSyncProcess],
    unique_name: Callable[[str], str], redis_url: str, tmp_path: Path,
) -> None:
    """MM2's use.defaults.from=source: a property the source topic has at its default is SET on the
    remote topic with the source's value (the default, target, leaves the target's own default)."""
    source, target = secured_clusters
    prefix = unique_name("defaults")
    plain, tuned = f"{prefix}-plain", f"{prefix}-tuned"
    create_topic(source.admin(), plain, partitions=1)
    create_topic(source.admin(), tuned, partitions=1, config={"retention.ms": "3600000"})
    flows = [sync_flow("S", "T", [f"{prefix}-.*"], use_defaults_from="source")]
    config = strait_config({"S": cluster_entry(source), "T": cluster_entry(target)}, flows, redis_url)
    configsync("--config", str(write_config(tmp_path / "strait.yaml", config)), "--lease-ttl", "5")

    for remote in (f"S.{plain}", f"S.{tuned}"):  # created one after the other: wait for each
        wait_for(lambda r=remote: r in target.admin().list_topics(timeout=10).topics
                 and "segment.bytes" in overrides(target, r), 30, f"the source's defaults on {remote}")
    described = topic_config(source, plain)
    for remote in (f"S.{plain}", f"S.{tuned}"):
        pinned = overrides(target, remote)
        for name in ("segment.bytes", "cleanup.policy", "max.message.bytes"):
            assert pinned[name] == described[name][0], f"{remote}: {name}"
        assert "min.insync.replicas" not in pinned, "an excluded property was set"
    assert overrides(target, f"S.{tuned}")["retention.ms"] == "3600000"
