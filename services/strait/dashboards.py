"""strait's Grafana dashboards: defined once here, rendered to classic JSON, pushed to a Grafana.

The panels are declared as data (`Panel`, `Query`); `render()` turns a `Dashboard` into classic
dashboard JSON (schemaVersion 41, fixed uid, datasource uid ``prometheus``). The files under
``grafana/dashboards/`` are that rendering, for Grafana's file provisioning; a unit test keeps them
equal (`python -m strait.dashboards write` regenerates them). `push()` installs the same dashboards
and the Prometheus datasource into a running Grafana through its HTTP API (grafana-client).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from strait.errors import StraitError

SCHEMA_VERSION = 41
DATASOURCE_UID = "prometheus"
DATASOURCE = {"type": "prometheus", "uid": DATASOURCE_UID}
FOLDER_UID = "strait"
FOLDER_TITLE = "strait"
TAGS = ("strait", "kafka", "replication")
# The jobs Prometheus scrapes strait's processes under (compose and the embedded lab alike).
STRAIT_JOBS = "replicator|configsync|heartbeat|checkpoint"

# Which component exports each strait metric; metrics of every process (service_up, errors, flow
# state) and Prometheus's own `up` map to None. The live dashboard test requires data for a panel
# only when every component its queries need runs.
METRIC_COMPONENT: dict[str, str | None] = {
    "strait_replicated_records_total": "replicator",
    "strait_replicated_bytes_total": "replicator",
    "strait_replication_latency_seconds": "replicator",
    "strait_source_lag_records": "replicator",
    "strait_replicator_batch_duration_seconds": "replicator",
    "strait_replicator_planning_seconds": "replicator",
    "strait_offset_syncs_total": "replicator",
    "strait_flow_topics": "replicator",
    "strait_source_data_loss_total": "replicator",
    "strait_topics_in_sync": "configsync",
    "strait_topics_missing": "configsync",
    "strait_topics_partition_mismatch": "configsync",
    "strait_topic_config_drift": "configsync",
    "strait_acl_drift": "configsync",
    "strait_leader": "configsync",
    "strait_configsync_actions_total": "configsync",
    "strait_configsync_last_pass_timestamp_seconds": "configsync",
    "strait_heartbeat_age_seconds": "heartbeat",
    "strait_end_to_end_latency_seconds": "heartbeat",
    "strait_heartbeats_emitted_total": "heartbeat",
    "strait_replication_lag_seconds": "heartbeat",
    "strait_failover_rpo_records": "heartbeat",
    "strait_source_last_seen_timestamp_seconds": "heartbeat",
    "strait_checkpoint_age_seconds": "checkpoint",
    "strait_groups_synced": "checkpoint",
    "strait_checkpoints_emitted_total": "checkpoint",
    "strait_service_up": None,
    "strait_errors_total": None,
    "strait_flow_state": None,
    "process_resident_memory_bytes": None,
    "process_cpu_seconds_total": None,
    "up": None,
}
_HISTOGRAM_SUFFIX = re.compile(r"_(bucket|sum|count)$")


@dataclass(frozen=True)
class Query:
    """One PromQL query of a panel.

    Args:
        expr: the PromQL, with Grafana variables (``$flow``, ``$__rate_interval``).
        legend: legend format (``{{flow}}``).
    """

    expr: str
    legend: str = ""


@dataclass(frozen=True)
class Panel:
    """One panel: a title, a kind (timeseries, stat, table, bargauge) and its queries.

    Args:
        title: panel title.
        kind: Grafana panel type.
        queries: its PromQL queries.
        unit: Grafana unit id of the values (``s``, ``Bps``, ``short``).
        description: what it shows, in the panel's info tooltip.
        width: grid columns out of 24.
        height: grid rows.
        thresholds: (value, color) steps above green, for stat and bargauge panels.
        no_value: what to show when the query returns nothing (e.g. "0" for error counters).
    """

    title: str
    kind: str
    queries: tuple[Query, ...]
    unit: str = "short"
    description: str = ""
    width: int = 12
    height: int = 8
    thresholds: tuple[tuple[float, str], ...] = ()
    no_value: str | None = None

    def metrics(self) -> set[str]:
        """The metric names its queries read (histogram series folded to their family)."""
        return {name for q in self.queries for name in metric_names(q.expr)}


@dataclass(frozen=True)
class Variable:
    """A template variable filled from a label's values, multi-select with "All" (``.*``)."""

    name: str
    label: str
    query: str  # label_values(...)


