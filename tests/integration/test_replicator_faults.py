"""The replicator SIGKILLed at random moments under load: at least once with zero loss, and exactly once.

`make test` kills it once under a 30 s load; with ``STRAIT_FAULTS=full`` (`make test-faults`) twice
under a 48 s load. The fault drills SIGKILL it too (tests/faults), and the multi-host drill kills
its driver; what this test adds is the order of the replays on the target, and a second flow in
exactly-once mode in the same replicator (B->A), which copies every record once through the kills.
"""

from __future__ import annotations

import os
import random
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Producer

from strait_lab.clients import create_topic
from strait_lab.kafka import KafkaCluster
from strait_lab.services import StraitProcess
from strait_replicator.state import epoch_of_log_text
from tests.support.config import flow_config, write_config
from tests.support.kafka import count, last_values, records_by_partition
from tests.support.waiting import wait_for

pytestmark = pytest.mark.slow

PARTITIONS = 6
FULL = os.environ.get("STRAIT_FAULTS", "").lower() == "full"
KILLS = 2 if FULL else 1
TICKS = 480 if FULL else 300  # of 0.1 s: the load lasts past the kills, each after its run's start-up and first copies
RATE = 2_500  # records/s
TOTAL = int(RATE * TICKS * 0.1)


def _load(cluster: KafkaCluster, topic: str, stop: threading.Event, done: threading.Event) -> None:
    """Produce TOTAL keyed records, value "<partition>:<sequence>", over TICKS tenths of a second."""
    producer = Producer({**cluster.client_config(), "linger.ms": 5, "enable.idempotence": True})
    per_tick = TOTAL // TICKS
    for tick in range(TICKS):
        if stop.is_set():
            break
        for i in range(tick * per_tick, (tick + 1) * per_tick):
            partition = i % PARTITIONS
            while True:
                try:
                    producer.produce(topic, key=f"k{i}".encode(), value=f"{partition}:{i // PARTITIONS}".encode(),
                                     partition=partition, headers=[("seq", str(i).encode())])
                    break
                except BufferError:
                    producer.poll(0.05)
        producer.poll(0)
        time.sleep(0.1)
    assert producer.flush(60) == 0
    done.set()


def _epoch_starts(checkpoint: Path, topic: str) -> dict[int, set[int]]:
    """Each partition's start offset of every epoch, from Spark's offsets log."""
    starts: dict[int, set[int]] = {p: set() for p in range(PARTITIONS)}
    for path in sorted((checkpoint / "offsets").iterdir()):
        if not path.name.isdigit():
            continue
        epoch = epoch_of_log_text(path.read_text())
        assert epoch is not None, f"offsets log entry {path.name} unreadable"
        for (t, p), offset in epoch.start.items():
            if t == topic:
                starts[p].add(offset)
    return starts


