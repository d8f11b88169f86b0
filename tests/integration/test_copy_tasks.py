"""The executor side of the replicator on real clusters: epoch tasks run one after another in one worker.

An epoch task leaves its source consumer assigned, so the next task going on from the same offsets
finds the records that arrived in between already fetched. These tests run the tasks' function
directly (as a reused Python worker does) and check that whatever the next task asks for, the target
gets exactly the records from its start offsets, in order: going on, replaying from further back,
and after a task with other partitions.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from strait.lab.clients import Record, create_topic, produce
from strait.lab.kafka import KafkaCluster
from strait.policy import DefaultReplicationPolicy
from strait_replicator import writer
from strait_replicator.writer import CopyRange, EpochLimits, WriterSettings, copy_ranges
from tests.integration.replicator_support import records_by_partition

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
    return topic, remote, syncs


def _settings(source: KafkaCluster, target: KafkaCluster, topic: str, remote: str, syncs: str) -> WriterSettings:
    return WriterSettings(
        flow=f"{source.alias}->{target.alias}", source_alias=source.alias, target_alias=target.alias,
        policy=DefaultReplicationPolicy(), target_producer=target.client_config(),
        syncs_producer=source.client_config(), syncs_topic=syncs, syncs_alias=source.alias,
        source_consumer=source.client_config(), remote_names={topic: remote})


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
