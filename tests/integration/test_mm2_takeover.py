"""Replacing MirrorMaker 2 without a second copy, and handing back to it (issue 24), against MM2 itself.

One topic, MM2 (dedicated mode, the project's Kafka jars) and strait taking turns on the same
clusters: MM2 copies and checkpoints two consumer groups; a load starts and MM2 is stopped by
SIGTERM; strait's replicator starts while the load goes on and reads where MM2 got to from MM2's
Connect offsets topic. Then the groups continue through strait: one translates (`strait offsets
translate`) and fails over (`strait failover --source-down`) from MM2's checkpoints, the other gets
its next checkpoints from strait's checkpoint service, never behind MM2's. strait hands the flow back
(`strait handover --to mm2`) and MM2 goes on from strait's progress; MM2 is SIGKILLed under load;
strait takes over again, from MM2's offsets or offset syncs, while the load goes on. After each
switch every source record is on B; the records copied twice are counted and stay within the bound
strait reports (what MM2 copied after its last offset commit).

The same turns with both in their exactly-once modes (MM2's `exactly.once.source.support=enabled`,
strait's `exactly_once: true`): a read_committed consumer of the remote topic reads every record once
after each switch. MM2 commits its source offsets in the transactions of its copies, and strait reads
them read_committed, so it resumes exactly where MM2's last committed transaction ended, even after a
SIGKILL. A SIGKILLed MM2's open transaction would hide every later record from read_committed
consumers until its transaction timeout (10 minutes here, 60 s by default): strait fences MM2's task
producers when it takes over (their transactional ids are ``<source>-mm2-MirrorSourceConnector-<task>``),
so the test's waits for strait's copies pass long before that.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import redis
from confluent_kafka import TopicPartition

from strait.config import load_config
from strait.config.store import apply_config
from strait.flow_spec import FlowSpec, flow_spec
from strait.progress import mm2_workers_gone
from strait.translation import StoredCheckpoint, read_stored_checkpoints
from strait_bench.options import BenchOptions
from strait_bench.systems import start_mm2
from strait_lab.clients import create_topic
from strait_lab.kafka import KafkaCluster
from strait_lab.process import ManagedProcess
from strait_lab.services import StraitProcess
from tests.integration.replicator_support import resume_evidence
from tests.support.cli import strait
from tests.support.config import flow_config, write_config
from tests.support.kafka import (
    NumberedLoad,
    commit_offsets,
    committed_records,
    count,
    group_offsets,
    numbered_copies,
    produce_numbered,
)
from tests.support.waiting import wait_for

pytestmark = pytest.mark.slow

PARTITIONS = 3
MM2_SETTINGS = {"emit.heartbeats.enabled": "false", "offset.flush.interval.ms": "2000",
                "emit.checkpoints.interval.seconds": "1"}
# MM2's transactions span 3 s (not a poll's records, the default), so a SIGKILL leaves one open, and
# time out after 10 minutes (60 s by default): only strait's fence ends it within the test's waits for
# strait's copies.
MM2_EXACTLY_ONCE_SETTINGS = {"A->B.transaction.boundary": "interval", "A->B.transaction.boundary.interval.ms": "3000",
                             "B.producer.transaction.timeout.ms": "600000"}
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
                 lab_root: Path, redis_url: str, exactly_once: bool = False) -> None:
        self.source, self.target, self.topic, self.remote = source, target, topic, f"A.{topic}"
        self.tmp_path, self.lab_root, self.exactly_once = tmp_path, lab_root, exactly_once
        config = flow_config(source, target, [topic], redis_url=redis_url, exactly_once=exactly_once,
                             groups={"include": [f"{topic}-.*"]}, emit_checkpoints={"interval_seconds": 1})
        self.config = write_config(tmp_path / "flow.yaml", config)
        self.produced = 0
        self.turn = 0
        self.replicator_log = ""  # the last strait turn's

    def produce(self, total: int, rate: float = 20_000) -> None:
        self.produced += produce_numbered(self.source, self.topic, PARTITIONS, total, rate, first=self.produced)

    def copied(self) -> int:
        """The records on the remote topic (read_committed in exactly-once mode: commit markers hold offsets)."""
        return committed_records(self.target, self.remote) if self.exactly_once else count(self.target, self.remote)

    def caught_up(self, what: str, extra: int = 0) -> None:
        wait_for(lambda: self.copied() >= self.produced + extra, 180, what)

    def spec(self) -> FlowSpec:
        """The flow's spec, as the replicator builds it."""
        config = load_config(self.config)
        return flow_spec(config, config.flow("A->B"), [(self.topic, self.remote)], None)

    def mm2(self) -> ManagedProcess:
        self.turn += 1
        settings = {**MM2_SETTINGS, **(MM2_EXACTLY_ONCE_SETTINGS if self.exactly_once else {})}
        return start_mm2(self.source, self.target, [self.topic], BenchOptions(), self.tmp_path / f"mm2-{self.turn}",
                         settings, exactly_once=self.exactly_once)

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
                before = self.copied()
                wait_for(lambda: self.copied() > before + 3_000, 120, f"{what}: copying")
                self.produced += load.stop()
            self.caught_up(what)
            time.sleep(2)
        finally:
            if load is not None:
                load.stop()  # counted above, or the turn failed
            process.stop()
        self.replicator_log = process.log_text()
        evidence, bound = resume_evidence(process, self.topic)[0]
        duplicates = _duplicates(self.target, self.remote, self.produced)
        print(f"{what}: strait resumed from {evidence}, reported at most {bound}, found {duplicates}")
        return evidence, int(bound), duplicates

    def strait_after_mm2(self, what: str, end: Callable[[ManagedProcess], None], rate: float) \
            -> tuple[str, int, int]:
        """MM2 copies what was produced (none twice), then under a load of ``rate`` records/s is ended by
        ``end``, and strait takes over while the load goes on: :meth:`strait`'s answer."""
        mm2 = self.mm2()
        load: NumberedLoad | None = None
        try:
            self.caught_up(f"MirrorMaker 2 copying before {what}")
            time.sleep(3)  # anything MM2 would copy a second time arrives meanwhile
            twice = _duplicates(self.target, self.remote, self.produced)
            print(f"MM2 before {what}: {twice} records twice")
            assert twice == 0, "MirrorMaker 2 went on where the copies end"
            before = self.copied()
            load = NumberedLoad(self.source, self.topic, PARTITIONS, rate, first=self.produced)
            wait_for(lambda: self.copied() >= before + 3 * rate, 60, "MirrorMaker 2 copying under load")
            if self.exactly_once:  # a take-over never fences the tasks of an MM2 that may still run
                assert not mm2_workers_gone(self.spec(), 0), "MirrorMaker 2's running workers taken for gone"
            end(mm2)
        except BaseException:
            if load is not None:
                load.stop()
            raise
        finally:
            mm2.stop()
        return self.strait(f"taking over under load from {what}", load)


