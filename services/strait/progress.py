"""Where each source partition's copy goes on: its progress, kept on the target beside the copies.

The replicator's tasks write, about twice a second, one record per source partition that moved to
the flow's progress topic on the target (``strait-offsets.<source>.internal``, compacted): the last
source offset whose record *and offset syncs* the target holds, in the format Kafka Connect keeps
MirrorMaker 2's progress in (:class:`strait.records.SourceOffset`), plus the target offset of that
record. A replicator whose state is gone (a new host, a wiped volume) reads it and goes on where
the copies end; MM2 can read it too (``strait handover``).

When a partition has no progress of strait's, its start is decided from other evidence in Kafka, in
this order, and reported with a bound on the records copied a second time:

1. ``strait-progress``: strait's own progress record;
2. ``mm2-offsets``: the source offset MM2 committed to its Connect offsets topic on the target
   (``mm2-offsets.<source>.internal``; a Connect cluster's ``offset.storage.topic``);
3. ``offset-syncs``: the newest offset sync of the partition in the flow's syncs topic (MM2 and
   strait write the same format there), which bounds where the earlier copy got to;
4. ``empty-remote``: the remote partition holds no records: a first copy, from the earliest offset
   (or the latest with ``start: latest``); ``shared-remote``, for a partition of a flow with
   ``target_partitions``, whose remote topic holds what all its partitions copied (and what other
   flows aggregating into it copied): the partition has no progress, and either the topic's other
   partitions have (a partition added to the source: copied from its earliest offset, whatever
   ``start`` says), or another flow writing to the same remote topic has progress for its topic
   there (a region joining an aggregation: copied as on an empty remote, with a warning and the
   remote's record count as the bound on records copied twice, for the case this flow's own
   progress was lost);
5. ``start-earliest`` / ``start-latest``: the flow's explicit ``start`` choice; ``from-target``:
   the remote partition is taken for a copy made without progress records (by another tool), and
   the copy goes on after the source record equal to the remote's last one (same key, value and
   headers), searched from the first source record of its timestamp on (the timestamps themselves
   are not compared).

A remote partition that holds records with none of that evidence is never copied again from the
earliest offset silently: :class:`ResumeError` names the topics and says how to choose.
"""

from __future__ import annotations

import json
import logging
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from strait.config.model import FlowConfig, StraitConfig, SyncsLocation, dedicated_mm2_offsets_topic
from strait.errors import StraitError
from strait.flow_spec import FlowSpec
from strait.kafka.admin import TopicSpec, admin_client, create_topics, list_offsets, topic_partitions
from strait.records import MIRROR_SOURCE_CONNECTOR, RecordFormatError, SourceOffset
from strait.translation import SyncIndex, SyncsFollower

log = logging.getLogger(__name__)
librdkafka_log = logging.getLogger("strait.librdkafka")

Key = tuple[str, int]
DEFAULT_TIMEOUT = 30.0
# A reader asks for a topic's end at each read; the broker answers that request only after the
# reader's fetch waiting for new records there (500 ms by default) returns. The replicator reads its
# progress topic at every change of epochs, while no record is copied. (Pausing the partitions
# between reads instead, to spare the idle fetches, made every read take 1 s.)
READER_FETCH_WAIT_MS = 20
RELIST_SECONDS = 30.0  # how often a reader asks again which partitions its topic has (or whether it is gone)
EVIDENCE = ("strait-progress", "mm2-offsets", "offset-syncs", "empty-remote", "shared-remote", "from-target",
            "start-earliest", "start-latest")
# Evidence that the target holds every record below the start (from-target matches only the remote's
# last record; the others are a policy's choice)
COPY_EVIDENCE = frozenset({"strait-progress", "mm2-offsets", "offset-syncs"})
# from-target compares at most this many source records from the remote's last timestamp on
MATCH_SCAN_RECORDS = 100_000
MATCH_POLL_SECONDS = 0.5


class ResumeError(StraitError):
    """Where a partition's copy starts cannot be decided from evidence, or the evidence cannot be read."""


class ResumeNotAuthorizedError(ResumeError):
    """The principal may not read a topic holding evidence (an ACL is missing)."""


_NOT_AUTHORIZED = (KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.GROUP_AUTHORIZATION_FAILED)


@dataclass(frozen=True)
class Progress:
    """A partition's progress record: every source offset below ``next_offset`` is on the target
    (copied, or nothing to copy); ``target_offset`` is where the last copied record landed (-1:
    unknown, e.g. MM2's records or a repartitioning flow); ``live``: what the replicator's task
    reports with it (:mod:`strait_replicator.live`), opaque here."""

    next_offset: int
    target_offset: int = -1
    live: Mapping[str, Any] | None = field(default=None, compare=False)

    def value_bytes(self) -> bytes:
        """Connect's value: MM2 reads ``offset`` (the last offset done) and ignores the rest."""
        value: dict[str, Any] = {"offset": self.next_offset - 1, "target_offset": self.target_offset}
        if self.live is not None:
            value["live"] = self.live
        return json.dumps(value, separators=(",", ":")).encode()


