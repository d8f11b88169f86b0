"""Failover and failback of a flow: drain, stop, translate the groups, write their offsets, report.

``failover(A->B)`` moves consumer groups from the source A to the target B:

1. **Drain.** Wait until every source partition the flow replicates is copied up to its
   read_committed end (its last stable offset): the newest offset sync covers it, or the source
   shows no copyable record between the last copy and the end (transaction markers). A drain that
   does not finish within the timeout is reported and nothing is changed.
2. **Stop the flow** (a new stored configuration version with the flow disabled) *before* writing
   offsets: once drained the replicator has nothing left to copy, and a stopped flow can no longer
   write copies (e.g. a replayed batch) behind the offsets written next. Producers still writing
   to A after this point show up as lost records in the report.
3. **Translate** each group's committed source offsets exactly (the flow's syncs), emit final
   checkpoints and write the offsets to the target group when it has no active members there.
4. **Report**, per group and partition: committed source offset, target offset, and, counted from
   the records themselves (key, value, timestamp, headers), the records that would be *lost* (unread
   on the source but not at/after the target offset) and *re-read* (at/after the target offset but
   not among the unread source records). Both are expected to be 0.

``failback(A->B)`` goes back after a failover, once A is reachable again: see :func:`failback`.

Choice for the default (prefix) policy: what producers write on B after failover should go to B's
*local* topics (``orders``); failback replicates them to ``B.orders`` on A with the reverse flow
B->A and consumers on A subscribe to both (MM2's active/passive pattern). Records written to the
remote topic ``A.orders`` on B cannot go back under the default policy (B->A never copies a topic
that came from A: cycle prevention), so failback counts them and reports them as not carried back
instead of silently dropping them. The identity policy makes the two directions symmetric but
cannot tell copies from originals, so a flow pair using it must never run both ways at once,
which failback respects (the reverse flow is stopped before the original direction restarts).
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

import redis
from confluent_kafka import (
    Consumer,
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient

from strait.config.model import FlowConfig, StraitConfig
from strait.config.store import apply_config, load_stored_config
from strait.errors import StraitError
from strait.kafka.admin import admin_client, create_topics, end_offsets, explain_error, internal_topic
from strait.kafka.groups import ACTIVE_STATES, alter_group_offsets, group_states
from strait.progress import OffsetsTopic, ResumeError
from strait.records import Checkpoint
from strait.translation import (
    CommittedOffset,
    PartitionTranslation,
    SyncsFollower,
    TailProbe,
    TranslationError,
    committed_offsets,
    read_committed,
    replicated_partitions,
    translate_group,
)

log = logging.getLogger(__name__)
librdkafka_log = logging.getLogger("strait.librdkafka")

DEFAULT_TIMEOUT = 120.0
KAFKA_TIMEOUT = 30.0


class FailoverError(StraitError):
    """A failover or failback step could not be done; the message names flow, group or cluster."""


# -- report --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PartitionLag:
    """A source partition not copied to its read_committed end yet."""

    topic: str
    partition: int
    end: int
    copied_to: int | None  # next source offset after the last copied record (None: nothing copied)
    lag: int


@dataclass(frozen=True)
class PartitionOutcome:
    """One partition of a group moved to the other cluster."""

    topic: str
    partition: int
    target_topic: str
    source_offset: int
    target_offset: int | None
    previous_target_offset: int | None
    lost: int | None
    reread: int | None
    note: str = ""


@dataclass(frozen=True)
class GroupOutcome:
    """One group: ``state`` is written, dry-run, active-on-target (not written), untranslated (no exact
    offset for any partition) or no-offsets (nothing committed on the flow's topics)."""

    group: str
    state: str
    partitions: tuple[PartitionOutcome, ...]
    notes: tuple[str, ...] = ()

    @property
    def clean(self) -> bool:
        """Every partition translated, nothing lost or re-read, and written (or a dry run)."""
        return self.state in ("written", "dry-run", "no-offsets") and all(
            p.target_offset is not None and p.lost == 0 and p.reread == 0 for p in self.partitions)


@dataclass(frozen=True)
class FailoverReport:
    """What a failover (or failback) did, or would do with ``dry_run``."""

    action: str
    flow: str
    dry_run: bool
    drained: bool
    drain_seconds: float
    lag: tuple[PartitionLag, ...]
    groups: tuple[GroupOutcome, ...] = ()
    seconds_after_drain: float | None = None
    config_version: int | None = None
    notes: tuple[str, ...] = field(default=())

    @property
    def clean(self) -> bool:
        """Drained and every group clean."""
        return self.drained and all(g.clean for g in self.groups)


# -- clusters ------------------------------------------------------------------------------------


def _consumer(settings: Mapping[str, str], **extra: object) -> Consumer:
    return Consumer({**settings, "group.id": "strait-failover", "enable.auto.commit": False,
                     "enable.auto.offset.store": False, "logger": librdkafka_log, **extra})


def list_groups(admin: AdminClient, flow: FlowConfig, alias: str) -> list[str]:
    """The groups on ``alias`` that pass the flow's group filter."""
    try:
        listing = admin.list_consumer_groups(request_timeout=KAFKA_TIMEOUT).result(timeout=KAFKA_TIMEOUT)
    except KafkaException as exc:
        raise explain_error(exc, alias, "listing consumer groups") from None
    group_filter = flow.group_filter()
    return sorted(g.group_id for g in listing.valid if group_filter.should_replicate_group(g.group_id))


RecordId = tuple[bytes | None, bytes | None, int, tuple[tuple[str, bytes | None], ...]]


def read_ids(settings: Mapping[str, str], alias: str, topic: str, partition: int, start: int,
             end: int, timeout: float = KAFKA_TIMEOUT) -> Counter[RecordId]:
    """The records of ``[start, end)`` as (key, value, timestamp, headers), counted."""
    found: Counter[RecordId] = Counter()
    if end <= start:
        return found
    consumer = _consumer(settings, **{"enable.partition.eof": True})
    consumer.assign([TopicPartition(topic, partition, start)])
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            for message in consumer.consume(1000, timeout=0.5):
                error = message.error()
                if error is not None and error.code() != KafkaError._PARTITION_EOF:
                    raise FailoverError(f"cluster {alias}: reading {topic}[{partition}]: {error.str()}")
                if error is None and message.offset() < end:
                    found[(message.key(), message.value(), message.timestamp()[1],
                           tuple(message.headers() or ()))] += 1
            position = consumer.position([TopicPartition(topic, partition)])[0].offset
            if position >= end:
                return found
        raise FailoverError(f"cluster {alias}: reading {topic}[{partition}] from {start} to {end} took over "
                            f"{timeout:.0f}s; is the cluster reachable?")
    finally:
        consumer.close()


# -- one side of a move --------------------------------------------------------------------------


class FlowSide:
    """A flow's clients and syncs, for draining and translating (close() when done)."""

    def __init__(self, config: StraitConfig, flow: FlowConfig, timeout: float, syncs_wait: float = 0.0) -> None:
        why = flow.no_offset_syncs_reason()
        if why is not None:
            raise FailoverError(f"flow {flow.name} writes no offset syncs ({why}), so its consumer groups' offsets "
                                "cannot be translated; move consumers with their own reset policy instead")
        self.config, self.flow = config, flow
        self.source_settings = read_committed(config.cluster(flow.source).librdkafka_config("consumer"))
        self.target_settings = read_committed(config.cluster(flow.target).librdkafka_config("consumer"))
        self.source_admin = admin_client(config.cluster(flow.source).librdkafka_config("admin"))
        self.target_admin = admin_client(config.cluster(flow.target).librdkafka_config("admin"))
        self.follower = self._follower(syncs_wait)
        self.probe = TailProbe(self.source_settings)
        self.progress = OffsetsTopic(self.target_settings, flow.topic_names().progress, flow.source)
        try:
            self.follower.catch_up(timeout)
        except StraitError:
            self.close()
            raise

    def _follower(self, wait: float) -> SyncsFollower:
        """The syncs reader; waits up to ``wait`` seconds for the replicator to create the syncs topic
        (a flow just enabled)."""
        location = self.flow.topic_names().offset_syncs
        settings = self.config.cluster(location.alias).librdkafka_config("consumer")
        deadline = time.monotonic() + wait
        while True:
            try:
                return SyncsFollower(settings, location, KAFKA_TIMEOUT)
            except TranslationError as exc:
                if time.monotonic() >= deadline:
                    raise FailoverError(f"flow {self.flow.name}: {exc}; has the replicator run this flow "
                                        f"(`strait run replicator`)?") from None
                time.sleep(1.0)

    def close(self) -> None:
        """Close the consumers."""
        self.follower.close()
        self.probe.close()
        self.progress.close()

    def lag(self) -> list[PartitionLag]:
        """The source partitions not copied to their read_committed end (empty when drained).

        A partition is copied up to its newest offset sync or its progress on the target, whichever
        is further: a partition copied while the flow wrote its syncs elsewhere (its syncs location
        changed) has progress beyond its syncs here.
        """
        self.follower.poll(0.5)
        progress = self._progress()
        partitions = replicated_partitions(self.source_admin, self.flow, KAFKA_TIMEOUT)
        behind: list[PartitionLag] = []
        for (topic, partition), (low, end) in sorted(end_offsets(self.source_admin, self.flow.source,
                                                                 partitions).items()):
            if end <= low:
                continue  # nothing there to copy
            history = self.follower.index.history(topic, partition)
            last = history.translator.last_copied() if history is not None else None
            found = [at for at in (None if last is None else last.upstream + 1,
                                   progress.get((topic, partition))) if at is not None]
            copied_to = max(found) if found else None
            if copied_to is not None and (copied_to >= end
                                          or self.probe.empty_between(topic, partition, copied_to, end)):
                continue
            behind.append(PartitionLag(topic, partition, end, copied_to, end - (copied_to or low)))
        return behind

    def _progress(self) -> dict[tuple[str, int], int]:
        """Where strait's progress on the target says each partition's copy got to (what was read
        before, when the target does not answer now)."""
        try:
            self.progress.read(KAFKA_TIMEOUT)
        except ResumeError as exc:
            log.warning("flow=%s progress not read to its end: %s", self.flow.name, exc)
        return {key: at.next_offset for key, at in self.progress.progress.items()}

    def wait_drained(self, timeout: float) -> tuple[list[PartitionLag], float]:
        """Poll until drained or ``timeout``; returns the lag left and the seconds waited."""
        started = time.monotonic()
        while True:
            behind = self.lag()
            waited = time.monotonic() - started
            if not behind or waited >= timeout:
                return behind, waited
            log.info("flow=%s draining partitions_behind=%d records_behind=%d", self.flow.name, len(behind),
                     sum(p.lag for p in behind))
            time.sleep(min(1.0, max(0.0, timeout - waited)))

    def catch_up_syncs(self, timeout: float = KAFKA_TIMEOUT) -> None:
        """Read the syncs written since the drain check (the replicator's last batch end)."""
        deadline = time.monotonic() + timeout
        while self.follower.poll(0.5) and time.monotonic() < deadline:
            pass

    def translations(self, group: str) -> tuple[list[CommittedOffset], list[PartitionTranslation]]:
        """The group's committed source offsets and their exact translations."""
        partitions = replicated_partitions(self.source_admin, self.flow, KAFKA_TIMEOUT)
        committed = committed_offsets(self.source_settings, self.flow.source, group, partitions, KAFKA_TIMEOUT)
        return committed, translate_group(self.flow, self.follower.index, committed, self.probe)


def loss_and_reread(side: FlowSide, t: PartitionTranslation) -> tuple[int, int]:
    """From the records: unread source records missing at/after the target offset, and extra ones there."""
    assert t.downstream is not None
    source_end = end_offsets(side.source_admin, side.flow.source, [TopicPartition(t.topic, t.partition)])
    target_end = end_offsets(side.target_admin, side.flow.target, [TopicPartition(t.remote_topic, t.partition)])
    unread = read_ids(side.source_settings, side.flow.source, t.topic, t.partition, t.upstream,
                      source_end[(t.topic, t.partition)][1])
    resumed = read_ids(side.target_settings, side.flow.target, t.remote_topic, t.partition, t.downstream,
                       target_end[(t.remote_topic, t.partition)][1])
    return sum((unread - resumed).values()), sum((resumed - unread).values())


def target_committed(side: FlowSide, group: str,
                     translations: Iterable[PartitionTranslation]) -> dict[tuple[str, int], int]:
    """The group's committed offsets on the target's remote partitions."""
    partitions = [TopicPartition(t.remote_topic, t.partition) for t in translations]
    return {(c.topic, c.partition): c.offset for c in committed_offsets(
        side.target_settings, side.flow.target, group, partitions, KAFKA_TIMEOUT)}


def emit_checkpoints(side: FlowSide, group: str, translations: Sequence[PartitionTranslation]) -> None:
    """Write the group's final checkpoints to ``<source>.checkpoints.internal`` on the target."""
    flow = side.flow
    topic = flow.topic_names().checkpoints
    create_topics(side.target_admin, flow.target, [internal_topic(topic, flow.internal_topic_replication_factor("checkpoints"))])
    producer = Producer({**side.config.cluster(flow.target).librdkafka_config("producer"),
                         "enable.idempotence": True, "logger": librdkafka_log})
    errors: list[KafkaError] = []
    for t in translations:
        assert t.downstream is not None
        checkpoint = Checkpoint(group, t.remote_topic, t.partition, t.upstream, t.downstream, t.metadata)
        producer.produce(topic, key=checkpoint.key_bytes(), value=checkpoint.value_bytes(), partition=0,
                         on_delivery=lambda err, _msg: errors.append(err) if err is not None else None)
    remaining = producer.flush(KAFKA_TIMEOUT)
    if remaining or errors:
        detail = errors[0].str() if errors else f"{remaining} not acknowledged"
        raise FailoverError(f"flow {flow.name} group {group}: writing checkpoints to {topic} on cluster "
                            f"{flow.target} failed: {detail}")


def write_offsets(side: FlowSide, group: str, translations: Sequence[PartitionTranslation]) -> bool:
    """Write the group's target offsets; False when the group became active on the target meanwhile."""
    writes = [TopicPartition(t.remote_topic, t.partition, t.downstream, t.metadata) for t in translations]
    future = side.target_admin.alter_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(group, writes)], request_timeout=KAFKA_TIMEOUT)[group]
    try:
        result = future.result(timeout=KAFKA_TIMEOUT)
    except KafkaException as exc:
        if exc.args and exc.args[0].code() in (KafkaError.UNKNOWN_MEMBER_ID, KafkaError.REBALANCE_IN_PROGRESS):
            return False
        raise explain_error(exc, side.flow.target, f"writing offsets of group {group}") from None
    failed = [tp for tp in result.topic_partitions or [] if tp.error is not None]
    if failed:
        raise FailoverError(f"flow {side.flow.name} group {group}: writing the offset of {failed[0].topic}"
                            f"[{failed[0].partition}] on cluster {side.flow.target} failed: {failed[0].error}")
    return True


