"""The copy itself: source partitions to the target, record by record, in order.

A copier (:mod:`strait_replicator.copier`) runs a :class:`CopyLoop` over a :class:`SourceCopy`: the
native copy loop (``_copyloop.c``, C on librdkafka) reads each partition from its start offset and
produces every record as it arrives to the same partition number of its remote topic (or,
repartitioned, by key) with key, value, headers and timestamp unchanged and in order (idempotent
producer); no Python runs per record. About every half second Python takes the records the target
acknowledged, as arrays, produces their exact offset syncs and writes the progress to the target
(:class:`ProgressWriter`). Any read or delivery error fails the copier and its task, so Spark never
commits an epoch that is not on the target.
"""

from __future__ import annotations

import logging
import math
import os
import sys
import time
import zipimport
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from confluent_kafka import KafkaError, KafkaException, Producer

from strait.config.model import SyncsLocation
from strait.errors import StraitError
from strait.flow_spec import FlowSpec, Pairs
from strait.kafka.admin import KafkaRetriableError
from strait.offsets import OffsetTranslationError, SyncPoint
from strait.progress import Progress, progress_record
from strait.records import EXACT_SYNC_HEADER, OffsetSync
from strait_replicator.live import LiveRun, PartitionReport, live_value
from strait_replicator.native import native_copy_class, return_freed_memory

log = logging.getLogger(__name__)

# Seconds; replication latency = target acknowledgement time - source record timestamp.
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)

SUMMARY_SCHEMA = (
    "topic string, partition int, remote_topic string, records long, bytes long, "
    "first_offset long, last_offset long, next_offset long, syncs int, latency_counts array<long>, "
    "latency_sum double, lag long, start_offset long"
)
SUMMARY_FIELDS = ("topic", "partition", "remote_topic", "records", "bytes", "first_offset", "last_offset",
                  "next_offset", "syncs", "latency_counts", "latency_sum", "lag", "start_offset")
PRODUCER_DEFAULTS = {
    "enable.idempotence": "true",  # keeps per-partition order across retries
    "acks": "all",
    "linger.ms": "5",
    "batch.size": "1048576",
    "message.max.bytes": "104857600",  # let the target broker judge record sizes, not the client
    "queue.buffering.max.kbytes": "262144",
    "queue.buffering.max.messages": "1000000",  # the default 100,000 stalls the copy loop on BufferError
    # A copier that lost its lease (its host frozen, cut off) writes nothing once this has passed
    # too: the hand-off to another copier waits for it (strait_replicator.copier). Kafka's 300 s would
    # hold the partitions that long; 30 s still outlasts a leader election on the target.
    "message.timeout.ms": "30000",
}
# librdkafka sends one partition per ProduceRequest and an idempotent producer keeps at most 5 in flight
# per connection, so a backlog spread over N partitions needs about N/5 round trips: at 10,000
# partitions on a loaded 2-core machine, a hand-off's backlog outlasted the 30 s above and the copiers
# lapsed and copied again; 120 s at 5,000 partitions a copier ended that (README, "The wide run"). An
# at-least-once copy's default timeout therefore grows with its partitions, this much each, up to
# librdkafka's own default; the hand-off's fence waits for it (strait_replicator.copier). Not exactly
# once: its transactions' timeout would grow with it, and a transaction left open by a host gone and
# never fenced holds read_committed readers back until the broker aborts it.
MESSAGE_TIMEOUT_MS_PER_PARTITION = 24
MAX_MESSAGE_TIMEOUT_MS = 300_000
# Offset syncs need no fence (translation ignores an older copy's syncs that arrive late), so they keep
# Kafka's own delivery timeout: an outage of the syncs topic's leader only delays them, and the
# progress waits for them.
SYNCS_MESSAGE_TIMEOUT_MS = "300000"

# Exactly once: a copier commits its transaction this often (records, their syncs on the target and the
# progress that covers them); a read_committed consumer sees a record about this much later than a copy.
COMMIT_SECONDS = 0.02
# ...and this often while it copies a backlog (its fetches come back full): a commit first waits for every
# record sent to be acknowledged, a pause in the copy that longer transactions pay less often.
BACKLOG_COMMIT_SECONDS = 1.0
# A transaction a copier left open (its host gone, unfenced) holds back read_committed consumers of its
# partitions until the broker aborts it this long after it began; a claimant fences it sooner.
TRANSACTION_TIMEOUT_MS = "30000"
# A commit slower than this is logged with where its time went (acknowledgements, syncs, the commit):
# a read_committed consumer waits for it. One line per copier at most this often, with the slowest.
SLOW_COMMIT_SECONDS = 0.25
SLOW_COMMIT_LOG_SECONDS = 10.0

CONSUMER_DEFAULTS = {
    "fetch.max.bytes": "52428800",
    "max.partition.fetch.bytes": "4194304",
    # A deep prefetch queue keeps fetches in flight while the loop produces (measured: 16 MiB gave
    # 30k records/s, 128 MiB 100k). A copier's consumer outlives the epochs; what a stopping copier
    # had prefetched is read again by the next one.
    "queued.max.messages.kbytes": "131072",
    "fetch.wait.max.ms": "100",
}
# The copy loop's own settings; the user's consumer settings cannot change them.
CONSUMER_FIXED = {
    "enable.auto.commit": "false",
    "enable.auto.offset.store": "false",
    "enable.partition.eof": "true",
    "auto.offset.reset": "earliest",
}
CONSUME_BATCH = 10_000
# With nothing queued, wait this long for one record (it is sent as soon as it arrives).
IDLE_WAIT_SECONDS = 0.1
# How often acknowledged records turn into offset syncs and latency counts while an epoch runs, and
# the progress is written (with what the previous settle's acknowledged syncs cover: a restart
# copies again about two of these).
SETTLE_SECONDS = 0.5
# A copy that catches up after copying at least this many records since it last did hands the memory its
# queues freed back to the system (glibc keeps it): a head start copier that copied a backlog while Spark
# started held 550-730 MB in the driver, idle, at the bench's peak memory (the query starting beside it).
TRIM_AFTER_RECORDS = 100_000
# What one copy writes into the progress topic at most, about (at least once; a copy of many
# partitions writes each one less often: a restart then copies again up to that many seconds of them).
PROGRESS_RECORDS_PER_SECOND = 1_000
STOP_CHECK_SECONDS = 0.1
# Once a stop is requested, what is still unacknowledged gets this long: the process exits a few
# seconds after SIGTERM. A cluster that does not answer (a dead source holding the offset syncs)
# then ends the copier without its final progress, so the next start copies that part again from
# the progress on the target, instead of writing progress whose syncs were never written.
STOP_FLUSH_SECONDS = 3.0
MIN_TASK_SECONDS = 1.0
UNKNOWN_PARTITION_WAIT_SECONDS = 60.0
# librdkafka wants a group.id and looks up its coordinator even for a consumer that only assigns
# partitions and never commits: the replicator's principal needs DESCRIBE on this group, no more.
SOURCE_GROUP = "strait-replicator"


