"""Failover drill on real clusters: load into A, consumers on A, failover, the same consumers on B;
then failback: load into B, B->A carries it home, the same consumers back on A.

The replicator and the checkpoint service run as `strait run` processes controlled from Redis. A
producer writes numbered records into A while two consumers of one group read them slowly
(behind the producer) and commit after every batch. The producer stops (the application moves),
the consumers stop, `failover` drains the flow, stops it and writes the group's offsets on B; the
same consumers then read B's remote topic from there. Every produced record must be processed
exactly once across A and B: none lost, none twice. After failback (producers wrote to B's local
topic), the consumers on A read the rest of B's records from ``B.<topic>`` and nothing from
``<topic>`` again (its offsets come from the group's position on ``A.<topic>`` on B).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import redis
from confluent_kafka import Consumer, Producer

from strait.config import load_config
from strait.config.store import apply_config, load_stored_config
from strait.failover import FailoverReport, failback, failover
from strait_lab.clients import create_topic
from strait_lab.kafka import KafkaCluster
from strait_lab.services import StraitProcess
from tests.support.config import flow_config, write_config
from tests.support.kafka import count
from tests.support.waiting import slack, wait_for

pytestmark = pytest.mark.slow

PARTITIONS = 3
CONSUMERS = 2


class Load:
    """A producer thread writing numbered records (``<prefix>-<i>``) until stopped."""

    def __init__(self, cluster: KafkaCluster, topic: str, per_second: float, prefix: str = "n") -> None:
        self.produced = 0
        self._stop = threading.Event()
        self._producer = Producer({**cluster.client_config(), "enable.idempotence": True, "linger.ms": 5})
        self._topic, self._interval, self._prefix = topic, 1.0 / per_second, prefix
        self._errors: list[str] = []
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> Load:
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            self._producer.produce(self._topic, key=f"k{self.produced % 17}".encode(),
                                   value=f"{self._prefix}-{self.produced}".encode(),
                                   headers=[("seq", str(self.produced).encode())],
                                   on_delivery=lambda err, _m: self._errors.append(str(err)) if err else None)
            self._producer.poll(0)
            self.produced += 1
            time.sleep(self._interval)

    def stop(self) -> int:
        """Stop, wait for every delivery; returns the number of records produced."""
        self._stop.set()
        self._thread.join(30)
        assert self._producer.flush(60) == 0 and not self._errors, self._errors[:3]
        return self.produced


class GroupMember:
    """One consumer of the group: processes records (appends their value), commits after each batch."""

    def __init__(self, cluster: KafkaCluster, group: str, topics: list[str], processed: list[str],
                 lock: threading.Lock, pause: float) -> None:
        self._consumer = Consumer({**cluster.client_config(), "group.id": group, "enable.auto.commit": False,
                                   "auto.offset.reset": "earliest", "session.timeout.ms": 10000})
        self._topics, self._processed, self._lock, self._pause = topics, processed, lock, pause
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> GroupMember:
        self._thread.start()
        return self

    def _run(self) -> None:
        self._consumer.subscribe(self._topics)
        try:
            while not self._stop.is_set():
                batch = [m for m in self._consumer.consume(20, timeout=0.5) if m.error() is None]
                if not batch:
                    continue
                with self._lock:
                    self._processed.extend(m.value().decode() for m in batch)
                self._consumer.commit(asynchronous=False)  # processed, then committed: at-least-once
                time.sleep(self._pause)
        finally:
            self._consumer.close()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(60)


def _members(cluster: KafkaCluster, group: str, topics: list[str], processed: list[str], lock: threading.Lock,
             pause: float) -> list[GroupMember]:
    return [GroupMember(cluster, group, topics, processed, lock, pause).start() for _ in range(CONSUMERS)]


def _stop(members: list[GroupMember]) -> None:
    for member in members:
        member.stop()


def _assert_once(processed: list[str], expected: set[str]) -> None:
    assert len(processed) == len(set(processed)), f"{len(processed) - len(set(processed))} records processed twice"
    assert set(processed) == expected, f"{len(expected - set(processed))} records lost"


def _print_report(report: FailoverReport) -> None:
    from strait.cli.failover import render

    print(render(report))


def test_failover_drill_and_failback_lose_and_duplicate_nothing(
    source_cluster: KafkaCluster, target_cluster: KafkaCluster, redis_url: str,
    services: Callable[..., StraitProcess], unique_name: Callable[[str], str], tmp_path: Path,
) -> None:
    topic, group = unique_name("orders"), unique_name("billing")
    create_topic(source_cluster.admin(), topic, partitions=PARTITIONS)
    config = flow_config(source_cluster, target_cluster, [topic], redis_url=redis_url,
                         groups={"include": [group]}, emit_checkpoints={"interval_seconds": 1})
    client = redis.Redis.from_url(redis_url)
    apply_config(client, load_config(write_config(tmp_path / "strait.yaml", config)), "drill")
    services("replicator", "--redis-url", redis_url)
    services("checkpoint", "--redis-url", redis_url, "--lease-ttl", "3")

    # Load into A, the group's consumers on A, behind the producer.
    processed: list[str] = []
    lock = threading.Lock()
    load = Load(source_cluster, topic, per_second=400).start()
    members = _members(source_cluster, group, [topic], processed, lock, pause=0.1)
    wait_for(lambda: count(target_cluster, f"A.{topic}") > 2000, 240, "replication under load")
    time.sleep(5)
    produced = load.stop()  # the application stops writing to A
    _stop(members)
    on_a = len(processed)
    assert 0 < on_a < produced, f"consumers should be behind: processed {on_a} of {produced}"

    # Failover: the same consumers resume on B's remote topic.
    started = time.monotonic()
    report = failover(client, "A->B", [group], timeout=120)
    took = time.monotonic() - started
    _print_report(report)
    print(f"failover: drained after {report.drain_seconds:.1f}s, done {report.seconds_after_drain:.1f}s after "
          f"drain, {took:.1f}s in all; {produced} produced, {on_a} processed on A")
    assert report.drained and report.clean, report
    (outcome,) = report.groups
    assert outcome.state == "written" and len(outcome.partitions) == PARTITIONS
    assert all(p.lost == 0 and p.reread == 0 for p in outcome.partitions)
    assert report.seconds_after_drain is not None and report.seconds_after_drain < slack(30)
    assert not load_stored_config(client)[1].flow("A->B").enabled

    members = _members(target_cluster, group, [f"A.{topic}"], processed, lock, pause=0.0)
    try:
        wait_for(lambda: len(processed) >= produced, 120, f"all {produced} records processed", interval=0.5)
        time.sleep(3)  # anything read twice would arrive now
    finally:
        _stop(members)
    _assert_once(processed, {f"n-{i}" for i in range(produced)})

    # B is the primary: producers write to B's local topic, the consumers read it (and A.<topic>), behind.
    create_topic(target_cluster.admin(), topic, partitions=PARTITIONS)
    load = Load(target_cluster, topic, per_second=300, prefix="b").start()
    members = _members(target_cluster, group, [f"A.{topic}", topic], processed, lock, pause=0.2)
    wait_for(lambda: len(processed) > produced + 500, 60, "consumers reading B's own records", interval=0.5)
    produced_on_b = load.stop()
    _stop(members)
    assert len(processed) < produced + produced_on_b

    # Failback: B->A carries B's records home (B.<topic> on A), the group moves back, A->B runs again.
    back = failback(client, "A->B", [group], timeout=180)
    _print_report(back)
    assert back.drained and back.clean, back
    (outcome,) = back.groups
    assert outcome.state == "written"
    assert {(p.topic, p.target_topic) for p in outcome.partitions} == {(topic, f"B.{topic}"),
                                                                        (f"A.{topic}", topic)}
    stored = load_stored_config(client)[1]
    assert stored.flow("A->B").enabled and not stored.flow("B->A").enabled

    members = _members(source_cluster, group, [topic, f"B.{topic}"], processed, lock, pause=0.0)
    try:
        wait_for(lambda: len(processed) >= produced + produced_on_b, 120, "every record of B processed on A",
                 interval=0.5)
        time.sleep(3)
    finally:
        _stop(members)
    _assert_once(processed, {f"n-{i}" for i in range(produced)} | {f"b-{i}" for i in range(produced_on_b)})
