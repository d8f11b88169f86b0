"""Fixtures of the fault drills: the shared rig, service replicas, and the per-fault table at the end."""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack, nullcontext
from pathlib import Path

import pytest

from strait.kafka.admin import create_topics, internal_topic
from strait.policy import HEARTBEATS_TOPIC
from strait_lab.kafka import KafkaCluster, KafkaClusterSpec
from strait_lab.redis import RedisServer
from strait_lab.services import StraitProcess
from tests.support.jvm import default_jit
from tests.support.machine import MachineShare
from tests.support.summary import add_summary
from tests.faults.drill import (
    DRILL_TOPICS,
    REPORT_PATH,
    KeyedLoad,
    Mode,
    Rig,
    format_report,
    read_report,
    start_all,
    wait_copied,
)

log = logging.getLogger(__name__)

# The controllers' quorum tolerates 6 s without a fetch (Kafka: 2 s; its leader resigns after 1.5x): on a
# saturated 2-core machine the drills' source and target quorums both lost their leader twice within
# 20 s of a broker's SIGKILL (CI, session 22), the source held writes 40 s, and the drill measured Kafka.
BROKER_OVERRIDES = {"min.insync.replicas": "2", "default.replication.factor": "3",
                    "controller.quorum.fetch.timeout.ms": "6000"}


@pytest.fixture(scope="session")
def mode() -> Mode:
    """Short (default) or full (STRAIT_FAULTS=full)."""
    return Mode.from_env()


@pytest.fixture(scope="package")
def rig(lab_root: Path, mode: Mode) -> Iterator[Rig]:
    """Clusters C and D (3 brokers each), a dedicated Redis, the config in Redis and the replicator,
    once it copies. Drills whose verdicts rest on timing run alone on the machine
    (:func:`alone_from_here`); their stalls and recoveries are timed against the clusters' own (a
    direct producer's), so the short drills' JVMs compile with C1 as every test's do; the full
    drills (`make test-faults`, the numbers README reports) keep the default JIT of production."""
    with default_jit() if mode.name == "full" else nullcontext():
        yield from _rig(lab_root)


@pytest.fixture(scope="package")
def _drills_alone(machine: MachineShare) -> Iterator[ExitStack]:
    with ExitStack() as stack:
        yield stack


@pytest.fixture
def alone_from_here(rig: Rig, machine: MachineShare, _drills_alone: ExitStack) -> None:
    """The drill is timed: from its start to the end of the drills no other worker runs a test. The
    drills that only count (lost, duplicates within their bound) run before the timed ones, beside
    other workers' tests (tests/conftest.py orders them), so the machine is given up once."""
    _drills_alone.enter_context(machine.alone())  # nests: the first one takes the lock, the stack's end drops it


def _rig(lab_root: Path) -> Iterator[Rig]:
    REPORT_PATH.unlink(missing_ok=True)
    workdir = lab_root / f"faults-{uuid.uuid4().hex[:6]}"
    clusters = [KafkaCluster(KafkaClusterSpec(alias, brokers=3, overrides={"log.retention.ms": "-1",
                                                                           **BROKER_OVERRIDES}),
                             workdir / f"kafka-{alias}") for alias in ("C", "D")]
    redis = RedisServer(workdir / "redis")
    rig: Rig | None = None
    try:
        for cluster in clusters:
            cluster.launch()
        for cluster in clusters:
            cluster.wait_ready(180)
        redis.start()
        rig = Rig(clusters[0], clusters[1], redis, workdir, f"drill-{uuid.uuid4().hex[:6]}",
                  epoch_seconds=Mode.from_env().epoch_seconds)
        rig.topics = [rig.topic(name) for name in DRILL_TOPICS]
        for topic in rig.topics:
            rig.create_topic(topic)
        # As configsync creates it: in the replicator's first query, so the heartbeat replicas the
        # drills start do not restart that query for a new topic inside a drill's window.
        create_topics(rig.source.admin(), rig.source.alias, [internal_topic(HEARTBEATS_TOPIC, 3)])
        rig.apply(rig.build_config(rig.topics))
        rig.start_replicator()
        _warm_up(rig)
        yield rig
    finally:
        _summarize()
        if rig is not None:
            rig.stop()
        redis.stop()
        for cluster in clusters:  # SIGKILL: the rig's data is thrown away, a clean shutdown only costs time
            for node in cluster.nodes:
                node.kill()


def _warm_up(rig: Rig) -> None:
    """Wait until the replicator copies records, so no drill counts the first start-up of Spark."""
    load = KeyedLoad(rig.source, rig.topic("warm-up"), 100).start()
    time.sleep(1)
    load.stop()
    wait_copied(rig, load.topic, load.mark(), timeout=600)


@pytest.fixture(autouse=True)
def _brokers_back_after_each_drill(request: pytest.FixtureRequest) -> Iterator[None]:
    yield
    if "rig" in request.fixturenames:
        request.getfixturevalue("rig").restore_nodes()


@pytest.fixture
def replicas(rig: Rig) -> Iterator[Callable[..., list[StraitProcess]]]:
    """Start service replicas side by side: ``replicas("heartbeat", "heartbeat")``; stopped after the test."""
    started: list[StraitProcess] = []

    def start(*components: str) -> list[StraitProcess]:
        processes = [rig.service(component, len(started) + i) for i, component in enumerate(components)]
        started.extend(processes)
        start_all(processes)
        return processes

    yield start
    for process in started:
        process.kill()  # the drill is over; a graceful stop only costs time


def _summarize() -> None:
    """The per-fault table of this run, for the run's closing summary."""
    rows = read_report()
    if rows:
        add_summary("strait fault drills", [format_report(rows), f"(rows in {REPORT_PATH})"])