def move_group(side: FlowSide, group: str, dry_run: bool) -> GroupOutcome:
    """Translate one group, count lost and re-read records, and (unless dry) write it on the target."""
    flow = side.flow
    _committed, translations = side.translations(group)
    notes: list[str] = []
    source_state = group_states(side.source_admin, flow.source, [group], KAFKA_TIMEOUT).get(group)
    if source_state in ACTIVE_STATES:
        notes.append(f"group {group} still has members on {flow.source}: commits made after this report "
                     f"are not carried over; stop its consumers and run again")
    if not translations:
        notes.append(f"group {group} has no committed offsets on topics of flow {flow.name}")
    previous = target_committed(side, group, translations)
    rows = [_outcome(side, t, previous.get((t.remote_topic, t.partition))) for t in translations]
    translated = [t for t in translations if t.downstream is not None]
    state = "dry-run" if dry_run else "written" if translated else "untranslated" if translations else "no-offsets"
    if not dry_run and translated:
        if group_states(side.target_admin, flow.target, [group], KAFKA_TIMEOUT).get(group) in ACTIVE_STATES \
                or not _write(side, group, translated):
            state = "active-on-target"
            notes.append(f"group {group} has active members on {flow.target}: offsets not written; stop them "
                         f"and run `strait failover --flow {flow.name} --group {group}` again")
    if len(translated) < len(translations):
        notes.append(f"{len(translations) - len(translated)} partition(s) without an exact translation: consumers "
                     f"of group {group} start there by their auto.offset.reset")
    log.info("flow=%s group=%s state=%s partitions=%d translated=%d", flow.name, group, state,
             len(translations), len(translated))
    return GroupOutcome(group, state, tuple(rows), tuple(notes))


