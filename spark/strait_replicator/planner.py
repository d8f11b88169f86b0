"""The epoch planner of a flow's query: where each partition starts, and which task copies which.

A plain object (epoch in, next epoch and task groups out): the Spark data source
(:mod:`strait_replicator.source`) is a thin adapter around it, and it reads the clusters only
through :class:`EpochSources`, so its rules are tested without clusters or Spark.

An epoch's entry in the offsets log holds where each partition starts (``from``) and the source's
end offsets when it was planned (``until``). Each epoch, a replayed one too, starts each partition
where its progress on the target says; a partition without progress starts where the query's
evidence decided (``SourcePlan.resume``), never below where that evidence says the target holds
every record (``SourcePlan.on_target``).
"""

from __future__ import annotations

import base64
import logging
import math
import pickle
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from pyspark.sql.datasource import InputPartition

from strait.flow_spec import FlowSpec
from strait.logs import log_first, setup_logging
from strait.progress import keys_of
from strait_replicator.live import Hold, ProgressLog
from strait_replicator.state import CheckpointFormatError, EpochOffsets, Offsets, TopicPartitionKey
from strait_replicator.writer import CopyRange, EpochLimits

log = logging.getLogger(__name__)

# A rate-limited flow runs one task per this many records/s: the limit is split evenly over tasks.
RECORDS_PER_SECOND_PER_TASK = 50_000
# A backlog a task copies in about a second: below it, tasks keep their partitions from epoch to epoch.
SMALL_BACKLOG = 50_000
# A copier waits for the next epoch's task at least this many times as long as planning the last epoch
# took (10,000 partitions: 22 s on 2 busy cores, and the copiers' 20 s wait ran out between epochs).
LINGER_PER_PLANNING_SECOND = 3.0
# ... and at least this many times as long as the next tasks took to come last time: from the previous epoch's
# end (for the first epoch, from when the driver made the plan) to its tasks. 10,000 partitions: the second
# epoch's tasks came 44-50 s after the first ended, while its copiers waited 20 s and stopped; the first
# tasks came 71 s after the plan was made.
LINGER_PER_TURNAROUND_SECOND = 1.5
# A wide flow moves thousands of partitions: past strait.logs.LOGGED_LINES named ones, this line counts the rest.
_MORE_RESUMES = "flow=%s epoch=%d %d more partitions resume at their progress on the target"


@dataclass(frozen=True)
class SourcePlan:
    """What the stream needs: the partitions to copy, the epoch's limits, the task count, the copy settings."""

    partitions: tuple[tuple[str, int], ...]  # (source topic, partition count)
    tasks: int
    checkpoint: str  # the query's Spark checkpoint (named in messages; read by the driver only)
    spec: FlowSpec
    epoch_seconds: float
    max_records_per_epoch: int
    records_per_second: float = 0.0  # 0: no limit
    resume: tuple[tuple[tuple[str, int], int], ...] = ()  # where each partition starts when it has no progress
    query: str = ""  # this run of the flow's query: what a stop record names
    # where the target holds every record below, from the evidence when the query started: no epoch,
    # a replayed one neither, starts a partition below it until its progress is seen
    on_target: tuple[tuple[tuple[str, int], int], ...] = ()
    last_epoch: EpochOffsets | None = None  # the newest epoch in the checkpoint when the query started
    made_at: float = 0.0  # when the driver made the plan (wall clock; 0: unknown): its first tasks are late from then

    def encode(self) -> str:
        """The plan as a data source option value."""
        return base64.b64encode(pickle.dumps(self)).decode("ascii")

    @staticmethod
    def decode(text: str) -> SourcePlan:
        """The plan of a data source option value."""
        return pickle.loads(base64.b64decode(text))

    @property
    def progress(self) -> ProgressLog | None:
        """The flow's progress topic (None: the copies write no progress)."""
        return ProgressLog.of(self.spec)

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
    holds: tuple[Hold, ...] = ()  # the flow's copiers' holds read by then (strait_replicator.copier)


class EpochSources(Protocol):
    """What the planner reads from the clusters."""

    def source_ends(self, wait: bool) -> Offsets | None:
        """The source's end offsets of the plan's partitions (-1001: no leader answered); without
        ``wait`` one quick try, None when it fails; None also once the flow stops."""

    def progress(self) -> Offsets:
        """Each planned partition's progress on the target; {} when it cannot be read now."""

    def stop_requested(self, read: bool) -> bool:
        """Whether a stop of this query was read (read on first with ``read``)."""

    def progress_positions(self) -> tuple[tuple[int, int], ...]:
        """Where the progress topic was read to (the tasks watch it from there); () without one."""

    def holds(self) -> tuple[Hold, ...]:
        """The holds of the flow's copiers not released, as read up to :meth:`progress_positions`."""