def progress_record(cluster: str, topic: str, partition: int, progress: Progress) -> tuple[bytes, bytes]:
    """Key and value of a partition's progress record (``cluster``: the source's alias)."""
    key = SourceOffset(MIRROR_SOURCE_CONNECTOR, cluster, topic, partition, progress.next_offset - 1).key_bytes()
    return key, progress.value_bytes()


class OffsetsTopic:
    """Reads the source offsets of one connector and one source cluster from a Connect offsets topic.

    :meth:`read` reads up to the end every partition had when it was called, so what it returns is
    at least as new as any record acknowledged before; later calls read only what came since.
    ``start_at`` is where reading begins in each partition of the topic: ``"beginning"``, ``"end"``
    (only what is written from now on), or the offsets a reader got to (:attr:`positions`).
    ``on_record`` sees every progress record read, in order; ``on_raw`` the key, value and offset of
    every record read (the replicator's control records too; any Connect topic's records). A topic that
    does not exist holds no progress. Not thread-safe.
    """

    def __init__(self, settings: Mapping[str, str], location: SyncsLocation, cluster: str,
                 connector: str = MIRROR_SOURCE_CONNECTOR, start_at: str | Mapping[int, int] = "beginning",
                 on_record: Callable[[Key, Progress], None] | None = None,
                 on_raw: Callable[[bytes | None, bytes | None, int], None] | None = None) -> None:
        self.location, self.cluster, self.connector = location, cluster, connector
        self._start_at, self._on_record, self._on_raw = start_at, on_record, on_raw
        self._consumer = Consumer({**settings, "group.id": "strait-progress", "enable.auto.commit": False,
                                   "enable.auto.offset.store": False, "enable.partition.eof": False,
                                   "isolation.level": "read_committed", "logger": librdkafka_log,
                                   "fetch.wait.max.ms": READER_FETCH_WAIT_MS})
        self._positions: dict[int, int] = {}  # partition of the offsets topic -> next offset to read
        self._listed_at = -float("inf")  # when the topic's partitions were last asked for
        self.progress: dict[Key, Progress] = {}
        self.read_through = False  # a read got to the end once: ``progress`` is whole, if maybe old

    def read(self, timeout: float = DEFAULT_TIMEOUT, until: Mapping[int, int] | None = None) -> dict[Key, Progress]:
        """Every partition's newest progress, read up to the topic's current end: its last stable offset
        (read_committed), or, with ``until``, past those offsets (the high watermarks, read when the
        progress of transactions open now must be waited for)."""
        deadline = time.monotonic() + timeout
        try:
            ends = self._ends(timeout)
            if until:
                ends = {p: max(end, until.get(p, end)) for p, end in ends.items()}
            self._read_to(ends, deadline, timeout)
            self.read_through = True
        except KafkaException as exc:
            error = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
            kind = ResumeNotAuthorizedError if error is not None and error.code() in _NOT_AUTHORIZED else ResumeError
            raise kind(f"cluster {self.location.alias}: reading topic {self.location.topic}: "
                       f"{error.str() if error is not None else exc}") from None
        return self.progress

    def _read_to(self, ends: dict[int, int], deadline: float, timeout: float) -> None:
        while any(self._positions.get(p, 0) < end for p, end in ends.items()):
            left = deadline - time.monotonic()
            if left <= 0:
                behind = {p: end - self._positions.get(p, 0) for p, end in ends.items()}
                raise ResumeError(f"cluster {self.location.alias}: reading topic {self.location.topic} took over "
                                  f"{timeout:.0f}s ({sum(behind.values())} records left); is the cluster up?")
            # as many as are left at most: consume() returns once it has them, not at its timeout
            left_records = sum(max(0, end - self._positions.get(p, 0)) for p, end in ends.items())
            messages = self._consumer.consume(max(1, min(1000, left_records)), min(left, 0.2))
            for message in messages:
                self._add(message)
            if not messages:  # past transaction markers, which no message shows
                self._note_positions()

    def close(self) -> None:
        """Close the consumer."""
        self._consumer.close()

    def _ends(self, timeout: float) -> dict[int, int]:
        """The current end offset of each partition of the topic (assigning partitions new to the reader)."""
        topic = self.location.topic
        if self._positions and time.monotonic() - self._listed_at < RELIST_SECONDS:  # one request, not two
            partitions = list(self._positions)
        else:
            self._listed_at = time.monotonic()
            metadata = self._consumer.list_topics(topic, timeout=timeout).topics.get(topic)
            if metadata is None or metadata.error is not None:
                if metadata is not None and metadata.error.code() not in (KafkaError.UNKNOWN_TOPIC_OR_PART,
                                                                          KafkaError._UNKNOWN_TOPIC):
                    raise KafkaException(metadata.error)
                return {}
            partitions = list(metadata.partitions)
        marks = {p: self._consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout)
                 for p in partitions}
        new = [p for p in partitions if p not in self._positions]
        for p in new:
            low, high = marks[p]
            if self._start_at == "end":
                self._positions[p] = high
            elif isinstance(self._start_at, Mapping):
                self._positions[p] = min(max(low, self._start_at.get(p, low)), high)
            else:
                self._positions[p] = low
        if new:
            self._consumer.incremental_assign([TopicPartition(topic, p, self._positions[p]) for p in new])
        return {p: high for p, (_low, high) in marks.items()}

    def _note_positions(self) -> None:
        topic = self.location.topic
        for tp in self._consumer.position([TopicPartition(topic, p) for p in self._positions]):
            if tp.offset >= 0:
                self._positions[tp.partition] = max(self._positions[tp.partition], tp.offset)

    @property
    def positions(self) -> dict[int, int]:
        """The next offset to read in each partition of the topic (for another reader's ``start_at``)."""
        return dict(self._positions)

    def _add(self, message: object) -> None:
        error = message.error()  # type: ignore[attr-defined]
        if error is not None:
            if error.code() != KafkaError._PARTITION_EOF:
                raise KafkaException(error)
            return
        self._positions[message.partition()] = message.offset() + 1  # type: ignore[attr-defined]
        key, value = message.key(), message.value()  # type: ignore[attr-defined]
        if self._on_raw is not None:
            self._on_raw(key, value, message.offset())  # type: ignore[attr-defined]
        try:
            parsed_key = json.loads(key or b"null")
            parsed = None if value is None else json.loads(value)
            offset = SourceOffset.from_parsed(parsed_key, parsed)
            if offset is None:  # a tombstone: that partition's progress was removed
                connector, where = parsed_key
                if connector == self.connector and where.get("cluster") == self.cluster:
                    self.progress.pop((str(where["topic"]), int(where["partition"])), None)
                return
        except (RecordFormatError, ValueError, TypeError, KeyError, AttributeError):
            return  # not a progress record: MM2's other records, garbage
        if offset.connector != self.connector or offset.cluster != self.cluster:
            return
        target, live = parsed.get("target_offset", -1), parsed.get("live")
        target = target if isinstance(target, int) else -1
        earlier = self.progress.get((offset.topic, offset.partition))
        if target < 0 and earlier is not None and earlier.next_offset == offset.next_offset:
            target = earlier.target_offset  # a run that copied nothing yet: the same position, still known
        progress = Progress(offset.next_offset, target, live if isinstance(live, dict) else None)
        self.progress[(offset.topic, offset.partition)] = progress
        if self._on_record is not None:
            self._on_record((offset.topic, offset.partition), progress)


