"""The replicator's Spark master and task slots, known before the JVM is up."""

from __future__ import annotations

import os

import pytest

from strait_replicator.session import available_cores, local_slots, spark_master

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
