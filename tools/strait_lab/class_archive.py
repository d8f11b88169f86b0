"""Class-data-sharing archives: lab and test brokers, and the replicator's Spark driver, start in
about half the CPU.

A JVM spends most of its start loading and verifying some thousands of classes from the jars. It
can record them once into an archive (``-XX:ArchiveClassesAtExit``, written as the recording JVM
exits) and map that archive at every later start (``-XX:SharedArchiveFile``). Two are recorded:

- ``kafka``: a lab broker serving a topic, a producer and a consumer. Measured (2 cores, one KRaft
  node, C1 only as in the tests): start to ready 4.2 s and 4.0 CPU-seconds without, 2.2 s and 2.1
  with it. Every lab broker of today's Kafka maps it (:func:`archive_options`).
- ``spark``: a replicator-like Spark driver (SQL, a Python streaming data source, foreachBatch).
  Measured: a local session to its first streaming batches 10.3-11.0 CPU-seconds of the JVM
  without, 6.5-6.7 with it. The lab and the tests hand it to the replicator through
  ``STRAIT_SPARK_CLASS_ARCHIVE`` (:func:`spark_archive_env`; strait_replicator.session maps it
  in the driver's JVM only: executors may run elsewhere).

`make deps` records both once per machine (:func:`ensure_archive`, 13 and about 20 s); an archive's
name carries a digest of the Java runtime and its jars, so a new JDK or new jars get a new archive
and never a stale one (a JVM given an archive that does not match ignores it, with a warning).
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from strait.paths import cache_dir
from strait_lab import deps

log = logging.getLogger(__name__)

KAFKA = "kafka"  # the brokers of today's Kafka; compatibility versions start without an archive
SPARK = "spark"  # the replicator's Spark driver, with pyspark's jars
ARCHIVE_VARIABLE = "STRAIT_SPARK_CLASS_ARCHIVE"  # read by strait_replicator.session


def archive_options(jar_set: str) -> list[str]:
    """The JVM options that map the archive of ``jar_set``'s classes, when one was recorded."""
    if jar_set != KAFKA or not deps.jars_ready(jar_set):
        return []
    path = archive_path(jar_set)
    return [f"-XX:SharedArchiveFile={path}"] if path.exists() else []


def spark_archive_env() -> dict[str, str]:
    """The replicator's environment entry that maps the Spark driver's archive, when one was recorded
    (none without Java or pyspark)."""
    try:
        path = archive_path(SPARK)
    except (OSError, ImportError):
        return {}
    return {ARCHIVE_VARIABLE: str(path)} if path.exists() else {}


def _jars_dir(name: str) -> Path:
    if name == SPARK:
        import pyspark

        return Path(pyspark.__file__).parent / "jars"
    return deps.jars_dir(name)


@functools.cache
def archive_path(name: str) -> Path:
    """Where the archive ``name`` (``kafka`` or ``spark``) for this Java runtime and its jars lives."""
    java = shutil.which("java") or "java"
    # without the options the launcher would echo into the version text (the tests set some)
    env = {k: v for k, v in os.environ.items() if k not in ("JDK_JAVA_OPTIONS", "JAVA_TOOL_OPTIONS", "_JAVA_OPTIONS")}
    version = subprocess.run([java, "-version"], capture_output=True, text=True, env=env).stderr
    jars = sorted((jar.name, jar.stat().st_size, jar.stat().st_mtime_ns) for jar in _jars_dir(name).glob("*.jar"))
    digest = hashlib.sha256(repr((os.path.realpath(java), version, jars)).encode()).hexdigest()[:16]
    return cache_dir() / "class-archives" / f"{name}-{digest}.jsa"


def ensure_archive(name: str = KAFKA) -> Path | None:
    """Record the archive ``name`` unless it exists; None (and a warning) when recording failed: its
    JVMs then start without it, as before."""
    try:
        path = archive_path(name)
    except (OSError, ImportError) as exc:
        log.warning("no %s class archive (%s: %s): its JVMs start without one", name, type(exc).__name__, exc)
        return None
    if path.exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f"{path.name}.{os.getpid()}.partial")
    started = time.monotonic()
    try:
        (_record_spark if name == SPARK else _record)(partial)
        if not partial.exists() or partial.stat().st_size == 0:
            log.warning("no class archive written to %s: %s JVMs start without one", partial, name)
            return None
        os.replace(partial, path)
    except Exception as exc:  # noqa: BLE001 - an optimisation: the lab works without it
        log.warning("recording the %s class archive failed (%s: %s): its JVMs start without one",
                    name, type(exc).__name__, exc)
        return None
    finally:
        partial.unlink(missing_ok=True)
    for old in path.parent.glob(f"{name}-*.jsa*"):  # older archives, and what a killed recording left
        if old != path:
            old.unlink(missing_ok=True)
    log.info("recorded the %s class archive %s in %.0fs", name, path, time.monotonic() - started)
    return path


def _record_spark(partial: Path) -> None:
    """Run a replicator-like Spark driver in a Python process of its own whose JVM records the
    classes it loads into ``partial`` as it exits (strait_lab.spark_workload)."""
    from strait_replicator.session import JAVA_OPTIONS

    env = {**os.environ, "STRAIT_SPARK_JAVA_OPTIONS": f"{JAVA_OPTIONS} -XX:ArchiveClassesAtExit={partial}"}
    env.pop(ARCHIVE_VARIABLE, None)
    done = subprocess.run([sys.executable, "-m", "strait_lab.spark_workload"], env=env, capture_output=True,
                          text=True, timeout=300)
    if done.returncode != 0:
        partial.unlink(missing_ok=True)
        raise RuntimeError(f"the recording driver exited with {done.returncode}: {done.stderr[-2000:]}")


def _record(partial: Path) -> None:
    """Run one broker that records the classes it loads into ``partial`` as it exits; make it serve
    a topic, a producer and a consumer first, so their classes are in it."""
    from confluent_kafka import Consumer

    from strait_lab.clients import Record, create_topic, produce
    from strait_lab.kafka import KafkaCluster, KafkaClusterSpec

    with tempfile.TemporaryDirectory(prefix="strait-class-archive-") as workdir:
        cluster = KafkaCluster(KafkaClusterSpec("archive", jvm_options=(f"-XX:ArchiveClassesAtExit={partial}",)),
                               Path(workdir))
        try:
            cluster.launch()
            cluster.wait_ready(180)
            admin = cluster.admin()
            create_topic(admin, "classes", partitions=2, timeout=60)
            produce(cluster.client_config(), "classes",
                    [Record(b"%d" % i, b"x" * 100, headers=(("h", b"v"),)) for i in range(100)])
            # a group that commits, as the tests' consumers do (strait_lab.clients reads without one)
            consumer = Consumer({**cluster.client_config(), "group.id": "classes", "auto.offset.reset": "earliest"})
            consumer.subscribe(["classes"])
            deadline, read = time.monotonic() + 30, 0
            while read < 100 and time.monotonic() < deadline:
                read += len(consumer.consume(100, 1.0))
            consumer.commit(asynchronous=False)
            consumer.close()
            del admin  # no client left to retry a broker that stops
        finally:
            for node in cluster.nodes:
                node.stop(timeout=120)  # SIGTERM: the JVM writes the archive as it exits
        codes = [node.returncode() for node in cluster.nodes]
        if any(code is None or code < 0 for code in codes):  # killed, maybe mid-write: not an archive to keep
            partial.unlink(missing_ok=True)
            log.warning("the broker recording the class archive did not exit by itself (codes %s)", codes)