class EpochPlanner:
    """Plans each epoch of a query: where its partitions start (the previous epoch's progress) and its tasks."""

    def __init__(self, plan: SourcePlan, sources: EpochSources) -> None:
        self.plan, self.sources = plan, sources
        self._last = plan.last_epoch  # the newest epoch planned or run (Spark asks for the next once it is committed)
        self._planned = -1  # the newest epoch this planner planned itself
        self._planned_starts: Offsets = {}  # where that epoch's partitions start (read from the progress then)
        self._ends_unknown = False  # the last epoch was planned without the source's ends
        self._floor = dict(plan.on_target)  # the copy evidence of partitions whose progress was not seen yet
        self._planning_seconds = 0.0  # how long planning the last epoch took
        # when the last epoch's tasks ended, or the plan was made (wall clock): the next tasks are late from then
        self._turnaround_from = plan.made_at or time.time()

    def initial(self) -> EpochOffsets:
        """The offset before the query's first epoch: the resume points."""
        return EpochOffsets(-1, dict(self.plan.resume))

    def next_epoch(self) -> EpochOffsets:
        """The next epoch; the last one again when a stop was requested or nothing is planned (Spark
        then starts no epoch)."""
        began = time.monotonic()
        try:
            return self._next_epoch()
        finally:
            self._planning_seconds = time.monotonic() - began

    def _next_epoch(self) -> EpochOffsets:
        last = self._last or self.initial()
        if self.sources.stop_requested(read=True):
            return last
        start = self._starting_points(self._planned_from(last))
        until = self._source_ends(last)
        if not until:  # the flow stops, or every planned topic is gone: no epoch until it is planned again
            return last
        # A partition whose leader is not known at this moment (a broker just died) lists no end
        # (-1001); its task copies it live all the same, from where it starts, and its end is the
        # last one known.
        until = {key: end if end >= 0 else max(0, start.get(key, 0), last.until.get(key, 0))
                 for key, end in until.items()}
        self._last = EpochOffsets(last.epoch + 1, start, until)
        self._planned, self._planned_starts = self._last.epoch, start
        return self._last

    def head_start(self, copiers: int) -> list[CopyTask]:
        """Every partition in as many tasks as the query's first epoch would have, at most ``copiers``
        (the driver host's cores), each starting where that epoch will (see
        :class:`~strait_replicator.headstart.HeadStart`): they copy until its tasks claim them. The
        flow's rate limit is shared among them."""
        last = self._last or self.initial()
        start = self._starting_points(self._planned_from(last))
        ranges = [CopyRange(topic, p, start[(topic, p)]) for topic, p in self.plan.keys() if (topic, p) in start]
        groups = assign_partitions(ranges, {}, min(copiers, self._task_count(len(ranges))))
        limits = EpochLimits(seconds=math.inf, max_records=sys.maxsize,
                             records_per_second=self.plan.records_per_second / max(1, len(groups)))
        read_to, holds = self.sources.progress_positions(), self.sources.holds()
        return [CopyTask(last.epoch + 1, tuple(group), limits, read_to, False, holds) for group in groups]

    def _planned_from(self, last: EpochOffsets) -> Offsets:
        """Where the epoch after ``last`` starts before the progress is read: where ``last`` started,
        the query's resume points for partitions it did not have."""
        return {**dict(self.plan.resume), **last.start}

    def tasks(self, epoch: EpochOffsets) -> list[CopyTask]:
        """The tasks of ``epoch``: its partitions in groups, each starting where the copies got to."""
        if self._last is None or epoch.epoch >= self._last.epoch:
            self._last = epoch
        # An epoch planned just now starts where the progress said then: no copy ran since. A replayed
        # one (planned before this query started, run again) goes on where the copies got to.
        replayed = epoch.epoch != self._planned
        starts = self._starting_points(epoch.start) if replayed else self._planned_starts
        if replayed:
            self._log_moved(epoch, starts)
        ranges = [CopyRange(topic, p, starts[(topic, p)]) for topic, p in self.plan.keys()
                  if (topic, p) in starts and (topic, p) in epoch.until]
        groups = assign_partitions(ranges, epoch.until, self._task_count(len(ranges)))
        seconds, now = self.plan.epoch_seconds, time.time()
        limits = EpochLimits(
            seconds=seconds,
            max_records=max(1, self.plan.max_records_per_epoch // max(1, len(groups))),
            records_per_second=self.plan.records_per_second / max(1, len(groups)),
            # a stop read while planning comes before where the tasks watch from: they end at once
            ends_at=now + (0.0 if self.sources.stop_requested(read=False) else seconds),
            # the next epoch's tasks come about as late as this epoch's did: its copiers wait for them
            linger_seconds=max(LINGER_PER_PLANNING_SECOND * self._planning_seconds,
                               LINGER_PER_TURNAROUND_SECOND * max(0.0, now - self._turnaround_from)),
        )
        self._turnaround_from = limits.ends_at
        read_to, holds = self.sources.progress_positions(), self.sources.holds()
        return [CopyTask(epoch.epoch, tuple(group), limits, read_to, replayed, holds) for group in groups]

    def _log_moved(self, epoch: EpochOffsets, starts: Offsets) -> None:
        moved = sorted((key, at) for key, at in starts.items() if key in epoch.start and at != epoch.start[key])
        if not moved:
            return
        setup_logging()  # this runs in a Python worker of the driver's: its lines go to the driver's stderr
        flow = self.plan.spec.flow
        log_first(log, [(flow, epoch.epoch, topic, p, at, epoch.start[(topic, p)]) for (topic, p), at in moved],
                  "flow=%s epoch=%d topic=%s partition=%d resumes at offset %d: the progress or the resume evidence "
                  "on the target (the epoch started at %d)", _MORE_RESUMES, flow, epoch.epoch)

    def _source_ends(self, last: EpochOffsets) -> Offsets | None:
        """The source's end offsets for the next epoch.

        Nothing is copied while an epoch is planned. When the leaders do not answer one quick try
        (one moving or restarting), an epoch that follows one this planner planned on listed ends
        starts on those (no end known now, :meth:`next_epoch`); the next change of epochs waits for
        the leaders, however long, as a query's first one does.
        """
        if last.until and last.epoch == self._planned and not self._ends_unknown:
            ends = self.sources.source_ends(wait=False)
            # a leader that did not answer in time: its partitions' ends are waited for next time
            self._ends_unknown = ends is None or any(end < 0 for end in ends.values())
            if ends is not None:
                return ends
            log.info("flow=%s cluster=%s no end offsets in a quick try: the epoch starts on the last epoch's",
                     self.plan.spec.flow, self.plan.spec.source_alias)
            return {key: -1 for key in last.until}
        self._ends_unknown = False
        return self.sources.source_ends(wait=True)

    def _starting_points(self, planned: Offsets) -> Offsets:
        """Where each partition of ``planned`` starts now (:func:`epoch_starts`)."""
        progress = self.sources.progress()
        for key in progress:  # from now on its progress says
            self._floor.pop(key, None)
        return epoch_starts(planned, progress, self._floor)

    def _task_count(self, partitions: int) -> int:
        tasks = min(self.plan.tasks, partitions)
        if self.plan.records_per_second:
            tasks = min(tasks, -(-int(self.plan.records_per_second) // RECORDS_PER_SECOND_PER_TASK))
        return max(1, tasks) if partitions else 0


# -- where a partition starts ------------------------------------------------------------------------
#
# A query's first start comes from the resume evidence on the target (strait.progress.decide_starts).
# After that two rules, kept apart on purpose: an epoch being planned trusts the progress on the
# target even where it is lower than planned (a topic re-created on the source starts again at 0),
# while a copier taking partitions over mid-epoch never goes back from where its epoch was planned
# (a lower progress there is an older copier's, written before the plan).


def epoch_starts(planned: Offsets, progress: Offsets, floor: Offsets) -> Offsets:
    """Where an epoch's partitions start: each partition's progress on the target; for one without
    progress yet, where it was planned, no lower than ``floor`` (where the query's copy evidence says
    the target holds every record)."""
    return {**{key: max(at, floor.get(key, at)) for key, at in planned.items()}, **progress}


def resumed_ranges(task: CopyTask, progress: Offsets, flow: str) -> list[CopyRange]:
    """The task's ranges, each starting where the progress written since its epoch was planned says
    the copies got to, when that is further."""
    starts = {(r.topic, r.partition): r.start for r in task.ranges if r.start is not None}
    points = {key: max(start, progress.get(key, start)) for key, start in starts.items()}
    moved = [(key, offset) for key, offset in sorted(points.items()) if offset != starts[key]]
    log_first(log, [(flow, task.epoch, topic, p, offset, starts[(topic, p)]) for (topic, p), offset in moved],
              "flow=%s epoch=%d topic=%s partition=%d resumes at offset %d: the progress on the target "
              "(planned at %d)", _MORE_RESUMES, flow, task.epoch)
    return [CopyRange(r.topic, r.partition, points.get((r.topic, r.partition), r.start)) for r in task.ranges]


def logged_epoch(entry: dict[str, Any], plan: SourcePlan) -> EpochOffsets:
    """The epoch of an offsets log entry, or an error naming the checkpoint and what to do."""
    try:
        return EpochOffsets.from_json(entry)
    except CheckpointFormatError as exc:
        raise CheckpointFormatError(
            f"flow {plan.spec.flow}: the checkpoint {plan.checkpoint} was written by an older strait: "
            f"{exc}. Move that folder away and start again: the flow then copies its topics from their "
            f"earliest offsets (records already on the target are copied again, none is lost)") from exc


def assign_partitions(ranges: Sequence[CopyRange], until: Offsets, tasks: int) -> list[list[CopyRange]]:
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
