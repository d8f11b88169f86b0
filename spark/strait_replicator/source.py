"""The streaming source of a flow: Spark schedules epochs, its tasks copy partitions live.

Spark's own Kafka source hands every record through the JVM and Arrow to Python, which profiling
showed to cap a flow below what one librdkafka consumer and producer do in a Python worker; and a
micro-batch per few hundred records puts Spark's fixed cost per batch (planning, two checkpoint
writes, task launch) into every record's latency. Here each micro-batch is an *epoch*: its tasks
copy their partitions live, record by record as they arrive, for a minute
(:func:`strait_replicator.writer.copy_ranges`). Spark keeps what it is good at: the write-ahead
offsets log in the checkpoint, task scheduling on local cores or a cluster, one running task per
partition at a time, and replay of a failed epoch.

An epoch's entry in the offsets log holds where each partition starts (``from``) and the source's
end offsets when it was planned (``until``). Where a partition's copy got to lives on the target:
the tasks write each partition's progress there (:mod:`strait.progress`), and every epoch, a
replayed one too, starts each partition where its progress says; a partition without progress
starts where the query's evidence decided (``SourcePlan.resume``). A task that copies an epoch
again resumes each partition where the progress written since the epoch was planned says, and every
task ends its epoch early on a stop record (:mod:`strait_replicator.live`). What lives where is
:mod:`strait_replicator.state`'s to say.
"""

from __future__ import annotations

import base64
import itertools
import logging
import pickle
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from confluent_kafka import IsolationLevel, TopicPartition
from pyspark import TaskContext
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

from strait.config.model import SyncsLocation
from strait.kafka.admin import KafkaRetriableError, RenewableAdmin, list_offsets_per_leader
from strait.logs import setup_logging
from strait.progress import OffsetsTopic, ResumeError, keys_of
from strait.retry import is_transient, retry_transient
from strait_replicator.live import LiveRun, progress_since, stop_named, stop_watch
from strait_replicator.state import CheckpointFormatError, EpochOffsets, Offsets, TopicPartitionKey
from strait_replicator.writer import SUMMARY_SCHEMA, CopyRange, EpochLimits, WriterSettings, copy_ranges

log = logging.getLogger(__name__)

FORMAT = "strait_copy"
# Spark redacts option values whose key matches its redaction pattern ("secret"): the plan holds
# cluster credentials.
PLAN_OPTION = "strait.secret.plan"
# A leader that does not answer (a frozen broker) is given up on after this long and asked again
# through fresh metadata, where it may have moved.
LIST_TIMEOUT = 10.0
# The source's leaders are asked for their ends at every change of epochs, while nothing is copied:
# one that does not answer this soon is not waited for then (SourcePlan's reader, _source_ends).
QUICK_LIST_SECONDS = 0.5
STOP_READ_SECONDS = 2.0  # how long the planner reads the progress topic for a stop before planning
# A rate-limited flow runs one task per this many records/s: the limit is split evenly over tasks.
RECORDS_PER_SECOND_PER_TASK = 50_000
# A backlog a task copies in about a second: below it, tasks keep their partitions from epoch to epoch.
SMALL_BACKLOG = 50_000



@dataclass(frozen=True)
class SourcePlan:
    """What the stream needs: the partitions to copy, the epoch's limits, the task count, the copy settings."""

    partitions: tuple[tuple[str, int], ...]  # (source topic, partition count)
    source_admin: tuple[tuple[str, str], ...]  # librdkafka settings of an admin client on the source
    tasks: int
    checkpoint: str  # the query's Spark checkpoint (named in messages; read by the driver only)
    writer: WriterSettings
    epoch_seconds: float
    max_records_per_epoch: int
    records_per_second: float = 0.0  # 0: no limit
    resume: tuple[tuple[tuple[str, int], int], ...] = ()  # where each partition starts when it has no progress
    progress: tuple[tuple[tuple[str, str], ...], str] | None = None  # target consumer settings, progress topic
    query: str = ""  # this run of the flow's query: what a stop record names
    # where the target holds every record below, from the evidence when the query started: no epoch,
    # a replayed one neither, starts a partition below it until its progress is seen
    on_target: tuple[tuple[tuple[str, int], int], ...] = ()
    last_epoch: EpochOffsets | None = None  # the newest epoch in the checkpoint when the query started

    def encode(self) -> str:
        """The plan as a data source option value."""
        return base64.b64encode(pickle.dumps(self)).decode("ascii")

    @staticmethod
    def decode(text: str) -> SourcePlan:
        """The plan of a data source option value."""
        return pickle.loads(base64.b64decode(text))

    def keys(self) -> list[TopicPartitionKey]:
        """Every source partition of the plan."""
        return keys_of(self.partitions)


