"""Monitoring outlives the source cluster: in the embedded lab, its alerts fire within 2 minutes of its death.

The lab of `strait lab up` (clusters A and B, Redis, Prometheus loading prometheus/rules.yml, and
every strait component for flow A->B) runs in this process. Once records of A reach B and the
heartbeat service's source watch has seen A answer, cluster A's broker is SIGKILLed; Prometheus's
/api/v1/alerts must then show StraitHeartbeatStale, StraitFlowInError and StraitSourceUnreachable
firing for A->B within 2 minutes. The seconds each took, when each service first put the flow in
state "error", and how long each service then takes to stop are printed. Then the heartbeat service
is restarted with A still dead: it must export when A last answered, as the one before it knew.
About 2.5 minutes: the lab starts in ~30 s (the drill's topic is on A before its services start, so
they copy it from their first pass), StraitHeartbeatStale cannot fire before ~90 s (30 s of silence,
then 1 minute), and the restarted service waits out its predecessor's lease (15 s).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from strait_lab.clients import Record, create_topic, produce
from strait_lab.prometheus import PrometheusServer
from strait_lab.runtime import Lab
from strait_lab.services import StraitProcess
from strait_lab.topology import LAB_SERVICES, LabSpec
from tests.support.kafka import count
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.slow]

FLOW = "A->B"
DEADLINE_SECONDS = 120.0
REQUIRED_ALERTS = ("StraitHeartbeatStale", "StraitFlowInError", "StraitSourceUnreachable")
SEEN = "strait_source_last_seen_timestamp_seconds"


def _firing(prometheus: PrometheusServer) -> set[str]:
    """Names of the alerts firing for the flow."""
    return {a["labels"]["alertname"] for a in prometheus.alerts()
            if a["state"] == "firing" and a["labels"].get("flow") == FLOW}


def _services_in_error(prometheus: PrometheusServer) -> set[str]:
    """Services whose current state of the flow is "error", as Prometheus last scraped them."""
    result = prometheus.query(f'max by (service) (strait_flow_state{{flow="{FLOW}",state="error"}}) == 1')
    return {sample["metric"]["service"] for sample in result}


TOPIC = f"orders-{uuid.uuid4().hex[:6]}"
RECORDS = 200


def _orders(lab: Lab) -> None:
    """The drill's topic and records, on A before the services start: they copy it from their first pass."""
    source = lab.clusters["A"]
    create_topic(source.admin(), TOPIC, partitions=2)
    produce(source.client_config(), TOPIC, [Record(f"k{i}".encode(), b"v" * 100, ()) for i in range(RECORDS)])


@pytest.fixture
def lab(lab_root: Path) -> Iterator[Lab]:
    workdir = lab_root / f"dead-source-{uuid.uuid4().hex[:6]}"
    workdir.mkdir(parents=True)
    lab = Lab(LabSpec(services=LAB_SERVICES), workdir)  # free ports: runs beside other labs
    started = time.monotonic()
    lab.up(prepare=_orders)
    print(f"lab up in {time.monotonic() - started:.0f}s; logs {workdir}")
    yield lab
    # The design: with a cluster dead, every process still stops in seconds. The services are stopped
    # side by side (each as StraitProcess.stop does it), so the teardown lasts as long as the slowest.
    started = time.monotonic()

    def stop(service: StraitProcess) -> str:
        service.stop()
        return f"{service.process.name} stopped in {time.monotonic() - started:.0f}s " \
               f"(exit code {service.process.returncode()})"

    with ThreadPoolExecutor(max_workers=max(1, len(lab.services))) as pool:
        for line in pool.map(stop, lab.services):
            print(line)
    lab.down()
    print(f"lab down in {time.monotonic() - started:.0f}s")


def test_alerts_fire_within_two_minutes_of_the_source_death(lab: Lab) -> None:
    prometheus, source, target = lab.prometheus, lab.clusters["A"], lab.clusters["B"]
    assert prometheus is not None
    loaded = {rule["name"] for group in prometheus.rule_groups() for rule in group["rules"]}
    assert set(REQUIRED_ALERTS) <= loaded, "prometheus/rules.yml not loaded"

    started = time.monotonic()
    wait_for(lambda: count(target, f"A.{TOPIC}") == RECORDS, 180, "the records copied to B")
    wait_for(lambda: prometheus.query(f'flow:strait_heartbeat_age_seconds:max{{flow="{FLOW}"}} < 5'), 120,
             "a fresh heartbeat age of A->B, through Prometheus")
    # The source cannot be reported unreachable before it once answered (a heartbeat service started
    # a second before the kill had not asked it yet).
    wait_for(lambda: prometheus.query(f'time() - strait_source_last_seen_timestamp_seconds{{flow="{FLOW}"}} < 5'),
             120, "A answering the source watch, through Prometheus")
    print(f"flow {FLOW} replicating records, A seen by the source watch {time.monotonic() - started:.0f}s after lab up")
    assert not _firing(prometheus) & set(REQUIRED_ALERTS), "alerts fire before the source dies"
    expected = set(REQUIRED_ALERTS)

    for node in source.nodes:
        node.kill()  # SIGKILL, the broker's whole process group
    killed = time.monotonic()
    fired: dict[str, float] = {}
    in_error: dict[str, float] = {}
    while time.monotonic() - killed < DEADLINE_SECONDS + 5 and set(fired) < expected:
        now = time.monotonic() - killed
        for name in _firing(prometheus) - set(fired):
            fired[name] = now
        for service in _services_in_error(prometheus) - set(in_error):
            in_error[service] = now
        time.sleep(1)
    for service in sorted(in_error):
        print(f"{service}: flow {FLOW} in state error {in_error[service]:.0f}s after the kill")
    never = sorted(set(LAB_SERVICES) - set(in_error))
    print(f"services that had not put {FLOW} in state error when the wait ended: {never or 'none'}")
    for name in sorted(expected):
        print(f"{name}: " + (f"firing {fired[name]:.0f}s after the kill" if name in fired else "not firing"))
    broken = {rule["name"]: rule.get("lastError") for group in prometheus.rule_groups()
              for rule in group["rules"] if rule.get("health") == "err"}
    assert not broken, f"rules failing to evaluate: {broken}"
    late = {name: fired.get(name) for name in expected if fired.get(name, DEADLINE_SECONDS + 1) > DEADLINE_SECONDS}
    assert not late, f"not firing within {DEADLINE_SECONDS:.0f}s of the source's death: {late}; " \
                     f"services in error: {in_error}"
    _heartbeat_restart_keeps_the_last_answer(lab)


def _heartbeat_restart_keeps_the_last_answer(lab: Lab) -> None:
    """A heartbeat service started while the source is dead reports when the source last answered the
    one before it (from Redis), so StraitSourceUnreachable does not lose its series."""
    heartbeat = next(s for s in lab.services if s.component == "heartbeat")
    seen = heartbeat.sample(SEEN, flow=FLOW)
    assert seen is not None
    heartbeat.stop()
    restarted = time.monotonic()
    heartbeat.start()
    wait_for(lambda: heartbeat.sample(SEEN, flow=FLOW) is not None, 60,
             "the restarted heartbeat service exporting when the source last answered")
    print(f"heartbeat service restarted: {SEEN} back {time.monotonic() - restarted:.0f}s after its start")
    assert heartbeat.sample(SEEN, flow=FLOW) == seen, "the restarted service forgot when the source last answered"
