"""The dashboards: provisioned files equal their definition, classic JSON conventions, known metrics only."""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import pytest
import yaml

from strait.cli.dashboards import credential_from_env, register
from strait.dashboards import (
    DATASOURCE_UID, METRIC_COMPONENT, SCHEMA_VERSION, all_dashboards, dump, metric_names, rendered_panels,
)
from strait.errors import ConfigError
from strait.paths import repo_root

GRAFANA = repo_root() / "grafana"
FILES = sorted((GRAFANA / "dashboards").glob("*.json"))
PANEL_TYPES = {"timeseries", "stat", "table", "bargauge"}


def _load(path: Path) -> dict:
    return json.loads(path.read_text())


def test_provisioned_files_are_the_rendered_definitions() -> None:
    expected = {f"{d.uid}.json": dump(d) for d in all_dashboards()}
    assert {p.name for p in FILES} == set(expected)
    for path in FILES:
        assert path.read_text() == expected[path.name], f"{path.name} is stale: python -m strait.dashboards write"


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_classic_json_conventions(path: Path) -> None:
    dashboard = _load(path)
    assert dashboard["schemaVersion"] >= 41 and dashboard["schemaVersion"] == SCHEMA_VERSION
    assert dashboard["uid"].startswith("strait-") and "id" not in dashboard
    assert dashboard["editable"] is False and "strait" in dashboard["tags"]
    assert "__inputs" not in dashboard and "${DS_" not in path.read_text()
    variables = {v["name"] for v in dashboard["templating"]["list"]}
    for variable in dashboard["templating"]["list"]:
        assert variable["datasource"] == {"type": "prometheus", "uid": DATASOURCE_UID}
    ids, cells = set(), set()
    for panel in dashboard["panels"]:
        assert panel["id"] not in ids
        ids.add(panel["id"])
        pos = panel["gridPos"]
        assert pos["x"] + pos["w"] <= 24
        for x in range(pos["x"], pos["x"] + pos["w"]):
            for y in range(pos["y"], pos["y"] + pos["h"]):
                assert (x, y) not in cells, f"{panel['title']} overlaps another panel"
                cells.add((x, y))
    for panel in rendered_panels(dashboard):
        assert panel["type"] in PANEL_TYPES
        assert panel["datasource"] == {"type": "prometheus", "uid": DATASOURCE_UID}
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert target["datasource"]["uid"] == DATASOURCE_UID
            used = set(re.findall(r"\$(\w+)", target["expr"])) - {"__rate_interval"}
            assert used <= variables, f"{panel['title']}: undefined variables {used - variables}"


def test_uids_are_unique_and_fixed() -> None:
    uids = [_load(p)["uid"] for p in FILES]
    assert sorted(uids) == ["strait-overview", "strait-services", "strait-topics"]


def test_overview_shows_what_the_issue_asks_for() -> None:
    overview = next(d for d in all_dashboards() if d.uid == "strait-overview")
    metrics = set().union(*(p.metrics() for p in overview.panels()))
    assert {
        "strait_replicated_records_total", "strait_replicated_bytes_total", "strait_source_lag_records",
        "strait_end_to_end_latency_seconds", "strait_replication_latency_seconds", "strait_heartbeat_age_seconds",
        "strait_checkpoint_age_seconds", "strait_groups_synced", "strait_topics_missing",
        "strait_topic_config_drift", "strait_acl_drift", "strait_errors_total", "strait_service_up",
        "strait_leader",
    } <= metrics
    titles = " ".join(p.title for p in overview.panels())
    for words in ("Records/s", "Bytes/s", "lag (records)", "lag (seconds)", "p50 / p99"):
        assert words in titles


def test_every_metric_is_known_and_exported_by_strait_code() -> None:
    sources = "\n".join(p.read_text() for folder in ("services", "spark")
                        for p in (repo_root() / folder).rglob("*.py") if p.name != "dashboards.py")
    for dashboard in all_dashboards():
        for panel in dashboard.panels():
            assert panel.metrics() <= set(METRIC_COMPONENT), f"{panel.title}: {panel.metrics()}"
    for metric in METRIC_COMPONENT:
        if metric.startswith("strait_"):
            assert f'"{metric}"' in sources, f"{metric} is not defined by any strait process"


def test_disaster_recovery_panels_show_lag_seconds_and_rpo_per_flow() -> None:
    overview = next(d for d in all_dashboards() if d.uid == "strait-overview")
    by_title = {p.title: p for p in overview.panels()}
    lag, rpo = by_title["Replication lag (seconds)"], by_title["Failover RPO (records)"]
    assert lag.metrics() == {"strait_replication_lag_seconds"} and lag.unit == "s"
    assert rpo.metrics() == {"strait_failover_rpo_records"}
    for panel in (lag, rpo):
        [query] = panel.queries
        assert query.expr.startswith("max by (flow) (") and query.legend == "{{flow}}"


def test_metric_names_reads_selectors_not_functions_or_labels() -> None:
    expr = ('histogram_quantile(0.99, sum by (flow, le) (rate(strait_x_seconds_bucket{flow=~"$flow"}[5m]))) '
            '/ on (flow) clamp_min(max by (flow) (strait_y), 1) or up{job="a"} == 0')
    assert metric_names(expr) == {"strait_x_seconds", "strait_y", "up"}


def test_provisioning_points_at_the_fixed_datasource_and_the_mounted_folder() -> None:
    source = yaml.safe_load((GRAFANA / "provisioning/datasources/prometheus.yaml").read_text())["datasources"][0]
    assert (source["uid"], source["type"], source["url"]) == (DATASOURCE_UID, "prometheus", "http://prometheus:9090")
    provider = yaml.safe_load((GRAFANA / "provisioning/dashboards/strait.yaml").read_text())["providers"][0]
    compose = yaml.safe_load((repo_root() / "compose/compose.yml").read_text())
    mounts = dict(v.split(":")[:2] for v in compose["services"]["grafana"]["volumes"] if v.startswith("."))
    assert mounts["../grafana/dashboards"] == provider["options"]["path"]
    assert mounts["../grafana/provisioning"] == "/etc/grafana/provisioning"


def test_push_takes_credentials_from_the_environment_only(monkeypatch: pytest.MonkeyPatch) -> None:
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["dashboards", "push", "--grafana-url", "http://grafana:3000"])
    assert args.grafana_url == "http://grafana:3000" and not hasattr(args, "password")
    for name in ("GRAFANA_TOKEN", "GRAFANA_USER", "GRAFANA_PASSWORD"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(ConfigError, match="GRAFANA_TOKEN"):
        credential_from_env()
    monkeypatch.setenv("GRAFANA_USER", "admin")
    monkeypatch.setenv("GRAFANA_PASSWORD", "pw")
    assert credential_from_env() == ("admin", "pw")
    monkeypatch.setenv("GRAFANA_TOKEN", "glsa_x")
    assert credential_from_env() == "glsa_x"


def test_export_writes_the_same_files(tmp_path: Path) -> None:
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["dashboards", "export", str(tmp_path)])
    assert args.handler(args) == 0
    for path in FILES:
        assert (tmp_path / path.name).read_text() == path.read_text()
