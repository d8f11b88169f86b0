"""Three configsync replicas as processes: flows spread over them, one holder per flow, and a killed
replica's flow moves to a survivor within one lease TTL."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import redis

from strait.coord.leases import Leases
from strait_lab.clients import create_topic
from strait_lab.kafka import KafkaCluster
from tests.integration.test_configsync_support import ConfigSyncProcess, partitions, sync_flow
from tests.support.config import cluster_entry, strait_config, write_config
from tests.support.waiting import wait_for

pytestmark = pytest.mark.usefixtures("alone_in_module")  # hand-over within a lease TTL

LEASE_TTL = 4.0
ALIASES = ("A1", "A2", "A3")
FLOWS = tuple(f"{alias}->B" for alias in ALIASES)


def _holders(replicas: list[ConfigSyncProcess]) -> dict[str, list[int]]:
    """For each flow, the replicas (by index) whose /metrics say they hold it."""
    held: dict[str, list[int]] = {flow: [] for flow in FLOWS}
    for index, replica in enumerate(replicas):
        if not replica.process.alive():
            continue
        for flow in FLOWS:
            if replica.sample("strait_leader", service="configsync", item=flow) == 1:
                held[flow].append(index)
    return held


def _lease_ports(client: redis.Redis) -> dict[str, str | None]:
    """For each flow, the metrics port of the member that holds its lease in Redis."""
    leases = Leases(client)
    meta = {k.decode(): json.loads(v) for k, v in client.hgetall("strait:members:configsync:meta").items()}
    result: dict[str, str | None] = {}
    for flow in FLOWS:
        owner = leases.owner(f"configsync:{flow}")
        result[flow] = meta.get(owner.holder, {}).get("metrics_port") if owner else None
    return result


def test_three_replicas_share_flows_and_take_over_a_killed_one(
    source_cluster: KafkaCluster, target_cluster: KafkaCluster, configsync: Callable[..., ConfigSyncProcess],
    unique_name: Callable[[str], str], redis_url: str, tmp_path: Path,
) -> None:
    prefix = unique_name("scale")
    clusters = {alias: cluster_entry(source_cluster) for alias in ALIASES} | {"B": cluster_entry(target_cluster)}
    flows = [sync_flow(alias, "B", [f"{prefix}-{alias}-.*"]) for alias in ALIASES]
    config = write_config(tmp_path / "strait.yaml", strait_config(clusters, flows, redis_url))
    for alias in ALIASES:
        create_topic(source_cluster.admin(), f"{prefix}-{alias}-t0")
    replicas = [configsync("--config", str(config), "--lease-ttl", str(LEASE_TTL)) for _ in range(3)]

    def one_each() -> bool:
        held = _holders(replicas)
        return all(len(h) == 1 for h in held.values()) and sorted(h[0] for h in held.values()) == [0, 1, 2]

    wait_for(one_each, 30, "one flow per replica", interval=0.5)
    client = redis.Redis.from_url(redis_url)
    ports = _lease_ports(client)
    held = _holders(replicas)
    for flow in FLOWS:  # metrics and Redis agree on who holds each flow
        assert ports[flow] == str(replicas[held[flow][0]].metrics_port)
    for alias in ALIASES:
        wait_for(lambda a=alias: partitions(target_cluster, f"{a}.{prefix}-{a}-t0") == 1, 20, f"{alias} synced")

    victim_flow = "A2->B"
    victim = held[victim_flow][0]
    survivors_before = {flow: held[flow] for flow in FLOWS if flow != victim_flow}
    replicas[victim].kill()
    killed = time.monotonic()
    new_holder = wait_for(lambda: (h := _holders(replicas)[victim_flow]) and h[0] != victim and h, 3 * LEASE_TTL,
                          "the killed replica's flow taken over", interval=0.2)
    moved_after = time.monotonic() - killed
    # one TTL for the lease and the membership to expire, plus one control tick and one scrape
    assert moved_after <= LEASE_TTL + 1.5, f"hand-over took {moved_after:.1f}s"
    assert len(new_holder) == 1
    # A starved replica may drop a renewal for a moment under load; what matters is where flows settle.
    wait_for(lambda: {flow: _holders(replicas)[flow] for flow in survivors_before} == survivors_before,
             2 * LEASE_TTL, "the surviving replicas keeping their flows", interval=0.5)
    assert _lease_ports(client)[victim_flow] == str(replicas[new_holder[0]].metrics_port)

    create_topic(source_cluster.admin(), f"{prefix}-A2-t1", partitions=2)
    wait_for(lambda: partitions(target_cluster, f"A2.{prefix}-A2-t1") == 2, 15, "the moved flow keeps syncing")