@dataclass(frozen=True)
class Dashboard:
    """One dashboard: fixed uid, rows of panels, template variables."""

    uid: str
    title: str
    description: str
    variables: tuple[Variable, ...]
    rows: tuple[tuple[str, tuple[Panel, ...]], ...]
    extra_tags: tuple[str, ...] = field(default=())

    def panels(self) -> Iterator[Panel]:
        """Every panel, rows flattened."""
        for _title, panels in self.rows:
            yield from panels


def metric_names(expr: str) -> set[str]:
    """Metric names a PromQL expression selects (functions, keywords and labels left out)."""
    without_strings = re.sub(r'"[^"]*"', '""', expr)
    without_labels = re.sub(r"\{[^}]*\}", "{}", without_strings)
    without_by = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", without_labels)
    names = set()
    for token in re.findall(r"[A-Za-z_:][A-Za-z0-9_:]*(?=\s*(?:\{|\[|\)|$|==|>|<|/|\*|\+|-|\s+or\b|\s+and\b))",
                            without_by):
        if token in _PROMQL_WORDS or token.startswith("__"):
            continue
        names.add(_HISTOGRAM_SUFFIX.sub("", token) if token.endswith(("_bucket", "_sum", "_count")) else token)
    return names


_PROMQL_WORDS = {
    "sum", "max", "min", "avg", "count", "rate", "increase", "irate", "deriv", "topk", "bottomk", "time",
    "histogram_quantile", "clamp_min", "clamp_max", "vector", "or", "and", "unless", "by", "on", "absent",
    "label_values", "le", "offset", "bool", "s", "m", "h", "rate_interval", "range", "interval",
}


def _rate(metric: str, selector: str, by: str) -> str:
    return f"sum by ({by}) (rate({metric}{{{selector}}}[$__rate_interval]))"


def _quantile(q: float, metric: str, selector: str, by: str) -> str:
    return f"histogram_quantile({q}, sum by ({by}, le) (rate({metric}_bucket{{{selector}}}[$__rate_interval])))"


FLOW = 'flow=~"$flow"'
FLOW_TOPIC = 'flow=~"$flow", topic=~"$topic"'
FLOW_VAR = Variable("flow", "Flow", "label_values(strait_flow_state, flow)")


