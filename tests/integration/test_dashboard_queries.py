"""Every dashboard panel's PromQL returns data from a real Prometheus scraping running strait services.

The strait components that exist in this checkout (`strait run --help`) run against the session's
clusters A and B under a small load: keyed records with headers produced into A, a consumer group
committing on A, and one source topic deleted mid-run (a real error for the error panels). The
session's Prometheus scrapes them; then each query of each provisioned dashboard file, with its
template variables at "All", must return at least one series. A query whose metrics come from a
component that does not exist yet is listed and skipped, not required.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from strait.cli import build_parser
from strait.config import load_config
from strait.config.store import apply_config
from strait.dashboards import METRIC_COMPONENT, metric_names, rendered_panels
from strait_lab.clients import Record, create_topic, produce
from strait_lab.kafka import KafkaCluster
from strait_lab.prometheus import PrometheusServer
from strait_lab.redis import RedisServer
from strait_lab.services import StraitProcess
from strait.paths import repo_root
from tests.integration.test_configsync_support import alter
from tests.support.config import flow_config, write_config
from tests.support.kafka import consume_and_commit, count
from tests.support.waiting import wait_for

pytestmark = pytest.mark.slow

DASHBOARDS = sorted((repo_root() / "grafana" / "dashboards").glob("*.json"))
COMPONENTS = ("configsync", "replicator", "heartbeat", "checkpoint")
# Grafana's $__rate_interval is at least four scrape intervals; the test Prometheus scrapes every second.
RATE_INTERVAL = "20s"


def components_present() -> set[str]:
    """The strait components this checkout can run: the choices of `strait run`."""
    parser = build_parser()
    commands = next(a for a in parser._subparsers._group_actions)  # type: ignore[union-attr]
    run = commands.choices["run"]
    components = next(a for a in run._subparsers._group_actions)  # type: ignore[union-attr]
    return set(components.choices) & set(COMPONENTS)


def substitute(expr: str, variables: dict[str, str]) -> str:
    """The query as Grafana sends it with every variable at "All" (its allValue)."""
    expr = expr.replace("$__rate_interval", RATE_INTERVAL)
    return re.sub(r"\$\{?(\w+)\}?", lambda m: variables.get(m.group(1), m.group(0)), expr)


def dashboard_queries() -> list[tuple[str, str, str]]:
    """(dashboard uid, panel title, substituted expr) for every query of every provisioned file."""
    found = []
    for path in DASHBOARDS:
        dashboard = json.loads(path.read_text())
        variables = {v["name"]: v.get("allValue") or ".*" for v in dashboard["templating"]["list"]}
        for panel in rendered_panels(dashboard):
            for target in panel["targets"]:
                found.append((dashboard["uid"], panel["title"], substitute(target["expr"], variables)))
    return found


class Load:
    """Keyed records with headers into a topic of A, in a background thread, until stopped."""

    def __init__(self, cluster: KafkaCluster, topic: str, partitions: int) -> None:
        self.cluster, self.topic, self.partitions = cluster, topic, partitions
        self.stop = threading.Event()
        self.sent = 0
        self.thread = threading.Thread(target=self._run, name="dashboard-load", daemon=True)

    def _run(self) -> None:
        while not self.stop.is_set():
            batch = [Record(f"user-{(self.sent + i) % 97}".encode(), b"x" * 200,
                            (("trace-id", f"{self.sent + i}".encode()), ("source", b"dashboards-test")))
                     for i in range(50)]
            self.sent += produce(self.cluster.client_config(), self.topic, batch)
            self.stop.wait(0.25)

    def __enter__(self) -> Load:
        self.thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop.set()
        self.thread.join(30)


@pytest.fixture
def strait_services(services: Callable[..., StraitProcess],
                    prometheus_server: PrometheusServer) -> Iterator[Callable[..., StraitProcess]]:
    """``services`` whose processes Prometheus scrapes while the test runs."""
    scraped: list[StraitProcess] = []

    def start(component: str, *args: str) -> StraitProcess:
        process = services(component, *args)
        scraped.append(process)
        prometheus_server.add_target(process.metrics_address, job=component)
        return process

    yield start
    for process in reversed(scraped):
        prometheus_server.remove_target(process.metrics_address)


def test_every_dashboard_query_returns_data_from_running_services(
    source_cluster: KafkaCluster, target_cluster: KafkaCluster, redis_server: RedisServer, redis_url: str,
    prometheus_server: PrometheusServer, strait_services: Callable[..., StraitProcess],
    unique_name: Callable[[str], str], tmp_path: Path,
) -> None:
    present = components_present()
    print(f"strait components present: {sorted(present)}; absent: {sorted(set(COMPONENTS) - present)}")
    assert {"replicator", "configsync"} <= present
    assert DASHBOARDS, "no provisioned dashboards under grafana/dashboards"

    topic, doomed, group = unique_name("orders"), unique_name("doomed"), unique_name("billing")
    create_topic(source_cluster.admin(), topic, partitions=3)
    create_topic(source_cluster.admin(), doomed, partitions=1)
    produce(source_cluster.client_config(), doomed, [Record(b"k", b"v", (("h", b"1"),))] * 10)
    config = flow_config(source_cluster, target_cluster, [topic, doomed], redis_url=redis_url,
                         groups={"include": [group]},
                         sync_group_offsets={"enabled": True, "interval_seconds": 1},
                         sync_topic_configs={"enabled": True, "interval_seconds": 2},
                         emit_checkpoints={"enabled": True, "interval_seconds": 1})
    path = write_config(tmp_path / "strait.yaml", config)
    apply_config(redis_server.client(), load_config(path), str(path))

    state_dir = tmp_path / "replicator-state"
    for component in COMPONENTS:
        if component in present:
            extra = ("--state-dir", str(state_dir)) if component == "replicator" else ()
            strait_services(component, "--redis-url", redis_url, *extra)

    with Load(source_cluster, topic, 3) as load:
        wait_for(lambda: count(target_cluster, f"A.{topic}") > 0 and count(target_cluster, f"A.{doomed}") == 10,
                 180, "records replicated to the target")
        assert consume_and_commit(source_cluster, group, [topic], 200, timeout=15) > 0
        # A change only configsync makes, for its actions' panel: the replicator may have created the
        # remote topics before configsync's first pass (a quick driver start did, once).
        alter(source_cluster, topic, {"retention.ms": "86400001"})
        admin = source_cluster.admin()  # kept alive until the deletion's result arrives
        admin.delete_topics([doomed])[doomed].result(30)

        queries = dashboard_queries()
        required, skipped = [], []
        for uid, title, expr in queries:
            needs = {METRIC_COMPONENT[name] for name in metric_names(expr)} - {None}
            (required if needs <= present else skipped).append((uid, title, expr))
        for uid, title, expr in skipped:
            print(f"not required (component absent): {uid} / {title}: {expr}")

        def empty() -> list[tuple[str, str, str]]:
            return [q for q in required if not prometheus_server.query(q[2])]

        try:
            wait_for(lambda: not empty(), 240, "data for every dashboard query", interval=3)
        except AssertionError:
            raise AssertionError("queries without data:\n" + "\n".join(
                f"  {uid} / {title}: {expr}" for uid, title, expr in empty())) from None
        assert load.sent > 0
    print(f"{len(required)} dashboard queries returned data; {len(skipped)} not required")