def _write(side: FlowSide, group: str, translated: Sequence[PartitionTranslation]) -> bool:
    emit_checkpoints(side, group, translated)
    return write_offsets(side, group, translated)


def _outcome(side: FlowSide, t: PartitionTranslation, previous: int | None) -> PartitionOutcome:
    if t.downstream is None:
        return PartitionOutcome(t.topic, t.partition, t.remote_topic, t.upstream, None, previous, None, None,
                                t.reason)
    lost, reread = loss_and_reread(side, t)
    return PartitionOutcome(t.topic, t.partition, t.remote_topic, t.upstream, t.downstream, previous, lost, reread)


# -- configuration -------------------------------------------------------------------------------


def with_flows(config: StraitConfig, changes: Mapping[str, bool], added: Sequence[FlowConfig] = ()) -> StraitConfig:
    """The configuration with the named flows enabled/disabled (and ``added`` flows appended)."""
    flows = [replace(f, enabled=changes[f.name]) if f.name in changes else f for f in config.flows]
    return replace(config, flows=tuple(flows) + tuple(added))


def store_flows(client: redis.Redis, config: StraitConfig, changes: Mapping[str, bool], reason: str,
                added: Sequence[FlowConfig] = (), namespace: str = "strait") -> tuple[StraitConfig, int]:
    """Store a new configuration version with the flows changed; every service follows it live."""
    updated = with_flows(config, changes, added)
    version = apply_config(client, updated, reason, namespace)
    log.info("configuration version=%d %s", version,
             " ".join(f"flow={name} enabled={on}" for name, on in changes.items()))
    return updated, version


