"""The replicator submitted with spark-submit to a Spark standalone cluster.

A driver given a master URL, with workers on other "hosts", is tested in test_replicator_multi_host.py.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pyspark
import pytest

from strait_lab.clients import Record, create_topic, produce
from strait_lab.kafka import KafkaCluster
from strait_lab.ports import free_port
from strait_lab.process import ManagedProcess
from tests.integration.replicator_support import count, flow_config, wait_for, write_config

pytestmark = pytest.mark.slow

SPARK_BIN = Path(pyspark.__file__).parent / "bin"
ENV = {"PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}


@pytest.fixture(scope="module")
def spark_master(lab_root: Path) -> Iterator[str]:
    """A Spark standalone master with one worker (1 core), from pyspark's own jars."""
    port, ui, worker_ui = free_port(), free_port(), free_port()
    url = f"spark://127.0.0.1:{port}"
    master = ManagedProcess("Spark master", [str(SPARK_BIN / "spark-class"), "org.apache.spark.deploy.master.Master",
                                             "--host", "127.0.0.1", "--port", str(port), "--webui-port", str(ui)],
                            lab_root / "spark" / "master.log", env=ENV)
    worker = ManagedProcess("Spark worker", [str(SPARK_BIN / "spark-class"), "org.apache.spark.deploy.worker.Worker",
                                             url, "--host", "127.0.0.1", "--cores", "1", "--memory", "1g",
                                             "--webui-port", str(worker_ui)],
                            lab_root / "spark" / "worker.log", env=ENV)
    master.start()
    master.wait_until(lambda: "I have been elected leader" in master.log_path.read_text(), 90, "leader")
    worker.start()
    worker.wait_until(lambda: "Successfully registered with master" in worker.log_path.read_text(), 90, "registered")
    yield url
    worker.stop()
    master.stop()


def _replicate_through(command: list[str], name: str, source: KafkaCluster, target: KafkaCluster,
                       topic: str, lab_root: Path) -> None:
    create_topic(source.admin(), topic, partitions=2, config={"retention.ms": "-1"})
    produce(source.client_config(), topic, [Record(b"k", str(i).encode(), partition=i % 2) for i in range(500)])
    process = ManagedProcess(name, command, lab_root / "spark" / f"{name}.log", env=ENV)
    process.start()
    try:
        wait_for(lambda: count(target, f"A.{topic}") == 500, 240, f"{topic} replicated through {name}")
    finally:
        process.stop(timeout=60)


def test_spark_submit_to_a_standalone_master(
    spark_master: str, source_cluster: KafkaCluster, target_cluster: KafkaCluster,
    unique_name: Callable[[str], str], tmp_path: Path, lab_root: Path,
) -> None:
    topic = unique_name("submit")
    config = write_config(tmp_path / "s.yaml", flow_config(source_cluster, target_cluster, [topic]))
    main = Path(__import__("strait_replicator").__file__).parent / "__main__.py"
    command = [str(SPARK_BIN / "spark-submit"), "--master", spark_master,
               "--conf", f"spark.pyspark.python={sys.executable}", "--conf", "spark.driver.host=127.0.0.1",
               str(main), "--config", str(config), "--state-dir", str(tmp_path / "state")]
    _replicate_through(command, f"submit-{topic}", source_cluster, target_cluster, topic, lab_root)
    assert os.path.exists(tmp_path / "state" / "A_to_B" / "checkpoint" / "commits")