def test_sigkill_under_load_loses_nothing_and_bounds_duplicates(
    source_cluster: KafkaCluster, target_cluster: KafkaCluster, unique_name: Callable[[str], str],
    tmp_path: Path, lab_root: Path,
) -> None:
    """One replicator, two flows under load, SIGKILLed and started again. A->B at least once: nothing
    lost, replays start where an epoch or a killed run's progress did, a few seconds of load copied
    again per kill at most. B->A exactly once: a read_committed consumer of its remote topic reads
    every record once, in order."""
    seed = int(os.environ.get("STRAIT_FAULT_SEED", time.time()))
    rng = random.Random(seed)
    print(f"fault seed {seed}")
    topic, eos_topic = unique_name("kill"), unique_name("kill-eos")
    remote, eos_remote = f"A.{topic}", f"B.{eos_topic}"
    create_topic(source_cluster.admin(), topic, partitions=PARTITIONS, config={"retention.ms": "-1"})
    create_topic(target_cluster.admin(), eos_topic, partitions=PARTITIONS, config={"retention.ms": "-1"})
    at_least_once = flow_config(source_cluster, target_cluster, [topic])
    exactly_once = flow_config(target_cluster, source_cluster, [eos_topic], exactly_once=True)
    config = write_config(tmp_path / "s.yaml", {**at_least_once,
                                                "flows": at_least_once["flows"] + exactly_once["flows"]})
    state = tmp_path / "state"
    stop, done, eos_done = threading.Event(), threading.Event(), threading.Event()
    loaders = [threading.Thread(target=_load, args=(source_cluster, topic, stop, done), daemon=True),
               threading.Thread(target=_load, args=(target_cluster, eos_topic, stop, eos_done), daemon=True)]
    for loader in loaders:
        loader.start()
    processes: list[StraitProcess] = []
    try:
        for kill in range(KILLS + 1):
            process = StraitProcess("replicator", ["--config", str(config), "--state-dir", str(state)],
                                    lab_root / "replicator", name=f"replicator-kill-{kill}-{topic}")
            processes.append(process)
            process.start(timeout=120)
            if kill == KILLS:
                break
            before, eos_before = count(target_cluster, remote), count(source_cluster, eos_remote)
            wait_for(lambda: count(target_cluster, remote) > before or done.is_set(), 120,
                     "this run copying")  # past start-up
            wait_for(lambda: count(source_cluster, eos_remote) > eos_before or eos_done.is_set(), 60,
                     "this run copying exactly once")
            time.sleep(rng.uniform(1, 6))  # in the middle of the running epoch
            process.kill()
            print(f"killed replicator after run {kill}")
        wait_for(lambda: done.is_set() and eos_done.is_set(), 180, "the loads to finish")
        last, eos_last = last_values(source_cluster, topic), last_values(target_cluster, eos_topic)
        wait_for(lambda: last_values(target_cluster, remote) == last, 300, f"every partition of {remote} caught up")
        wait_for(lambda: last_values(source_cluster, eos_remote) == eos_last, 120,
                 f"every partition of {eos_remote} caught up")
        time.sleep(3)  # let an in-flight batch finish so the offsets log is complete
    finally:
        stop.set()
        for process in processes:
            process.stop()

    eos_source = records_by_partition(target_cluster, eos_topic)
    eos_target = records_by_partition(source_cluster, eos_remote)  # read_committed
    for partition in range(PARTITIONS):
        got = [int(r.value.split(b":")[1]) for r in eos_target[partition]]
        assert got == list(range(len(eos_source[partition]))), \
            f"{eos_remote}[{partition}]: not each record once in order ({len(got) - len(set(got))} twice, " \
            f"{len(eos_source[partition]) - len(set(got))} missing)"
    print(f"exactly once after {KILLS} SIGKILLs: {TOTAL} records, each once")
    source = records_by_partition(source_cluster, topic)
    target = records_by_partition(target_cluster, remote)
    starts = _epoch_starts(state / "A_to_B" / "checkpoint", topic)
    for partition, offset in _resume_points(processes, topic):
        starts[partition].add(offset)
    duplicates = 0
    for partition in range(PARTITIONS):
        expected = [r.value for r in source[partition]]
        got = [int(r.value.split(b":")[1]) for r in target[partition]]
        assert len(expected) == len(range(partition, TOTAL, PARTITIONS))
        assert set(got) == set(range(len(expected))), f"partition {partition} lost records"
        duplicates += len(got) - len(set(got))
        _assert_replays_start_at_an_epoch(got, starts[partition], partition)
        assert [r.headers for r in target[partition][-3:]] == [r.headers for r in source[partition][-3:]]
    print(f"duplicates after {KILLS} SIGKILLs: {duplicates} of {TOTAL} records")
    # A restarted epoch resumes where the live reports of the killed run got to (about a second
    # behind it), not at the epoch's start: at most a few seconds of load per kill.
    assert duplicates <= KILLS * 5 * RATE, f"{duplicates} duplicates after {KILLS} kills"


def _resume_points(processes: list[StraitProcess], topic: str) -> list[tuple[int, int]]:
    """(partition, offset) of every 'resumes at offset' line the replicator runs logged for ``topic``,
    and of where each run's head start began it."""
    pattern = re.compile(rf"topic={re.escape(topic)} partition=(\d+) resumes at offset (\d+)")
    head_starts = re.compile(rf"head start copier=\S+ topic={re.escape(topic)} from=(\S+)")
    points = []
    for process in processes:
        text = process.process.log_path.read_text(errors="replace")
        points += [(int(m[1]), int(m[2])) for m in pattern.finditer(text)]
        points += [(int(partition), int(offset)) for m in head_starts.finditer(text)
                   for partition, offset in (start.split(":") for start in m[1].split(","))]
    return points


def _assert_replays_start_at_an_epoch(sequence: list[int], starts: set[int], partition: int) -> None:
    """The target is the source in order, except that after a kill the epoch that was running is
    copied again from its start or from where a killed run reported it had got to: a replay begins
    exactly at one of those and goes on in order."""
    high = -1
    i = 0
    while i < len(sequence):
        if sequence[i] == high + 1:
            high = sequence[i]
            i += 1
            continue
        assert sequence[i] <= high, f"partition {partition}: gap before source offset {sequence[i]}"
        assert sequence[i] in starts, f"partition {partition}: replay from {sequence[i]} is no epoch's start " \
            "nor a logged resume point"
        while i < len(sequence) and sequence[i] <= high:  # the replayed copy, in order
            if i + 1 < len(sequence) and sequence[i + 1] <= high:
                assert sequence[i + 1] == sequence[i] + 1, f"partition {partition}: replay out of order"
            i += 1