# -- failover ------------------------------------------------------------------------------------


def failover(client: redis.Redis, flow_name: str, groups: Sequence[str] = (), *, dry_run: bool = False,
             timeout: float = DEFAULT_TIMEOUT, namespace: str = "strait") -> FailoverReport:
    """Drain ``flow_name``, stop it, move its groups to the target; see the module docstring."""
    _version, config = load_stored_config(client, namespace=namespace)
    return move_flow(client, config, config.flow(flow_name), groups, dry_run, timeout, namespace)


def move_flow(client: redis.Redis, config: StraitConfig, flow: FlowConfig, groups: Sequence[str], dry_run: bool,
              timeout: float, namespace: str) -> FailoverReport:
    """The failover of ``flow`` as stored in ``config`` (which must be the stored version unless dry)."""
    side = FlowSide(config, flow, timeout, timeout if flow.enabled and not dry_run else 0.0)
    try:
        notes = [] if flow.enabled else [f"flow {flow.name} is stopped: drain checked once, not waited for"]
        behind, waited = side.wait_drained(timeout if flow.enabled and not dry_run else 0.0)
        if behind and not dry_run:
            log.warning("flow=%s not drained in %.0fs: nothing changed", flow.name, waited)
            notes.append(f"flow {flow.name} not drained after {waited:.0f}s: nothing was changed; stop the "
                         f"producers on {flow.source}, check the replicator, and run again (--timeout)")
            return FailoverReport("failover", flow.name, dry_run, False, waited, tuple(behind), notes=tuple(notes))
        drained_at = time.monotonic()
        version = None
        if not dry_run and flow.enabled:
            _config, version = store_flows(client, config, {flow.name: False}, f"strait failover {flow.name}",
                                           namespace=namespace)
            side.catch_up_syncs()
        names = list(groups) or list_groups(side.source_admin, flow, flow.source)
        outcomes = tuple(move_group(side, group, dry_run) for group in names)
        after = time.monotonic() - drained_at
        log.info("flow=%s failover dry_run=%s groups=%d drain_seconds=%.1f seconds_after_drain=%.1f", flow.name,
                 dry_run, len(outcomes), waited, after)
        return FailoverReport("failover", flow.name, dry_run, not behind, waited, tuple(behind), outcomes, after,
                              version, tuple(notes))
    finally:
        side.close()