def test_strait_takes_over_from_mirrormaker2_hands_back_and_takes_over_after_a_crash(
    source_cluster: KafkaCluster, target_cluster: KafkaCluster, unique_name: Callable[[str], str],
    tmp_path: Path, lab_root: Path, redis_url: str, services: Callable[..., StraitProcess],
) -> None:
    turns = Turns(source_cluster, target_cluster, unique_name("mm2-turns"), tmp_path, lab_root, redis_url)
    create_topic(source_cluster.admin(), turns.topic, partitions=PARTITIONS, config={"retention.ms": "-1"})

    turns.produce(20_000)
    failing_over, checkpointed = f"{turns.topic}-failover", f"{turns.topic}-checkpointed"
    consumed = [TopicPartition(turns.topic, p, CONSUMED) for p in range(PARTITIONS)]
    for group in (failing_over, checkpointed):
        commit_offsets(source_cluster, group, consumed)
    mm2 = turns.mm2()
    load: NumberedLoad | None = None
    try:
        turns.caught_up("MirrorMaker 2 copying")
        wait_for(lambda: len(_mm2_checkpoints(target_cluster, failing_over)) == PARTITIONS
                 and len(_mm2_checkpoints(target_cluster, checkpointed)) == PARTITIONS, 120,
                 "MM2 checkpointing the groups")
        load = NumberedLoad(source_cluster, turns.topic, PARTITIONS, 1_000, first=turns.produced)
        time.sleep(3)
        mm2.stop()  # SIGTERM mid-stream: MM2 commits its offsets; the load goes on
    except BaseException:
        if load is not None:
            load.stop()
        raise
    finally:
        mm2.stop()
    mm2_checkpoints = _mm2_checkpoints(target_cluster, checkpointed)
    evidence, bound, after_sigterm = turns.strait("taking over under load from MM2 stopped by SIGTERM", load)
    assert evidence == "mm2-offsets", "MM2 committed its offsets when it stopped"
    assert after_sigterm <= bound, "the reported bound holds"
    _translates_through_strait_with_nothing_lost(turns, failing_over)
    _fails_over_from_mm2_checkpoints_with_nothing_lost(turns, failing_over, redis_url)
    _strait_checkpoints_continue_mm2s(turns, checkpointed, mm2_checkpoints, services)

    handed = strait("handover", "--to", "mm2", "--flow", "A->B", "--config", str(turns.config))
    assert handed.returncode == 0, handed.stderr
    assert f"wrote {PARTITIONS} partitions to mm2-offsets.A.internal" in handed.stdout
    turns.produce(5_000)
    # MM2 goes on where strait's copies end (none twice), then is SIGKILLed mid-stream, between two
    # offset commits, while the load goes on
    evidence, bound, after_sigkill = turns.strait_after_mm2("MM2 SIGKILLed", lambda mm2: mm2.kill(), 2_000)
    assert evidence in ("mm2-offsets", "offset-syncs")
    assert after_sigkill <= bound, "the reported bound holds"


