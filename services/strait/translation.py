"""A flow's offset translation: its offset-syncs topic read into translators, group offsets translated.

Shared by the checkpoint service and the command line (`strait offsets translate`, failover).

Three rules keep every answer exact or absent, never wrong:

* **Complete history only.** :class:`~strait.offsets.PartitionTranslator` assumes it saw a
  partition's syncs from the first copied record on. The syncs topic is compacted, so after
  compaction only the newest sync per partition plus the uncleaned tail survive. :class:`SyncIndex`
  notices missing offsets in the syncs topic; a partition whose first sync came after such a hole
  has a *floor* (its oldest known upstream offset), and a committed offset below it has no answer.
* **Caught up first.** :class:`SyncsFollower` reports ready only once it has read up to the end
  offset the syncs topic had when it started, so a restarted reader never answers from a partial
  history.
* **Tail gaps proven, not guessed.** A committed offset past the last copied record + 1 (e.g. a
  group at the end of a transactional topic, past the final commit marker) is translated only when
  :class:`TailProbe` shows that the source has no record in between that the replicator would copy.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from strait.config.model import FlowConfig, StraitConfig, SyncsLocation
from strait.errors import StraitError
from strait.kafka.admin import KafkaPermissionError, admin_client, explain_error, topic_partitions
from strait.policy import should_replicate_topic
from strait.offsets import PartitionTranslator, SyncPoint
from strait.records import EXACT_SYNC_HEADER, Checkpoint, OffsetSync, RecordFormatError

log = logging.getLogger(__name__)
librdkafka_log = logging.getLogger("strait.librdkafka")

DEFAULT_TIMEOUT = 30.0

CheckpointKey = tuple[str, str, int]  # group, remote topic, partition


class TranslationError(StraitError):
    """The syncs or the group's offsets could not be read; the message names cluster and topic."""


class PartitionHistory:
    """One source partition's syncs; below ``floor`` the history may be cut by compaction."""

    def __init__(self, complete: bool) -> None:
        self.translator = PartitionTranslator()
        self.complete = complete
        self.floor: int | None = None

    def add(self, point: SyncPoint, exact: bool = True) -> None:
        """Record one sync in emission order (``exact``: strait wrote it, see PartitionTranslator.add)."""
        self.translator.add(point, exact)
        if self.floor is None or point.upstream < self.floor:
            self.floor = point.upstream

    def translate(self, committed: int) -> int | None:
        """The exact target offset for ``committed``, or None when unknown."""
        if not self.complete and (self.floor is None or committed < self.floor):
            return None
        return self.translator.translate(committed)


class SyncIndex:
    """Every partition's sync history, fed with the syncs topic's records in offset order."""

    def __init__(self) -> None:
        self._histories: dict[tuple[str, int], PartitionHistory] = {}
        self._next_offset = 0
        self._hole_seen = False
        self.corrupt = 0

    def add_record(self, offset: int, key: bytes | None, value: bytes | None,
                   headers: Sequence[tuple[str, bytes | None]] | None = None) -> OffsetSync | None:
        """Add one record of the syncs topic (with its headers: strait's syncs carry
        :data:`EXACT_SYNC_HEADER`); a corrupt one is counted and skipped (None)."""
        if offset != self._next_offset:
            self._hole_seen = True  # compaction (or deletion) removed records before this one
        self._next_offset = offset + 1
        try:
            sync = OffsetSync.from_record(key, value)
        except RecordFormatError as exc:
            self.corrupt += 1
            log.warning("offset sync skipped offset=%d reason=%s", offset, exc)
            return None
        self.add(sync, exact=any(name == EXACT_SYNC_HEADER for name, _value in headers or ()))
        return sync

    def add(self, sync: OffsetSync, exact: bool) -> None:
        """Add one decoded sync; ``exact`` when strait wrote it."""
        key = (sync.topic, sync.partition)
        history = self._histories.get(key)
        if history is None:
            history = self._histories[key] = PartitionHistory(complete=not self._hole_seen)
        history.add(SyncPoint(sync.upstream_offset, sync.downstream_offset), exact)

    def history(self, topic: str, partition: int) -> PartitionHistory | None:
        """The partition's history, or None when no sync was seen for it."""
        return self._histories.get((topic, partition))

    def partitions(self) -> list[tuple[str, int]]:
        """Every (source topic, partition) with syncs."""
        return sorted(self._histories)


