"""Per-partition parity of a flow's source and target: `strait verify`.

The replicator is at-least-once: after a crash a target partition may hold a replayed block, a
second copy of part of a batch. The flow's offset syncs say where the *newest* copy of each copied
source record is (:meth:`PartitionHistory.translate`), so a partition is compared as a merge of two
ordered streams:

* every source record in the checked range must have a newest copy on the target, at a target
  offset greater than the previous record's copy, equal in key, value, headers and timestamp;
* target records passed over on the way (older copies) are *duplicates* when they equal a source
  record of the range, *unexpected* otherwise (a record the replicator never wrote);
* source records after the last copied one (per the syncs) are *pending*: not replicated yet;
* a running SHA-256 over the source records and one over their newest copies, in order, summarise
  the range: they are equal exactly when every copy is present and equal.

Target offsets after the last newest copy are counted as ``target_tail``. While the replicator runs
they hold copies whose offset syncs are not written yet: copies of pending source records, or a
replay's copies of records synced before. Such a copy equals a source record, so every record of the
tail is compared, by key, value, headers and timestamp, with the partition's source records: one
that equals none of them is *unexpected in the tail* (``unexpected_tail``, with its first and last
target offset), a record the replicator never wrote. Any number of copies of one source record are
explained by it (replays of a replay are at-least-once too), and a foreign record equal to a source
record cannot be told from a copy. The tail is read up to the target's high watermark of the plan,
which is read after the source's; the source records written since the plan (up to the source's
high watermark read after the plan) explain the copies of records the replicator copied meanwhile,
so a running replicator never makes its own tail unexpected. A tail copy whose source record has
since been deleted from the source (retention, ``delete_records``) is reported as unexpected.

Parity holds when nothing is mismatched, missing, pending, unexpected or unexpected in the tail.
Duplicates are within the at-least-once contract and reported, never a failure.

The checked source range starts at the source's low watermark, or, when the syncs topic was
compacted before a partition's first sync, at the oldest sync kept (``unchecked_below``).
"""

from __future__ import annotations

import hashlib
import logging
import struct
import time
from collections import Counter
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from strait.config.model import FlowConfig, StraitConfig
from strait.errors import StraitError
from strait.kafka.admin import admin_client, explain_error, topic_partitions
from strait.remote_topics import RemoteTopic, replicated_topics
from strait.translation import PartitionHistory, SyncIndex, load_index

log = logging.getLogger(__name__)
librdkafka_log = logging.getLogger("strait.librdkafka")

DEFAULT_TIMEOUT = 30.0
FIELDS = ("key", "value", "headers", "timestamp")

Headers = tuple[tuple[str, bytes | None], ...]
Progress = Callable[[int], None]  # called with the number of source offsets just checked


class VerifyError(StraitError):
    """A partition could not be read for verification; the message names cluster, topic and partition."""


@dataclass(frozen=True)
class KafkaRecord:
    """One record as replication must preserve it, with its offset in its partition."""

    offset: int
    key: bytes | None
    value: bytes | None
    headers: Headers = ()
    timestamp: int = 0


def record_bytes(record: KafkaRecord) -> bytes:
    """A canonical, unambiguous encoding of key, value, headers and timestamp (not the offset)."""
    parts = [_field(record.key), _field(record.value), struct.pack(">i", len(record.headers))]
    for name, value in record.headers:
        parts += [_field(name.encode()), _field(value)]
    parts.append(struct.pack(">q", record.timestamp))
    return b"".join(parts)


def _field(data: bytes | None) -> bytes:
    if data is None:
        return struct.pack(">i", -1)
    return struct.pack(">i", len(data)) + data


def differing_field(source: KafkaRecord, target: KafkaRecord) -> str | None:
    """The first of key, value, headers, timestamp that differs, or None when the copy is equal."""
    for name in FIELDS:
        if getattr(source, name) != getattr(target, name):
            return name
    return None


