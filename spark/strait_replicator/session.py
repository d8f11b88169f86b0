"""The SparkSession of the replicator: local mode by default, any master URL when given.

The replicator reads and writes Kafka through its own Python data source and librdkafka, so the
session needs no jar beyond those pyspark ships (Spark's Kafka connector is a benchmark's concern).
"""

from __future__ import annotations

import logging
import math
import os
import re
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from py4j.protocol import Py4JError
from pyspark.sql import SparkSession

from strait.errors import StraitError

log = logging.getLogger(__name__)

EXECUTORS_WAIT_SECONDS = 60.0
LOCAL_CHECKPOINT_FILES = "org.apache.spark.sql.execution.streaming.FileSystemBasedCheckpointFileManager"
EXECUTORS_SETTLE_SECONDS = 2.0  # the other workers' executors register within moments of the first
# The JVMs of the replicator plan, schedule and relay small summaries; the records never enter them.
# Serial GC keeps such a JVM near its small live set (G1 let the driver grow from 360 to 620 MB PSS in
# 80 s of copying; serial: 410-450 MB) and C1 alone starts it about 1 s sooner. They go first, before a
# user's extraJavaOptions; STRAIT_SPARK_JAVA_OPTIONS replaces them (empty: the JVMs' own defaults).
JAVA_OPTIONS = "-XX:+UseSerialGC -XX:TieredStopAtLevel=1"
# A class-data-sharing archive of the driver JVM's classes (``java -XX:ArchiveClassesAtExit``, recorded
# with the same JDK and pyspark): about 40 % less CPU to start the driver. Optional; the lab records
# one (strait_lab.class_archive). Only the driver maps it: executors may run on other hosts.
CLASS_ARCHIVE_VARIABLE = "STRAIT_SPARK_CLASS_ARCHIVE"
_LOCAL = re.compile(r"^local(?:\[(\*|\d+)(?:,\d+)?\])?$")


class SparkStartError(StraitError):
    """Spark's session could not be started (no Java, a master that does not answer, a bad setting)."""


def spark_master(given: str | None) -> str | None:
    """The master the replicator's session runs on: the one given, else ``STRAIT_SPARK_MASTER``, else
    every core of this host; ``local[*]`` made explicit, so the task slots are known before the JVM
    is up (:func:`local_slots`). None when spark-submit started the process (it owns the master)."""
    if not given and launched_by_spark_submit():
        return None
    master = given or os.environ.get("STRAIT_SPARK_MASTER", "local[*]")
    match = _LOCAL.match(master)
    if match and match.group(1) == "*":
        return master.replace("[*", f"[{available_cores()}", 1)
    return master


def available_cores() -> int:
    """The cores this process may use, as the JVM counts them for ``local[*]``: its CPU affinity, under
    a container's CPU quota (cgroup v2 ``cpu.max``) when it has one."""
    cores = len(os.sched_getaffinity(0))
    try:
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text().split()[:2]
        if quota != "max":
            cores = min(cores, max(1, math.ceil(int(quota) / int(period))))
    except (OSError, ValueError):
        pass
    return max(1, cores)


def local_slots(master: str | None) -> int | None:
    """The task slots of a local master (``local`` is 1, ``local[N]`` N); None for any other."""
    match = _LOCAL.match(master or "")
    if match is None:
        return None
    count = match.group(1)
    if count is None:
        return 1
    return available_cores() if count == "*" else int(count)


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
    master = spark_master(master)
    if master is not None:
        builder = (builder.master(master).config("spark.jars", ",".join(jars))
                   .config("spark.driver.memory", driver_memory))
        java_options = os.environ.get("STRAIT_SPARK_JAVA_OPTIONS", JAVA_OPTIONS)
        driver_options = " ".join(option for option in (java_options, _class_archive_option()) if option)
        if driver_options:
            builder = builder.config("spark.driver.defaultJavaOptions", driver_options)
        if java_options:
            builder = builder.config("spark.executor.defaultJavaOptions", java_options)
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


