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
  (:meth:`ProgressLog.since`; a replayed epoch's planner read them too), so a crash copies again about a
  second of records instead of a whole epoch;
* a stop (or a configuration change) ends the running epoch within about 0.1 s: the driver writes a
  stop record there, which every copier watches for (:class:`ControlWatch`).

A record that was lost or cannot be read only means more records are copied again, never fewer.
"""

from __future__ import annotations

import json
import logging
import os
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from strait.config.model import SyncsLocation
from strait.flow_spec import FlowSpec, pairs
from strait.progress import OffsetsTopic, Progress

log = logging.getLogger(__name__)

Key = tuple[str, int]
PROGRESS_READ_SECONDS = 10.0
# Exactly once, the progress must be read to its high watermark: past the copiers' open transactions,
# which commit within milliseconds; a dead copier's is fenced by its claimant (the claimant fences every
# lapsed holder of the flow first), else the broker aborts it after its timeout and its 10 s abort check.
STRICT_READ_SECONDS = 45.0
WATCH_FETCH_WAIT_MS = 100  # a copier reads its control records this often at least


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


@dataclass(frozen=True)
class ProgressLog:
    """A flow's progress topic on the target: every reading of it (the planner's and the live
    metrics' reader, what a copier taking partitions over reads, the copiers' watch of the control
    records) and the stop record. The progress records themselves are written by the copy loop's
    :class:`~strait_replicator.writer.ProgressWriter`, the holds by each copier. Hashable: the
    planner keeps one reader per progress log."""

    flow: str
    source_alias: str
    target_alias: str
    topic: str
    consumer: tuple[tuple[str, str], ...]  # librdkafka settings of a consumer on the target

    def __post_init__(self) -> None:
        object.__setattr__(self, "consumer", pairs(self.consumer))

    @staticmethod
    def of(spec: FlowSpec) -> ProgressLog | None:
        """The progress log of a flow (None when its copies write no progress)."""
        if spec.progress is None:
            return None
        return ProgressLog(spec.flow, spec.source_alias, spec.target_alias, spec.progress.topic, spec.target_consumer)

    @property
    def location(self) -> SyncsLocation:
        """The topic and the cluster it is on."""
        return SyncsLocation(self.target_alias, self.topic)

    def reader(self, start_at: Mapping[int, int] | str = "beginning",
               on_record: Callable[[Key, Progress], None] | None = None,
               on_raw: Callable[[bytes | None, bytes | None, int], None] | None = None) -> OffsetsTopic:
        """A reader of the progress records of this flow's source (:class:`~strait.progress.OffsetsTopic`)."""
        return OffsetsTopic(dict(self.consumer), self.location, self.source_alias, start_at=start_at,
                            on_record=on_record, on_raw=on_raw)

    def since(self, positions: Mapping[int, int], keys: Sequence[Key], strict: bool = False) -> dict[Key, int]:
        """Where the copies of ``keys`` got to according to the progress records written since
        ``positions`` (where the driver had read the topic when it planned the epoch).

        The highest position wins: every run starts where the progress stood, so a lower one is an
        older run's. A topic that cannot be read gives nothing (the copy starts where it was planned),
        unless ``strict`` (exactly once: a start short of the committed progress would copy records
        twice): it is then read for up to STRICT_READ_SECONDS, and a ResumeError raised if it cannot be.
        """
        wanted = set(keys)
        reached: dict[Key, int] = {}

        def note(key: Key, progress: Progress) -> None:
            if key in wanted:
                reached[key] = max(reached.get(key, 0), progress.next_offset)
        reader = self.reader(start_at=positions, on_record=note)
        try:
            # strict: up to the high watermark, past every transaction open now (a read_committed
            # reader's own end is the last stable offset: progress committed after an open one is beyond it)
            reader.read(STRICT_READ_SECONDS if strict else PROGRESS_READ_SECONDS,
                        until=self.high_watermarks() if strict else None)
        except Exception as exc:  # noqa: BLE001 - the planned start is safe, only slower
            if strict:
                raise
            log.warning("progress of %s not read, the task starts where its epoch was planned: %s", self.topic, exc)
        finally:
            reader.close()
        return reached

    def high_watermarks(self) -> dict[int, int]:
        """Each partition's high watermark (what a read_uncommitted reader sees: open transactions too)."""
        consumer = Consumer({**dict(self.consumer), "group.id": "strait-progress",
                             "isolation.level": "read_uncommitted", "logger": logging.getLogger("strait.librdkafka")})
        try:
            metadata = consumer.list_topics(self.topic, timeout=PROGRESS_READ_SECONDS).topics.get(self.topic)
            if metadata is None or metadata.error is not None:
                return {}
            return {p: consumer.get_watermark_offsets(TopicPartition(self.topic, p), timeout=PROGRESS_READ_SECONDS)[1]
                    for p in metadata.partitions}
        finally:
            consumer.close()

    def watch(self, positions: Mapping[int, int]) -> ControlWatch:
        """A watch of the control records from ``positions`` on (one per copier)."""
        return ControlWatch(dict(self.consumer), self.topic, positions)

    def write_stop(self, producer_settings: Mapping[str, str], query: str, timeout: float) -> bool:
        """Write the stop record of ``query``; False when the target did not acknowledge it in time."""
        key, value = stop_record(self.flow, query)
        producer = Producer({**producer_settings, "logger": logging.getLogger("strait.librdkafka")})
        producer.produce(self.topic, key=key, value=value, partition=0)
        return producer.flush(timeout) == 0


