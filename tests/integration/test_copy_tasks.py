"""The executor side of the replicator on real clusters: epoch tasks run one after another in one worker,
and the worker copies on between them.

An epoch task leaves its source consumer assigned, so the next task going on from the same offsets
finds the records that arrived in between already fetched. These tests run the tasks' function
directly (as a reused Python worker does) and check that whatever the next task asks for, the target
gets exactly the records from its start offsets, in order: going on, replaying from further back,
and after a task with other partitions.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from strait_lab.clients import Record, create_topic, produce
from strait_lab.kafka import KafkaCluster
from strait.policy import DefaultReplicationPolicy
from strait_replicator import handover, writer
from strait.config.model import SyncsLocation
from strait.progress import OffsetsTopic
from strait_replicator.source import STOP_FILE, CopyStreamReader, CopyTask, SourcePlan
from strait_replicator.writer import CopyRange, EpochLimits, WriterSettings, copy_ranges
from tests.integration.replicator_support import count, records_by_partition, wait_for

NEXT_OFFSET = writer.SUMMARY_FIELDS.index("next_offset")
PARTITION = writer.SUMMARY_FIELDS.index("partition")


@pytest.fixture
def clients_released() -> Iterator[None]:
    yield
    writer.release_clients()


@pytest.fixture
def topics(source_cluster: KafkaCluster, target_cluster: KafkaCluster,
           unique_name: Callable[[str], str]) -> tuple[str, str, str]:
    topic, syncs = unique_name("epochs"), unique_name("epochs-syncs")
    remote = f"{source_cluster.alias}.{topic}"
    create_topic(source_cluster.admin(), topic, 2)
    create_topic(source_cluster.admin(), syncs, 1)
    create_topic(target_cluster.admin(), remote, 2)
    create_topic(target_cluster.admin(), _progress_topic(topic), 1)
    return topic, remote, syncs


def _progress_topic(topic: str) -> str:
    return f"{topic}-progress"


def _settings(source: KafkaCluster, target: KafkaCluster, topic: str, remote: str, syncs: str) -> WriterSettings:
    return WriterSettings(
        flow=f"{source.alias}->{target.alias}", source_alias=source.alias, target_alias=target.alias,
        policy=DefaultReplicationPolicy(), target_producer=target.client_config(),
        syncs_producer=source.client_config(), syncs_topic=syncs, syncs_alias=source.alias,
        source_consumer=source.client_config(), remote_names={topic: remote},
        progress_topic=_progress_topic(topic))


def _epoch(settings: WriterSettings, topic: str, starts: dict[int, int]) -> dict[int, int]:
    """One epoch task from ``starts`` (partition -> offset); where each partition's copy ended."""
    rows = copy_ranges([CopyRange(topic, p, start) for p, start in starts.items()], settings,
                       EpochLimits(seconds=1.5, max_records=1_000_000))
    return {row[PARTITION]: row[NEXT_OFFSET] for row in rows}


def _send(source: KafkaCluster, topic: str, first: int, count: int) -> list[Record]:
    records = [Record(f"k{i}".encode(), f"v{i}".encode(), partition=i % 2) for i in range(first, first + count)]
    produce(source.client_config(), topic, records)
    return records


def _values(records: list[Record], partition: int) -> list[bytes | None]:
    return [r.value for r in records if r.partition == partition]


def test_epoch_tasks_in_one_worker_copy_exactly_from_each_start(
        source_cluster: KafkaCluster, target_cluster: KafkaCluster, topics: tuple[str, str, str],
        clients_released: None) -> None:
    topic, remote, syncs = topics
    settings = _settings(source_cluster, target_cluster, topic, remote, syncs)
    sent = _send(source_cluster, topic, 0, 100)

    assert _epoch(settings, topic, {0: 0, 1: 0}) == {0: 50, 1: 50}
    sent += _send(source_cluster, topic, 100, 100)  # arrives between two epochs: fetched by the kept consumer
    assert _epoch(settings, topic, {0: 50, 1: 50}) == {0: 100, 1: 100}
    copied = records_by_partition(target_cluster, remote)
    assert [[r.value for r in copied[p]] for p in (0, 1)] == [_values(sent, 0), _values(sent, 1)]

    # A replayed epoch starts further back than the consumer stands: partition 0 is copied again from 20.
    assert _epoch(settings, topic, {0: 20, 1: 100}) == {0: 100, 1: 100}
    # A task with other partitions in between, then the two partitions again from where they stand.
    assert _epoch(settings, topic, {1: 100}) == {1: 100}
    sent += _send(source_cluster, topic, 200, 20)
    assert _epoch(settings, topic, {0: 100, 1: 100}) == {0: 110, 1: 110}

    copied = records_by_partition(target_cluster, remote)
    assert [r.value for r in copied[0]] == _values(sent[:200], 0) + _values(sent[:200], 0)[20:] + _values(sent[200:], 0)
    assert [r.value for r in copied[1]] == _values(sent, 1)


