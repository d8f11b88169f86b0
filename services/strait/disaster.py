"""Unplanned failover: the source cluster is gone; move a flow's groups to the target from target-side state alone.

A planned failover (:mod:`strait.failover`) drains the flow and translates each group's committed
source offsets exactly. With the source gone neither is possible, so :func:`failover_source_down`
works from what the target side holds:

1. **Stop the flow** (a new configuration version with it disabled), then let the replicator's last
   copies land: the remote partitions' end offsets on the target are read until they stop moving.
2. **Where the copies end** per source partition (``copied_to``, the next source offset not on the
   target): from the offset syncs when they live on the target (exact; the DR setting
   ``offset_syncs_topic_location: target``), otherwise from the source view the heartbeat service
   kept in Redis (:mod:`strait.source_watch`), carried forward by the records the target holds past
   its last known sync (exact unless the source had a gap in offsets there, e.g. a transaction marker).
3. **RPO** per partition: the source's end offset as last seen minus ``copied_to``: records that
   existed on the source and were never copied. Records written to the source after the time the
   view last saw it are not known to anyone on this side; the report names that time.
4. **Groups** move to the newest checkpoint per partition (an exact translation of what the group
   had committed when the checkpoint was taken). An offset is never moved backwards (group offset
   sync may already have moved it further) and a group with active members on the target is not
   written. Records the group consumed on the source after its checkpoint are read again on the
   target; the report bounds them by the checkpoint's age and by the records the target holds past
   the written offset.

The report is stored in Redis (``<namespace>:failover:<flow>``) so that the failback, once the source
is back, can list and copy the records that never left it (:func:`stranded_ranges`).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field

import redis
from confluent_kafka import KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from strait.config.model import FlowConfig, StraitConfig
from strait.errors import StraitError
from strait.failover import store_flows
from strait.kafka.admin import admin_client, list_offsets
from strait.kafka.groups import ACTIVE_STATES, alter_group_offsets, group_states
from strait.source_watch import PartitionView, SourceView, read_source_view
from strait.translation import (
    StoredCheckpoint,
    SyncsFollower,
    committed_offsets,
    read_stored_checkpoints,
)
from strait.verify import PartitionReader

log = logging.getLogger(__name__)

PROBE_TIMEOUT = 5.0
KAFKA_TIMEOUT = 30.0
SETTLE_TIMEOUT = 10.0


class DisasterRecoveryError(StraitError):
    """An unplanned failover or its failback step could not be done; the message says what to do."""


def failover_key(namespace: str, flow: str) -> str:
    """The Redis key of a flow's last unplanned failover report."""
    return f"{namespace}:failover:{flow}"


def source_unreachable(config: StraitConfig, alias: str, timeout: float = PROBE_TIMEOUT) -> str | None:
    """Why cluster ``alias`` does not answer a metadata request within ``timeout``; None when it does."""
    admin = admin_client({**config.cluster(alias).librdkafka_config("admin"),
                          "socket.connection.setup.timeout.ms": str(int(timeout * 1000))})
    try:
        admin.list_topics(timeout=timeout)
    except KafkaException as exc:
        error = exc.args[0] if exc.args else exc
        return f"cluster {alias} did not answer in {timeout:.0f}s: {getattr(error, 'str', lambda: error)()}"
    return None


# -- report --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SourcePartitionLoss:
    """One source partition: where the copies end, the source's end as last seen, and the RPO."""

    topic: str
    partition: int
    remote_topic: str
    copied_to: int | None
    end_seen: int | None
    end_seen_at: float | None
    rpo_records: int | None
    basis: str
    heartbeats: bool = False  # the flow's heartbeats topic: listed, not counted in the report's RPO


@dataclass(frozen=True)
class MovedPartition:
    """One partition of a group moved to its newest checkpoint."""

    remote_topic: str
    partition: int
    checkpoint_upstream: int
    checkpoint_downstream: int
    checkpoint_written_at: float
    checkpoint_age_seconds: float
    previous_target_offset: int | None
    target_offset: int
    reread_at_most: int
    note: str = ""