def read_offsets_topic(settings: Mapping[str, str], location: SyncsLocation, cluster: str,
                       timeout: float = DEFAULT_TIMEOUT, connector: str = MIRROR_SOURCE_CONNECTOR) -> dict[Key, Progress]:
    """One whole read of a Connect offsets topic (see :class:`OffsetsTopic`)."""
    reader = OffsetsTopic(settings, location, cluster, connector)
    try:
        return reader.read(timeout)
    finally:
        reader.close()


@dataclass(frozen=True)
class PartitionEvidence:
    """What Kafka says about one source partition's earlier copy.

    ``remote_end`` and ``remote_start``: the remote partition's end and log-start offsets (a
    repartitioning flow: the remote topic's totals); ``newest_sync``: the newest (upstream,
    downstream) offset sync; ``earliest`` and ``latest``: the source partition's offsets.
    """

    remote_start: int = 0
    remote_end: int = 0
    progress: Progress | None = None
    mm2_next: int | None = None
    newest_sync: tuple[int, int] | None = None
    sync_below_mm2: tuple[int, int] | None = None  # the newest sync below ``mm2_next``
    target_match: int | None = None  # from-target: the source offset after the remote's last record
    earliest: int = 0
    latest: int = 0
    # a repartitioning flow: the topic's other partitions have progress (this one was added since)
    siblings_copied: bool = False
    # a repartitioning flow: another flow writing to the remote topic has progress there (its name)
    shared_with: str | None = None


@dataclass(frozen=True)
class Resume:
    """Where a partition's copy starts, on what evidence, and at most how many records already on the
    target it copies again (-1: unknown)."""

    offset: int
    evidence: str
    duplicates: int


