"""One flow's checkpoints: exact translations of the source groups' commits, and group offset sync.

The flow's consumer groups are split into shards (``checkpoint_shards``, by a hash of the group
id); each shard is a work item with its own fenced lease, so the groups of one flow spread over
the checkpoint replicas. In one process a single :class:`FlowCheckpointer` thread serves every
shard of the flow it holds: one reader of the offset-syncs topic, one set of clients. A
:class:`ShardWorker` holds a shard's lease and attaches the shard to its flow's checkpointer; every
write for a group is checked against the lease of the group's shard first.

Start-up: the checkpoints already on the target are read back for every shard attached (so nothing
regresses across a restart or a hand-over), then the offset-syncs topic is read from its beginning;
no checkpoint is written before that read reached the end offset the topic had at start. Then,
every emit interval, the source groups that pass the flow's group filter and fall in a held shard
are listed (a new group is seen within two intervals: the listing runs beside the passes, so a
broker that does not answer it holds back no checkpoint), their committed offsets translated exactly,
and a checkpoint written for each partition whose translation changed. Offsets without an exact
translation yet are left out, never guessed.

With group offset sync on, every sync interval the translations are written to target groups
that have no active members (EMPTY or absent); a target offset only moves back when the source
group's committed offset moved back (the group was reset on the source).
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from confluent_kafka import (
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient

from strait.config.model import FlowConfig, StraitConfig
from strait.coord.assignment import ShardItem
from strait.coord.leases import LeaseKeeper
from strait.kafka.admin import (
    SERVICE_ADMIN_TIMEOUT, KafkaRetriableError, RenewableAdmin, create_topics, explain_error, internal_topic,
)
from strait.metrics import ERRORS, set_flow_state
from strait.retry import FlowTrouble, is_transient
from strait.records import Checkpoint
from strait.translation import (
    CheckpointKey,
    PartitionTranslation,
    SyncsFollower,
    TailProbe,
    committed_offsets,
    read_checkpoints,
    replicated_partitions,
    translate_group,
)
from strait.replicas import FlowWorker
from strait_checkpoint import metrics
from strait_checkpoint.group_sync import GroupOffsetSync
from strait_checkpoint.shards import HeldShards
from strait_checkpoint.writer import CheckpointWriter

log = logging.getLogger(__name__)
librdkafka_log = logging.getLogger("strait.librdkafka")

POLL_BUDGET = 0.2
# A broker that died is asked until its request times out, and ListGroups asks every broker: while
# the controllers have not fenced it yet (about 9 s) each listing waits this long, then answers
# without that broker's groups. Reading a group's commits whose coordinator died waits as long.
GROUP_LIST_TIMEOUT = 3.0
# A listing still unanswered after this long is asked again (its answer is lost, or its broker hangs).
LISTING_GIVE_UP_SECONDS = 30.0
GROUP_READ_TIMEOUT = 5.0
CORRUPT_RECORD = "corrupt_record"  # strait_errors_total kind of a skipped undecodable record
# How long a flow's checkpointer outlives its last shard here (idle, reading nothing): several lease TTLs.
IDLE_LINGER_SECONDS = 30.0
IDLE_TICK_SECONDS = 0.5
# A checkpointer replaced by a restart ends within a step; one waiting on a dead cluster is left behind.
REPLACED_JOIN_SECONDS = 15.0
# A pass slower than this is logged with where its time went, at most once per SLOW_PASS_LOG_SECONDS.
SLOW_PASS_SECONDS = 3.0
SLOW_PASS_LOG_SECONDS = 30.0

@dataclass(frozen=True)
class _Listing:
    """A ListGroups call in flight: its admin client (kept alive with it), its answer to come, and when
    it was asked (monotonic)."""

    admin: AdminClient
    answer: Future[Any]
    asked_at: float


@dataclass
class _Clients:
    source_admin: RenewableAdmin  # renewed after a transient error (fresh metadata)
    target_admin: RenewableAdmin
    producer: Producer
    follower: SyncsFollower
    probe: TailProbe


class FlowCheckpointer:
    """Checkpoints the groups of one flow that fall in the shards this process holds, in one thread."""

    def __init__(self, config: StraitConfig, flow_name: str) -> None:
        self.name = flow_name
        self.config = config
        self._pending: StraitConfig | None = None
        self._lock = threading.Lock()  # guards _pending
        self.wake, self.stopping = threading.Event(), threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"checkpoint-{flow_name}", daemon=True)
        self.shards = HeldShards(flow_name, self.wake, lambda: self.alive, self._forget_unowned)
        self._clients: _Clients | None = None
        self._writer = CheckpointWriter(flow_name)
        self._group_sync = GroupOffsetSync(flow_name)
        self._translations: dict[str, list[PartitionTranslation]] = {}
        self._current_at: dict[str, float] = {}  # group -> when its checkpoints last matched its commits
        self._listing: _Listing | None = None  # the source's groups being listed
        self._listed: set[str] | None = None  # the groups the last listing answered
        self._trouble = FlowTrouble(metrics.SERVICE, flow_name, "checkpoint step")
        self._corrupt_syncs = 0  # corrupt records of the syncs topic already counted
        self._next_setup = self._next_pass = self._next_sync = 0.0
        self._is_idle = False
        self._slow_logged_at = float("-inf")

    @property
    def flow(self) -> FlowConfig:
        """The flow's current configuration."""
        return self.config.flow(self.name)

    @property
    def alive(self) -> bool:
        """Whether the thread still runs."""
        return self._thread.is_alive()

    def start(self) -> FlowCheckpointer:
        """Start the thread; returns self."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Ask the thread to end (does not wait)."""
        self.stopping.set()
        self.wake.set()

    def join(self, timeout: float) -> None:
        """Wait for the thread to end."""
        self._thread.join(timeout)

    def update(self, config: StraitConfig) -> None:
        """Hand a new configuration to the thread."""
        with self._lock:
            self._pending = config
        self.wake.set()

    def attach(self, shard: ShardItem, keeper: LeaseKeeper) -> bool:
        """Serve ``shard`` (its lease held by ``keeper``) from the next step on; False once it is ending."""
        return self.shards.attach(shard, keeper)

    def detach(self, shard: ShardItem) -> None:
        """Stop serving ``shard``; returns once no step uses its lease any more."""
        self.shards.detach(shard)

    # -- loop ------------------------------------------------------------------------------------

    def _run(self) -> None:
        try:
            while not self.stopping.is_set() and not self.shards.close_if_idle(IDLE_LINGER_SECONDS):
                with self.shards.step_lock:
                    self.shards.drop_leaving()
                    pause = self._step() if self.shards.attached() else self._idle()
                    self.shards.drop_leaving()
                if pause > 0:
                    self.wake.wait(pause)
                self.wake.clear()
        except Exception:
            log.exception("flow=%s checkpointer failed", self.name)
            ERRORS.labels(service=metrics.SERVICE, flow=self.name, kind="internal").inc()
        finally:
            self._close()
            log.info("flow=%s checkpointer stopped", self.name)

    def _idle(self) -> float:
        """No shard held here: the flow is not served (its series say so) until one is attached again."""
        if not self._is_idle:
            self._is_idle = True
            log.info("flow=%s no shard held here: the checkpointer idles up to %.0fs for one to come back",
                     self.name, IDLE_LINGER_SECONDS)
            metrics.forget_flow(self.name, list(self._current_at))
            set_flow_state(metrics.SERVICE, self.name, "stopped")
        return IDLE_TICK_SECONDS

    def _step(self) -> float:
        """One round: set up, admit shards, read syncs, and a pass when due; returns how long to pause."""
        with self._lock:
            config, self._pending = self._pending, None
        if config is not None:
            self.config = config
            self._next_pass = self._next_sync = 0.0
        if self._is_idle:
            self._is_idle = False
            ready = self._clients is not None and self._clients.follower.ready
            set_flow_state(metrics.SERVICE, self.name, "running" if ready else "starting")
        now = time.monotonic()
        try:
            if self._clients is None:
                if now < self._next_setup:
                    return min(1.0, self._next_setup - now)
                self._setup()
            self._admit_joining()
            self._follow()  # waits up to POLL_BUDGET for syncs: it paces the loop
            if self._clients.follower.ready and len(self.shards) and now >= self._next_pass:
                self._passes(now)
                self._trouble.succeeded()
        except Exception as exc:  # a broken cluster must cost retries, never the checkpointer
            delay = self._failed(exc)
            self._next_pass = self._next_sync = now + delay
            if self._clients is None:
                self._next_setup = now + delay
                return min(1.0, delay)
        return 0.0

    def _passes(self, now: float) -> None:
        flow = self.flow
        self._checkpoint_pass()
        self._next_pass = now + (flow.emit_checkpoints.interval_seconds if flow.emit_checkpoints.enabled
                                 else flow.sync_group_offsets.interval_seconds)
        if flow.sync_group_offsets.enabled and now >= self._next_sync:
            assert self._clients is not None
            self._group_sync.sync_pass(flow, self.config.cluster(flow.target).librdkafka_config("consumer"),
                                       self._clients.target_admin.get(), self._translations, self.shards)
            self._next_sync = now + flow.sync_group_offsets.interval_seconds

    def _failed(self, exc: BaseException) -> float:
        if is_transient(exc) and self._clients is not None:
            self._clients.source_admin.renew()
            self._clients.target_admin.renew()
        return self._trouble.failed(exc)

    def _close(self) -> None:
        if self._clients is not None:
            self._clients.producer.flush(10)
            self._clients.follower.close()
            self._clients.probe.close()
        metrics.forget_flow(self.name, list(self._current_at))
        set_flow_state(metrics.SERVICE, self.name, "stopped")

    # -- shards ----------------------------------------------------------------------------------

    def _admit_joining(self) -> None:
        """Load the newest checkpoints of newly attached shards' groups, then serve those shards."""
        joining = self.shards.take_joining()
        if not joining:
            return
        try:
            loaded = self._read_checkpoints()
        except Exception:
            self.shards.put_back(joining)
            raise
        group_filter = self.flow.group_filter()
        for key, checkpoint in loaded.items():
            if group_filter.should_replicate_group(checkpoint.group) \
                    and any(shard.owns(checkpoint.group) for shard, _ in joining.values()):
                self._writer.last[key] = checkpoint
                self._group_sync.synced_upstream[key] = checkpoint.upstream_offset
        self.shards.admit(joining)
        self._next_pass = 0.0

    def _forget_unowned(self) -> None:
        """Drop the state and metric series of groups whose shard this process no longer holds."""
        def owned(key: CheckpointKey) -> bool:
            return self.shards.owns(key[0])

        self._writer.keep_only(owned)
        self._group_sync.keep_only(owned)
        self._translations = {g: t for g, t in self._translations.items() if self.shards.owns(g)}
        for group in [g for g in self._current_at if not self.shards.owns(g)]:
            del self._current_at[group]
            metrics.forget_group(self.name, group)

    # -- start-up --------------------------------------------------------------------------------

    def _setup(self) -> None:
        flow = self.flow
        source, target = self.config.cluster(flow.source), self.config.cluster(flow.target)
        target_admin = RenewableAdmin(target.librdkafka_config("admin"))
        topic = flow.topic_names().checkpoints
        create_topics(target_admin.get(), flow.target, [internal_topic(topic, flow.internal_topic_replication_factor("checkpoints"))])
        location = flow.topic_names().offset_syncs
        follower = SyncsFollower(self.config.cluster(location.alias).librdkafka_config("consumer"), location)
        self._corrupt_syncs = 0
        self._listing = self._listed = None
        self._clients = _Clients(RenewableAdmin(source.librdkafka_config("admin")), target_admin,
                                 Producer({**target.librdkafka_config("producer"), "enable.idempotence": True,
                                           "linger.ms": "5", "logger": librdkafka_log}),
                                 follower, TailProbe(source.librdkafka_config("consumer")))
        set_flow_state(metrics.SERVICE, self.name, "starting")
        log.info("flow=%s syncs_topic=%s on %s", self.name, location.topic, location.alias)

    def _read_checkpoints(self) -> dict[CheckpointKey, Checkpoint]:
        flow = self.flow
        return read_checkpoints(self.config.cluster(flow.target).librdkafka_config("consumer"),
                                flow.topic_names().checkpoints, on_corrupt=self._count_corrupt)

    def _follow(self) -> None:
        assert self._clients is not None
        follower = self._clients.follower
        was_ready = follower.ready
        metrics.SYNCS_READ.labels(self.name).inc(follower.poll(POLL_BUDGET))
        if follower.index.corrupt > self._corrupt_syncs:
            self._count_corrupt(follower.index.corrupt - self._corrupt_syncs)
            self._corrupt_syncs = follower.index.corrupt
        metrics.SYNCS_READY.labels(self.name).set(1 if follower.ready else 0)
        if follower.ready and not was_ready:
            set_flow_state(metrics.SERVICE, self.name, "running")

    def _count_corrupt(self, records: int = 1) -> None:
        """Corrupt records of the syncs or checkpoints topic are skipped; they count, never stop the flow."""
        ERRORS.labels(service=metrics.SERVICE, flow=self.name, kind=CORRUPT_RECORD).inc(records)

    # -- checkpoints -----------------------------------------------------------------------------

    def _source_groups(self) -> list[str]:
        """The source's groups that pass the flow's filter and fall in a shard held here.

        The listing runs beside the passes: while it is not answered (ListGroups asks every broker,
        and a broker that died answers nothing until the controllers fence it), a pass uses the groups
        the last listing found, so the checkpoints of the groups already known never wait for it; an
        answered listing is used and the next one asked at once. A listing that some broker did not
        answer keeps the groups known before: a group is forgotten only when a complete listing no
        longer has it.
        """
        assert self._clients is not None
        admin = self._clients.source_admin.get()
        listing = self._listing
        if listing is None or listing.admin is not admin or (
                not listing.answer.done() and time.monotonic() - listing.asked_at > LISTING_GIVE_UP_SECONDS):
            listing = self._listing = self._ask_groups(admin)  # the client was renewed, or the call is lost
        if self._listed is None or listing.answer.done():
            self._listing = None
            self._listed = self._answered_groups(listing)
            self._listing = self._ask_groups(admin)
        group_filter = self.flow.group_filter()
        return sorted(g for g in self._listed if group_filter.should_replicate_group(g) and self.shards.owns(g))

    @staticmethod
    def _ask_groups(admin: AdminClient) -> _Listing:
        return _Listing(admin, admin.list_consumer_groups(request_timeout=GROUP_LIST_TIMEOUT), time.monotonic())

    def _answered_groups(self, listing: _Listing) -> set[str]:
        """The groups of a listing, waiting for its answer if need be (the first pass)."""
        try:
            answer = listing.answer.result(timeout=SERVICE_ADMIN_TIMEOUT)
        except (KafkaException, TimeoutError) as exc:
            raise explain_error(exc, self.flow.source, "listing consumer groups") from None
        listed = {g.group_id for g in answer.valid}
        if answer.errors:
            log.info("flow=%s cluster=%s listing groups: %d broker(s) did not answer (%s); groups known before "
                     "are kept", self.name, self.flow.source, len(answer.errors), answer.errors[0])
            listed |= set(self._current_at)
        return listed

    def _checkpoint_pass(self) -> None:
        assert self._clients is not None
        clients, flow = self._clients, self.flow
        began = time.monotonic()
        groups = self._source_groups()
        partitions = replicated_partitions(clients.source_admin.get(), flow, SERVICE_ADMIN_TIMEOUT)
        listed = time.monotonic()
        translations, waiting = self._translate(groups, partitions)
        translated = time.monotonic()
        self._writer.begin_pass()
        emitted = sum(self._emit_fenced(group, result) for group, result in translations.items()) \
            if flow.emit_checkpoints.enabled else 0
        if emitted:
            self._writer.flush(clients.producer, flow.target)
        self._note_slow_pass(began, listed, translated, len(groups), waiting)
        now = time.time()
        for group, result in translations.items():
            self._current_at.setdefault(group, now)
            if all(t.downstream is not None for t in result):
                self._current_at[group] = now
            metrics.TRANSLATION_LAG.labels(self.name, group).set(sum(t.lag_records for t in result))
        for group in self._current_at:
            metrics.CHECKPOINT_AGE.labels(self.name, group).set(now - self._current_at[group])
        for gone in set(self._current_at) - set(groups):
            del self._current_at[gone]
            metrics.forget_group(self.name, gone)
        metrics.GROUPS_TRACKED.labels(self.name).set(len(groups))
        self._translations = {**{g: self._translations[g] for g in waiting if g in self._translations},
                              **translations}
        log.debug("flow=%s groups=%d checkpoints_emitted=%d", self.name, len(groups), emitted)

    def _note_slow_pass(self, began: float, listed: float, translated: float, groups: int,
                        waiting: list[str]) -> None:
        """Log a slow pass with where its time went (a dead leader, a coordinator moving), not too often."""
        now = time.monotonic()
        if now - began < SLOW_PASS_SECONDS or now - self._slow_logged_at < SLOW_PASS_LOG_SECONDS:
            return
        self._slow_logged_at = now
        log.info("flow=%s slow checkpoint pass: %.1fs (groups and partitions listed %.1fs, commits read and "
                 "translated %.1fs, checkpoints written %.1fs) groups=%d waiting_for_coordinator=%d",
                 self.name, now - began, listed - began, translated - listed, now - translated, groups, len(waiting))

    def _translate(self, groups: list[str], partitions: list[TopicPartition]) \
            -> tuple[dict[str, list[PartitionTranslation]], list[str]]:
        """Each group's translated commits, and the groups whose coordinator is moving (next pass).

        A group whose coordinator does not answer yet (its broker died) waits for the next pass
        without holding back the others.
        """
        assert self._clients is not None
        settings = self.config.cluster(self.flow.source).librdkafka_config("consumer")
        translations: dict[str, list[PartitionTranslation]] = {}
        waiting: list[str] = []
        waited_until = time.monotonic() + SERVICE_ADMIN_TIMEOUT  # then the rest wait too: the pass stays bounded
        for group in groups:
            if waiting and time.monotonic() > waited_until:
                waiting.append(group)
                continue
            try:
                offsets = committed_offsets(settings, self.flow.source, group, partitions, GROUP_READ_TIMEOUT)
            except KafkaRetriableError as exc:
                log.info("flow=%s group=%s commits not readable yet, next pass: %s", self.name, group, exc)
                waiting.append(group)
                continue
            translations[group] = translate_group(self.flow, self._clients.follower.index, offsets,
                                                  self._clients.probe)
        if waiting and not translations:
            raise KafkaRetriableError(f"cluster {self.flow.source}: no group's commits readable "
                                      f"({len(waiting)} waiting for their coordinator)")
        return translations, waiting

    def _emit_fenced(self, group: str, translations: list[PartitionTranslation]) -> int:
        """Emit the group's changed checkpoints while its shard's lease holds; 0 when it was lost."""
        assert self._clients is not None
        producer, topic = self._clients.producer, self.flow.topic_names().checkpoints
        return self.shards.as_holder(group, "checkpointed", lambda keeper: self._writer.emit(
            producer, topic, group, translations, keeper)) or 0