def _class_archive_option() -> str:
    """The driver JVM's option mapping ``$STRAIT_SPARK_CLASS_ARCHIVE``, or "" (unset, or not a file)."""
    path = os.environ.get(CLASS_ARCHIVE_VARIABLE, "").strip()
    if not path:
        return ""
    if not Path(path).is_file():
        log.warning("%s=%s is not a file: the Spark driver starts without a class archive", CLASS_ARCHIVE_VARIABLE, path)
        return ""
    if any(c.isspace() or c in "\"'" for c in path):  # Spark splits its Java options on blanks and quotes
        log.warning("%s=%s: a path with blanks or quotes cannot be a Java option; the Spark driver starts without "
                    "a class archive (move it)", CLASS_ARCHIVE_VARIABLE, path)
        return ""
    return f"-XX:SharedArchiveFile={path}"


def _quiet_epoch_length_warning(session: SparkSession) -> None:
    """An epoch lasts seconds by design; Spark would warn at every one that it outlasts its trigger."""
    jvm = session.sparkContext._jvm  # type: ignore[attr-defined]
    jvm.org.apache.logging.log4j.core.config.Configurator.setLevel(
        "org.apache.spark.sql.execution.streaming.ProcessingTimeExecutor", jvm.org.apache.logging.log4j.Level.ERROR)


# Spark runs a Python data source's planning (finding it, creating it, planning its read) in Python
# daemons of its own, one per step, each with a forked worker, and keeps them after use: about 280 MB
# PSS in all, idle while the queries run. Spark starts them again when a query starts.
PLANNER_MODULES = ("pyspark.sql.worker.lookup_data_sources", "pyspark.sql.worker.create_data_source",
                   "pyspark.sql.worker.plan_data_source_read")


@dataclass(frozen=True)
class PlannersEnded:
    """What :func:`end_idle_planners` did: the planner modules whose daemon it stopped, and those it
    left because a worker of theirs was planning (a query starting)."""

    stopped: tuple[str, ...]
    busy: tuple[str, ...]


def end_idle_planners(session: SparkSession) -> PlannersEnded:
    """Stop the driver's idle Python planner daemons (PLANNER_MODULES) through Spark's own worker
    factories; a factory with a worker out (planning now) is left alone. (A planner asked for in the
    moment between the look and the stop fails its query's start once; the start is retried.)

    The factories are Spark internals (``SparkEnv.pythonWorkers``, read by reflection): if a Spark
    version has them otherwise this raises, and the daemons are simply left running.
    """
    jvm = session.sparkContext._jvm  # type: ignore[attr-defined]
    env = jvm.org.apache.spark.SparkEnv.get()
    factories = _private_field(env, "pythonWorkers").iterator()
    stopped, busy = [], []
    while factories.hasNext():
        entry = factories.next()
        module, factory = entry._1().workerModule(), entry._2()
        if module not in PLANNER_MODULES:
            continue
        workers, idle = _private_field(factory, "daemonWorkers"), _private_field(factory, "idleWorkers")
        try:
            busy_now = planning(workers, idle)
        except Py4JError:  # read without the factory's lock: changed while read, so in use
            busy_now = True
        if busy_now:
            busy.append(module)
            continue
        factory.stop()
        stopped.append(module)
    return PlannersEnded(tuple(stopped), tuple(busy))


def planning(workers: Any, idle: Any) -> bool:
    """Whether a planner factory has a worker out planning: one of its ``workers`` (Spark's map of
    worker to process handle) alive and not among its ``idle`` ones. Spark's idle timeout stops idle
    workers without forgetting them: a known worker may be dead."""
    entries = workers.iterator()
    while entries.hasNext():
        entry = entries.next()
        if entry._2().isAlive() and not idle.contains(entry._1()):
            return True
    return False