def decide_start(key: Key, found: PartitionEvidence, start: str | None, exactly_once: bool = False) -> Resume | None:
    """The start of one partition from its evidence (see the module's order); None when nothing decides it.

    ``exactly_once``: the flow's copies are read read_committed and must hold each record once, so a
    take-over from MM2's offsets starts exactly at MM2's commit (see below)."""
    held = found.remote_end - found.remote_start
    if found.progress is not None:
        at = found.progress
        duplicates = min(max(0, held), max(0, found.remote_end - at.target_offset - 1)) if at.target_offset >= 0 else -1
        return Resume(at.next_offset, "strait-progress", duplicates if held > 0 else 0)
    if found.mm2_next is not None:
        # At-least-once: right after MM2's last offset sync below its commit, so that every committed
        # source offset across the switch translates exactly; the records from that sync to MM2's
        # commit are copied again (and counted in the bound). Exactly-once: at MM2's commit, copying
        # nothing twice; a group committed between MM2's last sync and its commit then translates as
        # MM2 itself would (just after that sync: read again, never skipped).
        anchor = None if exactly_once else found.sync_below_mm2
        start = found.mm2_next if anchor is None else anchor[0] + 1
        return Resume(start, "mm2-offsets", _bound_after(found, start, anchor or found.newest_sync))
    if found.newest_sync is not None:
        upstream, _downstream = found.newest_sync
        return Resume(upstream + 1, "offset-syncs", _bound_after(found, upstream + 1, found.newest_sync))
    if found.siblings_copied:  # a partition added to a topic under copy: all of it
        return Resume(found.earliest, "shared-remote", 0)
    if held <= 0:
        return Resume(found.latest if start == "latest" else found.earliest, "empty-remote", 0)
    if found.shared_with is not None:  # the remote's records may all be its own had its progress been lost
        return Resume(found.latest if start == "latest" else found.earliest, "shared-remote", held)
    if start == "from-target":
        return None if found.target_match is None else Resume(found.target_match, "from-target", 0)
    if start == "earliest":
        return Resume(found.earliest, "start-earliest", held)
    if start == "latest":
        return Resume(found.latest, "start-latest", 0)
    return None


def _bound_after(found: PartitionEvidence, start: int, sync: tuple[int, int] | None) -> int:
    """At most how many records on the remote partition are copies of source offsets >= ``start``.

    Past a sync (u, d) the remote holds ``end - d - 1`` records; when the sync lies at or past
    ``start`` the records of source offsets ``start..u`` (at most one each) are copies too.
    """
    held = found.remote_end - found.remote_start
    if held <= 0:
        return 0
    if sync is None:
        return held
    upstream, downstream = sync
    return max(0, min(held, found.remote_end - downstream - 1 + max(0, upstream - start + 1)))


def decide_starts(flow: str, evidence: Mapping[Key, PartitionEvidence], start: str | None,
                  remote_names: Mapping[str, str], exactly_once: bool = False) -> dict[Key, Resume]:
    """Every partition's start (``exactly_once``: see :func:`decide_start`); ResumeError naming the topics
    a remote copy exists for with no evidence."""
    decided: dict[Key, Resume] = {}
    unknown: dict[str, list[int]] = {}
    for key, found in sorted(evidence.items()):
        resume = decide_start(key, found, start, exactly_once)
        if resume is None:
            unknown.setdefault(key[0], []).append(key[1])
        else:
            decided[key] = resume
    if unknown and start == "from-target":
        named = ", ".join(f"{remote_names.get(t, t)}[{p}]" for t, ps in sorted(unknown.items()) for p in ps)
        raise ResumeError(
            f"flow {flow}: start is from-target, but no source record equals the last record of {named} (same "
            f"timestamp, key, value and headers): those remote partitions are not copies of the source's. "
            f"Choose start: earliest or start: latest for them")
    if unknown:
        named = "; ".join(f"{remote_names.get(t, t)} (partitions {', '.join(map(str, ps))}, "
                          f"{sum(evidence[(t, p)].remote_end - evidence[(t, p)].remote_start for p in ps)} records)"
                          for t, ps in sorted(unknown.items()))
        raise ResumeError(
            f"flow {flow}: the target already holds records of {named}, but no progress of strait's, no "
            f"MirrorMaker 2 offsets and no offset syncs say where they came from, so the copy is not started. "
            f"Set the flow's start: earliest (copy again from the earliest offset: the target then holds "
            f"those records twice) or start: latest (copy only what is produced from now on)")
    return decided


def summarize(decided: Mapping[Key, Resume]) -> dict[str, tuple[str, int]]:
    """Per topic: the evidence its partitions started from (the weakest when they differ) and the
    total bound on records copied again (-1: unknown for a partition)."""
    per_topic: dict[str, tuple[str, int]] = {}
    for (topic, _partition), resume in sorted(decided.items()):
        evidence, total = per_topic.get(topic, (resume.evidence, 0))
        weakest = max(evidence, resume.evidence, key=EVIDENCE.index)
        total = -1 if total < 0 or resume.duplicates < 0 else total + resume.duplicates
        per_topic[topic] = (weakest, total)
    return per_topic