CONTROL = "strait-control"
_CONTROL_PREFIX = json.dumps([CONTROL]).encode()[:-1]  # b'["strait-control"'


def stop_record(flow: str, query: str) -> tuple[bytes, bytes]:
    """Key and value of the record asking the tasks of ``query`` (a running query of ``flow``) to end
    their epoch now; written to the flow's progress topic, which every task's host reaches."""
    return (json.dumps([CONTROL, {"flow": flow}], separators=(",", ":")).encode(),
            json.dumps({"stop": query}, separators=(",", ":")).encode())


class ControlRecords:
    """What the control records in a progress topic said, as far as they were read: the queries
    asked to stop, the newest hold of each copier not released, the copiers released (copier ids
    are unique across flows)."""

    def __init__(self) -> None:
        self._stops: set[tuple[str, str]] = set()  # (flow, query)
        self._holds: dict[str, Hold] = {}
        self.released: set[str] = set()

    def note(self, key: bytes | None, value: bytes | None, offset: int) -> None:
        """Take one record of the progress topic into account (any other record is ignored)."""
        stop = stop_named(key, value)
        if stop is not None:
            self._stops.add(stop)
            return
        held = hold_named(key, value, offset)
        if held is None:
            return
        _flow, copier, hold = held
        if hold is None:
            self._holds.pop(copier, None)
            self.released.add(copier)
        else:
            self._holds[copier] = hold

    def stopped(self, flow: str, query: str) -> bool:
        """Whether a stop of ``query`` of ``flow`` was read."""
        return (flow, query) in self._stops

    def holds_of(self, flow: str) -> dict[str, Hold]:
        """The newest hold of each copier of ``flow`` not released, by copier."""
        return {copier: hold for copier, hold in self._holds.items() if hold.flow == flow}


class ControlWatch:
    """Reads the control records of a progress topic from given positions on into :attr:`control`
    (the stops of queries, the copiers' holds and releases). One per copier; not thread-safe."""

    def __init__(self, settings: Mapping[str, str], topic: str, positions: Mapping[int, int]) -> None:
        # Control records are never in a transaction, but exactly-once copiers' progress records beside
        # them are: read_committed would hold every claim and release back behind a dead copier's open one.
        self._consumer = Consumer({**settings, "group.id": "strait-progress", "enable.auto.commit": False,
                                   "enable.auto.offset.store": False, "fetch.wait.max.ms": WATCH_FETCH_WAIT_MS,
                                   "isolation.level": "read_uncommitted",
                                   "logger": logging.getLogger("strait.librdkafka")})
        # Where nobody read the topic (it was not there yet), the watch reads all of it: partition 0
        # holds the control records.
        positions = dict(positions) or {0: OFFSET_BEGINNING}
        self._consumer.assign([TopicPartition(topic, p, offset) for p, offset in positions.items()])
        self.topic = topic
        self.read_to = {p: max(0, offset) for p, offset in positions.items()}  # the next offset to read
        self.control = ControlRecords()

    def poll(self) -> None:
        """Read what has arrived (no waiting)."""
        while True:
            messages = self._consumer.consume(1000, 0)
            if not messages:
                return
            for message in messages:
                if message.error() is None:
                    self.read_to[message.partition()] = message.offset() + 1
                    self.control.note(message.key(), message.value(), message.offset())

    def read_past(self, partition: int, offset: int) -> bool:
        """Whether everything up to ``offset`` of ``partition`` was read (reading what has arrived)."""
        self.poll()
        if self.read_to.get(partition, 0) > offset:
            return True
        # past a transaction marker, which no message shows
        position = self._consumer.position([TopicPartition(self.topic, partition)])[0].offset
        return position > offset

    def close(self) -> None:
        """Close the consumer."""
        self._consumer.close()