# -- failback ------------------------------------------------------------------------------------


def reverse_flow(config: StraitConfig, flow: FlowConfig) -> FlowConfig:
    """The configured flow from ``flow``'s target back to its source, or one derived from ``flow``.

    The derived flow replicates the same topic names (the local topics written on the new primary)
    with the same policy, groups and intervals; it starts disabled.
    """
    name = f"{flow.target}->{flow.source}"
    for candidate in config.flows:
        if candidate.name == name:
            return candidate
    return replace(flow, source=flow.target, target=flow.source, enabled=False)


def source_offset_of(side: FlowSide, topic: str, partition: int, downstream: int) -> int | None:
    """The source offset whose translation is ``downstream`` (the inverse of exact translation).

    Translation is monotone, so the smallest source offset translating to at least ``downstream``
    is found by bisection; None when no source offset translates to exactly ``downstream`` (the
    consumer stands inside records that were not copied from the source).
    """
    history = side.follower.index.history(topic, partition)
    last = history.translator.last_copied() if history is not None else None
    if history is None or last is None:
        return None
    low, high = 0, last.upstream + 1
    while low < high:
        middle = (low + high) // 2
        translated = history.translate(middle)
        if translated is not None and translated >= downstream:
            high = middle
        else:
            low = middle + 1
    return low if history.translate(low) == downstream else None