def gather_evidence(sources: FlowSpec, keys: Sequence[Key],
                    timeout: float = DEFAULT_TIMEOUT) -> dict[Key, PartitionEvidence]:
    """Read what Kafka holds about each partition's earlier copy: the remote and source offsets and
    strait's progress always; MM2's offsets, then the offset syncs, only for partitions whose remote
    holds records that strait's progress does not explain."""
    names = dict(sources.remote_names)
    source_admin, target_admin = admin_client(dict(sources.source_admin)), admin_client(dict(sources.target_admin))
    remote = _remote_offsets(target_admin, sources, keys, names, timeout)
    progress = read_offsets_topic(dict(sources.target_consumer), sources.progress, sources.source_alias, timeout)
    missing = [key for key in keys if key not in progress and remote[key][1] > remote[key][0]]
    mm2 = _mm2_offsets(sources, timeout) if missing else {}
    syncs: dict[Key, tuple[int, int]] = {}
    below_mm2: dict[Key, tuple[int, int]] = {}
    if missing and sources.syncs is not None:
        follower = SyncsFollower(dict(sources.syncs_consumer), sources.syncs, timeout)
        try:
            follower.catch_up(timeout)
            syncs = sync_points(follower.index, {key: None for key in missing})
            below_mm2 = sync_points(follower.index, {key: mm2[key].next_offset for key in missing if key in mm2})
        finally:
            follower.close()
    unexplained = [key for key in missing if key not in mm2 and key not in syncs]
    matches = _matches_on_source(sources, unexplained, names, remote, timeout) \
        if sources.start == "from-target" and not sources.repartition else {}
    siblings, shared = _remote_explained(sources, progress, unexplained, names, timeout) \
        if sources.repartition else (set(), {})
    partitions = [TopicPartition(t, p) for t, p in keys]
    earliest = list_offsets(source_admin, sources.source_alias, partitions, "earliest", timeout=timeout)
    latest = list_offsets(source_admin, sources.source_alias, partitions, "latest", timeout=timeout)
    return {key: PartitionEvidence(
        remote_start=remote[key][0], remote_end=remote[key][1], progress=progress.get(key),
        mm2_next=mm2[key].next_offset if key in mm2 and key in missing else None, newest_sync=syncs.get(key),
        sync_below_mm2=below_mm2.get(key), target_match=matches.get(key),
        earliest=max(0, earliest.get(key, 0)), latest=max(0, latest.get(key, 0)),
        siblings_copied=key[0] in siblings, shared_with=shared.get(key[0])) for key in keys}


def _remote_explained(sources: FlowSpec, progress: Mapping[Key, Progress], unexplained: Sequence[Key],
                      names: Mapping[str, str], timeout: float) -> tuple[set[str], dict[str, str]]:
    """A repartitioning flow, its source topics with partitions no evidence explains: those whose other
    partitions have progress, and per other topic the flow writing to the same remote topic whose
    progress there explains the remote's records."""
    topics = sorted({topic for topic, _ in unexplained})
    siblings = {topic for topic in topics if any(key[0] == topic for key in progress)}
    shared: dict[str, str] = {}
    read: dict[SyncsLocation, dict[Key, Progress]] = {}
    for topic in topics:
        for other in sources.shared:
            if topic in siblings or topic in shared or other.remote != names.get(topic, topic):
                continue
            if other.progress not in read:
                read[other.progress] = read_offsets_topic(dict(sources.target_consumer), other.progress,
                                                          other.source_alias, timeout)
            if any(key[0] == other.topic for key in read[other.progress]):
                shared[topic] = other.flow
                log.warning("flow=%s topic=%s remote=%s shared_with=%s: the remote's records are taken for "
                            "the other flow's; this flow has no progress there and copies the topic from its "
                            "start (were its progress topic %s lost, its records are copied twice)",
                            sources.flow, topic, names.get(topic, topic), other.flow, sources.progress.topic)
    return siblings, shared


def _matches_on_source(sources: FlowSpec, keys: Sequence[Key], names: Mapping[str, str],
                       remote: Mapping[Key, tuple[int, int]], timeout: float) -> dict[Key, int]:
    """from-target: for each partition, the source offset after the record equal to its remote's last one."""
    found: dict[Key, int] = {}
    target = Consumer({**dict(sources.target_consumer), "group.id": "strait-progress", "enable.auto.commit": False,
                       "logger": librdkafka_log})
    source = Consumer({**dict(sources.source_consumer), "group.id": "strait-progress", "enable.auto.commit": False,
                       "enable.partition.eof": True, "logger": librdkafka_log})
    try:
        for key in keys:
            remote_topic, partition = remote_partition_of(names, key)
            last = _one_record(target, TopicPartition(remote_topic, partition, remote[key][1] - 1), timeout)
            if last is not None:
                match = _find_on_source(source, key, last, timeout)
                if match is not None:
                    found[key] = match
                    log.info("flow=%s topic=%s partition=%d from-target: the remote's last record is source offset "
                             "%d", sources.flow, key[0], key[1], match - 1)
    finally:
        target.close()
        source.close()
    return found


