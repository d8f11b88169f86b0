"""configsync's failures on real clusters: a principal without ALTER, a config the target rejects, an
unreachable cluster. Each gets a message naming topic and cluster, a metric and a retry (the shared
cluster retry policy), while the rest of the work goes on and the process keeps running."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

from confluent_kafka.admin import AclBinding, AclOperation, AclPermissionType, ResourcePatternType, ResourceType

from strait_lab.clients import create_topic
from strait_lab.kafka import KafkaCluster
from strait_lab.ports import free_port
from tests.integration.test_configsync_support import (
    STRAIT_USER,
    ConfigSyncProcess,
    add_acls,
    alter,
    overrides,
    partitions,
    report,
    sync_flow,
)
from tests.support.config import cluster_entry, strait_config, write_config
from tests.support.waiting import wait_for

ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
PRINCIPAL = f"User:{STRAIT_USER}"


def grant(restype: ResourceType, name: str, op: AclOperation, perm: AclPermissionType = ALLOW,
          pattern: ResourcePatternType = ResourcePatternType.LITERAL, principal: str = PRINCIPAL) -> AclBinding:
    return AclBinding(restype, name, pattern, principal, "*", op, perm)


def _errors(redis_url: str, flow: str, kind: str) -> list[str]:
    current = report(redis_url, flow) or {"errors": []}
    return [e["message"] for e in current["errors"] if e["kind"] == kind]


def test_permission_rejection_and_unreachable_cluster_are_reported_and_retried(
    secured_clusters: tuple[KafkaCluster, KafkaCluster], configsync: Callable[..., ConfigSyncProcess],
    unique_name: Callable[[str], str], redis_url: str, tmp_path: Path,
) -> None:
    source, target = secured_clusters
    prefix = unique_name("err")
    ok, locked, conflict = f"{prefix}-ok", f"{prefix}-locked", f"{prefix}-conflict"
    for topic in (ok, locked):
        create_topic(source.admin(), topic, config={"retention.ms": "3600000"})
    create_topic(source.admin(), conflict, config={"min.compaction.lag.ms": "3600000"})
    # an override made on the target alone, which the source's value conflicts with
    create_topic(target.admin(), f"S.{conflict}", config={"max.compaction.lag.ms": "60000"})
    add_acls(source, [grant(ResourceType.TOPIC, ok, AclOperation.READ, principal="User:reader")])
    # strait's principal on T: everything on its topics, but no ALTER_CONFIGS on one and no ALTER on the cluster
    add_acls(target, [
        grant(ResourceType.TOPIC, "S.", AclOperation.ALL, pattern=ResourcePatternType.PREFIXED),
        grant(ResourceType.TOPIC, "heartbeats", AclOperation.ALL),
        grant(ResourceType.BROKER, "kafka-cluster", AclOperation.DESCRIBE),
        grant(ResourceType.TOPIC, f"S.{locked}", AclOperation.ALTER_CONFIGS, DENY),
    ])
    clusters = {"S": cluster_entry(source), "T": cluster_entry(target, STRAIT_USER),
                "X": {"bootstrap_servers": f"127.0.0.1:{free_port()}"}}
    flows = [sync_flow("S", "T", [f"{prefix}-.*"]), sync_flow("X", "T", [f"{prefix}-.*"])]
    config = write_config(tmp_path / "strait.yaml", strait_config(clusters, flows, redis_url))
    process = configsync("--config", str(config), "--lease-ttl", "5", "--admin-timeout", "3")

    wait_for(lambda: partitions(target, f"S.{ok}") == 1 and partitions(target, f"S.{locked}") == 1, 30,
             "remote topics created by the limited principal")
    alter(source, ok, {"retention.ms": "7200000"})
    alter(source, locked, {"retention.ms": "7200000"})
    wait_for(lambda: overrides(target, f"S.{ok}").get("retention.ms") == "7200000", 10,
             "the allowed topic's change, despite the failing ones")

    denied = wait_for(lambda: [m for m in _errors(redis_url, "S->T", "permission") if f"S.{locked}" in m], 15,
                      "permission error for the locked topic")
    assert "cluster T" in denied[0] and "not authorized" in denied[0]
    rejected = wait_for(lambda: _errors(redis_url, "S->T", "rejected"), 15, "the target's rejection")
    assert f"S.{conflict}" in rejected[0] and "cluster T" in rejected[0] and "min.compaction.lag.ms" in rejected[0]
    acl_denied = wait_for(lambda: [m for m in _errors(redis_url, "S->T", "permission") if "creating ACL" in m], 15,
                          "permission error creating ACLs")
    assert "cluster T" in acl_denied[0]
    assert overrides(target, f"S.{locked}")["retention.ms"] == "3600000"
    assert overrides(target, f"S.{conflict}") == {"max.compaction.lag.ms": "60000"}, "target override kept"

    unreachable = wait_for(lambda: _errors(redis_url, "X->T", "unreachable"), 20, "unreachable cluster X")
    assert "cluster X" in unreachable[0]
    # the shared cluster retry policy: 0.5 s doubling up to 4 s, never more (a cluster back is synced at once)
    wait_for(lambda: re.search(r"flow=X->T kind=unreachable sync pass failed, retry_in=4\.0s", process.log_text()),
             60, "backoff doubling to 4 s")
    retries = re.findall(r"flow=X->T kind=unreachable sync pass failed, retry_in=([0-9.]+)s", process.log_text())
    assert retries[:4] == ["0.5", "1.0", "2.0", "4.0"] and max(map(float, retries)) == 4.0, retries

    for kind, flow in (("permission", "S->T"), ("rejected", "S->T"), ("unreachable", "X->T")):
        assert (process.sample("strait_errors_total", service="configsync", flow=flow, kind=kind) or 0) >= 1, kind
    assert process.sample("strait_topic_config_drift", flow="S->T") == 2
    assert process.sample("strait_acl_drift", flow="S->T") == 1
    assert process.sample("strait_flow_state", flow="X->T", state="error", service="configsync") == 1
    assert process.process.alive(), "configsync must keep running"