def stranded_records(side: FlowSide) -> dict[str, int]:
    """Records in the flow's remote topics on the target beyond the flow's copies (written there
    after failover): under the default policy the reverse flow does not carry them back."""
    flow, stranded = side.flow, {}
    for tp in replicated_partitions(side.source_admin, flow, KAFKA_TIMEOUT):
        remote = flow.topic_names().remote(tp.topic)
        if not _exists(side.target_admin, remote):
            continue
        history = side.follower.index.history(tp.topic, tp.partition)
        last = history.translator.last_copied() if history is not None else None
        end = end_offsets(side.target_admin, flow.target, [TopicPartition(remote, tp.partition)])
        extra = end[(remote, tp.partition)][1] - (0 if last is None else last.downstream + 1)
        if extra > 0:
            stranded[remote] = stranded.get(remote, 0) + extra
    return stranded


def _exists(admin: AdminClient, topic: str) -> bool:
    metadata = admin.list_topics(topic, timeout=KAFKA_TIMEOUT).topics.get(topic)
    return metadata is not None and metadata.error is None


def move_home(side: FlowSide, group: str, dry_run: bool) -> GroupOutcome:
    """Move a group's commits on the flow's remote topics (target) back to the source topics.

    ``side`` is the original flow (A->B): a commit at ``d`` on ``A.orders`` on B goes to the offset
    of ``orders`` on A whose copy is at ``d``.
    """
    flow = side.flow
    remote = {flow.topic_names().remote(tp.topic): tp.topic
              for tp in replicated_partitions(side.source_admin, flow, KAFKA_TIMEOUT)}
    partitions = [TopicPartition(r, tp.partition) for tp in replicated_partitions(side.source_admin, flow,
                                                                                  KAFKA_TIMEOUT)
                  for r in [flow.topic_names().remote(tp.topic)] if _exists(side.target_admin, r)]
    committed = committed_offsets(side.target_settings, flow.target, group, partitions, KAFKA_TIMEOUT)
    previous = {(c.topic, c.partition): c.offset for c in committed_offsets(
        side.source_settings, flow.source, group, [TopicPartition(remote[c.topic], c.partition) for c in committed],
        KAFKA_TIMEOUT)}
    rows, writes = [], []
    for c in committed:
        home = remote[c.topic]
        upstream = source_offset_of(side, home, c.partition, c.offset)
        if upstream is None:
            rows.append(PartitionOutcome(c.topic, c.partition, home, c.offset, None, previous.get((home, c.partition)),
                                         None, None, "past the copied records: read records written on the target"))
            continue
        unread = read_ids(side.target_settings, flow.target, c.topic, c.partition, c.offset,
                          end_offsets(side.target_admin, flow.target, [TopicPartition(c.topic, c.partition)])
                          [(c.topic, c.partition)][1])
        resumed = read_ids(side.source_settings, flow.source, home, c.partition, upstream,
                           end_offsets(side.source_admin, flow.source, [TopicPartition(home, c.partition)])
                           [(home, c.partition)][1])
        rows.append(PartitionOutcome(c.topic, c.partition, home, c.offset, upstream, previous.get((home, c.partition)),
                                     sum((unread - resumed).values()), sum((resumed - unread).values())))
        writes.append(TopicPartition(home, c.partition, upstream, c.metadata))
    state = "dry-run" if dry_run else "written" if writes else "untranslated" if rows else "no-offsets"
    notes: list[str] = []
    if writes and not dry_run:
        if group_states(side.source_admin, flow.source, [group], KAFKA_TIMEOUT).get(group) in ACTIVE_STATES:
            state = "active-on-target"
            notes.append(f"group {group} has active members on {flow.source}: offsets of {sorted(set(remote))} "
                         f"not written; stop them and run failback again")
        else:
            alter_group_offsets(side.source_admin, flow.source, group, writes, KAFKA_TIMEOUT)
    return GroupOutcome(group, state, tuple(rows), tuple(notes))