@dataclass(frozen=True)
class MovedGroup:
    """One group: ``state`` is written, dry-run, active-on-target (not written) or no-checkpoints."""

    group: str
    state: str
    partitions: tuple[MovedPartition, ...]
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class DisasterReport:
    """What an unplanned failover did (or would do with ``dry_run``); times are unix seconds."""

    flow: str
    source: str
    target: str
    dry_run: bool
    reason: str
    started_at: float
    seconds: float
    source_unreachable_since: float | None
    source_last_seen_at: float | None
    config_version: int | None
    partitions: tuple[SourcePartitionLoss, ...]
    groups: tuple[MovedGroup, ...]
    notes: tuple[str, ...] = field(default=())

    action = "failover (source down)"

    @property
    def rpo_records(self) -> int | None:
        """Records of the replicated topics known to exist on the source and never copied (heartbeats aside);
        None when unknown for some partition."""
        values = [p.rpo_records for p in self.partitions if not p.heartbeats]
        return None if not values or any(v is None for v in values) else sum(v for v in values if v is not None)

    @property
    def moved(self) -> bool:
        """Some group was written (or would be, in a dry run), or there was no group to move."""
        return not self.groups or any(g.state in ("written", "dry-run") for g in self.groups)

    @property
    def clean(self) -> bool:
        """Nothing lost, nothing that may be read again, every group moved."""
        return (self.rpo_records == 0 and all(g.state in ("written", "dry-run") for g in self.groups)
                and all(p.reread_at_most == 0 for g in self.groups for p in g.partitions))

    def to_dict(self) -> dict[str, object]:
        """The report as JSON-able data, with its summary fields."""
        return {**asdict(self), "action": self.action, "rpo_records": self.rpo_records, "clean": self.clean,
                "moved": self.moved}


# -- where the copies end ------------------------------------------------------------------------


def _target_ends(admin: AdminClient, alias: str, partitions: Sequence[TopicPartition]) -> dict[tuple[str, int], int]:
    return list_offsets(admin, alias, partitions, "latest", timeout=KAFKA_TIMEOUT, skip_unknown=True)


def settle_target(admin: AdminClient, alias: str, partitions: Sequence[TopicPartition],
                  timeout: float = SETTLE_TIMEOUT) -> dict[tuple[str, int], int]:
    """The remote partitions' end offsets once they stopped moving (the replicator's last copies landed)."""
    deadline = time.monotonic() + timeout
    ends = _target_ends(admin, alias, partitions)
    while time.monotonic() < deadline:
        time.sleep(1.0)
        again = _target_ends(admin, alias, partitions)
        if again == ends:
            return ends
        ends = again
    log.warning("cluster=%s remote partitions still growing after %.0fs; counting what is there now", alias, timeout)
    return ends


def _syncs_on_target(config: StraitConfig, flow: FlowConfig) -> dict[tuple[str, int], tuple[int, int]]:
    """Per source partition ``(copied_to, copied_down)`` from the offset syncs kept on the target."""
    location = flow.topic_names().offset_syncs
    follower = SyncsFollower(config.cluster(location.alias).librdkafka_config("consumer"), location, KAFKA_TIMEOUT)
    try:
        follower.catch_up(KAFKA_TIMEOUT)
        copied = {}
        for topic, partition in follower.index.partitions():
            history = follower.index.history(topic, partition)
            last = history.translator.last_copied() if history is not None else None
            if last is not None:
                copied[(topic, partition)] = (last.upstream + 1, last.downstream + 1)
        return copied
    finally:
        follower.close()


RecordCounter = Callable[[str, int, int, int], int]


def committed_records_counter(settings: Mapping[str, str], alias: str) -> RecordCounter:
    """Counts the records a read_committed consumer reads in ``[start, end)`` of a target partition: an
    exactly-once copy's offsets also count its commit markers and the records of aborted transactions."""
    def count(topic: str, partition: int, start: int, end: int) -> int:
        reader = PartitionReader(settings, alias, KAFKA_TIMEOUT, committed_only=True)
        try:
            return sum(1 for _record in reader.read(topic, partition, start, end))
        finally:
            reader.close()
    return count