def _private_field(obj: Any, name: str) -> Any:
    """A JVM object's private field, by reflection."""
    field = obj.getClass().getDeclaredField(name)
    field.setAccessible(True)
    return field.get(obj)


def _short(modules: tuple[str, ...]) -> str:
    return ",".join(m.rsplit(".", 1)[1] for m in modules)


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


class SessionStarter:
    """Starts the session in a thread of its own, so the replicator plans and copies while the JVM
    comes up (the JVM and its session take seconds); :meth:`get` waits for it."""

    def __init__(self, master: str | None, local_checkpoints: bool) -> None:
        self.master = spark_master(master)
        self._local_checkpoints = local_checkpoints
        self._planners_busy: PlannersEnded | None = None  # what the last try left busy
        self._session: SparkSession | None = None
        self._error: BaseException | None = None
        self._ready = threading.Event()
        threading.Thread(target=self._start, name="spark-session", daemon=True).start()

    def _start(self) -> None:
        try:
            self._session = build_session(self.master, local_checkpoints=self._local_checkpoints)
            wait_for_executors(self._session)
        except BaseException as exc:  # noqa: BLE001 - raised to whoever waits for the session
            self._error = exc
        finally:
            self._ready.set()

    def get(self) -> SparkSession:
        """The session, once started; SparkStartError when it could not be."""
        self._ready.wait()
        if self._session is None:
            raise SparkStartError(f"Spark's session did not start (master {self.master or 'of spark-submit'}): "
                                  f"{type(self._error).__name__}: {self._error}. Check that Java 17 or newer is "
                                  f"installed and the master answers") from self._error
        return self._session

    def ready(self) -> bool:
        """True once the session started (or failed to: :meth:`get` then says why) without waiting."""
        return self._ready.is_set()

    def failed(self) -> bool:
        """True once the session's start failed."""
        return self._ready.is_set() and self._session is None

    def slots(self) -> int:
        """The task slots: a local master's without waiting for the JVM, a cluster's once it is up."""
        return local_slots(self.master) or task_slots(self.get())

    def running_jobs(self) -> int:
        """How many Spark jobs run now (an epoch of each query is one; 0 before the session is up, or
        when Spark does not answer: the planner daemons are then left alone, never the process ended)."""
        if self._session is None:
            return 0
        try:
            return len(self._session.sparkContext.statusTracker().getActiveJobsIds())
        except Exception as exc:  # noqa: BLE001 - a py4j failure here must not end the control loop
            log.warning("Spark's running jobs not read (%s: %s)", type(exc).__name__, exc)
            return 0

    def end_idle_planners(self) -> bool:
        """:func:`end_idle_planners`, once the session is up; False while a planner is busy (try again
        later). A failure is logged, never raised, and counts as done (the daemons then stay: memory,
        not a fault)."""
        if self._session is None:
            return False
        try:
            ended = end_idle_planners(self._session)
        except Exception as exc:  # noqa: BLE001 - Spark's internals differ: keep copying, say so
            log.warning("Spark's idle planner daemons not ended (%s: %s); they hold about 280 MB",
                        type(exc).__name__, exc)
            return True
        if ended.busy:
            if ended != self._planners_busy:  # tried again every control step meanwhile: said once
                log.info("left Spark's busy planner daemons modules=%s", _short(ended.busy))
            self._planners_busy = ended
            return False
        self._planners_busy = None
        if ended.stopped:
            log.info("ended Spark's idle planner daemons modules=%s", _short(ended.stopped))
        return True

    def stop(self) -> None:
        """Stop the session if it started. Its JVM may be gone already: a Ctrl-C in a terminal (or a
        SIGTERM to the process group) stops it with the replicator; that is said, not raised."""
        if self._session is None:
            return
        try:
            self._session.stop()
        except (Py4JError, ConnectionError) as exc:
            log.info("Spark's JVM had already ended at the stop (%s): nothing left to stop", type(exc).__name__)
