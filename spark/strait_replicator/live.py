"""Live progress of running epoch tasks, carried by the progress records on the target.

An epoch lasts a minute, but neither the dashboards nor a task that runs an epoch again should wait
for it to end. About every half second each task writes, for each of its partitions that moved, one
progress record to the flow's progress topic on the target (:mod:`strait.progress`): how far the
target holds the records *and their offset syncs*, and, under ``live``, the task run's running
totals for the metrics. Every host that copies reaches the target, so nothing goes through files:

* the driver tails the topic and turns the totals into metrics while the epoch runs
  (:class:`strait_replicator.flow.LiveMetrics`);
* a task that runs an epoch again (a retried task, a replayed epoch after a restart) reads the
  records written since the epoch was planned and resumes each partition where the copies got to
  (:func:`progress_since`; a replayed epoch's planner read them too), so a crash copies again about a
  second of records instead of a whole epoch;
* a stop (or a configuration change) ends the running epoch within about 0.1 s: the driver writes a
  stop record there, which every task watches for (:class:`StopWatch`).

A record that was lost or cannot be read only means more records are copied again, never fewer.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from confluent_kafka import Consumer, TopicPartition

from strait.config.model import SyncsLocation
from strait.progress import OffsetsTopic, Progress

log = logging.getLogger(__name__)

Key = tuple[str, int]
PROGRESS_READ_SECONDS = 10.0


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
class LiveRun:
    """One run of one epoch task (a fresh id per run, so the driver counts each run's totals apart)."""

    epoch: int
    task: str = field(default_factory=lambda: uuid.uuid4().hex[:12])


@dataclass(frozen=True)
class RunReport:
    """What one task run reported last for one partition (``final``: the run ended without error)."""

    epoch: int
    task: str
    written_at: float
    final: bool
    partition: PartitionReport


def live_value(run: LiveRun, report: PartitionReport, final: bool) -> dict[str, Any]:
    """The ``live`` part of a progress record."""
    fields = asdict(report)
    del fields["topic"], fields["partition"], fields["acked"]
    return {"epoch": run.epoch, "task": run.task, "written_at": round(time.time(), 3), "final": final, **fields}


def run_report(key: Key, progress: Progress) -> RunReport | None:
    """The run report a progress record carries, or None (MM2's records, strait's hand-over, garbage)."""
    live = progress.live
    if live is None:
        return None
    try:
        part = PartitionReport(key[0], key[1], live["start"], progress.next_offset, int(live["records"]),
                               int(live["bytes"]), int(live["syncs"]), tuple(int(c) for c in live["latency_counts"]),
                               float(live["latency_sum"]), int(live["lag"]))
        return RunReport(int(live["epoch"]), str(live["task"]), float(live["written_at"]), bool(live["final"]), part)
    except (KeyError, TypeError, ValueError) as exc:
        log.warning("topic=%s partition=%d live progress skipped: %s", key[0], key[1], exc)
        return None


def progress_since(settings: Mapping[str, str], location: SyncsLocation, cluster: str,
                   positions: Mapping[int, int], keys: Sequence[Key]) -> dict[Key, int]:
    """Where the copies of ``keys`` got to according to the progress records written since
    ``positions`` (where the driver had read the progress topic when it planned the epoch).

    The highest position wins: every run starts where the progress stood, so a lower one is an older
    run's. A topic that cannot be read gives nothing (the copy starts where it was planned).
    """
    wanted = set(keys)
    reached: dict[Key, int] = {}

    def note(key: Key, progress: Progress) -> None:
        if key in wanted:
            reached[key] = max(reached.get(key, 0), progress.next_offset)
    reader = OffsetsTopic(settings, location, cluster, start_at=positions, on_record=note)
    try:
        reader.read(PROGRESS_READ_SECONDS)
    except Exception as exc:  # noqa: BLE001 - the planned start is safe, only slower
        log.warning("progress of %s not read, the task starts where its epoch was planned: %s", location.topic, exc)
    finally:
        reader.close()
    return reached


CONTROL = "strait-control"
_CONTROL_PREFIX = json.dumps([CONTROL]).encode()[:-1]  # b'["strait-control"'


def stop_record(flow: str, query: str) -> tuple[bytes, bytes]:
    """Key and value of the record asking the tasks of ``query`` (a running query of ``flow``) to end
    their epoch now; written to the flow's progress topic, which every task's host reaches."""
    return (json.dumps([CONTROL, {"flow": flow}], separators=(",", ":")).encode(),
            json.dumps({"stop": query}, separators=(",", ":")).encode())


class StopWatch:
    """Watches the flow's progress topic, from where the epoch was planned, for a stop of this query.

    One consumer per Python worker serves its tasks one after another (:func:`stop_watch`).
    """

    def __init__(self, settings: Mapping[str, str]) -> None:
        self._consumer = Consumer({**settings, "group.id": "strait-progress", "enable.auto.commit": False,
                                   "enable.auto.offset.store": False, "logger": logging.getLogger("strait.librdkafka")})
        self._key = b""
        self._flow = self._query = ""
        self.stopped = False

    def watch(self, topic: str, positions: Mapping[int, int], flow: str, query: str) -> StopWatch:
        """Watch for a stop of ``query`` written after ``positions``."""
        self._consumer.assign([TopicPartition(topic, p, offset) for p, offset in positions.items()])
        self._key = stop_record(flow, query)[0]
        self._flow, self._query = flow, query
        self.stopped = False
        return self

    def requested(self) -> bool:
        """True once the stop record of the watched query was read (what has arrived, no waiting)."""
        while not self.stopped:
            messages = self._consumer.consume(1000, 0)
            if not messages:
                break
            for message in messages:
                if message.error() is None and message.key() == self._key:
                    self.stopped = stop_named(message.key(), message.value()) == (self._flow, self._query) \
                        or self.stopped
        return self.stopped

    def close(self) -> None:
        """Close the consumer."""
        self._consumer.close()


def stop_named(key: bytes | None, value: bytes | None) -> tuple[str, str] | None:
    """(flow, query) of a stop record, None for any other record of the progress topic."""
    if not key or not value or not key.startswith(_CONTROL_PREFIX):
        return None
    try:
        flow, query = json.loads(key)[1]["flow"], json.loads(value)["stop"]
    except (ValueError, TypeError, KeyError, IndexError):
        return None
    return (flow, query) if isinstance(flow, str) and isinstance(query, str) else None


_watches: dict[tuple[tuple[str, str], ...], StopWatch] = {}


def stop_watch(settings: Mapping[str, str]) -> StopWatch:
    """This worker's stop watch for a cluster's settings."""
    key = tuple(sorted(settings.items()))
    if key not in _watches:
        _watches[key] = StopWatch(settings)
    return _watches[key]