@dataclass(frozen=True)
class CopyTask(InputPartition):  # type: ignore[misc]
    """One Spark task: the partitions it copies live in this epoch, and when the epoch ends."""

    epoch: int
    ranges: tuple[CopyRange, ...]
    limits: EpochLimits
    progress_from: tuple[tuple[int, int], ...] = ()  # where the driver had read the progress topic
    replayed: bool = False  # an epoch planned before this query started, run again


class CopySource(DataSource):  # type: ignore[misc]
    """``spark.readStream.format("strait_copy")``: a flow's source partitions, copied by the tasks."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> str:
        return SUMMARY_SCHEMA

    def streamReader(self, schema: Any) -> CopyStreamReader:
        return CopyStreamReader(SourcePlan.decode(self.options[PLAN_OPTION]))


class CopyStreamReader(DataSourceStreamReader):  # type: ignore[misc]
    """Plans each epoch: where its partitions start (the previous epoch's progress) and its tasks."""

    def __init__(self, plan: SourcePlan) -> None:
        self.plan = plan
        self._last = plan.last_epoch  # the newest epoch planned or run (Spark asks for the next once it is committed)
        self._planned = -1  # the newest epoch this reader planned itself
        self._planned_starts: Offsets = {}  # where that epoch's partitions start (read from the progress then)
        self._ends_unknown = False  # the last epoch was planned without the source's ends
        self._floor = dict(plan.on_target)  # the copy evidence of partitions whose progress was not seen yet

    def initialOffset(self) -> dict[str, Any]:
        return EpochOffsets(-1, dict(self.plan.resume)).to_json()

    def latestOffset(self) -> dict[str, Any]:
        last = self._last or EpochOffsets.from_json(self.initialOffset())
        if self._stop_requested():  # the same offset: Spark starts no new epoch
            return last.to_json()
        start = self._starting_points({**dict(self.plan.resume), **last.start})
        until = self._source_ends(last)
        if not until:  # the flow stops, or every planned topic is gone: no epoch until it is planned again
            return last.to_json()
        # A partition whose leader is not known at this moment (a broker just died) lists no end
        # (-1001); its task copies it live all the same, from where it starts, and its end is the
        # last one known.
        until = {key: end if end >= 0 else max(0, start.get(key, 0), last.until.get(key, 0))
                 for key, end in until.items()}
        self._last = EpochOffsets(last.epoch + 1, start, until)
        self._planned, self._planned_starts = self._last.epoch, start
        return self._last.to_json()

    def _source_ends(self, last: EpochOffsets) -> Offsets | None:
        """The source's end offsets for the next epoch.

        Nothing is copied while an epoch is planned. When the leaders do not answer one quick try
        (QUICK_LIST_SECONDS per request: one moving or restarting), an epoch that follows one this
        reader planned on listed ends starts on those (no end known now, :meth:`latestOffset`); the
        next change of epochs waits for the leaders, however long, as a query's first one does.
        """
        if last.until and last.epoch == self._planned and not self._ends_unknown:
            ends = self._list("latest", wait=False)
            # a leader that did not answer in time: its partitions' ends are waited for next time
            self._ends_unknown = ends is None or any(end < 0 for end in ends.values())
            if ends is not None:
                return ends
            log.info("flow=%s cluster=%s no end offsets in %.1fs: the epoch starts on the last epoch's",
                     self.plan.writer.flow, self.plan.writer.source_alias, QUICK_LIST_SECONDS)
            return {key: -1 for key in last.until}
        self._ends_unknown = False
        return self._list("latest")

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[CopyTask]:
        try:
            epoch = EpochOffsets.from_json(end)
        except CheckpointFormatError as exc:
            raise CheckpointFormatError(
                f"flow {self.plan.writer.flow}: the checkpoint {self.plan.checkpoint} was written by an older strait: "
                f"{exc}. Move that folder away and start again: the flow then copies its topics from their "
                f"earliest offsets (records already on the target are copied again, none is lost)") from exc
        if self._last is None or epoch.epoch >= self._last.epoch:
            self._last = epoch
        # An epoch planned just now starts where the progress said then: no copy ran since. A replayed
        # one (planned before this query started, run again) goes on where the copies got to.
        replayed = epoch.epoch != self._planned
        starts = self._starting_points(epoch.start) if replayed else self._planned_starts
        moved = sorted((key, at) for key, at in starts.items() if key in epoch.start and at != epoch.start[key])
        if moved and replayed:
            setup_logging()  # this runs in a Python worker of the driver's: its lines go to the driver's stderr
            for (topic, p), at in moved:
                log.info("flow=%s epoch=%d topic=%s partition=%d resumes at offset %d: the progress or the resume "
                         "evidence on the target (the epoch started at %d)", self.plan.writer.flow, epoch.epoch, topic, p, at,
                         epoch.start[(topic, p)])
        ranges = [CopyRange(topic, p, starts[(topic, p)]) for topic, p in self.plan.keys()
                  if (topic, p) in starts and (topic, p) in epoch.until]
        groups = assign_partitions(ranges, epoch.until, self._task_count(len(ranges)))
        seconds = self.plan.epoch_seconds
        limits = EpochLimits(
            seconds=seconds,
            max_records=max(1, self.plan.max_records_per_epoch // max(1, len(groups))),
            records_per_second=self.plan.records_per_second / max(1, len(groups)),
            # a stop read while planning comes before where the tasks watch from: they end at once
            ends_at=time.time() + (0.0 if self._stop_requested(read=False) else seconds),
        )
        read_to = tuple(sorted(self._progress_reader().positions.items())) if self.plan.progress else ()
        return [CopyTask(epoch.epoch, tuple(group), limits, read_to, replayed) for group in groups]

    def read(self, partition: CopyTask) -> Iterator[tuple[Any, ...]]:
        ranges = resumed_ranges(partition, self._progress_since(partition), self.plan.writer.flow)
        yield from copy_ranges(ranges, self.plan.writer, partition.limits, LiveRun(partition.epoch),
                               stop=self._stop_watch(partition))

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to do: the progress lives on the target, beside the copies."""

    def _starting_points(self, planned: Offsets) -> Offsets:
        """``planned`` moved on to where the copies got to: each partition's progress on the target;
        for a partition without progress yet, no lower than where the query's copy evidence says the
        target holds every record."""
        progress = self._progress()
        for key in progress:  # from now on its progress says (a topic re-created starts lower)
            self._floor.pop(key, None)
        return {**{key: max(at, self._floor.get(key, at)) for key, at in planned.items()}, **progress}

    def _stop_requested(self, read: bool = True) -> bool:
        """Whether the progress topic holds a stop of this query, read to its end first with ``read``
        (a target that does not answer in time gives what was read before)."""
        if self.plan.progress is None or not self.plan.query:
            return False
        if read and (self.plan.writer.flow, self.plan.query) not in _stops_read:
            try:
                self._progress_reader().read(STOP_READ_SECONDS)
            except ResumeError as exc:
                log.warning("flow=%s stop requests not read: %s", self.plan.writer.flow, exc)
        return (self.plan.writer.flow, self.plan.query) in _stops_read

    def _progress_reader(self) -> OffsetsTopic:
        """This process's reader of the flow's progress topic (read on from where it got to)."""
        assert self.plan.progress is not None
        reader = _progress_readers.get(self.plan.progress)
        if reader is None:
            settings, topic = self.plan.progress
            location = SyncsLocation(self.plan.writer.target_alias, topic)
            reader = _progress_readers[self.plan.progress] = OffsetsTopic(
                dict(settings), location, self.plan.writer.source_alias, on_raw=_note_stop)
        return reader

    def _progress_since(self, task: CopyTask) -> Offsets:
        """Where the copies of the task's partitions got to since its epoch was planned; read on the
        worker, from the target, by a retried task (its earlier attempt may have copied on) and by a
        replayed epoch's tasks (a copy of the query before may still be ending). The first attempt of
        a task of an epoch planned just now starts where the planner read the progress moments
        before: reading again would hold up every change of epochs for nothing."""
        if self.plan.progress is None or not task.progress_from or (not task.replayed and _first_attempt()):
            return {}
        settings, topic = self.plan.progress
        return progress_since(dict(settings), SyncsLocation(self.plan.writer.target_alias, topic),
                              self.plan.writer.source_alias, dict(task.progress_from),
                              [(r.topic, r.partition) for r in task.ranges])

    def _stop_watch(self, task: CopyTask) -> Callable[[], bool] | None:
        """What tells the task a stop was requested: the stop record in the progress topic."""
        if self.plan.progress is None or not task.progress_from or not self.plan.query:
            return None
        settings, topic = self.plan.progress
        return stop_watch(dict(settings)).watch(topic, dict(task.progress_from), self.plan.writer.flow,
                                                self.plan.query).requested

    def _progress(self) -> Offsets:
        """Each planned partition's progress on the target; none when it cannot be read now (the copy
        then starts where the epoch says: records may be copied again, none is skipped)."""
        if self.plan.progress is None:
            return {}
        reader = self._progress_reader()
        try:
            found = reader.read(LIST_TIMEOUT)
        except ResumeError as exc:
            if not reader.read_through:  # part of an old log: older positions than the query's evidence
                log.warning("flow=%s progress not read, epochs start where the last one did: %s",
                            self.plan.writer.flow, exc)
                return {}
            log.warning("flow=%s progress not read to its end, epochs start where it was read to before: %s",
                        self.plan.writer.flow, exc)
            found = reader.progress
        return {key: found[key].next_offset for key in self.plan.keys() if key in found}

    def _task_count(self, partitions: int) -> int:
        tasks = min(self.plan.tasks, partitions)
        if self.plan.records_per_second:
            tasks = min(tasks, -(-int(self.plan.records_per_second) // RECORDS_PER_SECOND_PER_TASK))
        return max(1, tasks) if partitions else 0

    def _list(self, which: str, only: Sequence[TopicPartitionKey] | None = None, wait: bool = True) -> Offsets | None:
        """The earliest or latest offset of each partition of the plan; a deleted topic is left out.

        A leader moving or a broker restarting is retried promptly with a new admin client (fresh
        metadata) for as long as it lasts, so the query never dies of it; None once the flow stops.
        Without ``wait``: one try of QUICK_LIST_SECONDS, None when it fails that way.
        """
        isolation = IsolationLevel.READ_UNCOMMITTED \
            if self.plan.writer.source_consumer.get("isolation.level") == "read_uncommitted" \
            else IsolationLevel.READ_COMMITTED
        alias = self.plan.writer.source_alias
        admin = cached_admin(self.plan.source_admin)
        partitions = [TopicPartition(t, p) for t, p in (only if only is not None else self.plan.keys())]
        def listed() -> Offsets:
            offsets = list_offsets_per_leader(admin.get(), alias, partitions, which, isolation,
                                              timeout=LIST_TIMEOUT if wait else QUICK_LIST_SECONDS,
                                              grace=1.0 if wait else QUICK_LIST_SECONDS / 2)
            unknown = sorted(key for key, offset in offsets.items() if offset < 0)
            if unknown and which == "earliest":  # where a new partition starts must be known
                raise KafkaRetriableError(f"cluster {alias}: no earliest offset of {unknown[0][0]}[{unknown[0][1]}] "
                                          f"yet (its leader is moving)")
            if unknown:
                log.info("flow=%s cluster=%s partitions=%s no leader answered: planned from where they start",
                         self.plan.writer.flow, alias, ",".join(f"{t}[{p}]" for t, p in unknown))
            return offsets

        if not wait:
            try:
                return listed()
            except Exception as exc:  # noqa: BLE001 - a transient one is given up on, any other raised
                if not is_transient(exc):
                    raise
                admin.renew()
                return None
        tries = itertools.count()  # the stop was read just before planning: read again only on a retry
        return retry_transient(listed, f"flow={self.plan.writer.flow} listing {which} offsets",
                               lambda: self._stop_requested(read=next(tries) > 0), on_failure=admin.renew)


_admins: dict[tuple[tuple[str, str], ...], RenewableAdmin] = {}
# (flow, query) of every stop record the planner's progress readers read
_stops_read: set[tuple[str, str]] = set()


def _note_stop(key: bytes | None, value: bytes | None) -> None:
    stop = stop_named(key, value)
    if stop is not None:
        _stops_read.add(stop)
# One reader of a progress topic per driver-side process, read on from where it got to at each epoch.
_progress_readers: dict[tuple[tuple[tuple[str, str], ...], str], OffsetsTopic] = {}


def _first_attempt() -> bool:
    """True in the first attempt of a task; False outside a task."""
    context = TaskContext.get()
    return context is not None and context.attemptNumber() == 0


def cached_admin(config: tuple[tuple[str, str], ...]) -> RenewableAdmin:
    """One admin client per source configuration per driver process (the reader's and the driver's),
    replaced after a transient error."""
    if config not in _admins:
        _admins[config] = RenewableAdmin(dict(config))
    return _admins[config]


def resumed_ranges(task: CopyTask, progress: Offsets, flow: str) -> list[CopyRange]:
    """The task's ranges, each starting where the progress written since its epoch was planned says
    the copies got to, when that is further."""
    starts = {(r.topic, r.partition): r.start for r in task.ranges if r.start is not None}
    points = {key: max(start, progress.get(key, start)) for key, start in starts.items()}
    moved = {key: offset for key, offset in points.items() if offset != starts[key]}
    if moved:
        setup_logging()  # a Python worker's first task: its lines go to the worker's stderr
        for (topic, partition), offset in sorted(moved.items()):
            log.info("flow=%s epoch=%d topic=%s partition=%d resumes at offset %d: the progress on the target "
                     "(planned at %d)", flow, task.epoch, topic, partition, offset, starts[(topic, partition)])
    return [CopyRange(r.topic, r.partition, points.get((r.topic, r.partition), r.start), r.end) for r in task.ranges]


def assign_partitions(ranges: list[CopyRange], until: Offsets, tasks: int) -> list[list[CopyRange]]:
    """The partitions in ``tasks`` groups.

    Keeping up (no partition's backlog reaches SMALL_BACKLOG), the groups are the same every epoch:
    partitions dealt out in name order, so a worker's consumer, left assigned, usually goes on with
    the same partitions. Catching up, groups have about equal backlog (then equal count), largest first.
    """
    if not ranges or tasks <= 0:
        return []
    groups: list[list[CopyRange]] = [[] for _ in range(min(tasks, len(ranges)))]

    def backlog(copy: CopyRange) -> int:
        return max(0, until.get((copy.topic, copy.partition), 0) - (copy.start or 0))
    if all(backlog(r) < SMALL_BACKLOG for r in ranges):
        for i, copy in enumerate(sorted(ranges, key=lambda r: (r.topic, r.partition))):
            groups[i % len(groups)].append(copy)
        return groups
    loads = [(0, 0)] * len(groups)
    for copy in sorted(ranges, key=lambda r: (-backlog(r), r.topic, r.partition)):
        lightest = loads.index(min(loads))
        groups[lightest].append(copy)
        loads[lightest] = (loads[lightest][0] + backlog(copy), loads[lightest][1] + 1)
    return groups
