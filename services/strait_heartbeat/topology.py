"""The replication topology as MM2's MirrorClient sees it: from the names of heartbeat topics only.

``A.heartbeats`` on a cluster means heartbeats of A reach it in one hop; ``B.A.heartbeats`` means A's
reach it through B in two hops. The topology of each cluster is published to Redis as JSON at
``<namespace>:topology:<alias>`` for `strait status`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field

from strait.policy import ReplicationPolicy


@dataclass(frozen=True)
class ClusterTopology:
    """What one cluster's heartbeat topics say about who replicates into it."""

    cluster: str
    heartbeat_topics: tuple[str, ...]
    upstream_clusters: dict[str, int] = field(default_factory=dict)  # alias -> fewest hops
    updated_at: float = 0.0

    def to_json(self) -> str:
        """The published form."""
        return json.dumps({**asdict(self), "heartbeat_topics": list(self.heartbeat_topics)}, sort_keys=True)


def topology_key(namespace: str, alias: str) -> str:
    """The Redis key of a cluster's topology."""
    return f"{namespace}:topology:{alias}"


def upstream_hops(policy: ReplicationPolicy, topic: str) -> dict[str, int]:
    """Every cluster a (replicated) heartbeat topic passed through, with its distance in hops."""
    hops: dict[str, int] = {}
    current, distance, seen = topic, 1, set()
    while current not in seen:
        seen.add(current)
        source = policy.topic_source(current)
        if source is None:
            break
        hops.setdefault(source, distance)
        upstream = policy.upstream_topic(current)
        if upstream is None or upstream == current:
            break
        current, distance = upstream, distance + 1
    return hops


def cluster_topology(policy: ReplicationPolicy, alias: str, topics: Iterable[str]) -> ClusterTopology:
    """The topology of cluster ``alias`` from its topic names."""
    heartbeat_topics = tuple(sorted(t for t in topics if policy.is_heartbeats_topic(t)))
    upstream: dict[str, int] = {}
    for topic in heartbeat_topics:
        for source, distance in upstream_hops(policy, topic).items():
            upstream[source] = min(distance, upstream.get(source, distance))
    return ClusterTopology(alias, heartbeat_topics, dict(sorted(upstream.items())), time.time())