def overview() -> Dashboard:
    """Replication health per flow: throughput, lag, latency, freshness, sync state, errors, replicas."""
    lag_records = f"sum by (flow) (strait_source_lag_records{{{FLOW}}})"
    return Dashboard(
        uid="strait-overview",
        title="strait / Replication overview",
        description="Replication health per flow: is it alive, is it keeping up, can consumers fail over.",
        variables=(FLOW_VAR,),
        rows=(
            ("Freshness", (
                Panel("Heartbeat age", "stat",
                      (Query(f"max by (flow) (strait_heartbeat_age_seconds{{{FLOW}}})", "{{flow}}"),),
                      unit="s", width=6, height=5, thresholds=((10, "orange"), (30, "red")),
                      description="Now minus the newest heartbeat seen on the target: the end-to-end "
                                  "liveness of the flow (heartbeats are emitted every second)."),
                Panel("Source lag (records)", "stat", (Query(lag_records, "{{flow}}"),),
                      width=6, height=5, thresholds=((1000, "orange"), (100000, "red")),
                      description="Source records not copied yet, summed over the flow's partitions."),
                Panel("Source lag (seconds)", "stat", (Query(
                    f"{lag_records} / on (flow) clamp_min("
                    f"{_rate('strait_replicated_records_total', FLOW, 'flow')}, 0.001)", "{{flow}}"),),
                      unit="s", width=6, height=5, thresholds=((60, "orange"), (600, "red")),
                      description="Time to copy the current lag at the current rate (large when nothing moves)."),
                Panel("Groups synced", "stat",
                      (Query(f"sum by (flow) (strait_groups_synced{{{FLOW}}})", "{{flow}}"),),
                      width=6, height=5,
                      description="Target consumer groups whose offsets are at their translated source offsets "
                                  "(summed over the checkpoint replicas, each serving its shards' groups)."),
            )),
            ("Disaster recovery", (
                Panel("Replication lag (seconds)", "timeseries",
                      (Query(f"max by (flow) (strait_replication_lag_seconds{{{FLOW}}})", "{{flow}}"),),
                      unit="s", width=10,
                      description="Age of the oldest source record not yet on the target (0 when caught up): "
                                  "consumers failing over now would miss records this old. It keeps growing "
                                  "while the source is gone with records uncopied."),
                Panel("Failover RPO (records)", "timeseries",
                      (Query(f"max by (flow) (strait_failover_rpo_records{{{FLOW}}})", "{{flow}}"),),
                      width=10,
                      description="Records on the source (as last seen) not copied to the target yet: what an "
                                  "unplanned failover (strait failover --flow F) would lose now."),
                Panel("Source last answered", "stat",
                      (Query(f"time() - max by (flow) (strait_source_last_seen_timestamp_seconds{{{FLOW}}})",
                             "{{flow}}"),),
                      unit="s", width=4, thresholds=((10, "orange"), (30, "red")),
                      description="Seconds since the flow's source cluster last answered (asked every second)."),
            )),
            ("Throughput and lag", (
                Panel("Records/s", "timeseries",
                      (Query(_rate("strait_replicated_records_total", FLOW, "flow"), "{{flow}}"),),
                      unit="rps", description="Records copied to the target per second."),
                Panel("Bytes/s", "timeseries",
                      (Query(_rate("strait_replicated_bytes_total", FLOW, "flow"), "{{flow}}"),),
                      unit="Bps", description="Key and value bytes copied to the target per second."),
                Panel("Source lag (records)", "timeseries", (Query(lag_records, "{{flow}}"),),
                      description="Source records not copied yet."),
                Panel("Heartbeat and checkpoint age", "timeseries", (
                    Query(f"max by (flow) (strait_heartbeat_age_seconds{{{FLOW}}})", "heartbeat {{flow}}"),
                    Query(f"max by (flow, group) (strait_checkpoint_age_seconds{{{FLOW}}})",
                          "checkpoint {{flow}} {{group}}"),
                ), unit="s", description="Heartbeat age per flow; checkpoint age per consumer group "
                                         "(how far a failover of the group would land behind)."),
            )),
            ("Latency", (
                Panel("Replication latency p50 / p99", "timeseries", (
                    Query(_quantile(0.5, "strait_replication_latency_seconds", FLOW, "flow"), "p50 {{flow}}"),
                    Query(_quantile(0.99, "strait_replication_latency_seconds", FLOW, "flow"), "p99 {{flow}}"),
                ), unit="s", description="Target append time minus the source record's timestamp."),
                Panel("End-to-end latency p50 / p99", "timeseries", (
                    Query(_quantile(0.5, "strait_end_to_end_latency_seconds", FLOW, "flow"), "p50 {{flow}}"),
                    Query(_quantile(0.99, "strait_end_to_end_latency_seconds", FLOW, "flow"), "p99 {{flow}}"),
                ), unit="s", description="A heartbeat's copy seen on the target minus its source timestamp."),
            )),
            ("Topics, configs and ACLs", (
                Panel("Topics in sync", "stat",
                      (Query(f"max by (flow) (strait_topics_in_sync{{{FLOW}}})", "{{flow}}"),),
                      width=8, height=6, description="Replicated topics whose remote topic matches the source."),
                Panel("Drift", "bargauge", (
                    Query(f"max by (flow) (strait_topics_missing{{{FLOW}}})", "topics missing {{flow}}"),
                    Query(f"max by (flow) (strait_topics_partition_mismatch{{{FLOW}}})",
                          "partition mismatch {{flow}}"),
                    Query(f"max by (flow) (strait_topic_config_drift{{{FLOW}}})", "config drift {{flow}}"),
                    Query(f"max by (flow) (strait_acl_drift{{{FLOW}}})", "ACL drift {{flow}}"),
                ), width=16, height=6, thresholds=((1, "orange"),),
                      description="What configsync has not reconciled yet: all zero when the target matches."),
            )),
            ("Errors and replicas", (
                Panel("Errors/s by kind", "timeseries",
                      (Query(f"sum by (service, kind) (rate(strait_errors_total{{{FLOW}}}[$__rate_interval]))",
                             "{{service}} {{kind}}"),),
                      no_value="0", width=8, description="Errors by service and kind (none: 0)."),
                Panel("Replicas up", "stat",
                      (Query("sum by (service) (strait_service_up)", "{{service}}"),),
                      width=8, description="Running processes per strait component."),
                Panel("Leaders", "table",
                      (Query("max by (service, item, instance) (strait_leader) == 1", ""),),
                      width=8, description="Which replica holds each work item's lease."),
            )),
        ),
    )


