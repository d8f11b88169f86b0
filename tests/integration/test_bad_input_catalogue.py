"""The bad-input catalogue on real clusters: what strait does with input it cannot use as given.

Each test is one entry of the catalogue (README): the input, and the clear error or the metric
strait answers it with. The configuration entries are in ``tests/unit/test_bad_input_catalogue.py``;
records too large for the target and a deleted source topic are in ``test_replicator.py``.
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Producer, TopicPartition

from strait.kafka.admin import create_topics, internal_topic
from strait_lab.clients import Record, consume_all, create_topic, produce
from strait_lab.kafka import KafkaCluster
from strait_lab.services import StraitProcess
from strait.records import Checkpoint, RecordFormatError
from tests.support.cli import strait
from tests.support.config import flow_config, write_config
from tests.support.kafka import commit_offsets, count
from tests.support.waiting import wait_for

pytestmark = pytest.mark.slow

KEEP_FOREVER = {"retention.ms": "-1"}  # retention acts on record timestamps; tests use old ones
# Undecodable as MM2 records; every one has a key, as the compacted internal topics require.
GARBAGE = [(b"\x00\x01not-a-key", b"\xff\xfenot-a-value"), (b"tombstone", None), (b"\x00", b"\x00"),
           (b"\x00\x00\x00\x05short", b"\x00\x00")]


def _inject(cluster: KafkaCluster, topic: str, records: list[tuple[bytes, bytes | None]]) -> None:
    """Write raw records to partition 0 of an internal topic, checking every delivery."""
    producer = Producer(cluster.client_config())
    failed: list[object] = []
    for key, value in records:
        producer.produce(topic, key=key, value=value, partition=0,
                         on_delivery=lambda err, _msg: failed.append(err) if err is not None else None)
    assert producer.flush(30) == 0 and not failed, failed


def _errors(process: StraitProcess, kind: str) -> float:
    return process.sample("strait_errors_total", flow="A->B", kind=kind) or 0


def _fresh(heartbeat: StraitProcess) -> bool:
    """The newest heartbeat replicated to the target is less than 10 s old."""
    age = heartbeat.sample("strait_heartbeat_age_seconds", flow="A->B")
    return age is not None and age < 10


def _values(cluster: KafkaCluster, topic: str) -> list[bytes | None]:
    return [r.value for r in sorted(consume_all(cluster.client_config(), topic), key=lambda r: r.offset or 0)]


# Losses and offset resets are found when an epoch ends: short epochs keep these tests short.
SHORT_EPOCHS = ("--epoch-seconds", "5")


def _first_copies(cluster: KafkaCluster, topic: str) -> list[bytes | None]:
    """The target's values in order with replayed copies dropped (at-least-once allows replays)."""
    return list(dict.fromkeys(_values(cluster, topic)))


