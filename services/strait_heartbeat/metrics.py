"""The heartbeat service's metrics (names per the design's metric contract)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

SERVICE = "heartbeat"

# Seconds from a heartbeat's stamp on the source to the moment its copy is seen on the target.
LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 900.0)

EMITTED = Counter("strait_heartbeats_emitted_total",
                  "Heartbeats written into a heartbeats topic of the flow's (its source's and its target's)",
                  ["flow", "cluster"])
AGE = Gauge("strait_heartbeat_age_seconds",
            "Now minus the timestamp of the newest heartbeat replicated to the flow's target", ["flow"])
END_TO_END = Histogram("strait_end_to_end_latency_seconds",
                       "Time a heartbeat copy is seen on the target minus the heartbeat's timestamp", ["flow"],
                       buckets=LATENCY_BUCKETS)
LAG_SECONDS = Gauge("strait_replication_lag_seconds",
                    "Age of the oldest source record not yet on the target (0 when caught up); keeps growing "
                    "while the source is gone with records uncopied", ["flow", "topic", "partition"])
RPO_RECORDS = Gauge("strait_failover_rpo_records",
                    "Records on the source (as last seen) not copied yet: what an unplanned failover now would lose",
                    ["flow"])
SOURCE_LAST_SEEN = Gauge("strait_source_last_seen_timestamp_seconds",
                         "Unix time the flow's source cluster last answered the source watch", ["flow"])
TOPOLOGY_CLUSTERS = Gauge("strait_topology_upstream_clusters",
                          "Clusters whose heartbeats reach this cluster (from heartbeat topic names)",
                          ["cluster"])


def forget(flow: str) -> None:
    """Drop a flow's series when this replica stops working on it."""
    for metric in (AGE, END_TO_END, RPO_RECORDS, SOURCE_LAST_SEEN):
        try:
            metric.remove(flow)
        except KeyError:
            pass
    forget_partitions(flow)


def forget_partitions(flow: str, keep: set[tuple[str, str]] = frozenset()) -> None:
    """Drop the flow's per-partition lag series, except those in ``keep`` ((topic, partition) label values)."""
    for labels in list(LAG_SECONDS._metrics):  # noqa: SLF001 (prometheus_client has no public listing)
        if labels[0] == flow and labels[1:] not in keep:
            LAG_SECONDS.remove(*labels)
