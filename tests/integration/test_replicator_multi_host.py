"""The replicator on a Spark standalone cluster whose workers share no disk with the driver (issue 19).

Each Spark worker runs in its own mount namespace with an empty tmpfs over the folder that holds the
driver's state dir, so its executors cannot see the driver's checkpoint or any file the driver
writes there: everything tasks and driver exchange has to go through Kafka (the progress records on
the target). Under continuous load: the live metrics move while the workers copy, a worker is
SIGKILLed mid-epoch (a replacement joins), the driver is SIGKILLed mid-epoch and started again; every
record reaches the target byte for byte, and the offset syncs translate exactly; a graceful stop
reaches the tasks on the other hosts (the stop record) and ends their epoch.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pyspark
import pytest

from strait.config import load_config
from strait.translation import CommittedOffset, load_index, translate_offset
from strait_lab.clients import create_topic
from strait_lab.kafka import KafkaCluster
from strait_lab.ports import free_port
from strait_lab.process import ManagedProcess
from strait_lab.services import StraitProcess
from tests.integration.replicator_support import (
    NumberedLoad, count, flow_config, records_by_partition, wait_for, write_config,
)

pytestmark = pytest.mark.slow

SPARK_BIN = Path(pyspark.__file__).parent / "bin"
ENV = {"PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
PARTITIONS = 4
RATE = 1_000


class OtherHostCluster:
    """A Spark standalone master and workers, each worker blind to ``hidden`` (the driver's disk)."""

    def __init__(self, lab_root: Path, hidden: Path) -> None:
        self.folder = lab_root / "spark-multi-host"
        self.hidden = hidden
        port = free_port()
        self.url = f"spark://127.0.0.1:{port}"
        self.master = ManagedProcess(
            "Spark master", [str(SPARK_BIN / "spark-class"), "org.apache.spark.deploy.master.Master", "--host",
                             "127.0.0.1", "--port", str(port), "--webui-port", str(free_port())],
            self.folder / "master.log", env=ENV)
        self.workers: list[ManagedProcess] = []

    def start(self) -> None:
        """The master, then two workers."""
        self.master.start()
        self.master.wait_until(lambda: "I have been elected leader" in self.master.log_path.read_text(), 90, "leader")
        for _ in range(2):
            self.add_worker()

    def add_worker(self) -> ManagedProcess:
        """One more worker "host": its own mount namespace, the driver's folder an empty tmpfs there."""
        n = len(self.workers)
        work = self.folder / f"worker-{n}"
        work.mkdir(parents=True, exist_ok=True)
        unshare = ["unshare", "--mount", "--propagation", "private"]
        if os.geteuid() != 0:
            unshare.append("--map-root-user")
        argv = [*unshare, "sh", "-c", 'mount -t tmpfs other-host "$0" && exec "$@"', str(self.hidden),
                str(SPARK_BIN / "spark-class"), "org.apache.spark.deploy.worker.Worker", self.url, "--host",
                "127.0.0.1", "--cores", "1", "--memory", "1g", "--webui-port", str(free_port()),
                "--work-dir", str(work)]
        worker = ManagedProcess(f"Spark worker {n}", argv, self.folder / f"worker-{n}.log", env=ENV)
        worker.start()
        worker.wait_until(lambda: "Successfully registered with master" in worker.log_path.read_text(), 90,
                          "registered")
        self.workers.append(worker)
        return worker

    def stop(self) -> None:
        """Every worker, then the master."""
        for worker in self.workers:
            worker.stop()
        self.master.stop()


@pytest.fixture
def other_hosts(lab_root: Path, tmp_path: Path) -> Iterator[OtherHostCluster]:
    cluster = OtherHostCluster(lab_root, tmp_path)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


def _copied_total(process: StraitProcess) -> float:
    try:
        return process.sample("strait_replicated_records_total", flow="A->B") or 0.0
    except OSError:
        return 0.0


def test_workers_that_share_no_disk_with_the_driver_copy_under_load_and_survive_sigkills(
    other_hosts: OtherHostCluster, source_cluster: KafkaCluster, target_cluster: KafkaCluster,
    unique_name: Callable[[str], str], tmp_path: Path, lab_root: Path,
) -> None:
    topic = unique_name("multi-host")
    remote = f"A.{topic}"
    create_topic(source_cluster.admin(), topic, partitions=PARTITIONS, config={"retention.ms": "-1"})
    config = write_config(tmp_path / "s.yaml", flow_config(source_cluster, target_cluster, [topic]))
    args = ["--config", str(config), "--master", other_hosts.url, "--state-dir", str(tmp_path / "state")]
    load = NumberedLoad(source_cluster, topic, PARTITIONS, RATE)
    drivers: list[StraitProcess] = []
    try:
        driver = StraitProcess("replicator", [*args, "--epoch-seconds", "20"], lab_root / "replicator", env=ENV,
                               name=f"driver-0-{topic}")
        drivers.append(driver)
        driver.start(timeout=120)
        wait_for(lambda: count(target_cluster, remote) > 2 * RATE, 180, "the workers copying")
        moving = [_copied_total(driver)]
        for _ in range(3):  # within one 20 s epoch: the metrics move while the tasks copy
            time.sleep(2)
            moving.append(_copied_total(driver))
        print(f"records counted live every 2 s: {moving}")
        assert moving[0] < moving[1] < moving[2] < moving[3], "the live metrics stood still during the epoch"

        other_hosts.workers[0].kill()  # a host lost mid-epoch, its executor with it
        other_hosts.add_worker()  # and replaced
        before = count(target_cluster, remote)
        wait_for(lambda: count(target_cluster, remote) > before + 3 * RATE, 180, "copying after the worker loss")

        time.sleep(5)
        driver.kill()  # the driver lost mid-epoch
        # epochs longer than the stop's grace: only the stop record ends the last one in time
        driver = StraitProcess("replicator", [*args, "--epoch-seconds", "300"], lab_root / "replicator", env=ENV,
                               name=f"driver-1-{topic}")
        drivers.append(driver)
        driver.start(timeout=120)
        before = count(target_cluster, remote)
        wait_for(lambda: count(target_cluster, remote) > before + 3 * RATE, 180, "copying after the driver loss")
        total = load.stop()
        wait_for(lambda: count(target_cluster, remote) >= total, 300, f"{remote} caught up")
        time.sleep(2)
        driver.stop()
        assert "running epoch ended=True" in driver.log_text(), \
            "the tasks on the other hosts did not see the stop record: the epoch was left running"
    finally:
        load.stop()
        for process in drivers:
            process.stop()

    assert not list((tmp_path / "state").rglob("strait-live*")), "no live files beside the checkpoint"
    source = records_by_partition(source_cluster, topic)
    target = records_by_partition(target_cluster, remote)
    duplicates = 0
    for partition in range(PARTITIONS):
        originals = {(r.key, r.value) for r in source[partition]}
        copies = [(r.key, r.value) for r in target[partition]]
        assert set(copies) == originals, f"partition {partition}: records lost or changed"
        duplicates += len(copies) - len(set(copies))
    print(f"multi-host: {total} records, {duplicates} copied twice after a worker and a driver SIGKILL")

    strait_config = load_config(config)
    flow = strait_config.flow("A->B")
    index = load_index(strait_config, flow)
    for partition in range(PARTITIONS):
        for offset in (1, len(source[partition]) // 2, len(source[partition]) - 1):
            row = translate_offset(flow, index, CommittedOffset(topic, partition, offset))
            assert row.downstream is not None, f"{topic}[{partition}] offset {offset} not translated"
            # the record a consumer resuming there reads next is the one the source group would read next
            assert target[partition][row.downstream].value == source[partition][offset].value