def test_both_in_exactly_once_mode_take_turns_and_every_record_is_read_once(
    source_cluster: KafkaCluster, target_cluster: KafkaCluster, unique_name: Callable[[str], str],
    tmp_path: Path, lab_root: Path, redis_url: str,
) -> None:
    turns = Turns(source_cluster, target_cluster, unique_name("mm2-eos-turns"), tmp_path, lab_root, redis_url,
                  exactly_once=True)
    create_topic(source_cluster.admin(), turns.topic, partitions=PARTITIONS, config={"retention.ms": "-1"})
    turns.produce(10_000)
    evidence, _bound, twice = turns.strait_after_mm2("MM2 stopped by SIGTERM", lambda mm2: mm2.stop(), 1_000)
    assert (evidence, twice) == ("mm2-offsets", 0), "strait went on where MM2's last transaction ended"

    handed = strait("handover", "--to", "mm2", "--flow", "A->B", "--config", str(turns.config))
    assert handed.returncode == 0, handed.stderr
    turns.produce(5_000)
    evidence, _bound, twice = turns.strait_after_mm2("MM2 SIGKILLed", lambda mm2: mm2.kill(), 2_000)
    assert twice == 0 and evidence in ("mm2-offsets", "offset-syncs"), (evidence, twice)
    assert "fenced MirrorMaker 2's exactly-once tasks transactional_ids=A-mm2-MirrorSourceConnector-0" \
        in turns.replicator_log, "the SIGKILLed MM2's open transaction was aborted by strait"


def _mm2_checkpoints(target: KafkaCluster, group: str) -> dict[tuple[str, str, int], StoredCheckpoint]:
    stored = read_stored_checkpoints(target.client_config(), "A.checkpoints.internal", timeout=30)
    return {key: value for key, value in stored.items()
            if key[0] == group and value.checkpoint.upstream_offset == CONSUMED}


