"""Topology from heartbeat topic names, as MM2's MirrorClient derives it."""

from __future__ import annotations

import json

from strait.policy import DefaultReplicationPolicy
from strait_heartbeat.topology import cluster_topology, upstream_hops


def test_hops_follow_nested_prefixes() -> None:
    policy = DefaultReplicationPolicy()
    assert upstream_hops(policy, "heartbeats") == {}
    assert upstream_hops(policy, "A.heartbeats") == {"A": 1}
    assert upstream_hops(policy, "B.A.heartbeats") == {"B": 1, "A": 2}


def test_cluster_topology_keeps_the_shortest_path_and_only_heartbeat_topics() -> None:
    topics = ["heartbeats", "A.heartbeats", "C.A.heartbeats", "C.heartbeats", "A.orders", "mm2-offset-syncs.B.internal"]
    topology = cluster_topology(DefaultReplicationPolicy(), "B", topics)
    assert topology.heartbeat_topics == ("A.heartbeats", "C.A.heartbeats", "C.heartbeats", "heartbeats")
    assert topology.upstream_clusters == {"A": 1, "C": 1}
    assert json.loads(topology.to_json())["upstream_clusters"] == {"A": 1, "C": 1}
