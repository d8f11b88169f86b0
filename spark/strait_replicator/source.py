"""The streaming source of a flow: Spark plans source offset ranges, its tasks copy them.

Spark's own Kafka source hands every record through the JVM and Arrow to Python, which profiling
showed to cap a flow below what one librdkafka consumer and producer do in a Python worker. Here
Spark keeps what it is good at (micro-batch planning, the write-ahead offsets log in the checkpoint,
task scheduling on local cores or a cluster, retries), and each task copies its offset ranges
itself (:func:`strait_replicator.writer.copy_ranges`). Every row of the stream is one summary of a
copied range, which the driver's ``foreachBatch`` accounts for.

Offsets in the checkpoint have the Kafka source's shape, ``{"topic": {"partition": offset}}``.
"""

from __future__ import annotations

import base64
import json
import logging
import pickle
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import IsolationLevel, TopicPartition
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

from strait.kafka.admin import KafkaAdminError, admin_client, list_offsets
from strait_replicator.writer import SUMMARY_SCHEMA, CopyRange, WriterSettings, copy_ranges

log = logging.getLogger(__name__)

FORMAT = "strait_copy"
# Spark redacts option values whose key matches its redaction pattern ("secret"): the plan holds
# cluster credentials.
PLAN_OPTION = "strait.secret.plan"
INITIAL_OFFSETS_FILE = "strait-initial-offsets.json"
OFFSETS_RETRY_SECONDS = 60.0
# A task has a fixed cost (hand-off to a Python worker, assigning the ranges, two acknowledged
# flushes); a small batch is copied faster and cheaper by fewer tasks.
MIN_RECORDS_PER_TASK = 20_000

Offsets = dict[str, dict[str, int]]


@dataclass(frozen=True)
class SourcePlan:
    """What the stream needs: the partitions to copy, the batch cap, the task count, the copy settings."""

    partitions: tuple[tuple[str, int], ...]  # (source topic, partition count)
    source_admin: tuple[tuple[str, str], ...]  # librdkafka settings of an admin client on the source
    max_records_per_batch: int
    tasks: int
    checkpoint: str
    writer: WriterSettings

    def encode(self) -> str:
        """The plan as a data source option value."""
        return base64.b64encode(pickle.dumps(self)).decode("ascii")

    @staticmethod
    def decode(text: str) -> SourcePlan:
        """The plan of a data source option value."""
        return pickle.loads(base64.b64decode(text))


@dataclass(frozen=True)
class CopyTask(InputPartition):  # type: ignore[misc]
    """One Spark task: the ranges it copies."""

    ranges: tuple[CopyRange, ...]


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
    """Plans each micro-batch's offset ranges from the source's end offsets, at most the batch cap."""

    def __init__(self, plan: SourcePlan) -> None:
        self.plan = plan
        self._planned: dict[tuple[str, int], int] | None = None  # the newest end handed to Spark

    def initialOffset(self) -> Offsets:
        offsets = self._list("earliest")
        path = Path(self.plan.checkpoint) / INITIAL_OFFSETS_FILE
        if not path.exists():  # the loss check's start of batch 0
            path.write_text(json.dumps(_as_json(offsets)))
        return _as_json(offsets)

    def latestOffset(self) -> Offsets:
        latest = self._list("latest")
        planned = self._planned if self._planned is not None else self._checkpointed_end()
        new = [key for key in latest if key not in planned]
        if new:  # a partition new to the stream is copied from its earliest offset
            planned = {**planned, **self._list("earliest", new)}
        capped = cap_batch(planned, latest, self.plan.max_records_per_batch)
        self._planned = capped
        return _as_json(capped)

    def partitions(self, start: Offsets, end: Offsets) -> Sequence[CopyTask]:
        groups = split_ranges(ranges_between(start, end), self.plan.tasks, MIN_RECORDS_PER_TASK)
        return [CopyTask(tuple(group)) for group in groups]

    def read(self, partition: CopyTask) -> Iterator[tuple[Any, ...]]:
        yield from copy_ranges(list(partition.ranges), self.plan.writer)

    def commit(self, end: Offsets) -> None:
        """Nothing to do: progress lives in Spark's checkpoint, the copies on the target."""

    def _checkpointed_end(self) -> dict[tuple[str, int], int]:
        """Where the stream stands when it resumes: the end of the newest planned batch."""
        folder = Path(self.plan.checkpoint) / "offsets"
        for batch in sorted(batch_ids(folder), reverse=True):
            offsets = offsets_of_log_file(folder / str(batch))
            if offsets is not None:
                return offsets
        return {}

    def _list(self, which: str, only: Sequence[tuple[str, int]] | None = None) -> dict[tuple[str, int], int]:
        """The earliest or latest offset of each partition of the plan; a deleted topic is left out."""
        isolation = IsolationLevel.READ_UNCOMMITTED \
            if self.plan.writer.source_consumer.get("isolation.level") == "read_uncommitted" \
            else IsolationLevel.READ_COMMITTED
        alias = self.plan.writer.source_alias
        admin = _admin(self.plan.source_admin)
        keys = only if only is not None else [(t, p) for t, count in self.plan.partitions for p in range(count)]
        partitions = [TopicPartition(t, p) for t, p in keys]
        deadline = time.monotonic() + OFFSETS_RETRY_SECONDS
        while True:
            try:
                return list_offsets(admin, alias, partitions, which, isolation, skip_unknown=True)
            except KafkaAdminError as exc:  # e.g. a partition without a leader for a moment
                if time.monotonic() > deadline:
                    raise
                log.warning("flow=%s listing %s offsets again: %s", self.plan.writer.flow, which, exc)
                time.sleep(1.0)


