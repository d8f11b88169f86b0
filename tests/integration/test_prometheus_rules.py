"""prometheus/rules.yml: valid for the real promtool, and its alerts behave as prometheus/tests.yml says."""

from __future__ import annotations

import logging
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from strait.dashboards import METRIC_COMPONENT, metric_names
from strait_lab import deps
from strait_lab.prometheus import RULES_ENV, PrometheusServer, lab_rule_files
from strait.paths import repo_root

PROMETHEUS = repo_root() / "prometheus"
REQUIRED_ALERTS = {"StraitHeartbeatStale", "StraitLagRising", "StraitReplicationStopped", "StraitCheckpointStale",
                   "StraitReplicaMissing", "StraitSyncErrors", "StraitFlowInError", "StraitSourceUnreachable",
                   "StraitReplicationLagHigh"}


def _promtool(*args: str, cwd: Path = PROMETHEUS) -> subprocess.CompletedProcess[str]:
    return subprocess.run([deps.ensure_binary("promtool"), *args], cwd=cwd, capture_output=True, text=True,
                          timeout=120)


def test_promtool_checks_the_rules() -> None:
    result = _promtool("check", "rules", "rules.yml")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_promtool_unit_tests_pass() -> None:
    result = _promtool("test", "rules", "tests.yml")
    assert result.returncode == 0, result.stdout + result.stderr


def test_promtool_checks_the_compose_scrape_config() -> None:
    result = _promtool("check", "config", "--syntax-only", "prometheus.yml")
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_broken_expectation_fails_the_unit_tests(tmp_path: Path) -> None:
    """The unit tests can fail: shifting one expected value makes promtool report it."""
    (tmp_path / "rules.yml").write_text((PROMETHEUS / "rules.yml").read_text())
    broken = (PROMETHEUS / "tests.yml").read_text().replace("value: 1000", "value: 999", 1)
    (tmp_path / "tests.yml").write_text(broken)
    result = _promtool("test", "rules", "tests.yml", cwd=tmp_path)
    assert result.returncode != 0 and "flow:strait_replicated_bytes:rate1m" in result.stdout + result.stderr


def test_alerts_cover_the_issue_and_carry_for_and_severity() -> None:
    groups = yaml.safe_load((PROMETHEUS / "rules.yml").read_text())["groups"]
    alerts = [rule for group in groups for rule in group["rules"] if "alert" in rule]
    assert REQUIRED_ALERTS <= {a["alert"] for a in alerts}
    for alert in alerts:
        assert alert.get("for"), alert["alert"]
        assert alert["labels"]["severity"] in ("warning", "critical"), alert["alert"]
        assert alert["annotations"]["summary"], alert["alert"]
    tested = yaml.safe_load((PROMETHEUS / "tests.yml").read_text())["tests"]
    exercised = {case["alertname"] for test in tested for case in test.get("alert_rule_test", [])}
    assert {a["alert"] for a in alerts} <= exercised, "every alert has a promtool unit test"


def test_dead_source_alerts_fire_within_two_minutes_by_their_timing() -> None:
    """A dead source: the heartbeat age passes 30 s after 30 s, the first service errs within about 20 s;
    each alert's threshold wait plus its ``for`` must leave room in the 2 minutes (measured live in
    test_dead_source_alerts.py)."""
    groups = yaml.safe_load((PROMETHEUS / "rules.yml").read_text())["groups"]
    alerts = {rule["alert"]: rule for group in groups for rule in group["rules"] if "alert" in rule}

    def seconds(alert: str) -> int:
        units = {"s": 1, "m": 60, "h": 3600}
        return sum(int(n) * units[u] for n, u in re.findall(r"(\d+)([smh])", alerts[alert]["for"]))

    assert 30 + seconds("StraitHeartbeatStale") <= 90
    assert 30 + seconds("StraitSourceUnreachable") <= 60
    assert seconds("StraitFlowInError") <= 60
    assert "strait failover --flow {{ $labels.flow }}" in alerts["StraitSourceUnreachable"]["annotations"]["description"]


def test_the_embedded_lab_loads_the_checkout_rules(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.delenv(RULES_ENV, raising=False)
    assert lab_rule_files() == [(PROMETHEUS / "rules.yml").resolve()]
    server = PrometheusServer(tmp_path, rule_files=lab_rule_files())
    assert yaml.safe_load(server._config())["rule_files"] == [str((PROMETHEUS / "rules.yml").resolve())]
    own = tmp_path / "my-rules.yml"
    own.write_text("groups: []\n")
    monkeypatch.setenv(RULES_ENV, str(own))
    assert lab_rule_files() == [own.resolve()]
    monkeypatch.setenv(RULES_ENV, str(tmp_path / "absent.yml"))
    with caplog.at_level(logging.WARNING, logger="strait_lab.prometheus"):
        assert lab_rule_files() == []
    assert "starts without recording or alert rules" in caplog.text and "absent.yml" in caplog.text


def test_rules_use_only_metrics_strait_exports() -> None:
    groups = yaml.safe_load((PROMETHEUS / "rules.yml").read_text())["groups"]
    recorded = {rule["record"] for group in groups for rule in group["rules"] if "record" in rule}
    for group in groups:
        for rule in group["rules"]:
            unknown = metric_names(rule["expr"]) - set(METRIC_COMPONENT) - recorded
            assert not unknown, f"{rule.get('alert') or rule.get('record')}: unknown metrics {unknown}"


def test_every_dashboard_query_is_valid_promql(tmp_path: Path) -> None:
    """promtool parses each panel query (variables substituted) as a recording rule's expression."""
    import json

    from strait.dashboards import rendered_panels

    rules = []
    for path in sorted((repo_root() / "grafana" / "dashboards").glob("*.json")):
        for panel in rendered_panels(json.loads(path.read_text())):
            for target in panel["targets"]:
                expr = target["expr"].replace("$__rate_interval", "1m").replace("$flow", ".*").replace("$topic", ".*")
                rules.append({"record": f"dashboard:q{len(rules)}", "expr": expr})
    (tmp_path / "queries.yml").write_text(yaml.safe_dump({"groups": [{"name": "dashboards", "rules": rules}]}))
    result = _promtool("check", "rules", "queries.yml", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