def _merge(local: Sequence[GroupOutcome], home: Sequence[GroupOutcome]) -> tuple[GroupOutcome, ...]:
    """One outcome per group from the reverse flow's part and the way home; the worse state wins."""
    order = ("active-on-target", "untranslated", "dry-run", "written", "no-offsets")
    by_group = {g.group: g for g in local}
    merged = []
    for g in home:
        other = by_group.pop(g.group, GroupOutcome(g.group, "no-offsets", ()))
        state = min((g.state, other.state), key=order.index)
        merged.append(GroupOutcome(g.group, state, other.partitions + g.partitions, other.notes + g.notes))
    return tuple(merged) + tuple(by_group.values())


def failback(client: redis.Redis, flow_name: str, groups: Sequence[str] = (), *, dry_run: bool = False,
             timeout: float = DEFAULT_TIMEOUT, namespace: str = "strait") -> FailoverReport:
    """After ``failover(A->B)``, with A back: B->A until drained, groups moved to A, then A->B again.

    1. Records written to A's remote topics on B (``A.orders``) after failover are counted: the
       default policy's B->A never copies them (see the module docstring); they are reported.
    2. The reverse flow B->A (configured, or derived from A->B and added) is enabled and drained:
       what producers wrote to B's local topics reaches A (``B.orders`` with the default policy).
    3. B->A is failed over like any flow (stopped; groups' commits on B's local topics written on
       A), and the groups' commits on ``A.orders`` on B go back to ``orders`` on A through the
       inverse of A->B's exact translation.
    4. A->B is enabled again.
    """
    _version, config = load_stored_config(client, namespace=namespace)
    flow = config.flow(flow_name)
    if flow.enabled and not dry_run:
        raise FailoverError(f"flow {flow.name} is running: failback follows a failover (`strait failover "
                            f"--flow {flow.name}`), which stops it; nothing was changed")
    back = reverse_flow(config, flow)
    forward = FlowSide(config, flow, timeout)
    try:
        stranded = stranded_records(forward)
        notes = [f"{records} record(s) were written to {topic} on {flow.target} after failover; flow {back.name} "
                 f"does not carry them back under the {flow.replication_policy} policy (producers on "
                 f"{flow.target} write to local topics); re-produce them to {flow.source}"
                 for topic, records in sorted(stranded.items())]
        if not dry_run and not back.enabled:
            known = any(f.name == back.name for f in config.flows)
            config, _v = store_flows(client, config, {back.name: True} if known else {},
                                     f"strait failback {flow.name}: start {back.name}",
                                     added=() if known else (replace(back, enabled=True),), namespace=namespace)
            back = config.flow(back.name)
        report = move_flow(client, config, back, groups, dry_run, timeout, namespace)
        version = report.config_version
        outcomes = report.groups
        if report.drained:
            names = [g.group for g in report.groups] or list(groups)
            outcomes = _merge(report.groups, [move_home(forward, group, dry_run) for group in names])
        if report.drained and not dry_run:
            _config, version = store_flows(client, load_stored_config(client, namespace=namespace)[1],
                                           {flow.name: True}, f"strait failback {flow.name}", namespace=namespace)
    finally:
        forward.close()
    return replace(report, action="failback", flow=flow.name, groups=outcomes, config_version=version,
                   notes=tuple(notes) + report.notes)
