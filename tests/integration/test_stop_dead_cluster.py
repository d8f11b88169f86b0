"""Every strait process ends within 10 s of SIGTERM while its source cluster is dead.

Each component (configsync, replicator, heartbeat, checkpoint) runs as `strait run COMPONENT`
against a source cluster of its own and the shared target. Once each does its work (records,
heartbeats and checkpoints reach the target), the source's broker is SIGKILLed while records are
produced to it, so the replicator has copies and offset syncs in flight; a few seconds later every
process gets SIGTERM at its main pid (as Docker and Kubernetes send it), and each must have
exited within 10 s. With the clusters alive, the same holds and the replicator commits its running
epoch first. Then the embedded lab of `strait lab up` with cluster A dead: its stop path
(``Lab.down``, what Ctrl-C runs) must end within ``LAB_DOWN_BOUND`` seconds. The seconds each took
are printed. Everything is started beside other workers' tests; only the stops run alone.
"""

from __future__ import annotations

import os
import signal
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka import Producer, TopicPartition

from strait_lab.clients import Record, create_topic, produce
from strait_lab.kafka import KafkaCluster
from strait_lab.redis import RedisServer
from strait_lab.runtime import Lab
from strait_lab.services import StraitProcess
from strait_lab.topology import LAB_SERVICES, LabSpec
from tests.support.config import flow_config, write_config
from tests.support.kafka import commit_offsets, count
from tests.support.machine import MachineShare
from tests.support.waiting import slack, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.slow]

COMPONENTS = ("configsync", "replicator", "heartbeat", "checkpoint")
STOP_BOUND = 10.0  # seconds from SIGTERM to exit, per process
# Seconds for the whole lab: Lab.down stops its 4 services one after another (measured: 14 to 22 s,
# from 80 s before each service bounded its stop), then Prometheus, Redis and cluster B.
LAB_DOWN_BOUND = 15.0
DEAD_BEFORE_STOP = 5.0  # the clients are in the middle of their retries when the stop comes
GROUP = "stop-test-group"


