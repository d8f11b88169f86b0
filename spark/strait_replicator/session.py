"""The SparkSession of the replicator: local mode by default, any master URL when given.

The replicator reads and writes Kafka through its own Python data source and librdkafka, so the
session needs no jar beyond those pyspark ships (Spark's Kafka connector is a benchmark's concern).
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Sequence

from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

EXECUTORS_WAIT_SECONDS = 60.0
LOCAL_CHECKPOINT_FILES = "org.apache.spark.sql.execution.streaming.FileSystemBasedCheckpointFileManager"
EXECUTORS_SETTLE_SECONDS = 2.0  # the other workers' executors register within moments of the first
# The JVMs of the replicator plan, schedule and relay small summaries; the records never enter them.
# Serial GC keeps such a JVM near its small live set (G1 let the driver grow from 360 to 620 MB PSS in
# 80 s of copying; serial: 410-450 MB) and C1 alone starts it about 1 s sooner. They go first, before a
# user's extraJavaOptions; STRAIT_SPARK_JAVA_OPTIONS replaces them (empty: the JVMs' own defaults).
JAVA_OPTIONS = "-XX:+UseSerialGC -XX:TieredStopAtLevel=1"


def launched_by_spark_submit() -> bool:
    """True when spark-submit started this process (it then owns the master, jars and driver JVM)."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


def build_session(master: str | None = None, app_name: str = "strait-replicator",
                  driver_memory: str = "2g", jars: Sequence[str] = (),
                  local_checkpoints: bool = False) -> SparkSession:
    """Create (or get) the replicator's SparkSession; ``jars`` adds to Spark's class path.

    Started by spark-submit, the session takes spark-submit's master and ``--jars``. With
    ``local_checkpoints`` (the checkpoints on this host's file system) Spark writes them through
    Hadoop's FileSystem API: its default, the FileContext API, forks a ``readlink`` process from the
    driver's JVM for every rename on a local disk, which held up every change of epochs (jstack).
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # executors run strait's interpreter
    builder = SparkSession.builder.appName(app_name)
    if master or not launched_by_spark_submit():
        master = master or os.environ.get("STRAIT_SPARK_MASTER", "local[*]")
        builder = (builder.master(master).config("spark.jars", ",".join(jars))
                   .config("spark.driver.memory", driver_memory))
        java_options = os.environ.get("STRAIT_SPARK_JAVA_OPTIONS", JAVA_OPTIONS)
        if java_options:
            builder = (builder.config("spark.driver.defaultJavaOptions", java_options)
                       .config("spark.executor.defaultJavaOptions", java_options))
    else:
        master = ""
    builder = (
        builder
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.ui.enabled", os.environ.get("STRAIT_SPARK_UI", "false"))
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.streaming.stopTimeout", "30s")
    )
    if local_checkpoints:
        builder = builder.config("spark.sql.streaming.checkpointFileManagerClass", LOCAL_CHECKPOINT_FILES)
    if master.startswith("local") or "//127.0.0.1:" in master:  # loopback lab: keep the driver there too
        builder = builder.config("spark.driver.bindAddress", "127.0.0.1").config("spark.driver.host", "127.0.0.1")
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel(os.environ.get("STRAIT_SPARK_LOG_LEVEL", "WARN"))
    _quiet_epoch_length_warning(session)
    return session


def _quiet_epoch_length_warning(session: SparkSession) -> None:
    """An epoch lasts seconds by design; Spark would warn at every one that it outlasts its trigger."""
    jvm = session.sparkContext._jvm  # type: ignore[attr-defined]
    jvm.org.apache.logging.log4j.core.config.Configurator.setLevel(
        "org.apache.spark.sql.execution.streaming.ProcessingTimeExecutor", jvm.org.apache.logging.log4j.Level.ERROR)


def task_slots(session: SparkSession) -> int:
    """The task slots the session's executors offer now: N in ``local[N]``; on a cluster, what its
    registered executors offer (0 before the first registers).

    An epoch task holds its slot for the whole epoch, so a task without a slot waits an epoch. On a
    cluster ``defaultParallelism`` says at least 2, even for one one-core worker: not a slot count.
    """
    context = session.sparkContext
    if context.master.startswith("local"):
        return context.defaultParallelism
    scala = context._jsc.sc()  # type: ignore[union-attr]
    return int(scala.maxNumConcurrentTasks(scala.resourceProfileManager().defaultResourceProfile()))


def wait_for_executors(session: SparkSession, timeout: float = EXECUTORS_WAIT_SECONDS) -> int:
    """On a cluster, wait until executors registered (at most ``timeout``); the task slots then."""
    deadline = time.monotonic() + timeout
    while task_slots(session) == 0 and time.monotonic() < deadline:
        time.sleep(0.5)
    if not session.sparkContext.master.startswith("local"):
        time.sleep(EXECUTORS_SETTLE_SECONDS)
    slots = task_slots(session)
    if slots == 0:
        log.warning("no executor registered with master=%s in %.0fs: epochs plan one task until one does",
                    session.sparkContext.master, timeout)
    else:
        log.info("executors offer task_slots=%d master=%s", slots, session.sparkContext.master)
    return slots