@dataclass(frozen=True)
class Hold:
    """What a copier's hold record says: copier ``copier`` of ``flow`` copies ``partitions`` for
    ``query``; it writes nothing after ``fence_at`` (wall clock: its lease's end plus its producer's
    message timeout) unless it writes a newer hold. ``since`` is its claim's offset in the progress
    topic: a newer claim (a higher one) on one of its partitions makes it stop and release them.
    ``process`` names the process it runs in (:func:`process_identity`)."""

    flow: str
    copier: str
    partitions: frozenset[Key]
    query: str
    since: int
    fence_at: float
    process: str = ""


def hold_record(hold: Hold) -> tuple[bytes, bytes]:
    """Key and value of a copier's hold record (a claim when ``since`` is -1: its own offset then)."""
    return (_hold_key(hold.flow, hold.copier),
            json.dumps({"hold": sorted([t, p] for t, p in hold.partitions), "query": hold.query, "since": hold.since,
                        "fence_at": round(hold.fence_at, 3), "process": hold.process},
                       separators=(",", ":")).encode())


def release_record(flow: str, copier: str) -> tuple[bytes, None]:
    """Key and value (a tombstone) of the record a copier writes once it copies no more."""
    return _hold_key(flow, copier), None


def _hold_key(flow: str, copier: str) -> bytes:
    return json.dumps([CONTROL, {"flow": flow, "copier": copier}], separators=(",", ":")).encode()


def hold_named(key: bytes | None, value: bytes | None, offset: int) -> tuple[str, str, Hold | None] | None:
    """(flow, copier, its hold or None once released) of a hold or release record at ``offset``; None
    for any other record."""
    if not key or not key.startswith(_CONTROL_PREFIX):
        return None
    try:
        where = json.loads(key)[1]
        flow, copier = where["flow"], where["copier"]
        if value is None:
            return flow, copier, None
        fields = json.loads(value)
        since = int(fields["since"])
        return flow, copier, Hold(flow, copier, frozenset((str(t), int(p)) for t, p in fields["hold"]),
                                  str(fields["query"]), since if since >= 0 else offset,
                                  float(fields["fence_at"]), str(fields.get("process", "")))
    except (ValueError, TypeError, KeyError, IndexError):
        return None


def process_identity(pid: int | None = None) -> str:
    """This machine's boot, PID namespace, a process's pid and start time: equal only for the same
    living process ("" where /proc does not tell)."""
    pid = os.getpid() if pid is None else pid
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as boot:
            machine = boot.read().strip()
        namespace = os.readlink("/proc/self/ns/pid")
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            started = stat.read().rsplit(")", 1)[1].split()[19]
    except OSError:
        return ""
    return f"{machine}/{namespace}/{pid}/{started}"


def process_gone(identity: str) -> bool:
    """True when ``identity`` names a process of this machine and PID namespace that no longer runs;
    False when it runs, or when where it runs cannot be seen from here."""
    mine = process_identity()
    if not identity or not mine:
        return False
    machine, namespace, pid, _started = identity.split("/", 3)
    if mine.split("/", 2)[:2] != [machine, namespace]:
        return False
    return process_identity(int(pid)) != identity


def stop_named(key: bytes | None, value: bytes | None) -> tuple[str, str] | None:
    """(flow, query) of a stop record, None for any other record of the progress topic."""
    if not key or not value or not key.startswith(_CONTROL_PREFIX):
        return None
    try:
        flow, query = json.loads(key)[1]["flow"], json.loads(value)["stop"]
    except (ValueError, TypeError, KeyError, IndexError):
        return None
    return (flow, query) if isinstance(flow, str) and isinstance(query, str) else None