@dataclass(frozen=True)
class Mismatch:
    """The first problem in a partition.

    ``kind`` is a differing field (key, value, headers, timestamp), ``missing`` (no copy on the
    target), ``order`` (the copy is not after the previous record's copy) or ``unexpected`` (a target
    record that is no copy of a checked source record, before the last copy or in the tail after it;
    ``source_offset`` is then None).
    """

    kind: str
    source_offset: int | None
    target_offset: int | None
    detail: str


@dataclass(frozen=True)
class PartitionRef:
    """A source partition and the remote topic its copies go to."""

    topic: str
    partition: int
    remote_topic: str


@dataclass(frozen=True)
class PartitionParity:
    """One partition's verdict: counts by offset range, checksums and the first mismatch."""

    topic: str
    partition: int
    remote_topic: str
    source_start: int | None  # first and last source offset checked against a copy
    source_end: int | None
    target_start: int | None  # first and last target offset of a newest copy found
    target_end: int | None
    source_records: int  # source records compared (not counting pending ones)
    target_records: int  # newest copies found
    matched: int
    mismatched: int
    missing: int
    pending: int
    duplicates: int
    unexpected: int
    target_tail: int
    source_sha256: str
    target_sha256: str
    unchecked_below: int | None = None
    first_mismatch: Mismatch | None = None
    unexpected_tail: int = 0  # target records after the last copy that equal no source record
    unexpected_tail_start: int | None = None  # first and last target offset of those
    unexpected_tail_end: int | None = None

    @property
    def ok(self) -> bool:
        """True when every checked source record has an equal newest copy, nothing is pending and the
        target holds no record the replicator did not write."""
        return not (self.mismatched or self.missing or self.pending or self.unexpected or self.unexpected_tail)


@dataclass(frozen=True)
class FlowParity:
    """Every checked partition of a flow."""

    flow: str
    partitions: tuple[PartitionParity, ...] = field(default_factory=tuple)

    @property
    def ok(self) -> bool:
        """True when every partition is in parity."""
        return all(p.ok for p in self.partitions)

    def total(self, name: str) -> int:
        """The sum of one count (e.g. ``"duplicates"``) over the partitions."""
        return sum(getattr(p, name) for p in self.partitions)


# -- the comparison of one partition -------------------------------------------------------------

class _TargetCursor:
    """Walks the target records in offset order; records passed over are kept for classification."""

    def __init__(self, records: Iterable[KafkaRecord]) -> None:
        self._records = iter(records)
        self._next: KafkaRecord | None = None
        self._done = False
        self.passed: Counter[bytes] = Counter()  # digests of older copies (or strangers) passed over
        self.passed_offsets: dict[bytes, int] = {}

    def _peek(self) -> KafkaRecord | None:
        if self._next is None and not self._done:
            self._next = next(self._records, None)
            self._done = self._next is None
        return self._next

    def seek(self, offset: int) -> KafkaRecord | None:
        """The record at ``offset`` (consumed), or None; records before it are passed over."""
        while (record := self._peek()) is not None and record.offset < offset:
            digest = hashlib.sha256(record_bytes(record)).digest()
            self.passed[digest] += 1
            self.passed_offsets.setdefault(digest, record.offset)
            self._next = None
        if record is not None and record.offset == offset:
            self._next = None
            return record
        return None


class _Tail:
    """The target records after the last copy, by digest, until a source record equal to them is seen."""

    def __init__(self, records: Iterable[KafkaRecord]) -> None:
        self._unexplained: dict[bytes, list[int]] = {}  # digest -> target offsets
        for record in records:
            self._unexplained.setdefault(_sha256(record), []).append(record.offset)

    @property
    def open(self) -> bool:
        """True while some tail record equals no source record seen so far."""
        return bool(self._unexplained)

    def explain(self, record: KafkaRecord) -> None:
        """Every tail record equal to this source record is a copy of it."""
        if self._unexplained:
            self._unexplained.pop(_sha256(record), None)

    def unexplained(self) -> list[int]:
        """Target offsets of the tail records that equal no source record, ascending."""
        return sorted(offset for offsets in self._unexplained.values() for offset in offsets)


def _sha256(record: KafkaRecord) -> bytes:
    return hashlib.sha256(record_bytes(record)).digest()