def install_lazy_zip_invalidation() -> None:
    """Re-read a zip archive on ``importlib.invalidate_caches()`` only when the file changed.

    PySpark's worker calls ``importlib.invalidate_caches()`` before every task, and Python 3.11's
    zipimporter then re-parses the whole directory of pyspark.zip (about 1,200 entries): profiled at
    two thirds of a worker's CPU time with one task per partition per micro-batch. Python 3.12 made
    this lazy (CPython gh-103200); this gives 3.11 the same effect, keeping the invalidation for an
    archive that really changed (new mtime or size).
    """
    if sys.version_info >= (3, 12) or getattr(zipimport.zipimporter.invalidate_caches, "strait_lazy", False):
        return
    reread = zipimport.zipimporter.invalidate_caches
    versions: dict[str, tuple[int, int] | None] = {}

    def invalidate_caches(self: zipimport.zipimporter) -> None:
        try:
            stat = os.stat(self.archive)
            version: tuple[int, int] | None = (stat.st_mtime_ns, stat.st_size)
        except OSError:
            version = None
        if version is not None and versions.get(self.archive) == version:
            return
        versions[self.archive] = version
        reread(self)

    invalidate_caches.strait_lazy = True  # type: ignore[attr-defined]
    zipimport.zipimporter.invalidate_caches = invalidate_caches  # type: ignore[method-assign]


class ReplicationWriteError(StraitError):
    """A record or an offset sync could not be written to the target; the batch is not committed."""


class PassingWriteError(ReplicationWriteError):
    """Writes timed out or met a passing state of the cluster (a leader moving, a broker restarting):
    the copier ends without failing its task, and the next copier resumes where the progress says."""


def is_passing(error: KafkaError) -> bool:
    """Whether a write failed for the moment only: it timed out, or met a passing state of the cluster."""
    return error.code() == KafkaError._MSG_TIMED_OUT or KafkaRetriableError.is_transient(error)


def write_error(message: str, errors: list[KafkaError],
                refused: type[StraitError] = ReplicationWriteError) -> StraitError:
    """The error for writes that failed with ``errors`` (none: not acknowledged in time): passing
    when every one of them is, else ``refused``."""
    return (PassingWriteError if all(is_passing(error) for error in errors) else refused)(message)


class ReplicationReadError(StraitError):
    """A source partition could not be read; the batch is not committed."""


@dataclass(frozen=True)
class CopyRange:
    """One topic-partition copied live from ``start`` (None: the earliest offset) until the epoch ends."""

    topic: str
    partition: int
    start: int | None


@dataclass(frozen=True)
class EpochLimits:
    """When a task's epoch ends: at ``ends_at`` (wall clock, the same for every task of the epoch, so
    no partition waits for a task that started later) or, without it, ``seconds`` after the task
    starts; or after ``max_records``. ``records_per_second`` (0: none) throttles the copy."""

    seconds: float
    max_records: int
    records_per_second: float = 0.0
    ends_at: float = 0.0
    # how long a copier waits after the epoch's end for the next epoch's task at least (0: its own
    # default): the planner raises it when planning takes long or the last tasks came late (thousands of partitions)
    linger_seconds: float = 0.0

    def task_seconds(self) -> float:
        """How long a task starting now copies (at least MIN_TASK_SECONDS: a late or retried task still copies)."""
        if not self.ends_at:
            return self.seconds
        return max(MIN_TASK_SECONDS, self.ends_at - time.time())


def producer_settings(config: Mapping[str, str] | Pairs) -> dict[str, str]:
    """The copy's producer settings: strait's defaults under the user's.

    Idempotence needs ``acks=all``; a user who asks for fewer acknowledgements (MM1 setups carry
    ``acks=1``) gets one request in flight instead, which keeps per-partition order the same way.
    """
    given = dict(config)
    settings = {**PRODUCER_DEFAULTS, **given}
    if str(settings["acks"]).lower() not in ("all", "-1") and "enable.idempotence" not in given:
        settings["enable.idempotence"] = "false"
        settings.setdefault("max.in.flight.requests.per.connection", "1")
    return settings


def copy_message_timeout_ms(settings: FlowSpec, partitions: int) -> int:
    """The delivery timeout of a copy of ``partitions`` partitions: the user's ``message.timeout.ms``
    when given, else 30 s, or at least once MESSAGE_TIMEOUT_MS_PER_PARTITION for each partition when
    that is more (at most MAX_MESSAGE_TIMEOUT_MS)."""
    given = dict(settings.target_producer)
    if "message.timeout.ms" in given:
        return int(given["message.timeout.ms"])
    base = int(PRODUCER_DEFAULTS["message.timeout.ms"])
    if settings.exactly_once:
        return base
    return max(base, min(MAX_MESSAGE_TIMEOUT_MS, partitions * MESSAGE_TIMEOUT_MS_PER_PARTITION))


