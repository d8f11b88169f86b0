"""Replacing MirrorMaker 2 without a second copy, and handing back to it (issue 24), against MM2 itself.

One topic, MM2 (dedicated mode, the project's Kafka jars) and strait taking turns on the same
clusters: MM2 copies, checkpoints a consumer group and is stopped by SIGTERM; strait's replicator
starts and reads where MM2 got to from MM2's Connect offsets topic, and the group fails over through
strait from MM2's checkpoints and syncs; strait hands the flow back (`strait handover --to mm2`) and MM2
goes on from strait's progress; MM2 is SIGKILLed under load; strait takes over again, from MM2's
offsets or offset syncs, while the load goes on. After each switch every source record is on B exactly
once, except the window strait reports.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition

from strait.translation import read_stored_checkpoints
from strait_bench.options import BenchOptions
from strait_bench.systems import start_mm2
from strait_lab.clients import create_topic
from strait_lab.kafka import KafkaCluster
from strait_lab.process import ManagedProcess
from strait_lab.services import StraitProcess
from tests.integration.replicator_support import (
    NumberedLoad, count, flow_config, numbered_copies, produce_numbered, resume_evidence, wait_for, write_config,
)

pytestmark = pytest.mark.slow

PARTITIONS = 3
MM2_SETTINGS = {"emit.heartbeats.enabled": "false", "offset.flush.interval.ms": "2000",
                "emit.checkpoints.interval.seconds": "1"}
CONSUMED = 3_000  # per partition, by the group MM2 checkpoints


def _duplicates(target: KafkaCluster, remote: str, total: int) -> int:
    """Assert every sequence number below ``total`` is on ``remote``; how many records are there twice."""
    copies = numbered_copies(target, remote)
    duplicates = 0
    for partition in range(PARTITIONS):
        got = copies.get(partition, [])
        missing = sorted(set(range(len(range(partition, total, PARTITIONS)))) - set(got))
        assert not missing, f"partition {partition} lost {len(missing)} records, {missing[:3]}..{missing[-3:]}"
        duplicates += len(got) - len(set(got))
    return duplicates


class Turns:
    """The topic, what was produced to it, and MM2 and strait taking turns on it."""

    def __init__(self, source: KafkaCluster, target: KafkaCluster, topic: str, tmp_path: Path,
                 lab_root: Path) -> None:
        self.source, self.target, self.topic, self.remote = source, target, topic, f"A.{topic}"
        self.tmp_path, self.lab_root = tmp_path, lab_root
        self.config = write_config(tmp_path / "flow.yaml", flow_config(source, target, [topic]))
        self.produced = 0
        self.turn = 0

    def produce(self, total: int, rate: float = 20_000) -> None:
        self.produced += produce_numbered(self.source, self.topic, PARTITIONS, total, rate, first=self.produced)

    def caught_up(self, what: str, extra: int = 0) -> None:
        wait_for(lambda: count(self.target, self.remote) >= self.produced + extra, 180, what)

    def mm2(self) -> ManagedProcess:
        self.turn += 1
        return start_mm2(self.source, self.target, [self.topic], BenchOptions(), self.tmp_path / f"mm2-{self.turn}",
                         MM2_SETTINGS)

    def strait(self, what: str, load: NumberedLoad | None = None) -> tuple[str, int, int]:
        """strait's replicator from a new state dir until it caught up (with ``load`` still producing
        until it copies): (evidence, bound reported, duplicates)."""
        self.turn += 1
        process = StraitProcess("replicator", ["--config", str(self.config), "--state-dir",
                                               str(self.tmp_path / f"state-{self.turn}")],
                                self.lab_root / "replicator", name=f"replicator-{self.turn}-{self.topic}")
        try:
            process.start(timeout=120)
            if load is not None:
                before = count(self.target, self.remote)
                wait_for(lambda: count(self.target, self.remote) > before + 3_000, 120, f"{what}: copying")
                self.produced += load.stop()
            self.caught_up(what)
            time.sleep(2)
        finally:
            if load is not None:
                load.stop()  # counted above, or the turn failed
            process.stop()
        evidence, bound = resume_evidence(process, self.topic)[0]
        duplicates = _duplicates(self.target, self.remote, self.produced)
        print(f"{what}: strait resumed from {evidence}, reported at most {bound}, found {duplicates}")
        return evidence, int(bound), duplicates


def test_strait_takes_over_from_mirrormaker2_hands_back_and_takes_over_after_a_crash(
    source_cluster: KafkaCluster, target_cluster: KafkaCluster, unique_name: Callable[[str], str],
    tmp_path: Path, lab_root: Path,
) -> None:
    turns = Turns(source_cluster, target_cluster, unique_name("mm2-turns"), tmp_path, lab_root)
    create_topic(source_cluster.admin(), turns.topic, partitions=PARTITIONS, config={"retention.ms": "-1"})

    turns.produce(20_000)
    group = f"{turns.topic}-group"
    _consume_and_commit(source_cluster, turns.topic, group, CONSUMED)
    mm2 = turns.mm2()
    try:
        turns.caught_up("MirrorMaker 2 copying")
        wait_for(lambda: len(_mm2_checkpoints(target_cluster, group)) == PARTITIONS, 120, "MM2 checkpointing the group")
    finally:
        mm2.stop()  # SIGTERM: MM2 commits its offsets
    turns.produce(10_000)
    evidence, _bound, after_sigterm = turns.strait("taking over from MM2 stopped by SIGTERM")
    assert (evidence, after_sigterm) == ("mm2-offsets", 0), "MM2 committed its offsets when it stopped"
    _fails_over_through_strait_with_nothing_lost(turns, group)

    handed = subprocess.run([sys.executable, "-m", "strait.cli", "handover", "--to", "mm2", "--flow", "A->B",
                             "--config", str(turns.config)], capture_output=True, text=True, timeout=120)
    assert handed.returncode == 0, handed.stderr
    assert f"wrote {PARTITIONS} partitions to mm2-offsets.A.internal" in handed.stdout
    turns.produce(5_000)
    load: NumberedLoad | None = None
    mm2 = turns.mm2()
    try:
        turns.caught_up("MirrorMaker 2 taking back over")
        time.sleep(3)  # anything MM2 would copy a second time arrives meanwhile
        after_handback = _duplicates(target_cluster, turns.remote, turns.produced)
        print(f"MM2 after the hand-back copied {after_handback} records a second time")
        assert after_handback == 0, "MirrorMaker 2 went on where strait's copies end"
        before = count(target_cluster, turns.remote)
        load = NumberedLoad(source_cluster, turns.topic, PARTITIONS, 2_000, first=turns.produced)
        wait_for(lambda: count(target_cluster, turns.remote) >= before + 6_000, 60, "MirrorMaker 2 copying under load")
        mm2.kill()  # mid-stream, between two offset commits; the load goes on
    except BaseException:
        if load is not None:
            load.stop()
        raise
    finally:
        mm2.stop()
    evidence, bound, after_sigkill = turns.strait("taking over under load from MM2 SIGKILLed", load)
    assert evidence in ("mm2-offsets", "offset-syncs")
    assert after_sigkill <= bound, "the reported bound holds"


def _consume_and_commit(cluster: KafkaCluster, topic: str, group: str, per_partition: int) -> None:
    """A source consumer group that read the first ``per_partition`` records of each partition."""
    consumer = Consumer({**cluster.client_config(), "group.id": group, "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    consumer.commit(offsets=[TopicPartition(topic, p, per_partition) for p in range(PARTITIONS)], asynchronous=False)
    consumer.close()


def _mm2_checkpoints(target: KafkaCluster, group: str) -> dict[tuple[str, str, int], object]:
    stored = read_stored_checkpoints(target.client_config(), "A.checkpoints.internal", timeout=30)
    return {key: value for key, value in stored.items()
            if key[0] == group and value.checkpoint.upstream_offset == CONSUMED}


def _fails_over_through_strait_with_nothing_lost(turns: Turns, group: str) -> None:
    """The group checkpointed by MM2 translates through strait, from MM2's checkpoints (the source down)
    and from the offset syncs MM2 and strait wrote: a consumer starting there on B misses nothing."""
    target = numbered_copies(turns.target, turns.remote)
    for source_down in (True, False):
        argv = [sys.executable, "-m", "strait.cli", "offsets", "translate", "--flow", "A->B", "--group", group,
                "--config", str(turns.config), "--json", *(["--source-down"] if source_down else [])]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        rows = json.loads(done.stdout)["partitions"]
        assert len(rows) == PARTITIONS, rows
        for row in rows:
            resumed_at = target[row["partition"]][row["downstream"]]
            print(f"group {group} partition {row['partition']} source_down={source_down}: target offset "
                  f"{row['downstream']} holds record {resumed_at} (the group consumed {CONSUMED})")
            assert resumed_at <= CONSUMED, "the group would skip records on the target"
            if not source_down:
                assert resumed_at == CONSUMED, "translated exactly from the offset syncs"