class _Tally:
    """Mutable counts while one partition is compared."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self.source_hash = hashlib.sha256()
        self.target_hash = hashlib.sha256()
        self.source_first: int | None = None
        self.source_last: int | None = None
        self.target_first: int | None = None
        self.target_last: int | None = None
        self.first: Mismatch | None = None
        self.last_target = -1
        self.unexpected_tail: list[int] = []

    def problem(self, kind: str, source: int | None, target: int | None, detail: str) -> None:
        """Count nothing; remember the first problem only."""
        if self.first is None:
            self.first = Mismatch(kind, source, target, detail)

    def checked(self, record: KafkaRecord) -> None:
        """A source record compared against its copy."""
        self.counts["source_records"] += 1
        self.source_hash.update(record_bytes(record))
        self.source_first = record.offset if self.source_first is None else self.source_first
        self.source_last = record.offset

    def copied(self, copy: KafkaRecord) -> None:
        """A newest copy found on the target."""
        self.counts["target_records"] += 1
        self.target_hash.update(record_bytes(copy))
        self.target_first = copy.offset if self.target_first is None else self.target_first
        self.target_last = copy.offset


def compare_partition(ref: PartitionRef, source: Iterable[KafkaRecord], target: Iterable[KafkaRecord],
                      history: PartitionHistory | None, progress: Progress | None = None,
                      tail: Iterable[KafkaRecord] = (), later: Iterable[KafkaRecord] = ()) -> PartitionParity:
    """Compare a source partition with its newest copies on the target.

    Args:
        ref: the partition and its remote topic.
        source: the source records to check, in offset order.
        target: the target partition's records in offset order, from (at most) the newest copy of the
            first source record on; earlier records may be included and are ignored.
        history: the partition's offset syncs (None when the replicator never copied from it).
        progress: called with 1 per source record handled.
        tail: the target records after the last copy (read first, before ``target``).
        later: source records after ``source`` (written since the plan), read only while some tail
            record equals no record of ``source``, and only as far as needed.
    """
    trailing = _Tail(tail)
    tally, cursor = _Tally(), _TargetCursor(target)
    floor = history.floor if history is not None else None
    last = history.translator.last_copied() if history is not None else None
    unchecked_below = floor if history is not None and not history.complete else None
    for record in source:
        if unchecked_below is not None and record.offset < unchecked_below:
            tally.counts["unchecked"] += 1
        elif last is None or record.offset > last.upstream:
            tally.counts["pending"] += 1
        else:
            _check_record(tally, cursor, history, floor, record)
        _absorb_duplicate(tally, cursor, record)
        trailing.explain(record)
        if progress is not None:
            progress(1)
    _count_unexpected(tally, cursor)
    if trailing.open:
        for record in later:
            trailing.explain(record)
            if not trailing.open:
                break
    _count_unexpected_tail(tally, trailing)
    return _parity(ref, tally, unchecked_below)


def _before_first_sync(history: PartitionHistory | None, floor: int | None) -> str:
    """Why a record below the first offset sync counts as never copied, with where that sync points:
    target records before its target offset are copies the syncs do not explain."""
    if history is None or floor is None:
        return "never copied: the partition has no offset sync"
    return (f"never copied: before the first offset sync of the partition (source offset {floor} at target "
            f"offset {history.translate(floor)})")


def _check_record(tally: _Tally, cursor: _TargetCursor, history: PartitionHistory | None,
                  floor: int | None, record: KafkaRecord) -> None:
    """Compare one copied source record with its newest copy."""
    tally.checked(record)
    target_offset = history.translate(record.offset) if history is not None else None
    if floor is None or record.offset < floor or target_offset is None:
        tally.counts["missing"] += 1
        tally.problem("missing", record.offset, None, _before_first_sync(history, floor))
        return
    if target_offset <= tally.last_target:
        tally.counts["mismatched"] += 1
        tally.problem("order", record.offset, target_offset,
                      f"copy at target offset {target_offset} is not after the previous copy at {tally.last_target}")
        return
    tally.last_target = target_offset
    copy = cursor.seek(target_offset)
    if copy is None:
        tally.counts["missing"] += 1
        tally.problem("missing", record.offset, target_offset,
                      f"no record at target offset {target_offset} (deleted, or below the target's low watermark)")
        return
    tally.copied(copy)
    differs = differing_field(record, copy)
    if differs is None:
        tally.counts["matched"] += 1
        return
    tally.counts["mismatched"] += 1
    tally.problem(differs, record.offset, target_offset, describe_difference(differs, record, copy))


def _absorb_duplicate(tally: _Tally, cursor: _TargetCursor, record: KafkaRecord) -> None:
    """Every older copy passed over on the target that equals this source record is a duplicate (a
    copy handed over several times before its offset syncs were written leaves several)."""
    if not cursor.passed:
        return
    digest = hashlib.sha256(record_bytes(record)).digest()
    copies = cursor.passed.pop(digest, 0)
    if copies:
        tally.counts["duplicates"] += copies
        cursor.passed_offsets.pop(digest, None)


def _count_unexpected(tally: _Tally, cursor: _TargetCursor) -> None:
    """Target records passed over that equal no checked source record."""
    left = sum(cursor.passed.values())
    if not left:
        return
    tally.counts["unexpected"] += left
    first = min(cursor.passed_offsets.values())
    tally.problem("unexpected", None, first, f"{left} target record(s) equal no source record, the first at "
                                             f"target offset {first}")


def _count_unexpected_tail(tally: _Tally, trailing: _Tail) -> None:
    """Target records after the last copy that equal no source record: written by someone else."""
    offsets = tally.unexpected_tail = trailing.unexplained()
    if offsets:
        tally.problem("unexpected", None, offsets[0],
                      f"{len(offsets)} target record(s) after the last copy equal no source record, at target "
                      f"offsets {offsets[0]}..{offsets[-1]}")


def _parity(ref: PartitionRef, tally: _Tally, unchecked_below: int | None) -> PartitionParity:
    c, tail = tally.counts, tally.unexpected_tail
    return PartitionParity(
        ref.topic, ref.partition, ref.remote_topic, tally.source_first, tally.source_last, tally.target_first,
        tally.target_last, c["source_records"], c["target_records"], c["matched"], c["mismatched"], c["missing"],
        c["pending"], c["duplicates"], c["unexpected"], 0, tally.source_hash.hexdigest(),
        tally.target_hash.hexdigest(), unchecked_below, tally.first, unexpected_tail=len(tail),
        unexpected_tail_start=tail[0] if tail else None, unexpected_tail_end=tail[-1] if tail else None)


def describe_difference(name: str, source: KafkaRecord, target: KafkaRecord) -> str:
    """What differs, without printing record contents (sizes, digests, header names, timestamps)."""
    if name == "timestamp":
        return f"timestamp: source {source.timestamp}, target {target.timestamp}"
    if name == "headers":
        return (f"headers: source {[h for h, _ in source.headers]} ({_digest(source.headers)}), "
                f"target {[h for h, _ in target.headers]} ({_digest(target.headers)})")
    return f"{name}: source {_summary(getattr(source, name))}, target {_summary(getattr(target, name))}"


def _summary(data: bytes | None) -> str:
    if data is None:
        return "null"
    return f"{len(data)} bytes sha256:{hashlib.sha256(data).hexdigest()[:12]}"


def _digest(headers: Headers) -> str:
    return "sha256:" + hashlib.sha256(b"".join(_field(n.encode()) + _field(v) for n, v in headers)).hexdigest()[:12]


# -- reading Kafka -------------------------------------------------------------------------------

@dataclass(frozen=True)
class Watermarks:
    """A partition's low and high watermark."""

    low: int
    high: int