# librdkafka wants a group.id even for a consumer that only assigns; it then looks up this group's coordinator
TRANSLATION_GROUP = "strait-translation"


def _consumer(settings: Mapping[str, str], **extra: object) -> Consumer:
    return Consumer({**settings, "group.id": TRANSLATION_GROUP, "enable.auto.commit": False,
                     "enable.auto.offset.store": False, "logger": librdkafka_log, **extra})


# A partition whose leader moves or was just created answers "not leader" for a moment: asked again.
_LEADER_MOVING = (KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE)
_LEADER_RETRY_SECONDS = 0.2


def high_watermark(consumer: Consumer, partition: TopicPartition, timeout: float) -> int:
    """The partition's end offset, asked again while its leader moves (until ``timeout``); a
    KafkaException when it cannot be had."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return int(consumer.get_watermark_offsets(partition, timeout=max(0.5, deadline - time.monotonic()))[1])
        except KafkaException as exc:
            error = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
            moving = error is not None and error.code() in _LEADER_MOVING
            if not moving or time.monotonic() + _LEADER_RETRY_SECONDS > deadline:
                raise
            time.sleep(_LEADER_RETRY_SECONDS)


def read_committed(settings: Mapping[str, str]) -> dict[str, str]:
    """Source consumer settings as the replicator reads: read_committed (librdkafka's default, which its
    copy consumer keeps) unless configured otherwise."""
    return {"isolation.level": "read_committed", **settings}


class SyncsFollower:
    """Reads a syncs topic from its beginning into a :class:`SyncIndex` and keeps tailing it.

    Not thread-safe: one thread calls :meth:`poll` and reads :attr:`index`.
    """

    def __init__(self, settings: Mapping[str, str], location: SyncsLocation,
                 timeout: float = DEFAULT_TIMEOUT) -> None:
        self.location = location
        self.index = SyncIndex()
        self._consumer = _consumer(settings)
        partition = TopicPartition(location.topic, 0)
        try:
            self._end_at_start = high_watermark(self._consumer, partition, timeout)
        except KafkaException as exc:
            self._consumer.close()
            raise TranslationError(f"cluster {location.alias}: reading the end of {location.topic}: "
                                   f"{exc.args[0].str() if exc.args else exc}") from None
        self._position = 0
        self._consumer.assign([TopicPartition(location.topic, 0, -2)])  # -2: from the beginning
        self.ready = self._end_at_start <= 0

    @property
    def position(self) -> int:
        """The next syncs-topic offset to read."""
        return self._position

    def poll(self, budget: float, max_records: int = 10000) -> int:
        """Read what arrives within ``budget`` seconds; returns the number of records read."""
        deadline = time.monotonic() + budget
        read = 0
        while read < max_records:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            messages = self._consumer.consume(num_messages=min(1000, max_records - read), timeout=left)
            for message in messages:
                if message.error() is not None:
                    if message.error().code() != KafkaError._PARTITION_EOF:
                        log.warning("topic=%s read error: %s", self.location.topic, message.error())
                    continue
                self.index.add_record(message.offset(), message.key(), message.value(), message.headers())
                self._position = message.offset() + 1
                read += 1
            if not messages:
                self._note_position()  # past commit markers (syncs written in transactions), which no message shows
                break
        if not self.ready and self._position >= self._end_at_start:
            self.ready = True
            log.info("topic=%s caught up position=%d partitions=%d", self.location.topic,
                     self._position, len(self.index.partitions()))
        return read

    def _note_position(self) -> None:
        try:
            found = self._consumer.position([TopicPartition(self.location.topic, 0)])[0].offset
        except KafkaException:
            return
        self._position = max(self._position, found)

    def catch_up(self, timeout: float) -> None:
        """Read until ready; raises TranslationError at the timeout."""
        deadline = time.monotonic() + timeout
        while not self.ready:
            if time.monotonic() > deadline:
                raise TranslationError(
                    f"cluster {self.location.alias}: read {self._position} of {self._end_at_start} records of "
                    f"{self.location.topic} in {timeout:.0f}s; is the cluster reachable?")
            self.poll(1.0)

    def close(self) -> None:
        """Close the consumer."""
        self._consumer.close()


# A partition the tail probe could not read in time (its leader died) costs each later pass nothing for this long.
PROBE_UNREADABLE_PAUSE_SECONDS = 10.0
# A topic the probe may not read (no READ ACL) is tried again after this long: the grant may come.
PROBE_DENIED_PAUSE_SECONDS = 300.0


class TailProbe:
    """Checks on the source that no record the replicator would copy lies in an offset range.

    It reads with the replicator's isolation level (:func:`read_committed`), so the aborted records
    and markers the copy skips do not count as records. It needs READ on the source topics; without
    it a commit past the last copied record waits for the copy to reach it (a warning says so).
    """

    def __init__(self, settings: Mapping[str, str], timeout: float = 5.0,
                 unreadable_pause: float = PROBE_UNREADABLE_PAUSE_SECONDS) -> None:
        self._consumer = _consumer(read_committed(settings), **{"enable.partition.eof": True})
        self._timeout = timeout
        self._unreadable_pause = unreadable_pause
        self._proven: set[tuple[str, int, int, int]] = set()  # offsets never change: a proof stays true
        self._unreadable_until: dict[tuple[str, int], float] = {}  # (topic, partition) -> monotonic time
        self._group_denied_warned = float("-inf")  # monotonic time of the last warning about the group

    def empty_between(self, topic: str, partition: int, start: int, end: int) -> bool:
        """True when the source shows no record in ``[start, end)`` and its readable end is >= ``end``.

        A partition that gave no answer within the timeout (its leader died and none is elected yet)
        is not read again for a pause: until then it is not shown empty, at once.
        """
        key = (topic, partition, start, end)
        if key in self._proven:
            return True
        if time.monotonic() < self._unreadable_until.get((topic, partition), 0.0):
            return False
        try:
            empty = self._read_between(topic, partition, start, end)
        except KafkaPermissionError as exc:
            self._unreadable_until[(topic, partition)] = time.monotonic() + PROBE_DENIED_PAUSE_SECONDS
            log.warning("probe topic=%s partition=%d %s", topic, partition, exc)
            return False
        if empty is None:
            self._unreadable_until[(topic, partition)] = time.monotonic() + self._unreadable_pause
            log.info("probe topic=%s partition=%d no answer within %.0fs: not read again for %.0fs",
                     topic, partition, self._timeout, self._unreadable_pause)
            return False
        self._unreadable_until.pop((topic, partition), None)
        if empty:
            if len(self._proven) > 100_000:
                self._proven.clear()
            self._proven.add(key)
        return empty

    def _read_between(self, topic: str, partition: int, start: int, end: int) -> bool | None:
        """Whether ``[start, end)`` is empty and readable; None when the source gave no answer in time.

        Raises KafkaPermissionError when the probe may not read the topic.
        """
        self._consumer.assign([TopicPartition(topic, partition, start)])
        deadline = time.monotonic() + self._timeout
        try:
            while time.monotonic() < deadline:
                message = self._consumer.poll(max(0.0, deadline - time.monotonic()))
                if message is None:
                    continue
                error = message.error()
                if error is None:
                    return message.offset() >= end
                if error.code() == KafkaError._PARTITION_EOF:
                    return message.offset() >= end
                if error.code() == KafkaError.GROUP_AUTHORIZATION_FAILED:
                    self._warn_group_denied(error)
                    continue  # the coordinator lookup failed, not the read: the assigned partition still answers
                if error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED:
                    raise KafkaPermissionError(
                        f"not authorized to read the source topic ({error.str()}): a group's commit past the last "
                        f"copied record is translated once the copy reaches it; grant READ on topic {topic} to "
                        f"strait's principal to translate it at once")
                log.warning("probe topic=%s partition=%d error: %s", topic, partition, error)
                return False
            return None
        finally:
            self._consumer.unassign()

    def _warn_group_denied(self, error: KafkaError) -> None:
        """One warning per PROBE_DENIED_PAUSE_SECONDS that the probe's group coordinator lookup is refused."""
        now = time.monotonic()
        if now - self._group_denied_warned < PROBE_DENIED_PAUSE_SECONDS:
            return
        self._group_denied_warned = now
        log.warning("probe group=%s not authorized to look up the group's coordinator (%s): the probe reads by "
                    "assignment and goes on; grant DESCRIBE on group %s to strait's principal on the source",
                    TRANSLATION_GROUP, error.str(), TRANSLATION_GROUP)

    def close(self) -> None:
        """Close the consumer."""
        self._consumer.close()