def _one_record(consumer: Consumer, where: TopicPartition, timeout: float) -> Any:
    consumer.assign([where])
    message = consumer.poll(timeout)
    consumer.unassign()
    return message if message is not None and message.error() is None else None


def _find_on_source(consumer: Consumer, key: Key, last: Any, timeout: float) -> int | None:
    """The offset after the source record of ``key`` equal to ``last``, searched from the first record
    with its timestamp on (timestamps need not grow, so the search goes on up to MATCH_SCAN_RECORDS)."""
    stamp = last.timestamp()[1]
    start = consumer.offsets_for_times([TopicPartition(key[0], key[1], stamp)], timeout=timeout)[0].offset
    if start < 0:
        return None
    consumer.assign([TopicPartition(key[0], key[1], start)])
    try:
        deadline, scanned = time.monotonic() + timeout, 0
        while scanned < MATCH_SCAN_RECORDS and time.monotonic() < deadline:
            # short waits: a batch returns at its count or its wait, and the partition's end comes first
            for message in consumer.consume(1000, min(MATCH_POLL_SECONDS, max(0.0, deadline - time.monotonic()))):
                if message.error() is not None:
                    if message.error().code() == KafkaError._PARTITION_EOF:
                        return None  # the end of the partition: no equal record
                    continue
                scanned += 1
                if (message.key(), message.value(), message.headers()) == (last.key(), last.value(), last.headers()):
                    return message.offset() + 1
        return None
    finally:
        consumer.unassign()


def _mm2_offsets(sources: FlowSpec, timeout: float) -> dict[Key, Progress]:
    """MM2's committed offsets; none (with a warning) when the replicator may not read its topic."""
    if sources.mm2_offsets is None:
        return {}
    try:
        return read_offsets_topic(dict(sources.target_consumer), sources.mm2_offsets, sources.source_alias, timeout,
                                  sources.mm2_connector)
    except ResumeNotAuthorizedError as exc:
        log.warning("flow=%s MirrorMaker 2's offsets not read (grant READ and DESCRIBE on %s to use them): %s",
                    sources.flow, sources.mm2_offsets.topic, exc)
        return {}


def mm2_task_transactional_ids(sources: FlowSpec, timeout: float = DEFAULT_TIMEOUT) -> list[str]:
    """The transactional ids MirrorMaker 2's source tasks use in its exactly-once mode (dedicated
    mode: ``<source>-mm2-<connector>-<task>``), one per task of its newest task generation, read from
    its Connect config topic on the target (``mm2-configs.<source>.internal``). None when MM2 never ran
    there, ran in a Connect cluster (the flow names its offsets topic: the cluster's group is not
    known), ran without its exactly-once mode (Connect records the task count it fences only in that
    mode), or the topic may not be read (a warning)."""
    dedicated = dedicated_mm2_offsets_topic(sources.source_alias)
    if sources.mm2_offsets is None or sources.mm2_offsets.topic != dedicated:
        return []
    configs = SyncsLocation(sources.mm2_offsets.alias, f"mm2-configs.{sources.source_alias}.internal")
    counts: list[int] = []

    def task_count(key: bytes | None, value: bytes | None, _offset: int) -> None:
        if key != b"tasks-fencing-" + sources.mm2_connector.encode():
            return
        try:
            parsed = json.loads(value) if value is not None else None
            count = parsed.get("task-count") if isinstance(parsed, dict) else None
        except ValueError:
            count = None
        if isinstance(count, int) and count >= 0:
            counts.append(count)
    reader = OffsetsTopic(dict(sources.target_consumer), configs, sources.source_alias, sources.mm2_connector,
                          on_raw=task_count)
    try:
        reader.read(timeout)
    except ResumeNotAuthorizedError as exc:
        log.warning("flow=%s MirrorMaker 2's tasks not known (grant READ and DESCRIBE on %s to fence their open "
                    "transactions): %s", sources.flow, configs.topic, exc)
        return []
    finally:
        reader.close()
    tasks = counts[-1] if counts else 0  # the newest generation's
    return [f"{mm2_group(sources)}-{sources.mm2_connector}-{task}" for task in range(tasks)]


def mm2_group(sources: FlowSpec) -> str:
    """The group MirrorMaker 2's workers (dedicated mode) join on the target for the flow's source."""
    return f"{sources.source_alias}-mm2"


_GONE_GROUP_STATES = ("EMPTY", "DEAD")  # DEAD: also a group that does not exist
MM2_GROUP_CALL_SECONDS = 5.0