def partition_losses(flow: FlowConfig, view: SourceView | None, synced: Mapping[tuple[str, int], tuple[int, int]] | None,
                     target_ends: Mapping[tuple[str, int], int],
                     committed_records: RecordCounter | None = None) -> list[SourcePartitionLoss]:
    """The RPO per source partition from the source view, the syncs (when on the target) and the target's
    ends; an exactly-once flow's records past the last sync are counted by ``committed_records``."""
    names = flow.topic_names()
    topic_filter = flow.topic_filter()
    keys = sorted({(p.topic, p.partition) for p in (view.partitions if view else ())}
                  | {key for key in (synced or {}) if topic_filter.should_replicate_topic(key[0])})
    losses = []
    for topic, partition in keys:
        remote = names.remote(topic)
        seen: PartitionView | None = view.partition(topic, partition) if view else None
        target_end = target_ends.get((remote, partition))
        if synced is not None:
            copied, down, basis = *synced.get((topic, partition), (None, None)), "offset syncs on the target"
        else:
            copied = seen.copied_to if seen else None
            down = seen.copied_down if seen else None
            basis = "source view in Redis"
        if copied is not None and down is not None and target_end is not None and target_end > down:
            past = target_end - down  # copies past the last sync read: contiguous source offsets assumed
            if flow.exactly_once and committed_records is not None:
                past = committed_records(remote, partition, down, target_end)
            copied += past
            basis += f", {past} record(s) on the target past the last sync"
        if copied is None and seen is not None and seen.earliest is not None and target_end is not None:
            # No sync known for the partition: its copy began at the source's earliest offset.
            copied = seen.earliest + target_end
            basis = "nothing copied" if target_end == 0 else \
                f"no offset sync known: {target_end} record(s) on the target counted from the source's earliest offset"
        end = seen.end if seen else None
        rpo = None if end is None or copied is None else max(0, end - copied)
        losses.append(SourcePartitionLoss(topic, partition, remote, copied, end, seen.end_seen_at if seen else None,
                                          rpo, basis, topic == names.heartbeats))
    return losses


# -- groups --------------------------------------------------------------------------------------


def move_group_to_checkpoints(config: StraitConfig, flow: FlowConfig, admin: AdminClient, group: str,
                              checkpoints: Sequence[StoredCheckpoint], target_ends: Mapping[tuple[str, int], int],
                              dry_run: bool, now: float) -> MovedGroup:
    """Write the group's newest checkpoints as its offsets on the target (never backwards, never while active)."""
    if not checkpoints:
        return MovedGroup(group, "no-checkpoints", (), (f"group {group} has no checkpoint on {flow.target}: its "
                                                         f"consumers start by their auto.offset.reset",))
    settings = config.cluster(flow.target).librdkafka_config("consumer")
    partitions = [TopicPartition(c.checkpoint.topic, c.checkpoint.partition) for c in checkpoints]
    previous = {(c.topic, c.partition): c.offset
                for c in committed_offsets(settings, flow.target, group, partitions, KAFKA_TIMEOUT)}
    rows, writes = [], []
    for stored in sorted(checkpoints, key=lambda c: (c.checkpoint.topic, c.checkpoint.partition)):
        cp = stored.checkpoint
        before = previous.get((cp.topic, cp.partition))
        offset, note = cp.downstream_offset, ""
        if before is not None and before > offset:
            offset, note = before, "already further on the target: not moved back"
        else:
            writes.append(TopicPartition(cp.topic, cp.partition, offset, cp.metadata))
        end = target_ends.get((cp.topic, cp.partition), offset)
        rows.append(MovedPartition(cp.topic, cp.partition, cp.upstream_offset, cp.downstream_offset, stored.written_at,
                                   round(max(0.0, now - stored.written_at), 3), before, offset, max(0, end - offset),
                                   note))
    state, notes = ("dry-run" if dry_run else "written"), []
    if group_states(admin, flow.target, [group], KAFKA_TIMEOUT).get(group) in ACTIVE_STATES:
        state = "active-on-target"
        notes.append(f"group {group} has active members on {flow.target}: offsets not written; stop them and run "
                     f"the failover again")
    elif writes and not dry_run:
        alter_group_offsets(admin, flow.target, group, writes, KAFKA_TIMEOUT)
    log.info("flow=%s group=%s state=%s partitions=%d written=%d", flow.name, group, state, len(rows),
             0 if state != "written" else len(writes))
    return MovedGroup(group, state, tuple(rows), tuple(notes))