def test_source_retention_deleting_unreplicated_records_is_counted_as_data_loss(
    source_cluster: KafkaCluster, target_cluster: KafkaCluster, services: Callable[..., StraitProcess],
    unique_name: Callable[[str], str], tmp_path: Path,
) -> None:
    topic = unique_name("retention")
    create_topic(source_cluster.admin(), topic, partitions=1, config=KEEP_FOREVER)
    produce(source_cluster.client_config(), topic, [Record(b"k", f"copied-{i}".encode()) for i in range(10)])
    path = write_config(tmp_path / "s.yaml", flow_config(source_cluster, target_cluster, [topic]))
    state = tmp_path / "replicator-state"
    first = services("replicator", "--config", str(path), "--state-dir", str(state), *SHORT_EPOCHS)
    wait_for(lambda: count(target_cluster, f"A.{topic}") == 10, 240, "the first records copied")
    _stop_after_commit(first, state)

    # While the replicator is down, retention removes records 10..24 it has not copied yet.
    produce(source_cluster.client_config(), topic, [Record(b"k", f"later-{i}".encode()) for i in range(10, 30)])
    _delete_records(source_cluster, topic, 0, 25)

    second = services("replicator", "--config", str(path), "--state-dir", str(state), *SHORT_EPOCHS)
    wait_for(lambda: count(target_cluster, f"A.{topic}") == 15, 300, "the records that survived retention")
    # The head start copied them; its losses are counted once the query's tasks take over from it: after
    # Spark's start, 62 s in one fresh-clone run on a slow machine.
    wait_for(lambda: second.sample("strait_source_data_loss_total", flow="A->B", topic=topic, partition="0") == 15,
             240, "the data-loss counter")
    assert _values(target_cluster, f"A.{topic}") == [f"copied-{i}".encode() for i in range(10)] + \
        [f"later-{i}".encode() for i in range(25, 30)]
    log_text = second.process.log_path.read_text()
    assert f"DATA LOSS topic={topic} partition=0 offsets=[10, 25) records=15" in log_text
    # The loss is reported, not an error of the flow: it runs (on a loaded machine its query may have
    # failed and be starting again: a Python worker not connecting back to Spark within Spark's 10 s)
    wait_for(lambda: second.sample("strait_flow_state", flow="A->B", state="running") == 1, 120, "the flow running")


def _stop_after_commit(process: StraitProcess, state: Path) -> None:
    """Stop the replicator as Docker does (SIGTERM to its main process only): the running epoch ends
    and is committed, so none is replayed at restart. (The driver's head start may have copied all
    there was before the query's tasks ran: the stop is sent once they committed an epoch.)"""
    wait_for(lambda: any(state.glob("*/checkpoint/commits/[0-9]*")), 120, "the query's first committed epoch")
    pid = process.process.pid
    assert pid is not None
    os.kill(pid, signal.SIGTERM)
    wait_for(lambda: not process.process.alive(), 90, "the replicator to stop")
    process.stop()
    planned = {p.name for p in state.glob("*/checkpoint/offsets/[0-9]*")}
    assert planned and planned == {p.name for p in state.glob("*/checkpoint/commits/[0-9]*")}


def _delete_records(cluster: KafkaCluster, topic: str, partition: int, before: int) -> None:
    """Advance the partition's log start offset to ``before``, as retention does."""
    admin = cluster.admin()
    futures = admin.delete_records([TopicPartition(topic, partition, before)])
    for future in (futures.values() if isinstance(futures, dict) else futures):
        future.result(30)


