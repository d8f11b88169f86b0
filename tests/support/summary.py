"""Sections printed at the end of a test run (the fault drills' table, how the compose lab booted).

A test or fixture writes its section to a file; the run's terminal summary prints every section
written since the run began. Files, not pytest's stash: under pytest-xdist the section is written in
a worker and printed by the controller.
"""

from __future__ import annotations

from pathlib import Path

from strait.paths import cache_dir

SUMMARY_DIR = cache_dir() / "test-summaries"


def add_summary(title: str, lines: list[str]) -> Path:
    """Write (or replace) the section ``title`` for this run's closing summary."""
    SUMMARY_DIR.mkdir(parents=True, exist_ok=True)
    path = SUMMARY_DIR / f"{title}.txt"
    path.write_text("\n".join(lines) + "\n")
    return path


def summaries_since(began: float) -> list[tuple[str, list[str]]]:
    """(title, lines) of every section written at or after ``began`` (a ``time.time()``)."""
    if not SUMMARY_DIR.is_dir():
        return []
    return [(path.stem, path.read_text().splitlines()) for path in sorted(SUMMARY_DIR.glob("*.txt"))
            if path.stat().st_mtime >= began]