class PartitionReader:
    """Reads offset ranges of one cluster's partitions in order, one partition at a time."""

    def __init__(self, settings: Mapping[str, str], alias: str, timeout: float = DEFAULT_TIMEOUT,
                 committed_only: bool = False) -> None:
        # what the replicator reads; an exactly-once flow's target is read as its consumers read it
        isolation = "read_committed" if committed_only else settings.get("isolation.level", "read_uncommitted")
        self.alias = alias
        self._timeout = timeout
        self._consumer = Consumer({**settings, "group.id": "strait-verify", "enable.auto.commit": False,
                                   "enable.auto.offset.store": False, "isolation.level": isolation,
                                   "enable.partition.eof": True, "logger": librdkafka_log})

    def watermarks(self, topic: str, partition: int) -> Watermarks:
        """The partition's watermarks; (0, 0) when the topic does not exist."""
        try:
            low, high = self._consumer.get_watermark_offsets(TopicPartition(topic, partition),
                                                             timeout=self._timeout)
        except KafkaException as exc:
            if exc.args and exc.args[0].code() in (KafkaError.UNKNOWN_TOPIC_OR_PART,
                                                   KafkaError._UNKNOWN_PARTITION):
                return Watermarks(0, 0)
            raise explain_error(exc, self.alias, f"reading the watermarks of topic {topic} partition "
                                                 f"{partition}") from None
        return Watermarks(low, high)

    def read(self, topic: str, partition: int, start: int, end: int) -> Iterator[KafkaRecord]:
        """The records in ``[start, end)``; raises VerifyError when the range stops arriving."""
        if start >= end:
            return
        self._consumer.assign([TopicPartition(topic, partition, start)])
        try:
            yield from self._read_assigned(topic, partition, end)
        finally:
            self._consumer.unassign()

    def _read_assigned(self, topic: str, partition: int, end: int) -> Iterator[KafkaRecord]:
        deadline = time.monotonic() + self._timeout
        while True:
            messages = self._consumer.consume(num_messages=1000, timeout=1.0)
            for message in messages:
                error = message.error()
                if error is not None and error.code() != KafkaError._PARTITION_EOF:
                    raise VerifyError(f"cluster {self.alias}: topic {topic} partition {partition}: {error.str()}")
                if error is None and message.offset() < end:
                    yield _record(message)
            if messages:
                deadline = time.monotonic() + self._timeout
            position = self._consumer.position([TopicPartition(topic, partition)])[0].offset
            if position >= end:
                return
            if time.monotonic() > deadline:
                raise VerifyError(f"cluster {self.alias}: topic {topic} partition {partition}: no records "
                                  f"arrived for {self._timeout:.0f}s at offset {position} (reading up to {end})")

    def close(self) -> None:
        """Close the consumer."""
        self._consumer.close()


