"""A Spark standalone cluster on loopback, from pyspark's own jars: a master and workers.

Used by the tests that run the replicator on a cluster and by the benchmark's scaling runs. A worker
may stand for another host: started in its own mount namespace with an empty tmpfs over a folder
(the driver's state dir, say), its executors cannot see what the driver keeps there.
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

from strait_lab.ports import free_port
from strait_lab.process import ManagedProcess

log = logging.getLogger(__name__)
# Executors run this interpreter (strait's), and every process stays on loopback.
SPARK_ENV = {"PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
START_TIMEOUT = 90.0


def spark_bin() -> Path:
    """pyspark's ``bin`` folder (spark-class, spark-submit)."""
    import pyspark  # here: importing pyspark is slow, and most users of this module never start Spark

    return Path(pyspark.__file__).parent / "bin"


class SparkStandalone:
    """A master and its workers, each a process of its own with its log in ``folder``."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        port = free_port()
        self.url = f"spark://127.0.0.1:{port}"
        self.master = ManagedProcess(
            "Spark master", [str(spark_bin() / "spark-class"), "org.apache.spark.deploy.master.Master", "--host",
                             "127.0.0.1", "--port", str(port), "--webui-port", str(free_port())],
            folder / "master.log", env=SPARK_ENV)
        self.workers: list[ManagedProcess] = []

    def start(self, workers: int, cores: int = 1, hidden: Path | None = None) -> SparkStandalone:
        """The master, then ``workers`` workers of ``cores`` cores (see :meth:`add_worker` for ``hidden``)."""
        self.master.start()
        self.master.wait_until(lambda: "I have been elected leader" in self.master.log_path.read_text(),
                               START_TIMEOUT, "Spark master elected leader")
        for _ in range(workers):
            self.add_worker(cores, hidden)
        return self

    def add_worker(self, cores: int = 1, hidden: Path | None = None) -> ManagedProcess:
        """One more worker, registered with the master. With ``hidden``, the worker is another "host":
        its own mount namespace, with ``hidden`` an empty tmpfs there."""
        n = len(self.workers)
        work = self.folder / f"worker-{n}"
        work.mkdir(parents=True, exist_ok=True)
        argv = [str(spark_bin() / "spark-class"), "org.apache.spark.deploy.worker.Worker", self.url, "--host",
                "127.0.0.1", "--cores", str(cores), "--memory", "1g", "--webui-port", str(free_port()),
                "--work-dir", str(work)]
        if hidden is not None:
            unshare = ["unshare", "--mount", "--propagation", "private"]
            if os.geteuid() != 0:
                unshare.append("--map-root-user")
            argv = [*unshare, "sh", "-c", 'mount -t tmpfs other-host "$0" && exec "$@"', str(hidden), *argv]
        worker = ManagedProcess(f"Spark worker {n}", argv, self.folder / f"worker-{n}.log", env=SPARK_ENV)
        self.workers.append(worker)  # stopped by stop() even when it never registers
        worker.start()
        worker.wait_until(lambda: "Successfully registered with master" in worker.log_path.read_text(),
                          START_TIMEOUT, f"Spark worker {n} registered")
        return worker

    def pids(self) -> list[int]:
        """The master's and the workers' process ids (executors are the workers' children)."""
        return [p.pid for p in (self.master, *self.workers) if p.pid is not None]

    def stop(self) -> None:
        """Every worker, then the master (each tried even when another fails to stop)."""
        try:
            for worker in self.workers:
                try:
                    worker.stop()
                except Exception:  # noqa: BLE001 - the others are stopped all the same
                    log.exception("stopping %s", worker.name)
        finally:
            self.master.stop()