# -- failover ------------------------------------------------------------------------------------


def failover_source_down(client: redis.Redis, config: StraitConfig, flow: FlowConfig, groups: Sequence[str],
                         *, dry_run: bool, reason: str, namespace: str = "strait") -> DisasterReport:
    """Move ``flow``'s groups to its target without its source; see the module docstring."""
    started, began = time.time(), time.monotonic()
    log.warning("flow=%s unplanned failover: %s", flow.name, reason)
    version = None
    if not dry_run and flow.enabled:
        _config, version = store_flows(client, config, {flow.name: False},
                                       f"strait failover {flow.name} (source down)", namespace=namespace)
    view = read_source_view(client, flow.name, namespace)
    target_admin = admin_client(config.cluster(flow.target).librdkafka_config("admin"))
    stored = read_stored_checkpoints(config.cluster(flow.target).librdkafka_config("consumer"),
                                     flow.topic_names().checkpoints, KAFKA_TIMEOUT)
    synced = _syncs_on_target(config, flow) if flow.offset_syncs_topic_location == "target" else None
    remote = _remote_partitions(flow, view, synced, stored)
    ends = settle_target(target_admin, flow.target, remote)
    if synced is not None and not dry_run:
        synced = _syncs_on_target(config, flow)  # the syncs of the copies that landed while settling
    counter = committed_records_counter(config.cluster(flow.target).librdkafka_config("consumer"), flow.target)
    losses = partition_losses(flow, view, synced, ends, counter)
    group_filter = flow.group_filter()
    names = list(groups) or sorted({key[0] for key in stored if group_filter.should_replicate_group(key[0])})
    now = time.time()
    moved = tuple(_without_checkpoint_noted(
        move_group_to_checkpoints(config, flow, target_admin, group,
                                  [c for key, c in stored.items() if key[0] == group], ends, dry_run, now),
        losses, flow.target) for group in names)
    report = DisasterReport(flow.name, flow.source, flow.target, dry_run, reason, started,
                            round(time.monotonic() - began, 3), view.unreachable_since if view else None,
                            view.reachable_at if view else None, version, tuple(losses), moved,
                            tuple(_notes(flow, view, synced)))
    if not dry_run:
        client.set(failover_key(namespace, flow.name), json.dumps(report.to_dict()))
    return report


def _without_checkpoint_noted(moved: MovedGroup, losses: Sequence[SourcePartitionLoss], target: str) -> MovedGroup:
    """Name the flow's partitions the group has no checkpoint for (not committed, or not copied that far)."""
    have = {(p.remote_topic, p.partition) for p in moved.partitions}
    missing = [f"{loss.remote_topic}[{loss.partition}]" for loss in losses
               if not loss.heartbeats and (loss.remote_topic, loss.partition) not in have]
    if not missing or not moved.partitions:
        return moved
    note = (f"group {moved.group} has no checkpoint for {', '.join(missing)} on {target} (it committed nothing there, "
            f"or the copy never reached its commit): its consumers start there by their auto.offset.reset")
    return MovedGroup(moved.group, moved.state, moved.partitions, moved.notes + (note,))


def _remote_partitions(flow: FlowConfig, view: SourceView | None, synced: Mapping[tuple[str, int], object] | None,
                       stored: Mapping[tuple[str, str, int], StoredCheckpoint]) -> list[TopicPartition]:
    names = flow.topic_names()
    keys = {(names.remote(p.topic), p.partition) for p in (view.partitions if view else ())}
    keys |= {(names.remote(t), p) for t, p in (synced or {})
             if flow.topic_filter().should_replicate_topic(t)}
    keys |= {(topic, partition) for _group, topic, partition in stored}
    return [TopicPartition(t, p) for t, p in sorted(keys)]


def _notes(flow: FlowConfig, view: SourceView | None, synced: object | None) -> list[str]:
    notes = []
    if view is None:
        notes.append(f"no source view of flow {flow.name} in Redis (is `strait run heartbeat` running?): the "
                     f"RPO is unknown")
    elif view.reachable_at is not None:
        notes.append(f"records written to {flow.source} after {_utc(view.reachable_at)} (when it last answered) "
                     f"are not known on this side and not counted in the RPO")
    if synced is None:
        notes.append(f"offset syncs live on {flow.source}: where the copies end comes from the source view, carried "
                     f"forward by the records on {flow.target}; set offset_syncs_topic_location: target for exact "
                     f"disaster recovery")
    return notes


