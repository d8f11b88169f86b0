"""The JVMs tests start (brokers, Spark drivers, MirrorMaker 2) compile with C1 only.

Measured on the 2-core machine (two 1-broker clusters, a replicator copying its first 1,000
records; 2 runs each): 13.7-14.9 CPU-seconds with the default tiered JIT, 7.6-8.6 with C1 only,
and the first records copied 2 s sooner. Most test JVMs live for a minute at low traffic, where C2
only costs compile time. The short fault drills too: their stalls are judged against a direct
producer's in the same run, and under C2's compiling the six brokers starved the 2-core machine (a
broker's restart to ready 23-37 s instead of 6-7, the drills 615 s instead of 462). The full drills
(`make test-faults`) keep the default JIT (:func:`default_jit`), as do production, the lab and `make bench`.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

from strait_lab import class_archive

# Read by every `java` launcher (JDK 9+), Spark's spark-class and Kafka's scripts included.
JVM_OPTIONS_VARIABLE = "JDK_JAVA_OPTIONS"
TEST_JVM_OPTIONS = "-XX:TieredStopAtLevel=1"


def use_quick_jvms() -> None:
    """Make JVMs started from now on compile with C1 only (unless the variable is set already), and
    Spark drivers map the class archive `make deps` recorded (strait_lab.class_archive)."""
    os.environ.setdefault(JVM_OPTIONS_VARIABLE, TEST_JVM_OPTIONS)
    for name, value in class_archive.spark_archive_env().items():
        os.environ.setdefault(name, value)


@contextmanager
def default_jit() -> Iterator[None]:
    """JVMs started inside the block use the default JIT (timed drills)."""
    saved = os.environ.pop(JVM_OPTIONS_VARIABLE, None)
    try:
        yield
    finally:
        if saved is not None:
            os.environ[JVM_OPTIONS_VARIABLE] = saved