class Checkpointers:
    """This process's flow checkpointers: one per flow while it holds a shard of the flow.

    A flow's checkpointer outlives its last shard by :data:`IDLE_LINGER_SECONDS`, idle: a process
    that froze past its leases and membership (a paused VM, a long stop of the world) drops every
    shard and takes them back a moment later, and a fresh checkpointer would first re-read the whole
    offset-syncs topic, often while a cluster is in trouble (the very moment such freezes come). A
    ``strait flow restart`` still gets a fresh one: a shard taken under a new restart mark ends the
    flow's checkpointer and starts another (the old one's shards end with it and are taken again).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._flows: dict[str, tuple[FlowCheckpointer, str]] = {}  # flow -> its checkpointer, restart mark

    def attach(self, shard: ShardItem, keeper: LeaseKeeper, config: StraitConfig, mark: str) -> FlowCheckpointer:
        """Serve ``shard`` (taken under restart ``mark``) from its flow's checkpointer, started if needed.

        A replaced checkpointer (a restart) is ended first, so that its last series do not overwrite
        the new one's; its shards' workers end with it.
        """
        with self._lock:
            current, started_under = self._flows.get(shard.flow, (None, ""))
            if current is not None and current.alive and not (mark and mark != started_under) \
                    and current.attach(shard, keeper):
                current.update(config)
                return current
            if current is not None:
                current.stop()
                current.join(timeout=REPLACED_JOIN_SECONDS)
            checkpointer = FlowCheckpointer(config, shard.flow)
            checkpointer.attach(shard, keeper)
            self._flows[shard.flow] = (checkpointer.start(), mark or started_under)
            return checkpointer

    def close(self, timeout: float) -> None:
        """End every checkpointer (the process stops), waiting at most ``timeout`` in all."""
        with self._lock:
            ending = [checkpointer for checkpointer, _mark in self._flows.values()]
            self._flows.clear()
        for checkpointer in ending:
            checkpointer.stop()
        deadline = time.monotonic() + timeout
        for checkpointer in ending:
            checkpointer.join(timeout=max(0.0, deadline - time.monotonic()))


class ShardWorker(FlowWorker):
    """Holds one shard's lease and has the flow's checkpointer serve the shard's groups meanwhile."""

    def __init__(self, checkpointers: Checkpointers, keeper: LeaseKeeper, config: StraitConfig, item: str) -> None:
        super().__init__(metrics.SERVICE, keeper, config, item)
        self.shard = ShardItem.parse(item)
        self._checkpointers = checkpointers

    def work(self) -> None:
        checkpointer = self._checkpointers.attach(self.shard, self.keeper, self.config, self.restart_mark)
        try:
            while self.running and checkpointer.alive:
                config = self.take_update()
                if config is not None:
                    checkpointer.update(config)
                self.wake.wait(0.5)
                self.wake.clear()
        finally:
            checkpointer.detach(self.shard)  # it ends by itself once no shard came back for a while