def _utc(seconds: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(seconds)) + f".{int(seconds % 1 * 10)} UTC"


# -- failback ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StrandedRange:
    """Records ``[start, end)`` of a source partition that never reached the target before the failover."""

    topic: str
    partition: int
    start: int
    end: int

    @property
    def records(self) -> int:
        """How many offsets the range spans."""
        return max(0, self.end - self.start)


def stored_failover(client: redis.Redis, flow: str, namespace: str = "strait") -> dict[str, object] | None:
    """The flow's last unplanned failover report as stored, or None."""
    raw = client.get(failover_key(namespace, flow))
    return json.loads(raw) if raw else None


def stranded_ranges(client: redis.Redis, config: StraitConfig, flow: FlowConfig,
                    namespace: str = "strait") -> list[StrandedRange]:
    """With the source back: per partition, the records after where the copies ended at the unplanned failover."""
    report = stored_failover(client, flow.name, namespace)
    if report is None:
        return []
    partitions = [TopicPartition(p["topic"], p["partition"]) for p in report["partitions"]  # type: ignore[index]
                  if p["copied_to"] is not None]
    admin = admin_client(config.cluster(flow.source).librdkafka_config("admin"))
    ends = list_offsets(admin, flow.source, partitions, "latest", timeout=KAFKA_TIMEOUT, skip_unknown=True)
    ranges = [StrandedRange(p["topic"], p["partition"], p["copied_to"], ends[(p["topic"], p["partition"])])
              for p in report["partitions"]  # type: ignore[union-attr]
              if p["copied_to"] is not None and (p["topic"], p["partition"]) in ends]
    return [r for r in ranges if r.records > 0]


def copy_stranded(client: redis.Redis, config: StraitConfig, flow: FlowConfig, ranges: Sequence[StrandedRange],
                  timeout: float, namespace: str = "strait") -> StraitConfig:
    """Run the (stopped) flow until the replicator copied every stranded range, then stop it again.

    The replicator resumes from its own progress, so the records reach the target in order with
    their offset syncs (a replay of its last second may add duplicates, as after any restart).
    Returns the configuration as stored at the end.
    """
    if not ranges:
        return config
    if flow.enabled:
        raise DisasterRecoveryError(f"flow {flow.name} is running: stranded records are copied only while it is "
                                    f"stopped after a failover; nothing was changed")
    config, _version = store_flows(client, config, {flow.name: True},
                                   f"strait failback {flow.name}: copy stranded records", namespace=namespace)
    location = flow.topic_names().offset_syncs
    follower = SyncsFollower(config.cluster(location.alias).librdkafka_config("consumer"), location, KAFKA_TIMEOUT)
    deadline = time.monotonic() + timeout
    try:
        while True:
            follower.poll(1.0, max_records=100_000)
            left = [r for r in ranges if _copied_to(follower, r.topic, r.partition) < r.end]
            if follower.ready and not left:
                break
            if time.monotonic() > deadline:
                raise DisasterRecoveryError(
                    f"flow {flow.name}: {len(left)} stranded range(s) not copied after {timeout:.0f}s (first: "
                    f"{left[0].topic}[{left[0].partition}] up to {left[0].end}); the flow keeps running: check "
                    f"the replicator, then run the failback again") if left else DisasterRecoveryError(
                    f"flow {flow.name}: offset syncs not read to their end in {timeout:.0f}s")
            log.info("flow=%s copying stranded records ranges_left=%d", flow.name, len(left))
    finally:
        follower.close()
    config, _version = store_flows(client, config, {flow.name: False},
                                   f"strait failback {flow.name}: stranded records copied", namespace=namespace)
    log.info("flow=%s stranded records copied ranges=%d records=%d", flow.name, len(ranges),
             sum(r.records for r in ranges))
    return config


def _copied_to(follower: SyncsFollower, topic: str, partition: int) -> int:
    history = follower.index.history(topic, partition)
    last = history.translator.last_copied() if history is not None else None
    return -1 if last is None else last.upstream + 1