def topics() -> Dashboard:
    """Per topic and partition: throughput, lag, latency, and checkpoints per group."""
    return Dashboard(
        uid="strait-topics",
        title="strait / Topics and partitions",
        description="Drill-down of one flow by topic and partition.",
        variables=(FLOW_VAR, Variable("topic", "Topic",
                                      'label_values(strait_replicated_records_total{flow=~"$flow"}, topic)')),
        rows=(
            ("Topics", (
                Panel("Records/s by topic", "timeseries",
                      (Query(_rate("strait_replicated_records_total", FLOW_TOPIC, "flow, topic"),
                             "{{flow}} {{topic}}"),), unit="rps"),
                Panel("Bytes/s by topic", "timeseries",
                      (Query(_rate("strait_replicated_bytes_total", FLOW_TOPIC, "flow, topic"),
                             "{{flow}} {{topic}}"),), unit="Bps"),
                Panel("Replication latency p99 by topic", "timeseries",
                      (Query(_quantile(0.99, "strait_replication_latency_seconds", FLOW_TOPIC, "flow, topic"),
                             "{{flow}} {{topic}}"),), unit="s"),
                Panel("Replication latency p50 by topic", "timeseries",
                      (Query(_quantile(0.5, "strait_replication_latency_seconds", FLOW_TOPIC, "flow, topic"),
                             "{{flow}} {{topic}}"),), unit="s"),
            )),
            ("Partitions", (
                Panel("Source lag by partition", "timeseries",
                      (Query(f"sum by (flow, topic, partition) (strait_source_lag_records{{{FLOW_TOPIC}}})",
                             "{{topic}}[{{partition}}]"),)),
                Panel("Top 20 lagging partitions", "table",
                      (Query(f"topk(20, sum by (flow, topic, partition) "
                             f"(strait_source_lag_records{{{FLOW_TOPIC}}}))"),),
                      description="Partitions with the most source records not copied yet."),
                Panel("Replication lag by partition (seconds)", "timeseries",
                      (Query(f"max by (flow, topic, partition) (strait_replication_lag_seconds{{{FLOW_TOPIC}}})",
                             "{{topic}}[{{partition}}]"),), unit="s", width=24,
                      description="Age of each partition's oldest source record not yet on the target."),
            )),
            ("Consumer groups", (
                Panel("Checkpoint age by group", "timeseries",
                      (Query(f"max by (flow, group) (strait_checkpoint_age_seconds{{{FLOW}}})",
                             "{{flow}} {{group}}"),), unit="s", width=24,
                      description="Seconds since the group's checkpoints last matched its committed offsets."),
            )),
        ),
        extra_tags=("drill-down",),
    )