def copy_producer_settings(settings: FlowSpec, transactional_id: str | None, partitions: int = 0) -> dict[str, str]:
    """The producer settings of a copy of ``partitions`` partitions (its delivery timeout:
    :func:`copy_message_timeout_ms`); transactional with ``transactional_id`` (exactly once)."""
    given = {**producer_settings(settings.target_producer),
             "message.timeout.ms": str(copy_message_timeout_ms(settings, partitions))}
    if transactional_id is None:
        return given
    # librdkafka wants a record's delivery timeout within its transaction's
    timeout = max(int(TRANSACTION_TIMEOUT_MS), int(given["message.timeout.ms"]))
    return {**given, "transactional.id": transactional_id, "transaction.timeout.ms": str(timeout)}


def commit_timeout(settings: FlowSpec) -> float:
    """How long an exactly-once copy's commit may take: its records' delivery timeout (which does not
    grow with the partitions in that mode), and a little for the commit itself."""
    return copy_message_timeout_ms(settings, 0) / 1000.0 + 5.0


def transactional_id(flow: str, copier: str) -> str:
    """The transactional.id of one copier of ``flow`` in exactly-once mode: a claimant fences the
    copier it takes partitions from by this name (users' ACLs: TransactionalId prefix ``strait-``)."""
    return f"strait-{flow}-{copier}"


def syncs_producer_settings(config: Mapping[str, str] | Pairs) -> dict[str, str]:
    """The offset syncs' producer settings: the copy's, with Kafka's delivery timeout unless the user's."""
    return producer_settings({"message.timeout.ms": SYNCS_MESSAGE_TIMEOUT_MS, **dict(config)})


def consumer_settings(settings: FlowSpec) -> dict[str, Any]:
    """The copy's source consumer settings: strait's defaults under the user's, the copy loop's own
    over them. It never joins a group nor commits: each copy assigns its partitions' offsets itself."""
    return {**CONSUMER_DEFAULTS, **dict(settings.source_consumer), **CONSUMER_FIXED, "group.id": SOURCE_GROUP}


EXACT_SYNC_HEADERS = [(EXACT_SYNC_HEADER, b"1")]


class SyncWriter:
    """Produces the offset syncs of a task to the flow's syncs topic."""

    def __init__(self, settings: FlowSpec, producer: Producer) -> None:
        self.settings, self.producer = settings, producer
        self.errors: list[KafkaError] = []
        self.sent = self.delivered = 0  # syncs of one partition are acknowledged in send order

    def _on_delivery(self, err: KafkaError | None, _msg: Any) -> None:
        if err is not None:
            self.errors.append(err)
        else:
            self.delivered += 1

    def send(self, topic: str, partition: int, points: list[SyncPoint]) -> int:
        """Produce one sync per point; how many were written (none when the flow writes no syncs)."""
        location = self.settings.syncs
        if location is None:
            self.sent += len(points)
            self.delivered += len(points)
            return 0
        for point in points:
            record = OffsetSync(topic, partition, point.upstream, point.downstream)
            produce_when_ready(self.producer, location.topic, key=record.key_bytes(), value=record.value_bytes(),
                               partition=0, on_delivery=self._on_delivery, headers=EXACT_SYNC_HEADERS)
        self.sent += len(points)
        return len(points)

    def flush(self, timeout: float | None = None) -> None:
        """Wait for every sync's acknowledgement (``timeout``, default the flush timeout); fail the task
        if one is missing."""
        remaining = self.producer.flush(self.settings.flush_timeout if timeout is None else timeout)
        self.check(remaining)

    def check(self, remaining: int = 0) -> None:
        """Fail the task if a sync failed (or ``remaining`` are not acknowledged): the progress must
        never pass a copied record whose sync is lost (the count of acknowledged syncs would)."""
        if self.errors or remaining:
            detail = self.errors[0].str() if self.errors else f"{remaining} not acknowledged"
            where = self.settings.syncs or SyncsLocation(self.settings.source_alias, "(none)")
            raise write_error(f"flow {self.settings.flow}: writing offset syncs to topic {where.topic} "
                              f"on cluster {where.alias} failed: {detail}", self.errors)


def progress_spacing(partitions: int) -> float:
    """Seconds between two progress records of one partition while a copy of ``partitions`` runs at
    least once: none for up to PROGRESS_RECORDS_PER_SECOND * SETTLE_SECONDS partitions (each settle
    writes them), then growing so that one copy writes about PROGRESS_RECORDS_PER_SECOND. Every reader
    of the progress topic reads every record: 10,000 moving partitions wrote 20,000 a second, and its
    readers fell tens of thousands of records behind (planning took 14-22 s a micro-batch)."""
    return partitions / PROGRESS_RECORDS_PER_SECOND if partitions > PROGRESS_RECORDS_PER_SECOND * SETTLE_SECONDS \
        else 0.0


