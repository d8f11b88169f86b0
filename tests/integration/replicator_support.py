"""Helpers of the replicator tests alone (the suite's shared ones are in tests/support)."""

from __future__ import annotations

import re

from strait_lab.services import StraitProcess


def resume_evidence(process: StraitProcess, topic: str) -> list[tuple[str, str]]:
    """(evidence, duplicates bound) of every resume line the process logged for ``topic``."""
    pattern = re.compile(rf"topic={re.escape(topic)} resumes evidence=(\S+) duplicates_at_most=(\S+)")
    return pattern.findall(process.process.log_path.read_text(errors="replace"))