def services() -> Dashboard:
    """The strait processes: replicas, scrapes, flow states, errors, work done, resources."""
    jobs = f'job=~"{STRAIT_JOBS}"'
    return Dashboard(
        uid="strait-services",
        title="strait / Services",
        description="strait's processes: replicas, leases, flow states, errors and the work each does.",
        variables=(FLOW_VAR,),
        rows=(
            ("Processes", (
                Panel("Replicas up", "timeseries",
                      (Query("sum by (service) (strait_service_up)", "{{service}}"),), width=8),
                Panel("Scrape targets", "table", (Query(f"up{{{jobs}}}"),), width=8,
                      description="Every strait process Prometheus scrapes: 1 up, 0 down."),
                Panel("Flow states", "table",
                      (Query(f"max by (service, flow, state) (strait_flow_state{{{FLOW}}}) == 1"),), width=8,
                      description="Each service's current state for each flow."),
                Panel("Errors/s by service and kind", "timeseries",
                      (Query(f"sum by (service, flow, kind) "
                             f"(rate(strait_errors_total{{{FLOW}}}[$__rate_interval]))",
                             "{{service}} {{flow}} {{kind}}"),), no_value="0"),
                Panel("Leases held", "table",
                      (Query("max by (service, item, instance) (strait_leader) == 1"),)),
            )),
            ("Replicator", (
                Panel("Micro-batch duration p99", "timeseries",
                      (Query(_quantile(0.99, "strait_replicator_batch_duration_seconds", FLOW, "flow"),
                             "{{flow}}"),), unit="s", width=6),
                Panel("Micro-batch planning p99", "timeseries",
                      (Query(_quantile(0.99, "strait_replicator_planning_seconds", FLOW, "flow"),
                             "{{flow}}"),), unit="s", width=6,
                      description="Driver time planning each micro-batch: grows with the flow's partitions."),
                Panel("Offset syncs/s", "timeseries",
                      (Query(_rate("strait_offset_syncs_total", FLOW, "flow"), "{{flow}}"),), width=6),
                Panel("Topics replicated", "stat",
                      (Query(f"max by (flow) (strait_flow_topics{{{FLOW}}})", "{{flow}}"),), width=6),
            )),
            ("Config sync, heartbeats, checkpoints", (
                Panel("Config sync actions/s", "timeseries",
                      (Query(f"sum by (flow, action) "
                             f"(rate(strait_configsync_actions_total{{{FLOW}}}[$__rate_interval]))",
                             "{{flow}} {{action}}"),), width=8, no_value="0"),
                Panel("Since last config sync pass", "stat",
                      (Query(f"time() - max by (flow) "
                             f"(strait_configsync_last_pass_timestamp_seconds{{{FLOW}}})", "{{flow}}"),),
                      unit="s", width=8, thresholds=((120, "orange"), (300, "red"))),
                Panel("Heartbeats and checkpoints emitted/s", "timeseries", (
                    Query(_rate("strait_heartbeats_emitted_total", FLOW, "flow"), "heartbeats {{flow}}"),
                    Query(_rate("strait_checkpoints_emitted_total", FLOW, "flow"), "checkpoints {{flow}}"),
                ), width=8),
            )),
            ("Resources", (
                Panel("Resident memory", "timeseries",
                      (Query(f"process_resident_memory_bytes{{{jobs}}}", "{{job}} {{instance}}"),), unit="bytes"),
                Panel("CPU", "timeseries",
                      (Query(f"rate(process_cpu_seconds_total{{{jobs}}}[$__rate_interval])",
                             "{{job}} {{instance}}"),), unit="percentunit"),
            )),
        ),
    )


DASHBOARDS = (overview, topics, services)


def all_dashboards() -> list[Dashboard]:
    """Every strait dashboard."""
    return [make() for make in DASHBOARDS]


# ---- rendering to classic dashboard JSON ---------------------------------------------------------

def _thresholds(steps: Iterable[tuple[float, str]]) -> dict[str, Any]:
    return {"mode": "absolute",
            "steps": [{"color": "green", "value": None}, *({"color": c, "value": v} for v, c in steps)]}