class ProgressWriter:
    """Writes a partition's progress record (:mod:`strait.progress`) to the target whenever its report
    changed, with the run's live totals (:mod:`strait_replicator.live`).

    Positions come from settles whose offset syncs are acknowledged, so a progress record never
    runs ahead of the syncs; a record that fails to arrive fails the task like a copied one.
    """

    def __init__(self, settings: FlowSpec, producer: Producer, run: LiveRun | None) -> None:
        self.settings, self.producer = settings, producer
        self.run = run or LiveRun(-1)
        self.errors: list[KafkaError] = []
        self.written: dict[tuple[str, int], PartitionReport] = {}
        self._written_at: dict[tuple[str, int], float] = {}  # monotonic time of each partition's last write

    def _on_delivery(self, err: KafkaError | None, _msg: Any) -> None:
        if err is not None:
            self.errors.append(err)

    def write(self, reports: Mapping[tuple[str, int], tuple[PartitionReport, int]], final: bool = False,
              spaced_over: int = 0) -> set[tuple[str, int]]:
        """Produce the progress of each partition whose (report, target offset of its last record) changed;
        with ``spaced_over`` (a copy's partition count), each partition at most once per
        :func:`progress_spacing` of that many. Returns the partitions whose changed progress the spacing
        held back."""
        deferred: set[tuple[str, int]] = set()
        location = self.settings.progress
        if location is None:
            return deferred
        now = time.monotonic()
        spacing = progress_spacing(spaced_over) if spaced_over and not final else 0.0
        for (topic, partition), (report, target_offset) in reports.items():
            if report.acked <= 0 or (self.written.get((topic, partition)) == report and not final):
                continue
            if spacing and now - self._written_at.get((topic, partition), -math.inf) < spacing:
                deferred.add((topic, partition))
                continue
            self._written_at[(topic, partition)] = now
            progress = Progress(report.acked, target_offset, live_value(self.run, report, final))
            key, value = progress_record(self.settings.source_alias, topic, partition, progress)
            produce_when_ready(self.producer, location.topic, key=key, value=value, partition=0,
                               on_delivery=self._on_delivery)
            self.written[(topic, partition)] = report
        return deferred

    def check(self) -> None:
        """Fail the task if a progress record was not written."""
        if self.errors:
            where = self.settings.progress or SyncsLocation(self.settings.target_alias, "(none)")
            raise write_error(f"flow {self.settings.flow}: writing progress to topic {where.topic} "
                              f"on cluster {where.alias} failed: {self.errors[0].str()}", self.errors)


@dataclass(frozen=True)
class SentState:
    """A partition's records sent and not yet settled, and how far its fetch got (:meth:`CopiedPartition.sent`)."""

    unsettled: int = 0
    first_unsettled: int = -1  # the source offset of the oldest of them (-1: none)
    last_sent: int = -1
    bytes: int = 0  # of keys and values sent
    reached: int = -1  # an end of partition seen at this offset (-1: none)


class CopiedPartition:
    """What one copy copied of one source partition.

    The native copy keeps every record it sent until :meth:`settle` takes it: the records the target
    acknowledged, in send order, as arrays, which become offset syncs and latency counts and count
    as copied; memory stays bounded however long the copy. A repartitioned flow's records go to the
    partition the producer's partitioner picks (Kafka's murmur2 of the key), so only the unbroken run
    of acknowledged records from the oldest one counts, and it writes no offset syncs: target offsets
    no longer follow source offsets.
    """

    __slots__ = ("topic", "partition", "remote", "start", "index", "native", "repartitioned", "lag", "records",
                 "syncs", "first", "last", "first_since_mark", "counts", "latency_sum", "target_partition",
                 "last_target")

    def __init__(self, copy: CopyRange, remote: str, index: int, repartitioned: bool = False) -> None:
        self.topic, self.partition, self.remote, self.start = copy.topic, copy.partition, remote, copy.start
        self.index = index  # its place in the native copy
        self.native: Any = None  # the NativeCopy sending its records (bound by SourceCopy)
        self.repartitioned = repartitioned
        self.target_partition = -1 if repartitioned else copy.partition  # -1: the producer's partitioner
        self.last_target = -1  # the target offset of the last record settled (-1: none, or not one partition)
        self.lag = -1  # records on the source past what was copied; -1: unknown
        self.records = self.syncs = 0
        self.first = self.last = -1
        self.first_since_mark = -1  # the first record settled since the last Copier.mark (-1: none)
        self.counts = np.zeros(len(LATENCY_BUCKETS) + 1, dtype=np.int64)
        self.latency_sum = 0.0

    def sent(self) -> SentState:
        """What is sent and not settled, from the native copy (nothing before it starts)."""
        return SentState() if self.native is None else SentState(*self.native.state(self.index))

    @property
    def bytes(self) -> int:
        """Bytes of keys and values sent."""
        return self.sent().bytes

    def settle(self, syncs: SyncWriter) -> int:
        """Take the acknowledged records: emit their offset syncs, count them and their latencies; how many."""
        if self.native is None:
            return 0
        offsets, timestamps, targets, ack_times = (
            np.frombuffer(data, dtype=kind)
            for data, kind in zip(self.native.take(self.index), (np.int64, np.int64, np.int64, np.float64)))
        done = len(offsets)
        if not done:
            return 0
        if not self.repartitioned:
            self.syncs += syncs.send(self.topic, self.partition, sync_points_of(offsets, targets))
            self.last_target = int(targets[-1])
        latencies = ack_times - timestamps / 1000.0
        self.counts += np.histogram(latencies, bins=(-np.inf, *LATENCY_BUCKETS, np.inf))[0]
        self.latency_sum += float(latencies.sum())
        self.records += done
        first = int(offsets[0])
        self.first = first if self.first < 0 else self.first
        self.first_since_mark = first if self.first_since_mark < 0 else self.first_since_mark
        self.last = int(offsets[-1])
        return done

    def next_offset(self) -> int:
        """Where the next epoch goes on: past the last record copied or the end seen, else the start
        (everything below a task's start is on the target already); -1: unknown (:func:`next_offset_of`)."""
        return next_offset_of(self.sent(), self.records, self.last, self.start)

    def settled_position(self) -> int:
        """Every record below this offset is acknowledged and settled; -1: unknown.

        Right after :meth:`settle` the records still waiting are the unacknowledged ones, and the
        offsets below the first of them are copied records or gaps (compaction, markers).
        """
        state = self.sent()
        return state.first_unsettled if state.unsettled else next_offset_of(state, self.records, self.last, self.start)

    def settled(self) -> tuple[int, int]:
        """(:meth:`settled_position`, the target offset of the last record settled)."""
        return self.settled_position(), self.last_target

    def report(self, acked: int) -> PartitionReport:
        """This partition's live report, with ``acked`` from a settle whose syncs are acknowledged."""
        return PartitionReport(self.topic, self.partition, self.start, acked, self.records, self.bytes, self.syncs,
                               tuple(int(c) for c in self.counts), self.latency_sum, self.lag)

    def summary(self) -> tuple[Any, ...]:
        """The summary row (SUMMARY_FIELDS)."""
        return (self.topic, self.partition, self.remote, self.records, self.bytes,
                self.first if self.records else None, self.last if self.records else None, self.next_offset(),
                self.syncs, [int(c) for c in self.counts], self.latency_sum, self.lag,
                -1 if self.start is None else self.start)


