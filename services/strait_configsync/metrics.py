"""The config-sync service's metrics (names per the design's metric contract).

Drift gauges are exported only by the replica that holds the flow's lease; a replica that hands a
flow over removes its series, so summing over replicas never counts a flow twice.
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge

from strait.metrics import ERRORS as ERRORS  # one strait_errors_total per process
from strait.metrics import FLOW_STATE, FLOW_STATES, set_flow_state
from strait_configsync.drift import FlowReport

SERVICE = "configsync"

LEADER = Gauge("strait_leader", "1 while this process holds the lease of the work item", ["service", "item"])
TOPICS_IN_SYNC = Gauge("strait_topics_in_sync", "Replicated topics whose remote topic matches the source", ["flow"])
TOPICS_MISSING = Gauge("strait_topics_missing", "Replicated topics with no remote topic on the target", ["flow"])
PARTITION_MISMATCH = Gauge("strait_topics_partition_mismatch",
                           "Remote topics whose partition count differs from the source's", ["flow"])
CONFIG_DRIFT = Gauge("strait_topic_config_drift", "Remote topics whose synced configs differ from the source's",
                     ["flow"])
ACL_DRIFT = Gauge("strait_acl_drift", "ACLs missing on the target plus ACLs deleted on the source but kept",
                  ["flow"])
ACTIONS = Counter("strait_configsync_actions_total", "Changes made on the clusters", ["flow", "action"])
LAST_PASS = Gauge("strait_configsync_last_pass_timestamp_seconds", "End of the flow's last sync pass", ["flow"])

_DRIFT_GAUGES = (TOPICS_IN_SYNC, TOPICS_MISSING, PARTITION_MISMATCH, CONFIG_DRIFT, ACL_DRIFT, LAST_PASS)


def export_report(report: FlowReport, finished_at: float) -> None:
    """Set the flow's drift gauges and state from a report."""
    TOPICS_IN_SYNC.labels(report.flow).set(report.topics_in_sync)
    TOPICS_MISSING.labels(report.flow).set(report.missing_count)
    PARTITION_MISMATCH.labels(report.flow).set(report.partition_mismatch_count)
    CONFIG_DRIFT.labels(report.flow).set(report.config_drift_count)
    ACL_DRIFT.labels(report.flow).set(report.acl_drift)
    LAST_PASS.labels(report.flow).set(finished_at)
    set_flow_state(SERVICE, report.flow, "error" if report.errors else "running")


def set_leader(flow: str, held: bool) -> None:
    """Export whether this process holds the flow's lease; forget its drift series when it does not."""
    LEADER.labels(service=SERVICE, item=flow).set(1 if held else 0)
    if held:
        return
    for gauge in _DRIFT_GAUGES:
        try:
            gauge.remove(flow)
        except KeyError:
            pass
    for state in FLOW_STATES:
        try:
            FLOW_STATE.remove(flow, state, SERVICE)
        except KeyError:
            pass