def _panel_json(panel: Panel, panel_id: int, x: int, y: int) -> dict[str, Any]:
    table = panel.kind == "table"
    defaults: dict[str, Any] = {"unit": panel.unit, "thresholds": _thresholds(panel.thresholds),
                                "color": {"mode": "thresholds" if panel.kind in ("stat", "bargauge")
                                          else "palette-classic"}}
    if panel.no_value is not None:
        defaults["noValue"] = panel.no_value
    if panel.kind == "timeseries":
        defaults["custom"] = {"drawStyle": "line", "lineWidth": 1, "fillOpacity": 10, "showPoints": "never",
                              "spanNulls": False}
    options: dict[str, Any]
    if panel.kind == "timeseries":
        options = {"legend": {"displayMode": "list", "placement": "bottom", "showLegend": True},
                   "tooltip": {"mode": "multi", "sort": "desc"}}
    elif panel.kind in ("stat", "bargauge"):
        options = {"reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
                   "orientation": "horizontal" if panel.kind == "bargauge" else "auto"}
        if panel.kind == "stat":
            options.update({"colorMode": "value", "graphMode": "area", "textMode": "auto", "justifyMode": "auto"})
        else:
            options.update({"displayMode": "gradient", "showUnfilled": True})
    else:
        options = {"showHeader": True, "cellHeight": "sm"}
    rendered: dict[str, Any] = {
        "id": panel_id, "type": panel.kind, "title": panel.title, "datasource": dict(DATASOURCE),
        "gridPos": {"h": panel.height, "w": panel.width, "x": x, "y": y},
        "fieldConfig": {"defaults": defaults, "overrides": []}, "options": options,
        "targets": [
            {"refId": chr(ord("A") + i), "datasource": dict(DATASOURCE), "editorMode": "code", "expr": q.expr,
             "legendFormat": q.legend or "__auto", "range": not table, "instant": table,
             **({"format": "table"} if table else {})}
            for i, q in enumerate(panel.queries)
        ],
    }
    if panel.description:
        rendered["description"] = panel.description
    if table:
        rendered["transformations"] = [{"id": "organize", "options": {"excludeByName": {"Time": True}}}]
    return rendered


def _variable_json(var: Variable) -> dict[str, Any]:
    return {
        "name": var.name, "label": var.label, "type": "query", "datasource": dict(DATASOURCE),
        "definition": var.query, "query": {"query": var.query, "refId": "StandardVariableQuery"},
        "refresh": 2, "sort": 1, "multi": True, "includeAll": True, "allValue": ".*",
        "current": {"selected": True, "text": ["All"], "value": ["$__all"]}, "options": [], "hide": 0,
        "regex": "",
    }


def render(dashboard: Dashboard) -> dict[str, Any]:
    """The dashboard as classic Grafana JSON (no ``id``: Grafana assigns it)."""
    panels: list[dict[str, Any]] = []
    panel_id, y = 1, 0
    for row_title, row_panels in dashboard.rows:
        panels.append({"id": panel_id, "type": "row", "title": row_title, "collapsed": False,
                       "gridPos": {"h": 1, "w": 24, "x": 0, "y": y}, "panels": []})
        panel_id, y, x, line_height = panel_id + 1, y + 1, 0, 0
        for panel in row_panels:
            if x + panel.width > 24:
                x, y, line_height = 0, y + line_height, 0
            panels.append(_panel_json(panel, panel_id, x, y))
            panel_id, x, line_height = panel_id + 1, x + panel.width, max(line_height, panel.height)
        y += line_height
    return {
        "uid": dashboard.uid, "title": dashboard.title, "description": dashboard.description,
        "tags": [*TAGS, *dashboard.extra_tags], "editable": False, "graphTooltip": 1, "timezone": "browser",
        "schemaVersion": SCHEMA_VERSION, "version": 1, "refresh": "10s", "fiscalYearStartMonth": 0,
        "liveNow": False, "weekStart": "",
        "time": {"from": "now-30m", "to": "now"}, "timepicker": {},
        "annotations": {"list": [{
            "builtIn": 1, "datasource": {"type": "grafana", "uid": "-- Grafana --"}, "enable": True, "hide": True,
            "iconColor": "rgba(0, 211, 255, 1)", "name": "Annotations & Alerts", "type": "dashboard",
        }]},
        "links": [{"type": "dashboards", "tags": ["strait"], "asDropdown": True, "title": "strait dashboards",
                   "includeVars": True, "keepTime": True}],
        "templating": {"list": [_variable_json(v) for v in dashboard.variables]},
        "panels": panels,
    }


def dump(dashboard: Dashboard) -> str:
    """The rendered JSON text as written to ``grafana/dashboards/<uid>.json``."""
    return json.dumps(render(dashboard), indent=2) + "\n"