@dataclass(frozen=True)
class CommittedOffset:
    """A source group's committed position on one partition."""

    topic: str
    partition: int
    offset: int
    metadata: str = ""


@dataclass(frozen=True)
class PartitionTranslation:
    """One partition of a group translated: ``downstream`` is None when there is no exact answer yet.

    ``lag_records`` counts the committed source records not translatable yet (0 when translated).
    """

    topic: str
    partition: int
    remote_topic: str
    upstream: int
    downstream: int | None
    metadata: str
    lag_records: int
    reason: str = ""


def replicated_partitions(admin: AdminClient, flow: FlowConfig,
                          timeout: float = DEFAULT_TIMEOUT) -> list[TopicPartition]:
    """Every partition of the source topics the flow replicates."""
    policy, topic_filter = flow.policy(), flow.topic_filter()
    return [TopicPartition(topic, p) for topic, count in sorted(topic_partitions(admin, flow.source, timeout).items())
            if should_replicate_topic(policy, topic_filter, topic, flow.target, flow.heartbeats_replication_enabled)
            for p in range(count)]


_COORDINATOR_MOVING = (KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
                       KafkaError.COORDINATOR_NOT_AVAILABLE)


def committed_offsets(settings: Mapping[str, str], alias: str, group: str, partitions: list[TopicPartition],
                      timeout: float = DEFAULT_TIMEOUT) -> list[CommittedOffset]:
    """The group's committed offsets on these partitions (those without a commit are left out).

    Read through a consumer that never joins the group: the AdminClient's offset listing can crash
    the process in librdkafka when the group coordinator moves (confluent-kafka-python #1982). The
    read does not ask for stable offsets: librdkafka asks for them under read_committed, and Kafka's
    group coordinator then answers only once every write to the group's offsets partition is
    replicated, so while that partition waits for a dead follower to leave its in-sync replicas the
    read times out (every 5 s of such a stall held back each checkpoint pass). Unstable reads answer
    with what is committed (replicated); offsets of a transaction still open are not among them.
    """
    if not partitions:
        return []
    consumer = Consumer({**settings, "group.id": group, "enable.auto.commit": False, "logger": librdkafka_log,
                         "isolation.level": "read_uncommitted"})
    deadline = time.monotonic() + timeout
    try:
        while True:
            try:
                result = consumer.committed(partitions, timeout=max(1.0, deadline - time.monotonic()))
                break
            except KafkaException as exc:
                # The coordinator moving or loading (NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS) passes.
                error = exc.args[0]
                passing = error.retriable() or error.code() in _COORDINATOR_MOVING
                if not passing or time.monotonic() > deadline:
                    raise explain_error(exc, alias, f"reading committed offsets of group {group}") from None
                time.sleep(0.5)
    finally:
        consumer.close()
    offsets = [CommittedOffset(tp.topic, tp.partition, tp.offset, tp.metadata or "")
               for tp in result if tp.error is None and tp.offset >= 0]
    return sorted(offsets, key=lambda c: (c.topic, c.partition))