def next_offset_of(state: SentState, records: int, last: int, start: int | None) -> int:
    """Where a partition's copy goes on: past the last record copied (``records`` settled, the last at
    ``last``) or the end of partition seen, else ``start``; -1: unknown.

    An end seen counts only once nothing sent waits for its acknowledgement: records sent and never
    acknowledged (a copier that lapsed) were not copied, however far the fetch got.
    """
    reached = state.reached if not state.unsettled else -1
    copied = max(last + 1 if records else -1, reached)
    return copied if copied >= 0 or start is None else start


class CopySetupError(StraitError):
    """The copy's clients could not be made from the flow's settings."""


class SourceCopy:
    """A task's source partitions copied by the native loop (``_copyloop.c``), and what each copied.

    Made, its clients connect to both clusters; :meth:`start` then fetches each partition from its
    start (a copier makes its copy before it claims the partitions, and starts it once their last
    holder released them: the hand-off does not wait for the clients' set-up).

    Errors the loop met are turned into Python's here: a failed delivery goes to :attr:`errors`
    (the copy loop raises it), a read error fails the copy unless librdkafka retries it by itself,
    and a partition whose topic was deleted is copied no more.
    """

    def __init__(self, ranges: list[CopyRange], settings: FlowSpec, transactional_id: str | None = None) -> None:
        self.settings = settings
        self.transactional_id = transactional_id  # exactly once: its producer's (None: at least once)
        self.errors: list[tuple[str, int, KafkaError]] = []  # (remote topic, target partition, error)
        self._parts = [CopiedPartition(r, settings.remote_topic(r.topic), i, settings.repartition)
                       for i, r in enumerate(ranges)]
        self.copied = {(part.topic, part.partition): part for part in self._parts}
        self.pending = dict(self.copied)  # partitions still copied
        self.records = 0  # records settled, over every partition
        try:
            self.native = native_copy_class()(
                consumer_settings(settings), copy_producer_settings(settings, transactional_id, len(ranges)),
                [(p.topic, p.partition, p.remote, p.target_partition) for p in self._parts])
        except ValueError as exc:
            raise self._setup_error(exc) from exc
        for part in self._parts:
            part.native = self.native

    def start(self, ranges: list[CopyRange] | None = None) -> None:
        """Fetch each partition from its range's start: ``ranges`` (the same partitions) when given,
        else those the copy was made with."""
        starts = {(r.topic, r.partition): r.start for r in ranges or ()}
        for part in self._parts:
            part.start = starts.get((part.topic, part.partition), part.start)
        try:
            self.native.assign([-2 if part.start is None else part.start for part in self._parts])
        except ValueError as exc:
            raise self._setup_error(exc) from exc

    def _setup_error(self, exc: ValueError) -> CopySetupError:
        return CopySetupError(f"flow {self.settings.flow}: the copy from cluster {self.settings.source_alias} to "
                              f"cluster {self.settings.target_alias} cannot start: {exc}")

    def copy(self, want: int, wait: float, write_until: float) -> tuple[int, int]:
        """Send what waited, then consume up to ``want`` records (waiting up to ``wait`` s for the first)
        and send them until ``write_until`` (wall clock); (records sent, records fetched)."""
        sent, fetched = self.native.copy(want, wait, write_until)
        self._take_failures()
        return sent, fetched

    def poll(self, timeout: float) -> None:
        """Serve the target's acknowledgements for up to ``timeout`` s."""
        self.native.poll(timeout)
        self._take_failures()

    def flush(self, timeout: float) -> None:
        """Wait until the target acknowledged every record sent; a write error when one failed or is missing."""
        remaining = self.native.flush(timeout)
        self._take_failures()
        if self.errors:
            _raise_write_error(self.settings, self.errors)
        if remaining:
            raise PassingWriteError(f"flow {self.settings.flow}: {remaining} records not acknowledged by cluster "
                                    f"{self.settings.target_alias} within {timeout:.0f}s")

    def settle(self, syncs: SyncWriter, everything: bool = True) -> list[CopiedPartition]:
        """Settle the partitions whose copy moved since the last settle, or every one: their acknowledged
        records become offset syncs and counts (:meth:`CopiedPartition.settle`). Returns those settled.

        A wide copy's few moving partitions are settled without a pass over the thousands at rest."""
        moved = self.native.changed()  # read (and cleared) on every pass, a full one too
        parts = self._parts if everything else [self._parts[i] for i in moved]
        for part in parts:
            self.records += part.settle(syncs)
        return parts

    def note_lag(self, parts: Iterable[CopiedPartition] | None = None) -> None:
        """Each partition's lag (of ``parts``, default all) from the end offset the last fetch reported
        (no request to the broker)."""
        for part in self._parts if parts is None else parts:
            _low, high = self.native.watermarks(part.index)
            reached = part.next_offset()
            position = reached if reached >= 0 else part.start
            if high >= 0 and position is not None:
                part.lag = max(0, high - position)

    def pass_logs(self) -> None:
        """Hand the clients' log lines to Python's logging (librdkafka's syslog levels)."""
        for level, facility, text in self.native.logs():
            _librdkafka.log(_LOG_LEVELS.get(level, logging.DEBUG), "%s: %s", facility, text)

    def close(self, flush_timeout: float) -> int:
        """End the clients, after up to ``flush_timeout`` s for the target's acknowledgements; how many
        records sent were left unacknowledged (0: nothing of this copy can arrive later)."""
        remaining = -1  # unknown, when the flush itself failed
        try:
            remaining = self.native.flush(flush_timeout)
        finally:
            self.native.close()
            self.pass_logs()
        return remaining

    def _take_failures(self) -> None:
        reads, deliveries = self.native.failures()
        for index, code, fatal, text in deliveries:
            part = self._parts[index]
            self.errors.append((part.remote, part.target_partition, KafkaError(code, text, fatal=bool(fatal))))
        for index, code, fatal, text in reads:
            self._on_read_error(self._parts[index], KafkaError(code, text, fatal=bool(fatal)))

    def _on_read_error(self, part: CopiedPartition, error: KafkaError) -> None:
        """A deleted partition is copied no more; errors librdkafka does not retry fail the copy."""
        if error.code() in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC, KafkaError._UNKNOWN_PARTITION):
            log.warning("topic=%s partition=%d is gone from the source (deleted?): copying it ends at offset %d",
                        part.topic, part.partition, part.last + 1 if part.records else part.start or -1)
            self.native.drop(part.index)
            self.pending.pop((part.topic, part.partition), None)
            return
        if error.fatal() or error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED:
            raise ReplicationReadError(f"reading topic {part.topic} partition {part.partition}: {error.str()} "
                                       f"({error.name()})")
        # Anything else (a broker down, a leader moving) librdkafka retries by itself; the driver fails
        # the flow when a partition with records makes no progress for the read timeout.
        log.warning("topic=%s partition=%d reading goes on after: %s", part.topic, part.partition, error.str())


