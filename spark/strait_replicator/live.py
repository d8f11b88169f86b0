"""Live reports: what a running epoch task has copied so far, shared through the checkpoint folder.

An epoch lasts a minute, but neither the dashboards nor a restarted replicator should wait for it
to end. About every second each task writes one small JSON file (``strait-live/``, beside the stop
file, so on the same storage as the checkpoint) with, per partition, how far the target holds the
records *and their offset syncs* (``acked``) and running totals for the metrics. The driver turns
the totals into metrics while the epoch runs; a task that copies an epoch again (a restart, a
retried task) resumes each partition where an earlier run of the same epoch got to, so a crash
copies again about a second of records instead of a whole epoch.

Files are written to a temporary name and renamed, so a reader sees a whole report or none; a report
that was lost or cannot be read only means more records are copied again, never fewer.
"""

from __future__ import annotations

import json
import logging
import os
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

log = logging.getLogger(__name__)

LIVE_DIR = "strait-live"
_SUFFIX = ".json"

Key = tuple[str, int]


@dataclass(frozen=True)
class PartitionReport:
    """One partition of one task run: it began copying at ``start`` (None: the earliest offset) and
    every record below ``acked`` (-1: none known yet) is on the target with its offset syncs; the
    running totals since ``start``; the records left on the source (-1: unknown)."""

    topic: str
    partition: int
    start: int | None
    acked: int
    records: int
    bytes: int
    syncs: int
    latency_counts: tuple[int, ...]
    latency_sum: float
    lag: int

    @property
    def key(self) -> Key:
        """(topic, partition)."""
        return self.topic, self.partition


@dataclass(frozen=True)
class TaskReport:
    """What one run of one epoch task reported last (``final``: the task ended without error)."""

    epoch: int
    task: str
    written_at: float
    final: bool
    partitions: tuple[PartitionReport, ...]

    def to_json(self) -> str:
        """The report as written to its file."""
        return json.dumps(asdict(self), separators=(",", ":"))

    @staticmethod
    def from_json(text: str) -> TaskReport:
        """The report of a file's text; ValueError, KeyError or TypeError when it is not one."""
        value = json.loads(text)
        parts = tuple(PartitionReport(**{**p, "latency_counts": tuple(p["latency_counts"])})
                      for p in value["partitions"])
        return TaskReport(int(value["epoch"]), str(value["task"]), float(value["written_at"]), bool(value["final"]),
                          parts)


class LiveReporter:
    """Writes the reports of one task run (a fresh id per run, so runs never overwrite each other)."""

    def __init__(self, folder: str | Path, epoch: int) -> None:
        self.folder = Path(folder)
        self.epoch = epoch
        self.task = uuid.uuid4().hex[:12]
        self._failed = False

    @property
    def path(self) -> Path:
        """This run's report file."""
        return self.folder / f"e{self.epoch:012d}-{self.task}{_SUFFIX}"

    def write(self, partitions: Sequence[PartitionReport], final: bool = False) -> None:
        """Replace this run's report; a failure is logged once and never fails the copy."""
        report = TaskReport(self.epoch, self.task, time.time(), final, tuple(partitions))
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            temporary = self.path.with_suffix(".tmp")
            temporary.write_text(report.to_json())
            os.replace(temporary, self.path)
        except OSError as exc:
            if not self._failed:
                log.warning("epoch=%d live report %s not written (metrics lag until the epoch ends, a restart "
                            "copies the epoch again from its start): %s", self.epoch, self.path, exc)
            self._failed = True


def read_reports(folder: str | Path, epoch: int | None = None) -> list[TaskReport]:
    """Every readable report in ``folder`` (only those of ``epoch`` when given), oldest first."""
    folder = Path(folder)
    prefix = "e" if epoch is None else f"e{epoch:012d}-"
    reports = []
    try:
        names = sorted(p for p in folder.iterdir() if p.name.startswith(prefix) and p.name.endswith(_SUFFIX))
    except OSError:
        return []
    for path in names:
        try:
            reports.append(TaskReport.from_json(path.read_text()))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.warning("live report %s skipped: %s", path, exc)
    return sorted(reports, key=lambda r: r.written_at)


def remove_reports(folder: str | Path, before_epoch: int) -> None:
    """Delete the reports (and stray temporary files) of epochs before ``before_epoch``."""
    folder = Path(folder)
    try:
        paths = list(folder.iterdir())
    except OSError:
        return
    for path in paths:
        name = path.name
        if name.startswith("e") and name[1:13].isdigit() and int(name[1:13]) < before_epoch:
            path.unlink(missing_ok=True)


def resume_points(reports: Iterable[TaskReport], starts: Mapping[Key, int]) -> dict[Key, int]:
    """Where each partition of an epoch can go on, given where the epoch started and earlier runs' reports.

    A run covered ``[start, acked)``; runs are chained from the epoch's start, so a partition moves
    only over offsets some run really put on the target (with their syncs). Partitions no run got
    further with keep their start.
    """
    covered: dict[Key, list[tuple[int, int]]] = {}
    for report in reports:
        for part in report.partitions:
            if part.start is not None and part.acked > part.start:
                covered.setdefault(part.key, []).append((part.start, part.acked))
    points = dict(starts)
    for key, spans in covered.items():
        if key not in points:
            continue
        for begin, end in sorted(spans):
            if begin <= points[key] < end:
                points[key] = end
    return points
