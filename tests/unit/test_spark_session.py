"""The replicator's Spark master and task slots, known before the JVM is up."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from strait_replicator.session import (
    CLASS_ARCHIVE_VARIABLE,
    _class_archive_option,
    available_cores,
    local_slots,
    planning,
    spark_master,
)

pytestmark = pytest.mark.unit


def test_every_core_is_made_explicit_so_the_slots_are_known_before_the_jvm(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("STRAIT_SPARK_MASTER", raising=False)
    monkeypatch.delenv("PYSPARK_GATEWAY_PORT", raising=False)
    cores = available_cores()
    assert 1 <= cores <= len(os.sched_getaffinity(0))
    assert spark_master(None) == f"local[{cores}]" and local_slots(spark_master(None)) == cores
    monkeypatch.setenv("STRAIT_SPARK_MASTER", "local[*,3]")
    assert spark_master(None) == f"local[{cores},3]"
    assert spark_master("local[2]") == "local[2]" and local_slots("local[2]") == 2
    assert local_slots("local") == 1 and local_slots("local[4,2]") == 4


def test_a_cluster_masters_slots_wait_for_its_executors_and_spark_submit_keeps_its_own(
        monkeypatch: pytest.MonkeyPatch) -> None:
    assert local_slots("spark://10.0.0.1:7077") is None and local_slots("local-cluster[2,1,1024]") is None
    assert spark_master("spark://10.0.0.1:7077") == "spark://10.0.0.1:7077"
    monkeypatch.setenv("PYSPARK_GATEWAY_PORT", "4242")
    assert spark_master(None) is None


class _Scala:
    """Just enough of Spark's Scala collections, as py4j shows them, for :func:`planning`."""

    def __init__(self, items: list) -> None:
        self.items = items

    def iterator(self) -> _Scala:
        self._left = list(self.items)
        return self

    def hasNext(self) -> bool:  # noqa: N802 - Scala's name
        return bool(self._left)

    def next(self) -> object:
        return self._left.pop(0)

    def contains(self, item: object) -> bool:
        return item in self.items


class _Entry:
    def __init__(self, worker: str, alive: bool) -> None:
        self.worker, self.alive = worker, alive

    def _1(self) -> str:
        return self.worker

    def _2(self) -> _Entry:
        return self

    def isAlive(self) -> bool:  # noqa: N802 - Java's name
        return self.alive


def test_a_planner_daemon_counts_as_busy_only_while_a_live_worker_of_it_is_out() -> None:
    idle = _Scala(["w1"])
    assert not planning(_Scala([]), idle)
    assert not planning(_Scala([_Entry("w1", True)]), idle)  # released: idle
    assert not planning(_Scala([_Entry("w2", False)]), idle)  # stopped by Spark's idle timeout, still listed
    assert planning(_Scala([_Entry("w1", True), _Entry("w2", True)]), idle)  # w2 plans now


def test_the_driver_maps_a_class_archive_only_when_it_is_a_file_its_java_option_can_name(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(CLASS_ARCHIVE_VARIABLE, raising=False)
    assert _class_archive_option() == ""
    archive = tmp_path / "spark.jsa"
    monkeypatch.setenv(CLASS_ARCHIVE_VARIABLE, str(archive))
    assert _class_archive_option() == ""  # not recorded (yet)
    archive.write_bytes(b"x")
    assert _class_archive_option() == f"-XX:SharedArchiveFile={archive}"
    blank = tmp_path / "my archives"
    blank.mkdir()
    (blank / "spark.jsa").write_bytes(b"x")
    monkeypatch.setenv(CLASS_ARCHIVE_VARIABLE, str(blank / "spark.jsa"))
    assert _class_archive_option() == ""  # Spark would split the option at the blank

