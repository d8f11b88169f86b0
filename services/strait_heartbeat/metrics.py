"""The heartbeat service's metrics (names per the design's metric contract)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

SERVICE = "heartbeat"

# Seconds from a heartbeat's stamp on the source to the moment its copy is seen on the target.
LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 900.0)

EMITTED = Counter("strait_heartbeats_emitted_total", "Heartbeats written into the flow's source", ["flow"])
AGE = Gauge("strait_heartbeat_age_seconds",
            "Now minus the timestamp of the newest heartbeat replicated to the flow's target", ["flow"])
END_TO_END = Histogram("strait_end_to_end_latency_seconds",
                       "Time a heartbeat copy is seen on the target minus the heartbeat's timestamp", ["flow"],
                       buckets=LATENCY_BUCKETS)
TOPOLOGY_CLUSTERS = Gauge("strait_topology_upstream_clusters",
                          "Clusters whose heartbeats reach this cluster (from heartbeat topic names)",
                          ["cluster"])


def forget(flow: str) -> None:
    """Drop a flow's series when this replica stops working on it."""
    for metric in (AGE, END_TO_END):
        try:
            metric.remove(flow)
        except KeyError:
            pass
