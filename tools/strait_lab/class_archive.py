"""A class-data-sharing archive of the Kafka brokers' classes: lab and test brokers start in half the CPU.

A broker's JVM spends most of its start loading and verifying some thousands of classes from the
jars. The JVM can record them once into an archive (``-XX:ArchiveClassesAtExit``, written as a
broker recording them exits) and map that archive at every later start (``-XX:SharedArchiveFile``).
Measured here (2 cores, one KRaft node, C1 only as in the tests): start to ready 4.2 s and 4.0
CPU-seconds without, 2.2 s and 2.1 CPU-seconds with the archive.

`make deps` records it once per machine (:func:`ensure_archive`, about 13 s); the archive's name
carries a digest of the Java runtime and the jars, so a new JDK or new jars get a new archive and
never a stale one (a JVM given an archive that does not match ignores it). Only lab brokers use it;
production brokers are the user's own.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from strait.paths import cache_dir
from strait_lab import deps

log = logging.getLogger(__name__)

JAR_SET = "kafka"  # the brokers of today's Kafka; compatibility versions start without an archive


def archive_options(jar_set: str) -> list[str]:
    """The JVM options that map the archive of ``jar_set``'s classes, when one was recorded."""
    if jar_set != JAR_SET or not deps.jars_ready(jar_set):
        return []
    path = archive_path(jar_set)
    return [f"-XX:SharedArchiveFile={path}"] if path.exists() else []


@functools.cache
def archive_path(jar_set: str) -> Path:
    """Where the archive of ``jar_set`` for this Java runtime and these jars lives."""
    java = shutil.which("java") or "java"
    # without the options the launcher would echo into the version text (the tests set some)
    env = {k: v for k, v in os.environ.items() if k not in ("JDK_JAVA_OPTIONS", "JAVA_TOOL_OPTIONS", "_JAVA_OPTIONS")}
    version = subprocess.run([java, "-version"], capture_output=True, text=True, env=env).stderr
    jars = sorted((jar.name, jar.stat().st_size, jar.stat().st_mtime_ns)
                  for jar in deps.jars_dir(jar_set).glob("*.jar"))
    digest = hashlib.sha256(repr((os.path.realpath(java), version, jars)).encode()).hexdigest()[:16]
    return cache_dir() / "class-archives" / f"{jar_set}-{digest}.jsa"


def ensure_archive(jar_set: str = JAR_SET) -> Path | None:
    """Record the archive unless it exists; None (and a warning) when recording failed: brokers
    then start without it, as before."""
    path = archive_path(jar_set)
    if path.exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f"{path.name}.{os.getpid()}.partial")
    started = time.monotonic()
    try:
        _record(partial)
        if not partial.exists() or partial.stat().st_size == 0:
            log.warning("no class archive written to %s: Kafka brokers start without one", partial)
            return None
        os.replace(partial, path)
    except Exception as exc:  # noqa: BLE001 - an optimisation: the lab works without it
        log.warning("recording the Kafka brokers' class archive failed (%s: %s): they start without one",
                    type(exc).__name__, exc)
        return None
    finally:
        partial.unlink(missing_ok=True)
    for old in path.parent.glob(f"{jar_set}-*.jsa"):
        if old != path:
            old.unlink(missing_ok=True)
    log.info("recorded the Kafka brokers' class archive %s in %.0fs", path, time.monotonic() - started)
    return path


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