def translate_offset(flow: FlowConfig, index: SyncIndex, committed: CommittedOffset,
                     probe: TailProbe | None = None) -> PartitionTranslation:
    """Translate one committed offset exactly, or say why it cannot be yet."""
    remote = flow.topic_names().checkpointed(committed.topic)
    history = index.history(committed.topic, committed.partition)

    def result(downstream: int | None, lag: int, reason: str = "") -> PartitionTranslation:
        return PartitionTranslation(committed.topic, committed.partition, remote, committed.offset, downstream,
                                    committed.metadata, lag, reason)

    if history is None:
        return result(None, committed.offset, "no offset syncs for this partition (not replicated yet)")
    downstream = history.translate(committed.offset)
    if downstream is not None:
        return result(downstream, 0)
    last = history.translator.last_copied()
    if not history.complete and history.floor is not None and committed.offset < history.floor:
        return result(None, 0, f"older than the oldest sync kept after compaction (upstream {history.floor})")
    assert last is not None
    if probe is not None and probe.empty_between(committed.topic, committed.partition, last.upstream + 1,
                                                 committed.offset):
        return result(last.downstream + 1, 0)
    return result(None, committed.offset - last.upstream - 1,
                  f"not replicated yet (last copied upstream offset {last.upstream})")


def translate_group(flow: FlowConfig, index: SyncIndex, offsets: Iterable[CommittedOffset],
                    probe: TailProbe | None = None) -> list[PartitionTranslation]:
    """Translate a group's committed offsets on the topics the flow replicates."""
    topic_filter = flow.topic_filter()
    return [translate_offset(flow, index, c, probe) for c in offsets
            if topic_filter.should_replicate_topic(c.topic) or index.history(c.topic, c.partition)]


