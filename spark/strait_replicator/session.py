"""The SparkSession of the replicator: local mode by default, any master URL when given.

Spark's Kafka connector comes from the jar set resolved by Maven (``spark-kafka``); jars that
pyspark already ships are left out so the class path holds one copy of each library.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pyspark
from pyspark.sql import SparkSession

from strait.lab import deps

_VERSIONED_JAR = re.compile(r"^(?P<artifact>.+?)-\d[\w.]*\.jar$")


def _artifact(jar: Path) -> str:
    match = _VERSIONED_JAR.match(jar.name)
    return match.group("artifact") if match else jar.stem


def connector_jars() -> list[str]:
    """The Kafka connector jars Spark needs beyond those pyspark ships."""
    folder = deps.ensure_jars("spark-kafka")
    shipped = {_artifact(jar) for jar in (Path(pyspark.__file__).parent / "jars").glob("*.jar")}
    return sorted(str(jar) for jar in folder.glob("*.jar") if _artifact(jar) not in shipped)


def launched_by_spark_submit() -> bool:
    """True when spark-submit started this process (it then owns the master, jars and driver JVM)."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


def build_session(master: str | None = None, app_name: str = "strait-replicator",
                  driver_memory: str = "2g") -> SparkSession:
    """Create (or get) the replicator's SparkSession.

    Started by spark-submit, the session takes spark-submit's master and ``--jars``
    (``python -m strait_replicator.session`` prints the connector jars to pass).
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # executors run strait's interpreter
    builder = SparkSession.builder.appName(app_name)
    if master or not launched_by_spark_submit():
        master = master or os.environ.get("STRAIT_SPARK_MASTER", "local[*]")
        builder = (builder.master(master).config("spark.jars", ",".join(connector_jars()))
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


if __name__ == "__main__":
    print(",".join(connector_jars()))