def _record(message: object) -> KafkaRecord:
    headers = tuple((name, value) for name, value in (message.headers() or ()))  # type: ignore[attr-defined]
    return KafkaRecord(message.offset(), message.key(), message.value(), headers,  # type: ignore[attr-defined]
                       message.timestamp()[1])  # type: ignore[attr-defined]


# -- a flow --------------------------------------------------------------------------------------

@dataclass(frozen=True)
class PartitionPlan:
    """What to read for one partition: source and target ranges."""

    ref: PartitionRef
    source: Watermarks
    target: Watermarks

    @property
    def source_offsets(self) -> int:
        """Source offsets to walk (the progress total)."""
        return self.source.high - self.source.low


def selected_topics(flow: FlowConfig, source_partitions: Mapping[str, int],
                    wanted: Sequence[str] = ()) -> list[RemoteTopic]:
    """The flow's replicated topics, or those named in ``wanted`` (source or remote names)."""
    topics = replicated_topics(flow, source_partitions)
    if not wanted:
        return topics
    by_name = {t.source: t for t in topics} | {t.remote: t for t in topics}
    unknown = [name for name in wanted if name not in by_name]
    if unknown:
        raise VerifyError(f"flow {flow.name}: topic(s) {', '.join(unknown)} not replicated by this flow from "
                          f"cluster {flow.source} (replicated: {', '.join(t.source for t in topics) or 'none'})")
    return sorted({by_name[name] for name in wanted}, key=lambda t: t.source)