def load_index(config: StraitConfig, flow: FlowConfig, timeout: float = DEFAULT_TIMEOUT) -> SyncIndex:
    """Read the flow's whole syncs topic once (for one-shot commands)."""
    why = flow.no_offset_syncs_reason()
    if why is not None:
        raise TranslationError(f"flow {flow.name} writes no offset syncs ({why}): its offsets cannot be translated "
                               "and its copies cannot be matched to source offsets")
    location = flow.topic_names().offset_syncs
    follower = SyncsFollower(config.cluster(location.alias).librdkafka_config("consumer"), location, timeout)
    try:
        follower.catch_up(timeout)
        return follower.index
    finally:
        follower.close()


def translate_source_group(config: StraitConfig, flow: FlowConfig, group: str,
                           timeout: float = DEFAULT_TIMEOUT) -> list[PartitionTranslation]:
    """Translate a source group's current committed offsets for ``flow`` (reads the syncs topic)."""
    index = load_index(config, flow, timeout)
    source = config.cluster(flow.source)
    partitions = replicated_partitions(admin_client(source.librdkafka_config("admin")), flow, timeout)
    offsets = committed_offsets(source.librdkafka_config("consumer"), flow.source, group, partitions, timeout)
    probe = TailProbe(source.librdkafka_config("consumer"))
    try:
        return translate_group(flow, index, offsets, probe)
    finally:
        probe.close()


@dataclass(frozen=True)
class StoredCheckpoint:
    """A checkpoint as read from the checkpoints topic, with the time it was written (unix seconds)."""

    checkpoint: Checkpoint
    written_at: float


def read_stored_checkpoints(settings: Mapping[str, str], topic: str, timeout: float = DEFAULT_TIMEOUT,
                            on_corrupt: Callable[[], None] | None = None) -> dict[CheckpointKey, StoredCheckpoint]:
    """The newest checkpoint per (group, remote topic, partition) in a checkpoints topic.

    Corrupt records are skipped, logged and reported through ``on_corrupt``.
    """
    consumer = Consumer({**settings, "group.id": "strait-checkpoint-load", "enable.auto.commit": False,
                         "logger": librdkafka_log})
    latest: dict[CheckpointKey, StoredCheckpoint] = {}
    try:
        try:
            high = high_watermark(consumer, TopicPartition(topic, 0), timeout)
        except KafkaException as exc:
            raise TranslationError(f"reading the end of {topic}: {exc.args[0].str() if exc.args else exc}") from None
        if high <= 0:
            return latest
        consumer.assign([TopicPartition(topic, 0, -2)])
        deadline, position = time.monotonic() + timeout, 0
        while position < high:
            if time.monotonic() > deadline:
                raise TranslationError(f"reading {topic}: {position} of {high} records in {timeout:.0f}s")
            for message in consumer.consume(num_messages=1000, timeout=1.0):
                if message.error() is not None:
                    continue
                position = message.offset() + 1
                try:
                    checkpoint = Checkpoint.from_record(message.key(), message.value())
                except RecordFormatError as exc:
                    log.warning("topic=%s corrupt checkpoint skipped offset=%d: %s", topic, message.offset(), exc)
                    if on_corrupt is not None:
                        on_corrupt()
                    continue
                key = (checkpoint.group, checkpoint.topic, checkpoint.partition)
                latest[key] = StoredCheckpoint(checkpoint, message.timestamp()[1] / 1000)
        return latest
    finally:
        consumer.close()


def read_checkpoints(settings: Mapping[str, str], topic: str, timeout: float = DEFAULT_TIMEOUT,
                     on_corrupt: Callable[[], None] | None = None) -> dict[CheckpointKey, Checkpoint]:
    """The newest checkpoint per (group, remote topic, partition), without their times."""
    return {key: stored.checkpoint
            for key, stored in read_stored_checkpoints(settings, topic, timeout, on_corrupt).items()}