@contextmanager
def _load(cluster: KafkaCluster, topic: str) -> Iterator[None]:
    """Produce to ``topic`` while the block runs; what is undelivered at its end is dropped.

    The source is killed inside the block, so the replicator has records and offset syncs in flight.
    """
    producer = Producer({**cluster.client_config(), "linger.ms": 5, "message.timeout.ms": 5000})
    stop = threading.Event()

    def run() -> None:
        i = 0
        while not stop.is_set():
            with suppress(BufferError):
                producer.produce(topic, f"v{i}".encode(), f"k{i}".encode())
                i += 1
            producer.poll(0.002)

    thread = threading.Thread(target=run, name="load", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(10)
        producer.purge()
        producer.flush(0)


def _stop_times(processes: dict[str, StraitProcess], timeout: float = 60.0) -> dict[str, float]:
    """SIGTERM every process's main pid at once; the seconds until each exited (``inf`` if it did not)."""
    started = time.monotonic()
    for process in processes.values():
        pid = process.process.pid
        assert pid is not None and process.process.alive(), f"{process.process.name} died early"
        os.kill(pid, signal.SIGTERM)
    ended: dict[str, float] = {}
    while len(ended) < len(processes) and time.monotonic() - started < timeout:
        for name, process in processes.items():
            if name not in ended and not process.process.alive():
                ended[name] = time.monotonic() - started
        time.sleep(0.1)
    return {name: ended.get(name, float("inf")) for name in processes}


@dataclass(frozen=True)
class Running:
    """Every component on one flow source->B, each having done its work."""

    processes: dict[str, StraitProcess]
    source: KafkaCluster
    topic: str
    state: Path  # the replicator's --state-dir


def _start_components(source: KafkaCluster, target: KafkaCluster, redis_url: str, folder: Path,
                      services: Callable[..., StraitProcess]) -> Running:
    """Every component on flow source->B over a new topic (not yet waited for: :func:`_wait_working`)."""
    topic = f"stopping-{uuid.uuid4().hex[:6]}"
    create_topic(source.admin(), topic, partitions=2)
    produce(source.client_config(), topic, [Record(f"k{i}".encode(), b"v", (), partition=i % 2) for i in range(100)])
    commit_offsets(source, GROUP, [TopicPartition(topic, 0, 40)])  # work for the checkpoint service
    config = flow_config(source, target, [topic], redis_url=redis_url,
                         emit_checkpoints={"enabled": True, "interval_seconds": 1},
                         sync_group_offsets={"enabled": True, "interval_seconds": 1})
    path = write_config(folder / f"strait-{source.alias}.yaml", config)
    state = folder / f"state-{source.alias}"
    processes = {}
    for name in COMPONENTS:
        extra = ["--state-dir", str(state)] if name == "replicator" else ["--lease-ttl", "5"]
        processes[name] = services(name, "--config", str(path), *extra)
    return Running(processes, source, topic, state)


def _wait_working(running: Running, target: KafkaCluster) -> None:
    """Until records, heartbeats and checkpoints reached the target and the query's tasks copy."""
    alias, topic = running.source.alias, running.topic
    wait_for(lambda: count(target, f"{alias}.{topic}") == 100, 240, "the records copied")
    wait_for(lambda: count(target, f"{alias}.heartbeats") > 0, 120, "heartbeats copied")
    wait_for(lambda: count(target, f"{alias}.checkpoints.internal") > 0, 120, "checkpoints emitted")
    # The driver's head start may have copied all of it before the query: stop once its tasks run.
    wait_for(lambda: "ended reason=yield" in running.processes["replicator"].log_text(), 120,
             "the query's tasks taking the partitions over")


@dataclass(frozen=True)
class Prepared:
    """What the module's tests stop: components whose source dies, components on a live source, the
    embedded lab with records of A copied to B."""

    dead: Running
    alive: Running
    lab: Lab
    lab_topic: str


@pytest.fixture(scope="module")
def prepared(kafka_cluster_factory: Callable[..., KafkaCluster], target_cluster: KafkaCluster,
             redis_server_factory: Callable[..., RedisServer], module_services: Callable[..., StraitProcess],
             tmp_path_factory: pytest.TempPathFactory, lab_root: Path) -> Iterator[Prepared]:
    """Everything the tests stop, started beside other workers' tests: only the stops are timed."""
    folder = tmp_path_factory.mktemp("stopping")
    lab = Lab(LabSpec(services=LAB_SERVICES), lab_root / f"stop-lab-{uuid.uuid4().hex[:6]}")  # free ports
    lab.workdir.mkdir(parents=True)
    runs: list[Running] = []
    try:
        lab_topic = f"orders-{uuid.uuid4().hex[:6]}"

        def orders(lab: Lab) -> None:  # on A before the lab's services start: copied from their first pass
            create_topic(lab.clusters["A"].admin(), lab_topic, partitions=2)
            produce(lab.clusters["A"].client_config(), lab_topic,
                    [Record(f"k{i}".encode(), b"v", ()) for i in range(100)])

        lab.up(prepare=orders)
        for alias in ("Z", "Y"):  # Z is killed below: no other test may use it
            runs.append(_start_components(kafka_cluster_factory(alias), target_cluster, redis_server_factory().url,
                                          folder, module_services))
        for running in runs:
            _wait_working(running, target_cluster)
        wait_for(lambda: count(lab.clusters["B"], f"A.{lab_topic}") == 100, 240, "the records copied to B")
        yield Prepared(runs[0], runs[1], lab, lab_topic)
    finally:
        for running in runs:
            for process in running.processes.values():
                process.process.kill()  # a graceful stop against a dead cluster only costs time
            running.source.kill()  # only this module uses Z and Y
        lab.down()  # a no-op once the test stopped it, the cleanup when it failed earlier


@pytest.fixture(scope="module")
def stopping(prepared: Prepared, machine: MachineShare) -> Iterator[Prepared]:
    """The stops are timed: from the first one on, no other worker runs a test until the module ends."""
    with machine.alone():
        yield prepared


def _report(took: dict[str, float], running: Running, clusters: str) -> None:
    """Print each stop time; fail naming the processes over STOP_BOUND and their logs."""
    for name, seconds in took.items():
        print(f"strait run {name}: exited {seconds:.1f}s after SIGTERM with {clusters} "
              f"(exit code {running.processes[name].process.returncode()})")
    slow = {name: seconds for name, seconds in took.items() if seconds > slack(STOP_BOUND)}
    assert not slow, f"still running {slack(STOP_BOUND):.0f}s after SIGTERM: {slow}; logs " \
                     f"{[str(p.process.log_path) for p in running.processes.values()]}"


def test_each_component_exits_within_10s_of_sigterm_with_its_source_dead(stopping: Prepared) -> None:
    running = stopping.dead
    with _load(running.source, running.topic):
        time.sleep(2)
        for node in running.source.nodes:
            node.kill()
    time.sleep(DEAD_BEFORE_STOP)
    _report(_stop_times(running.processes), running, "its source dead")
    assert all(p.process.returncode() == 0 for p in running.processes.values())


def test_with_the_clusters_alive_the_replicator_commits_its_running_epoch_and_each_component_exits_in_time(
    stopping: Prepared,
) -> None:
    running = stopping.alive
    with _load(running.source, running.topic):
        time.sleep(2)
        took = _stop_times(running.processes)
    _report(took, running, "the clusters alive")
    log_text = running.processes["replicator"].log_text()
    assert "running epoch ended=True" in log_text and "exiting now" not in log_text
    planned = {p.name for p in running.state.glob("*/checkpoint/offsets/[0-9]*")}
    assert planned and planned == {p.name for p in running.state.glob("*/checkpoint/commits/[0-9]*")}, \
        "the running epoch was not committed"


def test_the_lab_stops_within_its_bound_with_cluster_a_dead(stopping: Prepared) -> None:
    lab, topic = stopping.lab, stopping.lab_topic
    source = lab.clusters["A"]
    with _load(source, topic):
        time.sleep(2)
        for node in source.nodes:
            node.kill()
    time.sleep(DEAD_BEFORE_STOP)
    started = time.monotonic()
    lab.down()  # what Ctrl-C on `strait lab up` runs
    took = time.monotonic() - started
    print(f"lab down with cluster A dead: {took:.1f}s")
    for process in lab.processes():
        assert not process.alive(), f"{process.name} still runs after the lab stopped"
    assert took <= slack(LAB_DOWN_BOUND), f"the lab took {took:.0f}s to stop with cluster A dead; logs {lab.workdir}"