def mm2_workers_gone(sources: FlowSpec, wait_seconds: float) -> bool:
    """Whether MirrorMaker 2's worker group on the target is confirmed to have no member (Empty, or no
    such group), waiting up to ``wait_seconds`` for a crashed worker's session to expire (Connect's
    default is 10 s). Anything short of that (live members, a group the principal may not describe, a
    failed call) is False: a live MM2's tasks are never fenced."""
    admin = admin_client(dict(sources.target_admin))
    group = mm2_group(sources)
    deadline = time.monotonic() + wait_seconds
    while True:
        state = _group_state(admin, group)
        if state in _GONE_GROUP_STATES:
            return True
        if time.monotonic() >= deadline:
            log.info("flow=%s MirrorMaker 2's worker group=%s cluster=%s state=%s: not known to be gone",
                     sources.flow, group, sources.target_alias, state)
            return False
        time.sleep(1.0)


def _group_state(admin: AdminClient, group: str) -> str:
    """The group's state as the broker reports it, upper case ("LIVE" while it has members; "DEAD" when
    there is no such group; "ERROR: ..." when the call fails). Kafka's DescribeGroups through the older
    ``list_groups`` call: ``describe_consumer_groups`` refuses a Connect group, and
    ``list_consumer_groups`` leaves Connect groups out."""
    try:
        with warnings.catch_warnings():  # deprecated, but the only call of this client for a Connect group
            warnings.simplefilter("ignore", DeprecationWarning)
            found = admin.list_groups(group, timeout=MM2_GROUP_CALL_SECONDS)
    except Exception as exc:  # noqa: BLE001 - any failure means "not known to be gone"
        return f"ERROR: {type(exc).__name__}: {exc}"
    for meta in found:
        if meta.id != group:
            continue
        if meta.error is not None and meta.error.code() != KafkaError.GROUP_ID_NOT_FOUND:
            return f"ERROR: {meta.error.str()}"
        return "LIVE" if meta.members else str(meta.state or "DEAD").upper()
    return "DEAD"


def _remote_offsets(admin: AdminClient, sources: FlowSpec, keys: Sequence[Key], names: Mapping[str, str],
                    timeout: float) -> dict[Key, tuple[int, int]]:
    """(log start, end) of each key's remote partition; a repartitioning flow: of its whole remote topic."""
    if sources.repartition:
        counts = topic_partitions(admin, sources.target_alias, timeout)
        wanted = [TopicPartition(names.get(t, t), p) for t in {t for t, _ in keys}
                  for p in range(counts.get(names.get(t, t), 0))]
    else:
        wanted = [TopicPartition(names.get(t, t), p) for t, p in keys]
    low = list_offsets(admin, sources.target_alias, wanted, "earliest", timeout=timeout, skip_unknown=True)
    high = list_offsets(admin, sources.target_alias, wanted, "latest", timeout=timeout, skip_unknown=True)
    if sources.repartition:
        totals: dict[str, tuple[int, int]] = {}
        for (remote, p), end in high.items():
            start, stop = totals.get(remote, (0, 0))
            totals[remote] = (start + max(0, low.get((remote, p), 0)), stop + max(0, end))
        return {key: totals.get(names.get(key[0], key[0]), (0, 0)) for key in keys}
    return {key: (max(0, low.get(remote_partition_of(names, key), 0)),
                  max(0, high.get(remote_partition_of(names, key), 0))) for key in keys}


def sync_points(index: SyncIndex, limits: Mapping[Key, int | None]) -> dict[Key, tuple[int, int]]:
    """Each partition's (upstream, downstream) sync of the greatest upstream offset below its limit
    (None: the newest sync), where there is one."""
    found: dict[Key, tuple[int, int]] = {}
    for (topic, partition), limit in limits.items():
        history = index.history(topic, partition)
        if history is None:
            continue
        point = history.translator.last_copied() if limit is None else history.translator.last_below(limit)
        if point is not None:
            found[(topic, partition)] = (point.upstream, point.downstream)
    return found


def remote_partition_of(remote_names: Mapping[str, str], key: Key) -> Key:
    """The remote partition a source partition is copied to (same number, remote name)."""
    return remote_names.get(key[0], key[0]), key[1]


def keys_of(partitions: Sequence[tuple[str, int]]) -> list[Key]:
    """Every (topic, partition) of (topic, partition count) pairs."""
    return [(topic, p) for topic, count in partitions for p in range(count)]


PROGRESS_SEGMENT_MS = "600000"  # segments roll every 10 min, so compaction keeps about a record per partition


def progress_topic_spec(name: str, replication_factor: int) -> TopicSpec:
    """The progress topic as the replicator creates it: 1 partition, compacted, segments rolled often
    (tasks write a record every half second per moving partition)."""
    return TopicSpec(name, 1, replication_factor, {"cleanup.policy": "compact", "segment.ms": PROGRESS_SEGMENT_MS})