class FlowVerifier:
    """Verifies a flow's partitions: plan (watermarks), then check each partition."""

    def __init__(self, config: StraitConfig, flow: FlowConfig, timeout: float = DEFAULT_TIMEOUT) -> None:
        self.flow = flow
        self._timeout = timeout
        source, target = config.cluster(flow.source), config.cluster(flow.target)
        self._source_admin = admin_client(source.librdkafka_config("admin"))
        self._index: SyncIndex = load_index(config, flow, timeout)  # syncs first: they lag the records
        self._source = PartitionReader(source.librdkafka_config("consumer"), flow.source, timeout)
        self._target = PartitionReader(target.librdkafka_config("consumer"), flow.target, timeout,
                                       committed_only=flow.exactly_once)

    def plan(self, topics: Sequence[str] = ()) -> list[PartitionPlan]:
        """The partitions to check with their watermarks (source read before target)."""
        counts = topic_partitions(self._source_admin, self.flow.source, self._timeout)
        refs = [PartitionRef(topic.source, partition, topic.remote)
                for topic in selected_topics(self.flow, counts, topics) for partition in range(topic.partitions)]
        sources = [self._source.watermarks(ref.topic, ref.partition) for ref in refs]
        return [PartitionPlan(ref, source, self._target.watermarks(ref.remote_topic, ref.partition))
                for ref, source in zip(refs, sources)]

    def check(self, plan: PartitionPlan, progress: Progress | None = None) -> PartitionParity:
        """Compare one planned partition."""
        ref = plan.ref
        history = self._index.history(ref.topic, ref.partition)
        source = self._source.read(ref.topic, ref.partition, plan.source.low, plan.source.high)
        target_from, target_to = _target_range(history, plan)
        tail = self._target.read(ref.remote_topic, ref.partition, target_to, plan.target.high)
        target = self._target.read(ref.remote_topic, ref.partition, target_from, target_to)
        later = self._source_since_plan(plan)
        seen = Counter[str]()

        def step(n: int) -> None:
            seen["offsets"] += n
            if progress is not None:
                progress(n)

        try:
            result = replace(compare_partition(ref, source, target, history, step, tail, later),
                             target_tail=max(0, plan.target.high - target_to))
        finally:
            later.close()
        if progress is not None and plan.source_offsets > seen["offsets"]:
            progress(plan.source_offsets - seen["offsets"])  # offsets without a record: markers, compaction
        log.info("flow=%s topic=%s partition=%d ok=%s checked=%d missing=%d mismatched=%d pending=%d "
                 "duplicates=%d unexpected=%d unexpected_tail=%d", self.flow.name, ref.topic, ref.partition,
                 result.ok, result.source_records, result.missing, result.mismatched, result.pending,
                 result.duplicates, result.unexpected, result.unexpected_tail)
        return result

    def _source_since_plan(self, plan: PartitionPlan) -> Generator[KafkaRecord, None, None]:
        """The source records written since the plan, up to the high watermark read when first needed.

        That watermark is read after the plan's target watermark, so it covers the source record of
        every copy in the target's tail, even one the replicator made after the plan read the source.
        """
        ref = plan.ref
        high = self._source.watermarks(ref.topic, ref.partition).high
        yield from self._source.read(ref.topic, ref.partition, plan.source.high, high)

    def close(self) -> None:
        """Close the consumers."""
        self._source.close()
        self._target.close()


def _target_range(history: PartitionHistory | None, plan: PartitionPlan) -> tuple[int, int]:
    """Target offsets to read: from the newest copy of the first source record to the last copy."""
    last = history.translator.last_copied() if history is not None else None
    if history is None or last is None:
        return plan.target.low, plan.target.low
    start = history.translate(max(plan.source.low, history.floor or 0))
    start = plan.target.low if start is None else max(plan.target.low, start)
    end = min(plan.target.high, last.downstream + 1)
    return start, max(start, end)


def verify_flow(config: StraitConfig, flow: FlowConfig, topics: Sequence[str] = (),
                timeout: float = DEFAULT_TIMEOUT,
                on_plan: Callable[[list[PartitionPlan]], None] | None = None,
                progress: Progress | None = None) -> FlowParity:
    """Verify every partition of the flow's replicated topics (or of ``topics``)."""
    verifier = FlowVerifier(config, flow, timeout)
    try:
        plans = verifier.plan(topics)
        if on_plan is not None:
            on_plan(plans)
        return FlowParity(flow.name, tuple(verifier.check(plan, progress) for plan in plans))
    finally:
        verifier.close()