_admins: dict[tuple[tuple[str, str], ...], Any] = {}


def _admin(config: tuple[tuple[str, str], ...]) -> Any:
    """One admin client per source configuration in the driver's reader process."""
    if config not in _admins:
        _admins[config] = admin_client(dict(config))
    return _admins[config]


def _as_json(offsets: dict[tuple[str, int], int]) -> Offsets:
    result: Offsets = {}
    for (topic, partition), offset in sorted(offsets.items()):
        result.setdefault(topic, {})[str(partition)] = offset
    return result


def _as_keys(offsets: Offsets) -> dict[tuple[str, int], int]:
    return {(topic, int(p)): int(o) for topic, partitions in offsets.items() for p, o in partitions.items()}


def batch_ids(folder: Path) -> set[int]:
    """The batch ids of one of Spark's checkpoint logs (``offsets`` or ``commits``): its numbered files."""
    return {int(p.name) for p in folder.iterdir() if p.name.isdigit()} if folder.is_dir() else set()


def offsets_of_log_file(path: Path) -> dict[tuple[str, int], int] | None:
    """Kafka offsets from one of Spark's offsets-log files (JSON on the last line), or None."""
    try:
        lines = path.read_text(errors="replace").splitlines()
        parsed = json.loads(lines[-1]) if lines else None
    except (OSError, ValueError):
        return None
    if not isinstance(parsed, dict):
        return None
    return {(topic, int(p)): int(o) for topic, partitions in parsed.items() if isinstance(partitions, dict)
            for p, o in partitions.items()}


def cap_batch(planned: dict[tuple[str, int], int], latest: dict[tuple[str, int], int],
              limit: int) -> dict[tuple[str, int], int]:
    """The next batch's end offsets: ``latest``, cut so that at most ``limit`` records are planned.

    Each partition gets a share of the limit in proportion to its backlog, as Spark's Kafka source
    does; a partition new to the stream starts from its earliest offset, so its whole log counts.
    A partition whose latest offset lies below the planned one (topic re-created) keeps ``latest``.
    """
    backlog = {key: max(0, end - planned.get(key, 0)) for key, end in latest.items()}
    total = sum(backlog.values())
    if total <= limit:
        return dict(latest)
    capped = {}
    for key, end in latest.items():
        share = backlog[key] * limit // total
        capped[key] = end if backlog[key] == 0 else planned.get(key, 0) + max(1, share)
    return capped


def ranges_between(start: Offsets, end: Offsets) -> list[CopyRange]:
    """The copy range of every partition of a batch; partitions new to the stream start at the earliest."""
    starts = _as_keys(start)
    return [CopyRange(topic, partition, starts.get((topic, partition)), offset)
            for (topic, partition), offset in sorted(_as_keys(end).items())]


def split_ranges(ranges: list[CopyRange], tasks: int, min_records_per_task: int = 1) -> list[list[CopyRange]]:
    """Ranges with records into at most ``tasks`` groups of about equal size (largest first), with
    one group per ``min_records_per_task`` records at most.

    Empty ranges and those going backwards (a re-created topic, which the driver's loss check
    handles) are left out; a batch without records still gets one task, so it has a summary.
    """
    work = [r for r in ranges if r.has_records]
    records = sum(r.size for r in work)
    count = min(tasks, len(work), -(-records // max(1, min_records_per_task)))
    groups: list[list[CopyRange]] = [[] for _ in range(max(1, count))]
    sizes = [0] * len(groups)
    for copy in sorted(work, key=lambda r: r.size, reverse=True):
        smallest = sizes.index(min(sizes))
        groups[smallest].append(copy)
        sizes[smallest] += copy.size
    return groups