def datasource(url: str = "http://prometheus:9090") -> dict[str, Any]:
    """The Prometheus datasource every panel references (uid ``prometheus``)."""
    return {"name": "Prometheus", "type": "prometheus", "uid": DATASOURCE_UID, "access": "proxy", "url": url,
            "isDefault": True, "jsonData": {"httpMethod": "POST", "timeInterval": "15s"}}


def rendered_panels(dashboard_json: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    """The non-row panels of a rendered dashboard (rows' nested panels included)."""
    for panel in dashboard_json.get("panels", []):
        if panel.get("type") == "row":
            yield from panel.get("panels", [])
        else:
            yield panel


# ---- pushing into a running Grafana ----------------------------------------------------------------

class DashboardPushError(StraitError):
    """Grafana refused or could not be reached."""


@dataclass(frozen=True)
class PushResult:
    """What `push` did: the datasource action and each dashboard's URL."""

    datasource: str
    dashboards: dict[str, str]


def push(grafana_url: str, credential: str | tuple[str, str] | None, prometheus_url: str,
         folder: str = FOLDER_TITLE, timeout: float = 10.0) -> PushResult:
    """Install the datasource and every dashboard into a Grafana, overwriting strait's earlier versions.

    Args:
        grafana_url: base URL of the Grafana.
        credential: a service-account token, or (user, password).
        prometheus_url: URL the datasource points Grafana at.
        folder: folder title (uid ``strait``) the dashboards go to.
        timeout: seconds per HTTP request.
    """
    from grafana_client import GrafanaApi
    from grafana_client.client import GrafanaClientError, GrafanaException

    api = GrafanaApi.from_url(grafana_url, credential=credential, timeout=timeout)
    try:
        source = datasource(prometheus_url)
        try:
            existing = api.datasource.get_datasource_by_uid(DATASOURCE_UID)
        except GrafanaClientError as exc:
            if getattr(exc, "status_code", None) != 404:
                raise
            api.datasource.create_datasource(source)
            action = "created"
        else:
            if existing.get("readOnly"):  # provisioned from a file: Grafana refuses API edits, keep it
                action = "kept (provisioned)"
            else:
                api.datasource.update_datasource_by_uid(DATASOURCE_UID, source)
                action = "updated"
        try:
            api.folder.get_folder(FOLDER_UID)
        except GrafanaClientError as exc:
            if getattr(exc, "status_code", None) != 404:
                raise
            api.folder.create_folder(folder, uid=FOLDER_UID)
        urls = {}
        for dashboard in all_dashboards():
            answer = api.dashboard.update_dashboard({
                "dashboard": render(dashboard), "folderUid": FOLDER_UID, "overwrite": True,
                "message": "strait dashboards push",
            })
            urls[dashboard.uid] = grafana_url.rstrip("/") + str(answer.get("url", f"/d/{dashboard.uid}"))
    except GrafanaException as exc:
        raise DashboardPushError(f"Grafana at {grafana_url} refused the push: {exc}") from exc
    except OSError as exc:
        raise DashboardPushError(f"cannot reach Grafana at {grafana_url}: {exc}") from exc
    return PushResult(action, urls)


def write_files(folder: Path) -> list[Path]:
    """Write every dashboard's JSON into ``folder`` (the provisioned files); returns the paths."""
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for dashboard in all_dashboards():
        path = folder / f"{dashboard.uid}.json"
        path.write_text(dump(dashboard))
        written.append(path)
    return written


def main(argv: list[str] | None = None) -> int:
    """``python -m strait.dashboards write [FOLDER]``: regenerate the provisioned dashboard files."""
    from strait.paths import repo_root

    parser = argparse.ArgumentParser(prog="python -m strait.dashboards")
    commands = parser.add_subparsers(dest="command", required=True)
    write = commands.add_parser("write", help="write grafana/dashboards/*.json from this module")
    write.add_argument("folder", nargs="?", type=Path, default=repo_root() / "grafana" / "dashboards")
    args = parser.parse_args(argv)
    for path in write_files(args.folder):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