class FencedError(ReplicationWriteError):
    """Exactly once: a newer copier of the same partitions fenced this one (its transaction was aborted);
    the newer one goes on from the committed progress."""


class CopyTransactions:
    """Exactly once: the transactions of a copy's own producer on the target, and a producer-like view of
    it for what must commit with the copied records (the progress; the offset syncs when they live on
    the target). Callbacks of what was produced into a transaction are answered when it ends."""

    def __init__(self, source: SourceCopy) -> None:
        self.source, self.settings = source, source.settings
        self.native = source.native
        self._callbacks: list[Callable[[KafkaError | None, Any], None]] = []
        self.open = False
        # every transaction begun ended in a commit or an abort the broker confirmed: nothing of this
        # copier's can still be committed later (only then may it release its partitions)
        self.settled = True
        self._slow: list[tuple[float, float, float, float]] = []  # (seconds, flush, settle, commit) not logged yet
        self._slow_logged = -math.inf

    def start(self, timeout: float) -> None:
        """Fence every earlier producer of this transactional.id, then open the first transaction."""
        self._step("init", timeout)
        self.begin()

    def begin(self) -> None:
        """Open the next transaction."""
        self._step("begin", 0.0)
        self.open = True
        self.settled = False

    def commit(self, timeout: float) -> None:
        """Commit the open transaction (what was sent into it is flushed first); a FencedError when a newer
        copier fenced this one, a PassingWriteError (after aborting it) when it could not commit."""
        deadline = time.monotonic() + timeout
        while True:
            failure = self.native.transaction("commit", max(0.1, deadline - time.monotonic()))
            if failure is None or not failure[3] or time.monotonic() >= deadline:  # retriable: commit again
                break
        self.open = failure is not None and not failure[2]
        self.settled = failure is None
        callbacks, self._callbacks = self._callbacks, []
        error = None if failure is None else KafkaError(failure[0], failure[1], fatal=bool(failure[2]))
        for callback in callbacks:
            callback(error, None)
        if error is not None:
            self.abort(timeout)
            raise self._error("committing", error)

    def note_slow(self, seconds: float, flush: float, settle: float, commit: float) -> None:
        """A commit took ``seconds`` (SLOW_COMMIT_SECONDS or more): logged with where its time went, one
        line with the slowest at most every SLOW_COMMIT_LOG_SECONDS."""
        self._slow.append((seconds, flush, settle, commit))
        now = time.monotonic()
        if now - self._slow_logged < SLOW_COMMIT_LOG_SECONDS:
            return
        worst = max(self._slow)
        log.info("flow=%s transactional_id=%s slow commits=%d slowest seconds=%.3f flush=%.3f settle=%.3f "
                 "commit=%.3f", self.settings.flow, self.source.transactional_id, len(self._slow), *worst)
        self._slow, self._slow_logged = [], now

    def abort(self, timeout: float) -> None:
        """Abort the open transaction, if any (nothing of it is ever read by a read_committed consumer)."""
        if not self.open:
            return
        self.open = False
        self._callbacks = []
        failure = self.native.transaction("abort", timeout)
        self.settled = failure is None
        if failure is not None:
            log.warning("flow=%s transactional_id=%s abort failed: its partitions are not released, the next "
                        "copier fences it: %s", self.settings.flow, self.source.transactional_id, failure[1])

    def produce(self, topic: str, key: bytes | None = None, value: bytes | None = None, partition: int = 0,
                on_delivery: Callable[[KafkaError | None, Any], None] | None = None,
                headers: list[tuple[str, bytes]] | None = None) -> None:
        """Queue a record into the open transaction (BufferError while the queue is full)."""
        code = self.native.produce(topic, partition, key, value, list(headers or ()))
        if code == KafkaError._QUEUE_FULL:
            raise BufferError("the copy's producer queue is full")
        if code:
            raise KafkaException(KafkaError(code))
        if on_delivery is not None:
            self._callbacks.append(on_delivery)

    def poll(self, timeout: float = 0.0) -> int:
        """Serve the producer's acknowledgements."""
        self.native.poll(timeout)
        return 0

    def list_topics(self, topic: str, timeout: float) -> None:
        """Nothing to look up: the progress and syncs topics have one partition, 0."""

    def _step(self, step: str, timeout: float) -> None:
        failure = self.native.transaction(step, timeout)
        if failure is not None:
            raise self._error(step, KafkaError(failure[0], failure[1], fatal=bool(failure[2])))

    def _error(self, step: str, error: KafkaError) -> ReplicationWriteError:
        message = (f"flow {self.settings.flow}: transaction of {self.source.transactional_id} on cluster "
                   f"{self.settings.target_alias}, {step}: {error.str()}")
        if error.code() in _FENCED:
            return FencedError(message)
        return write_error(message, [error])