def _translates_through_strait_with_nothing_lost(turns: Turns, group: str) -> None:
    """The group checkpointed by MM2 translates through strait, from MM2's checkpoints (the source down)
    and from the offset syncs MM2 and strait wrote: a consumer starting there on B misses nothing."""
    target = numbered_copies(turns.target, turns.remote)
    for source_down in (True, False):
        done = strait("offsets", "translate", "--flow", "A->B", "--group", group,
                      "--config", str(turns.config), "--json", *(["--source-down"] if source_down else []))
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


def _fails_over_from_mm2_checkpoints_with_nothing_lost(turns: Turns, group: str, redis_url: str) -> None:
    """`strait failover --source-down` moves the group to MM2's checkpoints (strait wrote none for it):
    a consumer of the group on B starts at or before the first record it had not consumed."""
    config = load_config(turns.config)
    apply_config(redis.Redis.from_url(redis_url), config, "MM2 takeover drill")
    done = strait("failover", "--flow", "A->B", "--group", group, "--source-down", "--json",
                  "--redis-url", redis_url, timeout=180)
    assert done.returncode in (0, 3), f"failover failed ({done.returncode}): {done.stdout}\n{done.stderr}"
    moved = [g for g in json.loads(done.stdout)["groups"] if g["group"] == group]
    assert [g["state"] for g in moved] == ["written"], moved
    target = numbered_copies(turns.target, turns.remote)
    committed = group_offsets(turns.target, group, turns.remote, PARTITIONS)
    assert sorted(committed) == list(range(PARTITIONS)), committed
    for row in moved[0]["partitions"]:
        partition = row["partition"]
        assert committed[partition] == row["target_offset"] == row["checkpoint_downstream"]
        resumed_at = target[partition][row["target_offset"]]
        print(f"failover of {group} partition {partition}: B's group offset {row['target_offset']} holds record "
              f"{resumed_at} (consumed {CONSUMED}; re-read at most {row['reread_at_most']})")
        assert resumed_at <= CONSUMED, "the group would skip records after failover"
        assert CONSUMED - resumed_at <= row["reread_at_most"], "the re-read bound holds"


def _strait_checkpoints_continue_mm2s(turns: Turns, group: str, mm2_checkpoints: dict[tuple[str, str, int],
                                      StoredCheckpoint], services: Callable[..., StraitProcess]) -> None:
    """strait's checkpoint service reads MM2's checkpoints and syncs; its checkpoints for a group MM2
    checkpointed are never behind MM2's and never past what the group consumed: exact."""
    assert sorted(mm2_checkpoints) == [(group, turns.remote, p) for p in range(PARTITIONS)]
    target = numbered_copies(turns.target, turns.remote)
    checkpointer = services("checkpoint", "--config", str(turns.config), "--lease-ttl", "3")

    def exact() -> dict[tuple[str, str, int], StoredCheckpoint]:
        stored = read_stored_checkpoints(turns.target.client_config(), "A.checkpoints.internal", timeout=30)
        newest = {key: stored[key] for key in mm2_checkpoints if key in stored}
        done = all(target[c.checkpoint.partition][c.checkpoint.downstream_offset] == CONSUMED for c in newest.values())
        return newest if done and len(newest) == PARTITIONS else {}

    # the service translated the group (its MM2 checkpoints may have been exact already: nothing to write)
    wait_for(lambda: checkpointer.sample("strait_translation_lag_records", flow="A->B", group=group) == 0, 90,
             "strait's checkpoint service translating the group")
    ours = wait_for(exact, 30, "strait's checkpoint service checkpointing the group exactly")
    checkpointer.stop()
    for key, stored in sorted(ours.items()):
        mm2, mine = mm2_checkpoints[key].checkpoint, stored.checkpoint
        by = "MM2 (already exact)" if stored == mm2_checkpoints[key] else "strait"
        print(f"group {group} partition {mine.partition}: MM2 checkpointed {mm2.upstream_offset}->"
              f"{mm2.downstream_offset}, now {mine.upstream_offset}->{mine.downstream_offset} written by {by}")
        assert mine.upstream_offset == mm2.upstream_offset == CONSUMED
        assert mine.downstream_offset >= mm2.downstream_offset, "a checkpoint moved backwards"
