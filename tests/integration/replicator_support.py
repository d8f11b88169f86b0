"""Helpers of the replicator tests alone (the suite's shared ones are in tests/support)."""

from __future__ import annotations

import re

import psutil

from strait_lab.services import StraitProcess


def resume_evidence(process: StraitProcess, topic: str) -> list[tuple[str, str]]:
    """(evidence, duplicates bound) of every resume line the process logged for ``topic``."""
    pattern = re.compile(rf"topic={re.escape(topic)} resumes evidence=(\S+) duplicates_at_most=(\S+)")
    return pattern.findall(process.process.log_path.read_text(errors="replace"))


def driver_jvm_pids(process: StraitProcess) -> list[int]:
    """Pids of the replicator's Spark driver JVM (its ``java`` descendants)."""
    assert process.process.pid is not None
    found = []
    for child in psutil.Process(process.process.pid).children(recursive=True):
        try:
            if child.name() == "java":
                found.append(child.pid)
        except psutil.Error:  # ended meanwhile
            continue
    return found
