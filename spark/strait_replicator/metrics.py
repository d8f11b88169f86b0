"""The replicator's metrics, served by the driver (names per the design's metric contract)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

from strait.metrics import ERRORS as ERRORS  # one strait_errors_total per process
from strait.metrics import BucketedHistogram
from strait_replicator.writer import LATENCY_BUCKETS

SERVICE = "replicator"

RECORDS = Counter("strait_replicated_records_total", "Records copied to the target", ["flow", "topic"])
BYTES = Counter("strait_replicated_bytes_total", "Key and value bytes copied to the target", ["flow", "topic"])
OFFSET_SYNCS = Counter("strait_offset_syncs_total", "Offset syncs emitted", ["flow"])
LATENCY = BucketedHistogram(
    "strait_replication_latency_seconds",
    "Target acknowledgement time minus source record timestamp",
    ["flow", "topic"], LATENCY_BUCKETS,
)
SOURCE_LAG = Gauge("strait_source_lag_records", "Source records not yet copied", ["flow", "topic", "partition"])
BATCH_DURATION = Histogram(
    "strait_replicator_batch_duration_seconds", "Wall time of one micro-batch", ["flow"],
    buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120),
)
# Spark's own timing of a micro-batch's planning (durationMs: latestOffset, getBatch, queryPlanning): what
# a change of epochs costs the driver, growing with a flow's partitions.
PLANNING_DURATION = Histogram(
    "strait_replicator_planning_seconds", "Driver time planning one micro-batch (offsets and query plan)",
    ["flow"], buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)
TOPICS_REPLICATED = Gauge("strait_flow_topics", "Source topics the flow replicates", ["flow"])
DATA_LOSS = Counter("strait_source_data_loss_total",
                    "Source records deleted (retention, delete-records) before they were copied",
                    ["flow", "topic", "partition"])
RESUMED_FROM = Gauge("strait_replicator_resume_evidence",
                     "1 for the evidence a topic's copy started from, while the flow's query runs "
                     "(strait-progress, mm2-offsets, offset-syncs, empty-remote, shared-remote, from-target, "
                     "start-earliest, start-latest)",
                     ["flow", "topic", "evidence"])
RESUME_DUPLICATES = Gauge("strait_replicator_resume_duplicates_max",
                          "At most this many records already on the target were copied again when the topic's "
                          "copy started, while the flow's query runs (-1: unknown)", ["flow", "topic"])