_FENCED = (KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH)


def commit_copy(source: SourceCopy, syncs: SyncWriter, progress: ProgressWriter | None,
                transactions: CopyTransactions, timeout: float, final: bool = False, everything: bool = True) -> None:
    """Exactly once: commit the copy's open transaction with the progress of everything sent into it.

    Its records are acknowledged first (target offsets known), then their offset syncs are written (into
    the transaction when they live on the target, else acknowledged on the source) and the progress
    records, which say that every record sent so far is copied, join the transaction: the commit makes
    the records and the progress visible together, and an abort neither. Only the partitions that moved
    since the last commit are settled and written, unless ``everything`` (or ``final``).
    """
    began = time.monotonic()
    source.flush(timeout)
    flushed = time.monotonic()
    parts = source.settle(syncs, everything=everything or final)
    if not source.settings.syncs_in_transaction:
        syncs.flush(timeout)
    source.note_lag(parts)
    if progress is not None and progress.settings.progress is not None:
        progress.write({(part.topic, part.partition): (part.report(part.settled_position()), part.last_target)
                        for part in parts}, final=final)
    written = time.monotonic()
    transactions.commit(timeout)
    ended = time.monotonic()
    if ended - began >= SLOW_COMMIT_SECONDS:
        transactions.note_slow(ended - began, flushed - began, written - flushed, ended - written)
    syncs.check()
    if progress is not None:
        progress.check()


_librdkafka = logging.getLogger("strait.librdkafka")
_LOG_LEVELS = {0: logging.CRITICAL, 1: logging.CRITICAL, 2: logging.CRITICAL, 3: logging.ERROR, 4: logging.WARNING,
               5: logging.INFO, 6: logging.INFO, 7: logging.DEBUG}

def produce_when_ready(producer: Producer, topic: str, **kwargs: Any) -> None:
    """Produce one record, waiting while the local queue is full or the partition is not yet known."""
    deadline = time.monotonic() + UNKNOWN_PARTITION_WAIT_SECONDS
    while True:
        try:
            producer.produce(topic, **kwargs)
            return
        except BufferError:  # local queue full: let deliveries drain
            producer.poll(0.05)
        except KafkaException as exc:
            # A remote topic just grown (new source partition): the producer's metadata lags behind.
            if exc.args[0].code() != KafkaError._UNKNOWN_PARTITION or time.monotonic() > deadline:
                raise
            producer.list_topics(topic, timeout=5)
            producer.poll(0.1)


def finish_copy(source: SourceCopy, producer: Producer, syncs: SyncWriter, progress: ProgressWriter,
                flush_timeout: float, transactions: CopyTransactions | None = None) -> None:
    """Wait until every record sent, its offset syncs and the final progress are on the target (exactly
    once: committed); a ReplicationWriteError when one is not."""
    if transactions is not None:
        commit_copy(source, syncs, progress, transactions, flush_timeout, final=True)
        return
    settings = progress.settings
    source.flush(flush_timeout)
    for part in source.settle(syncs):
        unsettled = part.sent().unsettled
        if unsettled:
            raise ReplicationWriteError(
                f"flow {settings.flow}: {unsettled} records sent to {part.remote}[{part.partition}] were "
                f"not acknowledged")
    syncs.flush(flush_timeout)
    if settings.progress is not None:
        progress.write({key: (part.report(part.settled_position()), part.last_target)
                        for key, part in source.copied.items()}, final=True)
        _flush(producer, settings, flush_timeout)
        progress.check()


class _Every:
    """A pass due once per ``seconds``: :meth:`due` answers True when it is, and counts from then."""

    def __init__(self, seconds: float, now: float) -> None:
        self.seconds, self._next = seconds, now

    def due(self, now: float) -> bool:
        """Whether the pass is due at ``now`` (monotonic); when it is, the next one is ``seconds`` later."""
        if now < self._next:
            return False
        self._next = now + self.seconds
        return True