CONNECT_OFFSETS_PARTITIONS = 25  # Kafka Connect's default for an offsets topic it creates
STILL_COPYING_CHECK_SECONDS = 3.0


def hand_over_to_mm2(config: StraitConfig, flow: FlowConfig, timeout: float = DEFAULT_TIMEOUT,
                     settle: float = STILL_COPYING_CHECK_SECONDS) -> dict[Key, int]:
    """Write strait's progress of every partition of the flow's topics into MM2's Connect offsets topic, so MirrorMaker 2
    started afterwards goes on where strait's copies end; returns each partition's next offset.

    The records land in the partition Connect's producer would choose (Kafka's murmur2 of the key),
    so MM2 reads them as its own. strait's own progress records of those partitions are removed
    (tombstones), so a later take-over reads MM2's. ResumeError when strait has no progress of the
    flow, or when it still moves (the flow still copies: stop it first).
    """
    names = flow.topic_names()
    target = config.cluster(flow.target)
    reader = OffsetsTopic(target.librdkafka_config("consumer"), names.progress, flow.source)
    try:
        before = dict(reader.read(timeout))
        time.sleep(settle)
        after = reader.read(timeout)
    finally:
        reader.close()
    topics = flow.topic_filter()
    after = {key: progress for key, progress in after.items() if topics.should_replicate_topic(key[0])}
    if not after:
        raise ResumeError(f"flow {flow.name}: no progress of strait's for the flow's topics in {names.progress.topic} "
                          f"on {flow.target}: nothing to hand over")
    moved = sorted(key for key, progress in after.items() if before.get(key) != progress)
    if moved:
        raise ResumeError(f"flow {flow.name} is still copying ({moved[0][0]}[{moved[0][1]}] moved in {settle:.0f}s): "
                          f"stop it first (strait flow disable {flow.name}, or stop the replicator)")
    admin = admin_client(target.librdkafka_config("admin"))
    create_topics(admin, flow.target, [TopicSpec(names.mm2_offsets.topic, CONNECT_OFFSETS_PARTITIONS,
                                                 flow.internal_topic_replication_factor("offset_syncs"),
                                                 {"cleanup.policy": "compact"})], timeout)
    producer = Producer({**target.librdkafka_config("producer"), "partitioner": "murmur2",
                         "logger": librdkafka_log})
    errors: list[KafkaError] = []

    def delivered(err: KafkaError | None, _msg: object) -> None:
        if err is not None:
            errors.append(err)
    for (topic, partition), progress in sorted(after.items()):
        record = SourceOffset(names.mm2_connector, flow.source, topic, partition, progress.next_offset - 1)
        producer.produce(names.mm2_offsets.topic, key=record.key_bytes(), value=record.value_bytes(),
                         on_delivery=delivered)
    _flushed(producer, errors, timeout, f"flow {flow.name}: writing to {names.mm2_offsets.topic} on {flow.target}")
    # strait's own progress now belongs to MM2: a later take-over must read MM2's, which moves on
    for topic, partition in sorted(after):
        key, _value = progress_record(flow.source, topic, partition, after[(topic, partition)])
        producer.produce(names.progress.topic, key=key, value=None, partition=0, on_delivery=delivered)
    _flushed(producer, errors, timeout, f"flow {flow.name}: removing strait's progress from {names.progress.topic}")
    log.info("flow=%s handed over to MirrorMaker 2 partitions=%d topic=%s", flow.name, len(after),
             names.mm2_offsets.topic)
    return {key: progress.next_offset for key, progress in after.items()}


def _flushed(producer: Producer, errors: list[KafkaError], timeout: float, action: str) -> None:
    left = producer.flush(timeout)
    if errors or left:
        raise ResumeError(f"{action} failed: {errors[0].str() if errors else f'{left} records not acknowledged'}")


def resume_report_key(namespace: str, flow: str) -> str:
    """Redis key of the flow's last resume report (published by the replicator, read by `strait status`)."""
    return f"{namespace}:resume:{flow}"


def resume_report(decided: Mapping[Key, Resume]) -> dict[str, Any]:
    """What `strait status` shows of a query start: per topic the evidence and the duplicates bound."""
    return {"at": round(time.time(), 3),
            "topics": {topic: {"evidence": evidence, "duplicates_at_most": bound}
                       for topic, (evidence, bound) in summarize(decided).items()}}


def read_resume_report(client: Any, flow: str, namespace: str = "strait") -> dict[str, Any] | None:
    """The flow's last resume report, or None (none published, or unreadable)."""
    raw = client.get(resume_report_key(namespace, flow))
    try:
        value = json.loads(raw) if raw else None
    except ValueError:
        return None
    return value if isinstance(value, dict) else None