def test_source_topic_deleted_and_recreated_is_copied_again_from_its_start(
    source_cluster: KafkaCluster, target_cluster: KafkaCluster, services: Callable[..., StraitProcess],
    unique_name: Callable[[str], str], tmp_path: Path,
) -> None:
    topic = unique_name("recreated")
    remote = f"A.{topic}"
    create_topic(source_cluster.admin(), topic, partitions=1, config=KEEP_FOREVER)
    produce(source_cluster.client_config(), topic, [Record(b"k", f"old-{i}".encode()) for i in range(5)])
    path = write_config(tmp_path / "s.yaml", flow_config(source_cluster, target_cluster, [topic]))
    state = tmp_path / "replicator-state"
    process = services("replicator", "--config", str(path), "--state-dir", str(state), *SHORT_EPOCHS)
    wait_for(lambda: count(target_cluster, remote) == 5, 240, "the old topic copied")

    # Deleted while the replicator runs (it notices), re-created with new offsets from 0.
    _delete_topic(source_cluster, topic)
    wait_for(lambda: f"topics no longer on A: {topic}" in process.process.log_path.read_text(), 60,
             "the deletion reported")
    create_topic(source_cluster.admin(), topic, partitions=1, config=KEEP_FOREVER)
    produce(source_cluster.client_config(), topic, [Record(b"k", f"new-{i}".encode()) for i in range(3)])
    # Re-adding the topic to the subscription may replay the new records once more (at-least-once).
    old = [f"old-{i}".encode() for i in range(5)]
    new = [f"new-{i}".encode() for i in range(3)]
    wait_for(lambda: _first_copies(target_cluster, remote) == old + new, 240, "the re-created topic's records")
    _stop_after_commit(process, state)

    # Deleted and re-created while the replicator is down: its checkpoint says offset 3, the topic
    # now ends at 2; Spark alone would skip both records.
    _delete_topic(source_cluster, topic)
    create_topic(source_cluster.admin(), topic, partitions=1, config=KEEP_FOREVER)
    produce(source_cluster.client_config(), topic, [Record(b"k", f"newer-{i}".encode()) for i in range(2)])
    restarted = services("replicator", "--config", str(path), "--state-dir", str(state), *SHORT_EPOCHS)
    newer = [f"newer-{i}".encode() for i in range(2)]
    wait_for(lambda: _first_copies(target_cluster, remote) == old + new + newer, 300,
             "the records of the topic re-created while down")
    assert len(_values(target_cluster, remote)) <= len(old + new + newer) + len(new), "more than one replay"
    # counted when the epoch (or the head start) that copied them ends: 31 s after this wait began once, and a
    # head start's losses once waited 62 s for Spark's start, on slow machines
    wait_for(lambda: _errors(restarted, "source_offsets_reset") >= 1, 240, "the offsets reset counted")
    assert "offsets went back from 3 to 2 (topic deleted and re-created)" in restarted.process.log_path.read_text()
    produce(source_cluster.client_config(), topic, [Record(b"k", b"after")])
    wait_for(lambda: _first_copies(target_cluster, remote) == old + new + newer + [b"after"], 180,
             "replication going on")


def _delete_topic(cluster: KafkaCluster, topic: str) -> None:
    admin = cluster.admin()
    admin.delete_topics([topic], operation_timeout=30)[topic].result(30)
    wait_for(lambda: topic not in admin.list_topics(timeout=10).topics, 60, f"{topic} gone")


@pytest.fixture
def own_clusters(kafka_cluster_for_test: Callable[..., KafkaCluster]) -> tuple[KafkaCluster, KafkaCluster]:
    """A source and a target of the test's own, killed after it.

    The garbage the test writes into ``A.checkpoints.internal``, the offset syncs and ``A.heartbeats``
    must not reach other tests: MM2's own ``RemoteClusterUtils`` (the oracle of other tests) fails on
    a record it cannot decode, where strait skips it.
    """
    return kafka_cluster_for_test("A"), kafka_cluster_for_test("B")