class CopyLoop:
    """Copies the source's partitions as their records come, until the epoch or every partition ends.

    ``producer`` writes to the target what is not a copied record (progress; a copier's holds),
    ``syncs`` the offset syncs."""

    def __init__(self, source: SourceCopy, producer: Producer, syncs: SyncWriter, limits: EpochLimits,
                 progress: ProgressWriter | None = None, transactions: CopyTransactions | None = None) -> None:
        self.source, self.producer, self.syncs, self.limits = source, producer, syncs, limits
        # exactly once: a commit every COMMIT_SECONDS takes the place of the settles and reports
        self.transactions = transactions
        self._committed_sent = 0  # records sent up to the last commit
        self.settings, self.copied = source.settings, source.copied
        self.progress = progress if progress is not None and self.settings.progress is not None else None
        self.sent = 0
        self._sent_at_trim = 0  # records sent when freed memory was last handed back
        # (syncs sent, each partition's settled position and last target offset) at each settle, until
        # those syncs are acknowledged
        self._settles: list[tuple[int, dict[tuple[str, int], tuple[int, int]]]] = []
        self._acked = {key: (-1, -1) for key in self.copied}
        self._unreported: set[tuple[str, int]] = set()  # partitions whose acknowledged position moved since reported
        # A pass over every partition (settle, lag, progress) this often; in between, only those that
        # moved: a wide copy's partitions at rest cost nothing (SETTLE_SECONDS: every pass, up to 500).
        self.full_pass_seconds = max(SETTLE_SECONDS, progress_spacing(len(self.copied)))
        self.stop: Callable[[], bool] | None = None
        # Nothing is written after this (wall clock): a copier's lease (strait_replicator.copier). The
        # native loop checks it before every record, so a copier frozen mid-batch (its host stopped)
        # sends no more of it once thawed; what it fetched and did not send waits for the lease.
        self.write_until = math.inf

    def copy(self) -> None:
        """Copy until the loop ends; note each partition's lag."""
        self._loop()
        self.source.note_lag()

    def _loop(self) -> None:
        began = now = time.monotonic()
        limits, source = self.limits, self.source
        deadline = began + limits.task_seconds()
        cap = limits.max_records
        next_settle = next_stop_check = now
        full_pass = _Every(self.full_pass_seconds, now)
        while source.pending and now < deadline and self.sent < cap:
            if now >= next_stop_check:
                if self.stop is not None and self.stop():
                    return
                next_stop_check = now + STOP_CHECK_SECONDS
            if source.errors:
                _raise_write_error(self.settings, source.errors)
            want = min(CONSUME_BATCH, cap - self.sent)
            if limits.records_per_second:
                want = min(want, int(limits.records_per_second * (now - began)) - self.sent)
                if want <= 0:
                    source.poll(0.02)
                    self.producer.poll(0)
                    now = time.monotonic()
                    continue
            sent, fetched = source.copy(want, IDLE_WAIT_SECONDS, self.write_until)
            self.sent += sent
            if not fetched and self.sent - self._sent_at_trim >= TRIM_AFTER_RECORDS:
                self._sent_at_trim = self.sent  # caught up: what the queues held is freed
                return_freed_memory()
            now = time.monotonic()
            self.producer.poll(0)
            if time.time() > self.write_until:
                next_stop_check = now  # writes nothing more until the copier's lease is renewed there
                continue
            if self.transactions is not None:
                if now >= next_settle:
                    copied_before = self._committed_sent  # the first records copied become visible soon too
                    self._commit(full_pass.due(now))
                    now = time.monotonic()
                    backlog = fetched >= CONSUME_BATCH and copied_before > 0
                    next_settle = now + (BACKLOG_COMMIT_SECONDS if backlog else COMMIT_SECONDS)
                elif fetched < want:  # caught up: a backlog's long transaction need not wait
                    next_settle = min(next_settle, now + COMMIT_SECONDS)
                continue
            if now >= next_settle or not fetched:  # idle: syncs follow their records closely
                report = now >= next_settle
                everything = report and full_pass.due(now)
                self._settle(everything)
                if report:
                    self._report(everything)
                    next_settle = now + SETTLE_SECONDS

    def _commit(self, everything: bool) -> None:
        """Exactly once: commit what was sent since the last commit, with its progress (of every partition
        when ``everything``, else of those that moved); open the next transaction."""
        assert self.transactions is not None
        self.source.pass_logs()
        commit_copy(self.source, self.syncs, self.progress, self.transactions,
                    commit_timeout(self.settings),
                    everything=everything)
        self._committed_sent = self.sent
        self.transactions.begin()

    def _settle(self, everything: bool) -> None:
        """Turn acknowledged records into offset syncs and latency counts (of every partition when
        ``everything``, else of those that moved)."""
        if self.source.errors:  # a record failed: what was acknowledged after it is not a copy in order
            return
        parts = self.source.settle(self.syncs, everything)
        if self.progress is not None and parts:
            self._settles.append((self.syncs.sent, {(p.topic, p.partition): p.settled() for p in parts}))

    def _report(self, everything: bool) -> None:
        """Write the progress with the live totals: positions of the newest settle whose offset syncs
        are all acknowledged (of every partition when ``everything``, else of those whose position moved)."""
        self.source.pass_logs()
        if self.progress is None:
            return
        self.syncs.producer.poll(0)
        self.syncs.check()
        while self._settles and self._settles[0][0] <= self.syncs.delivered:
            for key, acked in self._settles.pop(0)[1].items():
                if self._acked[key] != acked:
                    self._acked[key] = acked
                    self._unreported.add(key)
        keys = list(self.copied) if everything else list(self._unreported)
        self.source.note_lag(self.copied[key] for key in keys)
        self._unreported = self.progress.write(
            {key: (self.copied[key].report(self._acked[key][0]), self._acked[key][1]) for key in keys},
            spaced_over=len(self.copied))
        self.progress.check()

def sync_points_of(source_offsets: np.ndarray, target_offsets: np.ndarray) -> list[SyncPoint]:
    """:func:`strait.offsets.sync_points`, vectorised: both batch ends and both sides of every break."""
    if len(source_offsets) != len(target_offsets):
        raise OffsetTranslationError(
            f"{len(source_offsets)} source offsets but {len(target_offsets)} target offsets")
    if len(source_offsets) == 0:
        return []
    up_steps, down_steps = np.diff(source_offsets), np.diff(target_offsets)
    disorder = np.flatnonzero((up_steps <= 0) | (down_steps <= 0))
    if len(disorder):
        i = int(disorder[0]) + 1
        raise OffsetTranslationError(
            f"offsets out of order at record {i}: {int(source_offsets[i])}->{int(target_offsets[i])}")
    linear = (up_steps == 1) & (down_steps == 1)
    keep = np.ones(len(source_offsets), dtype=bool)
    keep[1:-1] = ~(linear[:-1] & linear[1:])
    return [SyncPoint(int(up), int(down)) for up, down in zip(source_offsets[keep], target_offsets[keep])]


def _raise_write_error(settings: FlowSpec, errors: list[tuple[str, int, KafkaError]]) -> None:
    topic, partition, err = errors[0]
    if any(error.code() in _FENCED for _t, _p, error in errors):  # exactly once: a newer copier took over
        raise FencedError(f"flow {settings.flow}: writing to topic {topic} partition {partition} on cluster "
                          f"{settings.target_alias}: fenced by a newer copier ({err.str()})")
    raise write_error(f"flow {settings.flow}: writing to topic {topic} partition {partition} on cluster "
                      f"{settings.target_alias} failed: {err.str()} ({err.name()})", [e for _t, _p, e in errors])


def _flush(producer: Producer, settings: FlowSpec, timeout: float) -> None:
    remaining = producer.flush(timeout)
    if remaining:
        raise PassingWriteError(f"flow {settings.flow}: {remaining} records not acknowledged by cluster "
                                f"{settings.target_alias} within {timeout:.0f}s")
