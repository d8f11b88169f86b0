"""The SparkSession of the replicator: local mode by default, any master URL when given.

The replicator reads and writes Kafka through its own Python data source and librdkafka, so the
session needs no jar beyond those pyspark ships (Spark's Kafka connector is a benchmark's concern).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from pyspark.sql import SparkSession


def launched_by_spark_submit() -> bool:
    """True when spark-submit started this process (it then owns the master, jars and driver JVM)."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


def build_session(master: str | None = None, app_name: str = "strait-replicator",
                  driver_memory: str = "2g", jars: Sequence[str] = ()) -> SparkSession:
    """Create (or get) the replicator's SparkSession; ``jars`` adds to Spark's class path.

    Started by spark-submit, the session takes spark-submit's master and ``--jars``.
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # executors run strait's interpreter
    builder = SparkSession.builder.appName(app_name)
    if master or not launched_by_spark_submit():
        master = master or os.environ.get("STRAIT_SPARK_MASTER", "local[*]")
        builder = (builder.master(master).config("spark.jars", ",".join(jars))
                   .config("spark.driver.memory", driver_memory))
    else:
        master = ""
    builder = (
        builder
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.ui.enabled", os.environ.get("STRAIT_SPARK_UI", "false"))
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.streaming.stopTimeout", "30s")
    )
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