def test_corrupt_offset_syncs_checkpoints_and_heartbeats_are_skipped_and_counted(
    own_clusters: tuple[KafkaCluster, KafkaCluster], services: Callable[..., StraitProcess],
    redis_url: str, unique_name: Callable[[str], str], tmp_path: Path,
) -> None:
    source_cluster, target_cluster = own_clusters
    topic, group = unique_name("corrupt"), unique_name("corrupt-group")
    create_topic(source_cluster.admin(), topic, partitions=1, config=KEEP_FOREVER)
    produce(source_cluster.client_config(), topic, [Record(b"k", str(i).encode()) for i in range(20)])
    config = flow_config(source_cluster, target_cluster, [topic], redis_url=redis_url,
                         groups={"include": [group]}, emit_checkpoints={"interval_seconds": 1})
    path = write_config(tmp_path / "strait.yaml", config)
    syncs_topic, checkpoints_topic = "mm2-offset-syncs.B.internal", "A.checkpoints.internal"
    services("replicator", "--config", str(path))
    heartbeat = services("heartbeat", "--config", str(path), "--lease-ttl", "3")
    wait_for(lambda: count(target_cluster, f"A.{topic}") == 20, 240, "records copied")
    # Garbage in both internal topics before the checkpoint service reads them at start ...
    create_topics(target_cluster.admin(), "B", [internal_topic(checkpoints_topic, 1)])
    _inject(source_cluster, syncs_topic, GARBAGE)
    _inject(target_cluster, checkpoints_topic, GARBAGE)
    commit_offsets(source_cluster, group, [TopicPartition(topic, 0, 7)])
    checkpointer = services("checkpoint", "--config", str(path), "--lease-ttl", "3")
    wait_for(lambda: _checkpoint(target_cluster, group, topic) == (7, _downstream(target_cluster, topic, 7)), 180,
             "an exact checkpoint despite the garbage")
    wait_for(lambda: _errors(checkpointer, "corrupt_record") >= 2 * len(GARBAGE), 60, "corrupt records counted")

    # ... and in the syncs topic while it runs: it keeps translating.
    before = _errors(checkpointer, "corrupt_record")
    _inject(source_cluster, syncs_topic, GARBAGE)
    produce(source_cluster.client_config(), topic, [Record(b"k", str(i).encode()) for i in range(20, 30)])
    wait_for(lambda: count(target_cluster, f"A.{topic}") == 30, 180, "more records copied")
    commit_offsets(source_cluster, group, [TopicPartition(topic, 0, 25)])
    wait_for(lambda: _checkpoint(target_cluster, group, topic) == (25, _downstream(target_cluster, topic, 25)), 180,
             "the next exact checkpoint")
    wait_for(lambda: _errors(checkpointer, "corrupt_record") >= before + len(GARBAGE), 60, "the new garbage counted")
    assert checkpointer.sample("strait_flow_state", flow="A->B", state="running") == 1
    assert checkpointer.process.alive()
    assert "corrupt checkpoint skipped" in checkpointer.process.log_path.read_text()

    # Garbage in the replicated heartbeats topic the heartbeat service watches on the target.
    wait_for(lambda: _fresh(heartbeat), 180, "heartbeats watched on the target")
    _inject(target_cluster, "A.heartbeats", GARBAGE)
    wait_for(lambda: _errors(heartbeat, "corrupt_record") >= len(GARBAGE), 60, "corrupt heartbeats counted")
    wait_for(lambda: _fresh(heartbeat), 60, "heartbeats still watched")
    assert "corrupt heartbeat skipped" in heartbeat.process.log_path.read_text()

    # The command line reads the same syncs topic: it skips the garbage and answers exactly.
    shown = strait("offsets", "translate", "--flow", "A->B", "--group", group, "--json",
                   "--config", str(path), timeout=180)
    assert shown.returncode == 0, shown.stderr
    partitions = json.loads(shown.stdout)["partitions"]
    assert [(p["remote_topic"], p["upstream"], p["downstream"]) for p in partitions] == \
        [(f"A.{topic}", 25, _downstream(target_cluster, topic, 25))]
    assert "Traceback" not in shown.stderr


def _checkpoint(target: KafkaCluster, group: str, topic: str) -> tuple[int, int] | None:
    """The newest checkpoint (upstream, downstream) of the group's partition 0, skipping garbage."""
    latest = None
    for record in sorted(consume_all(target.client_config(), "A.checkpoints.internal"), key=lambda r: r.offset or 0):
        try:
            checkpoint = Checkpoint.from_record(record.key, record.value)
        except RecordFormatError:  # the injected garbage
            continue
        if checkpoint.group == group and checkpoint.topic == f"A.{topic}" and checkpoint.partition == 0:
            latest = (checkpoint.upstream_offset, checkpoint.downstream_offset)
    return latest


def _downstream(target: KafkaCluster, topic: str, upstream: int) -> int:
    """The target offset of the copy of source record ``upstream`` (values are the source offsets)."""
    for record in consume_all(target.client_config(), f"A.{topic}"):
        if record.value == str(upstream).encode():
            assert record.offset is not None
            return record.offset
    raise AssertionError(f"source offset {upstream} of {topic} not on the target")

