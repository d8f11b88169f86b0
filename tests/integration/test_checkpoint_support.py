"""Shared helpers of the heartbeat and checkpoint tests: their processes and the replicator."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

from strait_lab.kafka import KafkaCluster
from strait_lab.services import StraitProcess

@pytest.fixture
def services(tmp_path: Path, lab_root: Path) -> Iterator[Callable[..., StraitProcess]]:
    """Start processes: ``services("checkpoint", "--config", path)``, ``services("replicator", ...)``."""
    started: list[StraitProcess] = []

    def start(component: str, *args: str) -> StraitProcess:
        name = f"{component}-{len(started)}-{tmp_path.name}"
        if component == "replicator":
            process = StraitProcess("replicator", ["--state-dir", str(tmp_path / f"state-{len(started)}"), *args],
                                    lab_root / "replicator", name=name)
        else:
            process = StraitProcess(component, list(args), lab_root / component, name=name)
        started.append(process)
        process.start(timeout=120)
        return process

    yield start
    for process in started:
        process.stop()


def commit_offsets(cluster: KafkaCluster, group: str, partitions: list[TopicPartition], timeout: float = 60.0) -> None:
    """Commit a group's offsets through the admin API, retrying while the coordinator is still loading."""
    admin = cluster.admin()  # kept alive while its futures run
    deadline = time.monotonic() + timeout
    while True:
        result = admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(group, partitions)])[group]
        errors = [tp.error for tp in result.result(timeout=30).topic_partitions if tp.error is not None]
        if not errors:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"committing offsets of {group}: {errors[0]}")
        time.sleep(0.5)
