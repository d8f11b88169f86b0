"""A live terminal view of replication health for `strait lab up`, for users without Grafana.

It scrapes the lab's strait processes (the same /metrics Prometheus scrapes) and shows one row per
flow: state, records per second, lag, heartbeat age, checkpoint age, topic drift and errors.
"""

from __future__ import annotations

import math
import time
import urllib.request
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families
from rich.table import Table

Samples = list[tuple[str, dict[str, str], float]]


def scrape(urls: Iterable[str], timeout: float = 2.0) -> Samples:
    """Every sample of every reachable /metrics page (unreachable ones are skipped)."""
    samples: Samples = []
    for url in urls:
        try:
            with urllib.request.urlopen(url, timeout=timeout) as resp:
                text = resp.read().decode()
        except OSError:
            continue
        for family in text_string_to_metric_families(text):
            samples.extend((s.name, dict(s.labels), s.value) for s in family.samples)
    return samples


def _values(samples: Samples, name: str, flow: str, **labels: str) -> list[float]:
    return [v for n, found, v in samples
            if n == name and found.get("flow") == flow and all(found.get(k) == x for k, x in labels.items())]


@dataclass(frozen=True)
class FlowHealth:
    """One flow's row."""

    flow: str
    state: str
    records_total: float
    lag_records: float
    heartbeat_age: float | None
    checkpoint_age: float | None
    topics_in_sync: float | None
    topics_missing: float | None
    errors: float


def flow_health(samples: Samples) -> list[FlowHealth]:
    """Rows for every flow that appears in the samples."""
    flows = sorted({found["flow"] for _, found, _ in samples if found.get("flow")})
    rows = []
    for flow in flows:
        states = sorted({found.get("state", "") for n, found, v in samples
                         if n == "strait_flow_state" and found.get("flow") == flow and v == 1})
        heartbeat, checkpoint = _values(samples, "strait_heartbeat_age_seconds", flow), \
            _values(samples, "strait_checkpoint_age_seconds", flow)
        in_sync, missing = _values(samples, "strait_topics_in_sync", flow), _values(samples, "strait_topics_missing", flow)
        rows.append(FlowHealth(
            flow=flow,
            state="error" if "error" in states else (states[0] if states else "-"),
            records_total=sum(_values(samples, "strait_replicated_records_total", flow)),
            lag_records=sum(_values(samples, "strait_source_lag_records", flow)),
            heartbeat_age=max(heartbeat) if heartbeat else None,
            checkpoint_age=max(checkpoint) if checkpoint else None,
            topics_in_sync=max(in_sync) if in_sync else None,
            topics_missing=max(missing) if missing else None,
            errors=sum(_values(samples, "strait_errors_total", flow)),
        ))
    return rows


def _seconds(value: float | None) -> str:
    return "-" if value is None or math.isnan(value) else f"{value:.1f}s"


def _count(value: float | None) -> str:
    return "-" if value is None or math.isnan(value) else f"{value:.0f}"


class HealthView:
    """Renders the health table, computing records/s between two refreshes."""

    def __init__(self, endpoints: Mapping[str, str]) -> None:
        self.urls = list(endpoints.values())
        self._previous: dict[str, tuple[float, float]] = {}

    def table(self) -> Table:
        """Scrape now and build the table."""
        now = time.monotonic()
        table = Table(title="strait lab: replication health (Ctrl-C stops the lab)")
        for column in ("flow", "state", "records/s", "copied", "lag (records)", "heartbeat age",
                       "checkpoint age", "topics in sync", "missing", "errors"):
            table.add_column(column, justify="left" if column in ("flow", "state") else "right")
        for row in flow_health(scrape(self.urls)):
            before = self._previous.get(row.flow)
            rate = (row.records_total - before[1]) / (now - before[0]) if before and now > before[0] else 0.0
            self._previous[row.flow] = (now, row.records_total)
            table.add_row(row.flow, row.state, f"{rate:.0f}", _count(row.records_total), _count(row.lag_records),
                          _seconds(row.heartbeat_age), _seconds(row.checkpoint_age), _count(row.topics_in_sync),
                          _count(row.topics_missing), _count(row.errors))
        return table
