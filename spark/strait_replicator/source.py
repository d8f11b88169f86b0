"""The streaming source of a flow: Spark schedules epochs, its tasks copy partitions live.

Spark's own Kafka source hands every record through the JVM and Arrow to Python, which profiling
showed to cap a flow below what one librdkafka consumer and producer do in a Python worker; and a
micro-batch per few hundred records puts Spark's fixed cost per batch (planning, two checkpoint
writes, task launch) into every record's latency. Here each micro-batch is an *epoch*: its tasks
keep the copiers of their partitions going (:mod:`strait_replicator.copier`), which copy record by
record as they arrive and do not stop between epochs. Spark keeps what it is good at: the write-ahead
offsets log in the checkpoint, task scheduling on local cores or a cluster, one running task per
partition at a time, and replay of a failed epoch.

The planning is :class:`~strait_replicator.planner.EpochPlanner`'s; this module adapts it to
Spark's ``DataSource`` API and reads the clusters for it (:class:`ClusterSources`). Where a
partition's copy got to lives on the target: the tasks write each partition's progress there
(:mod:`strait.progress`). A task that copies an epoch again resumes each partition where the
progress written since the epoch was planned says, and every task ends its epoch early on a stop
record (:mod:`strait_replicator.live`). What lives where is :mod:`strait_replicator.state`'s to say.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Iterator
from typing import Any

from confluent_kafka import IsolationLevel, TopicPartition
from pyspark.sql.datasource import DataSource, DataSourceStreamReader

from strait.kafka.admin import RenewableAdmin, list_offsets_per_leader
from strait.progress import OffsetsTopic, ResumeError
from strait.retry import is_transient, retry_transient
from strait_replicator.copier import copy_task
from strait_replicator.live import ControlRecords, Hold, ProgressLog
from strait_replicator.planner import CopyTask, EpochPlanner, SourcePlan, logged_epoch
from strait_replicator.state import Offsets
from strait_replicator.writer import SUMMARY_SCHEMA

log = logging.getLogger(__name__)

FORMAT = "strait_copy"
# Spark redacts option values whose key matches its redaction pattern ("secret"): the plan holds
# cluster credentials.
PLAN_OPTION = "strait.secret.plan"
# A leader that does not answer (a frozen broker) is given up on after this long and asked again
# through fresh metadata, where it may have moved.
LIST_TIMEOUT = 10.0
# The source's leaders are asked for their ends at every change of epochs, while nothing is copied:
# one that does not answer this soon is not waited for then (EpochPlanner._source_ends).
QUICK_LIST_SECONDS = 0.5
STOP_READ_SECONDS = 2.0  # how long the planner reads the progress topic for a stop before planning


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
    """Spark's view of the flow: the planner on the driver, the copy in the tasks."""

    def __init__(self, plan: SourcePlan) -> None:
        self.plan = plan
        self.planner = EpochPlanner(plan, ClusterSources(plan))

    def initialOffset(self) -> dict[str, Any]:
        return self.planner.initial().to_json()

    def latestOffset(self) -> dict[str, Any]:
        return self.planner.next_epoch().to_json()

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[CopyTask]:
        return self.planner.tasks(logged_epoch(end, self.plan))

    def read(self, partition: CopyTask) -> Iterator[tuple[Any, ...]]:
        yield from copy_task(self.plan, partition)

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to do: the progress lives on the target, beside the copies."""


class ClusterSources:
    """What the planner reads, from the clusters: the source's ends, the progress and stop records on
    the target (:class:`~strait_replicator.planner.EpochSources`)."""

    def __init__(self, plan: SourcePlan) -> None:
        self.plan = plan

    def stop_requested(self, read: bool = True) -> bool:
        """Whether the progress topic holds a stop of this query, read to its end first with ``read``
        (a target that does not answer in time gives what was read before)."""
        if self.plan.progress is None or not self.plan.query:
            return False
        reader, control = self._progress_reading()
        if read and not control.stopped(self.plan.spec.flow, self.plan.query):
            try:
                reader.read(STOP_READ_SECONDS)
            except ResumeError as exc:
                log.warning("flow=%s stop requests not read: %s", self.plan.spec.flow, exc)
        return control.stopped(self.plan.spec.flow, self.plan.query)

    def progress_positions(self) -> tuple[tuple[int, int], ...]:
        """Where this process read the progress topic to."""
        return tuple(sorted(self._progress_reading()[0].positions.items())) if self.plan.progress else ()

    def _progress_reading(self) -> tuple[OffsetsTopic, ControlRecords]:
        """This process's reader of the flow's progress topic (read on from where it got to) and the
        control records it read."""
        assert self.plan.progress is not None
        reading = _progress_readers.get(self.plan.progress)
        if reading is None:
            control = ControlRecords()
            reading = _progress_readers[self.plan.progress] = (self.plan.progress.reader(on_raw=control.note), control)
        return reading

    def holds(self) -> tuple[Hold, ...]:
        """The holds of the flow's copiers not released nor past their fence, as this process read
        them (a copier that crashed leaves its hold: a new copier need not wait for it, nor read the
        progress again on its account). Exactly once, those past their fence too: a new copier of
        their partitions fences them (a crashed copier's transaction may still be open)."""
        if self.plan.progress is None:
            return ()
        now = time.time()
        holds = self._progress_reading()[1].holds_of(self.plan.spec.flow)
        return tuple(hold for hold in holds.values() if hold.fence_at > now or self.plan.spec.exactly_once)

    def progress(self) -> Offsets:
        """Each planned partition's progress on the target; none when it cannot be read now (the copy
        then starts where the epoch says: records may be copied again, none is skipped)."""
        if self.plan.progress is None:
            return {}
        reader = self._progress_reading()[0]
        try:
            found = reader.read(LIST_TIMEOUT)
        except ResumeError as exc:
            if not reader.read_through:  # part of an old log: older positions than the query's evidence
                log.warning("flow=%s progress not read, epochs start where the last one did: %s",
                            self.plan.spec.flow, exc)
                return {}
            log.warning("flow=%s progress not read to its end, epochs start where it was read to before: %s",
                        self.plan.spec.flow, exc)
            found = reader.progress
        return {key: found[key].next_offset for key in self.plan.keys() if key in found}

    def source_ends(self, wait: bool = True) -> Offsets | None:
        """The latest offset of each partition of the plan; a deleted topic is left out.

        A leader moving or a broker restarting is retried promptly with a new admin client (fresh
        metadata) for as long as it lasts, so the query never dies of it; None once the flow stops.
        Without ``wait``: one try of QUICK_LIST_SECONDS, None when it fails that way.
        """
        isolation = IsolationLevel.READ_UNCOMMITTED \
            if dict(self.plan.spec.source_consumer).get("isolation.level") == "read_uncommitted" \
            else IsolationLevel.READ_COMMITTED
        alias = self.plan.spec.source_alias
        admin = cached_admin(self.plan.spec.source_admin)
        partitions = [TopicPartition(t, p) for t, p in self.plan.keys()]

        def listed() -> Offsets:
            offsets = list_offsets_per_leader(admin.get(), alias, partitions, "latest", isolation,
                                              timeout=LIST_TIMEOUT if wait else QUICK_LIST_SECONDS,
                                              grace=1.0 if wait else QUICK_LIST_SECONDS / 2)
            unknown = sorted(key for key, offset in offsets.items() if offset < 0)
            if unknown:
                log.info("flow=%s cluster=%s partitions=%s no leader answered: planned from where they start",
                         self.plan.spec.flow, alias, ",".join(f"{t}[{p}]" for t, p in unknown))
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
        return retry_transient(listed, f"flow={self.plan.spec.flow} listing latest offsets",
                               lambda: self.stop_requested(read=next(tries) > 0), on_failure=admin.renew)


_admins: dict[tuple[tuple[str, str], ...], RenewableAdmin] = {}
# One reader of a progress topic per driver-side process, read on from where it got to at each epoch,
# with what the control records (stops, holds) it read said.
_progress_readers: dict[ProgressLog, tuple[OffsetsTopic, ControlRecords]] = {}


def cached_admin(config: tuple[tuple[str, str], ...]) -> RenewableAdmin:
    """One admin client per source configuration per driver process (the reader's and the driver's),
    replaced after a transient error."""
    if config not in _admins:
        _admins[config] = RenewableAdmin(dict(config))
    return _admins[config]