def _task(epoch: int, topic: str, starts: dict[int, int], seconds: float, stop_file: Path,
          progress_from: tuple[tuple[int, int], ...] = ()) -> CopyTask:
    limits = EpochLimits(seconds=seconds, max_records=1_000_000, stop_file=str(stop_file), ends_at=time.time() + seconds)
    return CopyTask(epoch, tuple(CopyRange(topic, p, start) for p, start in starts.items()), limits, progress_from)


def _ends(rows: list[tuple]) -> dict[int, int]:
    return {row[PARTITION]: row[NEXT_OFFSET] for row in rows}


def test_a_worker_copies_on_between_epochs_and_the_next_task_resumes_exactly_after_it(
        source_cluster: KafkaCluster, target_cluster: KafkaCluster, topics: tuple[str, str, str],
        tmp_path: Path, clients_released: None) -> None:
    topic, remote, syncs = topics
    settings = _settings(source_cluster, target_cluster, topic, remote, syncs)
    progress = (tuple(sorted(target_cluster.client_config().items())), _progress_topic(topic))
    plan = SourcePlan(((topic, 2),), (), 1, str(tmp_path), settings, epoch_seconds=1.5, max_records_per_epoch=10**6,
                      carry_over=True, progress=progress)
    reader = CopyStreamReader(plan)
    stop_file = tmp_path / STOP_FILE
    sent = _send(source_cluster, topic, 0, 100)
    planned = OffsetsTopic(target_cluster.client_config(), SyncsLocation(target_cluster.alias, progress[1]),
                           source_cluster.alias)
    try:
        first = _ends(list(reader.read(_task(0, topic, {0: 0, 1: 0}, 1.5, stop_file))))
        assert first == {0: 50, 1: 50}
        planned.read()  # where the driver stands in the progress topic when it plans epoch 1
        # Between the epochs the worker's carry-over copies what arrives, as a run of epoch 1.
        sent += _send(source_cluster, topic, 100, 100)
        wait_for(lambda: count(target_cluster, remote) == 200, 30, "the records sent between epochs")
        # Epoch 1 starts where epoch 0 ended; its task stops the carry-over and resumes after it,
        # where the carry-over's progress on the target says.
        task = _task(1, topic, first, 1.5, stop_file, tuple(sorted(planned.positions.items())))
        second = _ends(list(reader.read(task)))
        assert second == {0: 100, 1: 100}
    finally:
        stop_file.touch()  # ends the last carry-over, as a graceful stop does
        handover.stop_carry_over()
        planned.close()
    copied = records_by_partition(target_cluster, remote)
    assert [[r.value for r in copied[p]] for p in (0, 1)] == [_values(sent, 0), _values(sent, 1)]  # no duplicate


def test_a_claim_from_another_process_ends_the_carry_over_holding_the_partition(tmp_path: Path) -> None:
    import multiprocessing
    locks = handover.claim(tmp_path, [("t", 0), ("t", 1)])
    stopped_by_claim: list[float] = []

    def copy_until(interrupt: Callable[[], bool]) -> None:
        while not interrupt():
            time.sleep(0.005)
        stopped_by_claim.append(time.monotonic())
    handover.start_carry_over(handover.CarryOver(copy_until, locks))
    context = multiprocessing.get_context("spawn")
    other = context.Process(target=_claim_and_release, args=(str(tmp_path), [("t", 1)]))
    other.start()
    other.join(30)
    assert other.exitcode == 0, "the other process never got the partition"
    assert stopped_by_claim, "the carry-over did not end when another process claimed its partition"
    handover.stop_carry_over()
    handover.claim(tmp_path, [("t", 0), ("t", 1)], timeout=1).release()  # every lock was released


def _claim_and_release(folder: str, keys: list[tuple[str, int]]) -> None:
    handover.claim(folder, keys, timeout=20).release()
