"""Copiers: a flow's partitions copied without a pause, by threads that outlive the Spark tasks.

Spark's epochs decide which task copies which partitions, restart what dies and checkpoint; a
copier does the copying (:class:`~strait_replicator.writer.CopyLoop`) in a thread of the Python
worker. An epoch's task renews the copier of its partitions when it finds it in its worker (the
usual case: the copy never stops at an epoch's end), and starts one otherwise. A copier whose task
does not come back within LINGER_SECONDS of its epoch's end (longer when the planner saw the last
tasks come late: wide flows) stops by itself, and so does every copier of a query asked to stop.

A new copier first claims its partitions: a hold record in the flow's progress topic on the target
(:class:`~strait_replicator.live.Hold`), which every copier of the flow watches. A copier holding
one of the claimed partitions stops, waits until the target holds what it sent, writes its final
progress and releases its hold; the new copier then starts where the progress says. A holder that
does not answer (its host gone, frozen or cut off from the target) writes nothing once its lease
has ended (LEASE_SECONDS after its newest hold that the target acknowledged and it read back) and
its producer's ``message.timeout.ms`` has passed after that; the claimant waits for that moment
(``Hold.fence_at``), unless the holder's process is seen gone on the same machine. So two copiers
never write one partition at the same time, provided the hosts' clocks agree to well within the
lease. (A request half-sent when its host froze is the exception only a transactional producer
fences.)
"""

from __future__ import annotations

import dataclasses
import gc
import hashlib
import json
import logging
import math
import os
import socket
import struct
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np
from confluent_kafka import KafkaError, KafkaException, Producer

from strait.errors import StraitError
from strait.flow_spec import FlowSpec
from strait.logs import setup_logging
from strait_replicator.live import Hold, LiveRun, hold_record, process_gone, process_identity, release_record
from strait_replicator.native import return_freed_memory
from strait_replicator.planner import CopyTask, SourcePlan, resumed_ranges
from strait_replicator.writer import (STOP_FLUSH_SECONDS, CopiedPartition, CopyLoop, CopyRange, CopyTransactions,
                                      EpochLimits, FencedError, PassingWriteError, ProgressWriter, SourceCopy,
                                      SyncWriter, copy_message_timeout_ms, copy_producer_settings, finish_copy,
                                      install_lazy_zip_invalidation, producer_settings, syncs_producer_settings,
                                      transactional_id, write_error)

log = logging.getLogger(__name__)

Key = tuple[str, int]
LEASE_SECONDS = 5.0  # a copier writes nothing once its newest hold read back is this old
HOLD_SECONDS = 1.0  # how often a copier renews its hold
LINGER_SECONDS = 20.0  # how long a copier goes on after its task's epoch ended, for the next task to renew it
WAIT_SECONDS = 0.05  # how often a claim and a task look again
RELEASE_SECONDS = 5.0
# A task in another Python worker of the same host renews the copier through its door (an abstract
# Unix socket); False makes such a task take over as one on another host does (tests of the hand-off).
RENEW_NEXT_DOOR = True
DOOR_ANSWER_SECONDS = 2.0  # a copier next door that does not answer a renewal this fast is taken for frozen
DOOR_BEAT_SECONDS = 1.0  # how often a copier next door tells its task it is alive
DOOR_SILENCE_SECONDS = 5.0  # a task whose copier next door stays silent this long copies itself
# A holder whose partitions newer claims cover only in part goes on copying them all this long, for
# the claims of the rest (a head start copier holds many partitions, and the first epoch's tasks
# claim theirs a second or so apart): handing over at the first claim left the rest uncopied until theirs.
PARTLY_CLAIMED_SECONDS = 3.0
# A copier whose writes failed for the moment (lapsed) is followed within its task, this long after:
# the partitions would otherwise wait for the next epoch (up to its length: 60 s by default).
SUCCESSOR_SECONDS = 1.0


class HandOffError(StraitError):
    """A copier could not take its partitions over: its claim was not written to the target."""


class NextDoorCopierError(StraitError):
    """The copier a task renewed in another Python worker of its host failed (its message is the copier's)."""


class Copier(threading.Thread):
    """Copies one task group's partitions until no task renews it, a stop of its query, or a newer
    claim on one of its partitions (see the module's text)."""

    def __init__(self, plan: SourcePlan, task: CopyTask, door: bool = True, successor: bool = False) -> None:
        self.id = uuid.uuid4().hex[:12]
        super().__init__(name=f"strait-copier-{self.id}", daemon=True)
        progress_log = plan.progress
        if progress_log is None:
            raise HandOffError(f"flow {plan.spec.flow}: a copier needs the flow's progress topic")
        self.plan, self.task, self.settings, self.progress_log = plan, task, plan.spec, progress_log
        self.keys = _partitions_of(task)
        self.error: BaseException | None = None
        self.ended = threading.Event()
        self.claimed = threading.Event()  # its claim is on the target: any later one is newer
        self._stop_requested = threading.Event()
        self.copied: dict[Key, CopiedPartition] = {}
        self.reason = ""  # why it stopped: stop, yield, linger, lapsed, fenced, done, error
        self._lock = threading.Lock()
        self._wanted_until = _wanted_until(task.limits)
        self._run = LiveRun(task.epoch, self.id)
        self._progress: ProgressWriter | None = None
        settings = producer_settings(self.settings.target_producer)  # its holds, claim, progress and release
        self._hold_timeout = float(settings["message.timeout.ms"]) / 1000.0
        # its copy's producer (SourceCopy, made of the same ranges) may wait longer: nothing of this
        # copier's is written once this has passed after its lease (Hold.fence_at)
        self._message_timeout = copy_message_timeout_ms(self.settings, len(task.ranges)) / 1000.0
        self.producer = Producer({**settings, "logger": logging.getLogger("strait.librdkafka")})
        self.watch = progress_log.watch(dict(task.progress_from))
        self._since = -1  # the offset of its claim
        self._holds_acked: list[tuple[float, int]] = []  # (sent at, offset) of holds the target acknowledged
        self._hold_errors: list[KafkaError] = []
        self._valid_until = 0.0  # its lease: it writes no record after this (wall clock)
        self._next_hold = 0.0
        self._process = process_identity()
        self._released = False
        self._loop: CopyLoop | None = None
        self._source: SourceCopy | None = None  # its copy, once started
        self._prepared: SourceCopy | None = None  # its copy, made before the claim, until it starts
        # exactly once: its copy's transactions, initialised before its claim, so that a newer claimant's
        # fence holds whenever it comes
        self._transactions: CopyTransactions | None = None
        self._partly_claimed_at: float | None = None  # when a newer claim first covered some of its partitions
        self._unacknowledged = 0  # records its copy left unacknowledged when it ended (-1: unknown)
        # another copier held one of its partitions since the epoch was planned (a successor's predecessor
        # did, even when its hold and release are both read at the claim): start where the progress says
        self._contended = successor
        self.door = _Door(self)
        if not door:  # no task renews it through one: closed for good
            self.door.close()

    # -- what the task calls ------------------------------------------------------------------------

    def renew(self, epoch: int, limits: EpochLimits) -> bool:
        """Keep copying for an epoch's task of the same partitions; False if it is stopping."""
        with self._lock:
            if self.reason or self.ended.is_set():
                return False
            self._wanted_until = _wanted_until(limits)
            self._run = LiveRun(epoch, self.id)
            if self._progress is not None:
                self._progress.run = self._run
            return True

    def stop(self) -> None:
        """Stop at its next check, as a stop of its query would (a claim still being waited for is given up)."""
        self._stop_requested.set()

    def mark(self) -> dict[Key, tuple[Any, ...]]:
        """Where each partition's copy stands now: the base of :meth:`rows_since`."""
        marked = {}
        for key, part in list(self.copied.items()):
            part.first_since_mark = -1
            marked[key] = (part.records, part.bytes, part.syncs, part.counts.copy(), part.latency_sum,
                           part.next_offset())
        return marked

    def records(self) -> int:
        """Records copied so far, over all its partitions (without a pass over them)."""
        source = self._source
        return 0 if source is None else source.records

    def rows_since(self, mark: Mapping[Key, tuple[Any, ...]]) -> list[tuple[Any, ...]]:
        """One summary row per partition (``writer.SUMMARY_FIELDS``) of what was copied since ``mark``."""
        rows = []
        for key, part in list(self.copied.items()):
            records, size, syncs, counts, latency, start = mark.get(
                key, (0, 0, 0, np.zeros_like(part.counts), 0.0, -1 if part.start is None else part.start))
            copied = part.records - records
            first = part.first_since_mark if copied and part.first_since_mark >= 0 else None
            rows.append((part.topic, part.partition, part.remote, copied, part.bytes - size, first,
                         part.last if copied else None, part.next_offset(), part.syncs - syncs,
                         [int(c) for c in part.counts - counts], part.latency_sum - latency, part.lag, start))
        return rows

    # -- the thread ----------------------------------------------------------------------------------

    def run(self) -> None:
        setup_logging()  # its lines go to the worker's stderr
        self.door.open()
        try:
            self._claim_and_copy()
        except PassingWriteError as exc:  # a broker restarting, a leader moving: not the task's failure...
            failing = self._failing_for()
            if failing <= self.settings.flush_timeout:
                self.reason = "lapsed"
                log.warning("flow=%s copier=%s partitions=%d stops, the next copier goes on from the progress on the "
                            "target: %s", self.settings.flow, self.id, len(self.keys), exc)
            else:  # ...unless it lasts
                self.error, self.reason = exc, "error"
                log.warning("flow=%s copier=%s partitions=%d failed: writes failing for %.0fs: %s", self.settings.flow,
                            self.id, len(self.keys), failing, exc)
        except FencedError as exc:  # exactly once: a newer copier took its partitions over, as a claim would
            self.reason = "fenced"
            log.info("flow=%s copier=%s partitions=%d stops: a newer copier fenced it (%s)", self.settings.flow,
                     self.id, len(self.keys), exc)
        except BaseException as exc:  # noqa: BLE001 - the task that supervises it raises it
            self.error, self.reason = exc, "error"
            log.warning("flow=%s copier=%s partitions=%d failed: %s", self.settings.flow, self.id, len(self.keys), exc)
        finally:
            self.door.close()
            with _registry_lock:
                _copiers.pop(self.id, None)
            if self._transactions is not None:
                self._transactions.abort(STOP_FLUSH_SECONDS)  # a transaction begun and never committed
            settled = self._transactions is None or self._transactions.settled  # else it must be fenced
            if (not self._released and self._since >= 0 and not self._unacknowledged and settled
                    and self.producer.flush(STOP_FLUSH_SECONDS) == 0):
                self._release()  # nothing of its own is left to arrive: the next copier need not wait
            if self._prepared is not None:  # made, never started: nothing of it to wait for
                self._prepared.close(0.0)
            self.watch.close()
            self.ended.set()
            return_freed_memory()  # its copy's queues: the process lives on (a Python worker, the driver)

    def _failing_for(self) -> float:
        """Seconds the writes of its partitions have failed for the moment only, as this Python worker
        saw it: since the first of a chain of such failures of their copiers, each within the flush
        timeout of the one before and none of them after copying a record."""
        now, key = time.monotonic(), (self.settings.flow, self.keys)
        with _registry_lock:
            since, last = _passing_failures.get(key, (now, now))
            if now - last > self.settings.flush_timeout or any(part.records for part in self.copied.values()):
                since = now
            _passing_failures[key] = (since, now)
            return now - since

    def _claim_and_copy(self) -> None:
        """Make the copy (its clients connect meanwhile), claim the partitions, then copy them from
        where their last holder left them. A copy never started is closed after the release (run)."""
        self._prepared = SourceCopy(list(self.task.ranges), self.settings,
                                    transactional_id(self.settings.flow, self.id) if self.settings.exactly_once
                                    else None)
        if self.settings.exactly_once:
            self._transactions = CopyTransactions(self._prepared)
            self._transactions.start(self._message_timeout)
        self._claim()
        if not self.reason:
            ranges = self._starting_ranges()
            source, self._prepared = self._prepared, None
            self._copy(source, ranges)

    def _claim(self) -> None:
        """Write the claim, then wait until every older holder of one of its partitions released it or
        can write no more."""
        self._since = self._send_hold(time.time(), wait=True)
        self.claimed.set()
        known = {hold.copier: hold for hold in self.task.holds if hold.flow == self.settings.flow}
        logged = False
        while True:
            now = time.time()
            self.watch.poll()
            self.reason = self._stop_reason(now, claiming=True)
            if self.reason:
                self.door.close()
                return
            if now >= self._next_hold:
                self._send_hold(now)
            control = self.watch.control
            holders = {**known, **control.holds_of(self.settings.flow)}
            self._contended = self._contended or any(
                hold.partitions & self.keys for copier, hold in holders.items() if copier != self.id)
            waiting = [hold for copier, hold in holders.items()
                       if copier != self.id and copier not in control.released and hold.partitions & self.keys
                       and hold.since < self._since and now <= hold.fence_at and not process_gone(hold.process)]
            if not waiting and self.watch.read_past(0, self._since):
                if self.settings.exactly_once:  # its partitions' older holders, and any holder of the flow
                    # that lapsed (a dead copier's open transaction holds back every read of the progress)
                    self._fence(holder for copier, holder in holders.items()
                                if copier != self.id and copier not in control.released and holder.since < self._since
                                and (holder.partitions & self.keys or now > holder.fence_at))
                self._extend_lease()
                return
            if waiting and not logged:
                logged = True
                log.info("flow=%s copier=%s waits for copier=%s to release partitions=%s (or until %.1f s from now)",
                         self.settings.flow, self.id, waiting[0].copier, _named(waiting[0].partitions & self.keys),
                         max(hold.fence_at for hold in waiting) - now)
            self.producer.poll(WAIT_SECONDS)

    def _fence(self, holders: Iterable[Hold]) -> None:
        """Exactly once: end every transaction of the older ``holders`` that did not release its
        partitions (``init_transactions`` under its transactional.id aborts its open one, and it can
        commit no more), then release their holds for them."""
        for hold in holders:
            fence_copier(self.settings, hold.copier, self._message_timeout)
            log.info("flow=%s copier=%s fenced copier=%s (it did not release partitions=%s)", self.settings.flow,
                     self.id, hold.copier, _named(hold.partitions))
            key, value = release_record(self.settings.flow, hold.copier)
            self.producer.produce(self.progress_log.topic, key=key, value=value, partition=0)

    def _starting_ranges(self) -> list[CopyRange]:
        """The task's ranges, each from where the progress on the target now says (a released
        holder's final progress included). With no other copier of its partitions known since the
        epoch was planned, where the planner read the progress then; exactly once, always from the
        progress committed now (read to its end), since a start short of it copies records twice."""
        if self.settings.exactly_once:
            progress = self.progress_log.since(dict(self.task.progress_from), sorted(self.keys), strict=True)
            return resumed_ranges(self.task, progress, self.settings.flow)
        if not self._contended:
            return list(self.task.ranges)
        progress = self.progress_log.since(dict(self.task.progress_from), sorted(self.keys))
        return resumed_ranges(self.task, progress, self.settings.flow)

    def _copy(self, source: SourceCopy, ranges: list[CopyRange]) -> None:
        """Copy ``source``'s partitions from ``ranges``' starts until it stops (see :meth:`_check`);
        ``source`` is closed at the end."""
        settings = self.settings
        self._unacknowledged = -1  # until its close says what it left: no release before that
        syncs_producer: Producer | None = None
        transactions = self._transactions
        try:
            source.start(ranges)
            syncs_producer = Producer({**syncs_producer_settings(settings.syncs_producer),
                                       "logger": logging.getLogger("strait.librdkafka")})
            syncs = SyncWriter(settings, transactions if settings.syncs_in_transaction else syncs_producer)
            with self._lock:
                self._progress = ProgressWriter(settings, transactions or self.producer, self._run)
            self.copied, self._source = source.copied, source
            limits = EpochLimits(seconds=math.inf, max_records=sys.maxsize,
                                 records_per_second=self.task.limits.records_per_second)
            loop = CopyLoop(source, self.producer, syncs, limits, self._progress, transactions)
            loop.stop = self._check
            loop.write_until = self._valid_until
            self._loop = loop
            loop.copy()
            self.reason = self.reason or "done"  # every partition's topic was deleted
            if self.reason == "lapsed" or time.time() > self._valid_until:
                return  # it may no longer write: another copier may be copying
            flush = settings.flush_timeout if self.reason == "linger" else STOP_FLUSH_SECONDS
            finish_copy(source, self.producer, syncs, self._progress, flush, transactions)
        finally:
            if transactions is not None:  # not committed: never seen, and not left open to hold consumers back
                transactions.abort(STOP_FLUSH_SECONDS)
            self._unacknowledged = source.close(STOP_FLUSH_SECONDS)
            if syncs_producer is not None:
                syncs_producer.flush(1.0)

    def _check(self) -> bool:
        """Called by the copy loop about every 0.1 s: renew the hold, read the control records; True
        when the copy should stop. While the lease has lapsed (the target does not acknowledge the
        holds) it does not return: the copy waits."""
        while True:
            now = time.time()
            if now >= self._next_hold:
                self._send_hold(now)
                self.door.open()  # when an older copier of its partitions in this host held the name
            self.watch.poll()
            self.reason = self._stop_reason(now)
            if self.reason:  # judged before the lease is extended: a newer claim read with the hold wins
                self.door.close()
                return True
            self._extend_lease()
            if now <= self._valid_until:
                return False
            if self._loop is not None:
                self._loop.source.poll(0)  # acknowledgements of its copy are timed when served
            self.producer.poll(WAIT_SECONDS)

    def _stop_reason(self, now: float, claiming: bool = False) -> str:
        """Why it should stop now ("" if it should not)."""
        if self._hold_errors:
            raise write_error(f"flow {self.settings.flow}: writing the copier's hold to topic "
                              f"{self.progress_log.topic} on cluster {self.settings.target_alias} failed: "
                              f"{self._hold_errors[0].str()}", self._hold_errors, refused=HandOffError)
        if self.watch.control.stopped(self.settings.flow, self.plan.query) or self._stop_requested.is_set():
            return "stop"
        newer = [hold for copier, hold in self.watch.control.holds_of(self.settings.flow).items()
                 if copier != self.id and hold.since > self._since and hold.partitions & self.keys]
        claimed = frozenset().union(*(hold.partitions for hold in newer)) & self.keys
        if newer and (claiming or self._hands_over(claimed, newer, now)):  # a claimant copies nothing: gives way
            log.info("flow=%s copier=%s hands partitions=%s over to copier=%s", self.settings.flow, self.id,
                     _named(claimed), ",".join(hold.copier for hold in newer))
            return "yield"
        with self._lock:
            if not claiming and now > self._wanted_until:
                self.reason = "linger"  # renew() sees it under the lock
                log.info("flow=%s copier=%s no task renewed it: stops", self.settings.flow, self.id)
                return "linger"
        return ""

    def _hands_over(self, claimed: frozenset[Key], newer: list[Hold], now: float) -> bool:
        """Whether to stop for the ``newer`` claims (of its partitions ``claimed``): once they cover
        all its partitions, or PARTLY_CLAIMED_SECONDS after the first of them (the claimants wait
        meanwhile, their partitions still copied)."""
        if claimed == self.keys:
            return True
        if self._partly_claimed_at is None:
            self._partly_claimed_at = now
            log.info("flow=%s copier=%s partitions=%s claimed by copier=%s: copies on for the claims of the rest "
                     "(up to %.0f s)", self.settings.flow, self.id, _named(newer[0].partitions & self.keys),
                     newer[0].copier, PARTLY_CLAIMED_SECONDS)
        return now - self._partly_claimed_at >= PARTLY_CLAIMED_SECONDS

    def _extend_lease(self) -> None:
        """The lease runs LEASE_SECONDS from the sending of the newest hold acknowledged and read
        back: a newer claim written before that hold has been seen by then."""
        while self._holds_acked and self.watch.read_to.get(0, 0) > self._holds_acked[0][1]:
            sent_at, _offset = self._holds_acked.pop(0)
            self._valid_until = max(self._valid_until, sent_at + LEASE_SECONDS)
        if self._loop is not None:
            self._loop.write_until = self._valid_until

    def _send_hold(self, now: float, wait: bool = False) -> int:
        """Write its hold; with ``wait``, its offset once acknowledged (else -1)."""
        self._next_hold = now + HOLD_SECONDS
        # Exactly once, a claimant fences it through the broker: its lease alone is waited for.
        fence_at = now + LEASE_SECONDS + (0.0 if self.settings.exactly_once else self._message_timeout)
        hold = Hold(self.settings.flow, self.id, self.keys, self.plan.query, self._since, fence_at, self._process)
        key, value = hold_record(hold)
        acked: list[int] = []
        failed: list[KafkaError] = []

        def delivered(err: KafkaError | None, msg: Any) -> None:
            if err is not None:
                failed.append(err)
                self._hold_errors.append(err)
            else:
                acked.append(msg.offset())
                self._holds_acked.append((now, msg.offset()))
        self.producer.produce(self.progress_log.topic, key=key, value=value, partition=0, on_delivery=delivered)
        if not wait:
            return -1
        self.producer.flush(self._hold_timeout + 1.0)  # its delivery report, even a timeout's, is then in
        if not acked:
            raise HandOffError(f"flow {self.settings.flow}: the claim on partitions {_named(self.keys)} was not "
                               f"written to topic {self.progress_log.topic} on cluster "
                               f"{self.settings.target_alias}: {failed[0].str() if failed else 'timed out'}")
        return acked[0]

    def _release(self) -> None:
        self._released = True
        key, value = release_record(self.settings.flow, self.id)
        self.producer.produce(self.progress_log.topic, key=key, value=value, partition=0)
        if self.producer.flush(RELEASE_SECONDS):
            log.warning("flow=%s copier=%s release not written: the next copier waits for its lease to end",
                        self.settings.flow, self.id)


def _fence(settings: FlowSpec, name: str, timeout: float) -> None:
    """Abort the open transaction of the producer with transactional.id ``name`` on the flow's target,
    if any, and fence it: it can commit nothing more. KafkaException when the target refuses or does
    not answer."""
    producer = Producer({**copy_producer_settings(settings, name),
                         "logger": logging.getLogger("strait.librdkafka")})
    try:
        producer.init_transactions(timeout)
    finally:
        producer.close()


def fence_copier(settings: FlowSpec, copier: str, timeout: float) -> None:
    """Exactly once: abort the open transaction of ``copier`` of the flow, if any, and fence it: it can
    commit nothing more. A HandOffError when the target does not answer."""
    try:
        _fence(settings, transactional_id(settings.flow, copier), timeout)
    except KafkaException as exc:
        raise HandOffError(f"flow {settings.flow}: fencing copier {copier} on cluster {settings.target_alias} "
                           f"failed: {exc.args[0].str() if exc.args else exc}") from None


def fence_mm2_tasks(settings: FlowSpec, transactional_ids: Iterable[str], timeout: float) -> list[str]:
    """Abort the open transactions of MirrorMaker 2's exactly-once tasks and fence them (taking over
    from a crashed MM2: read_committed readers then see the copies that follow at once, not after
    MM2's ``transaction.timeout.ms``); the ids fenced. One that cannot be fenced (an ACL, a timeout) is
    logged: its transaction ends at its timeout."""
    fenced: list[str] = []
    for name in transactional_ids:
        try:
            _fence(settings, name, timeout)
            fenced.append(name)
        except KafkaException as exc:
            log.warning("flow=%s MirrorMaker 2's transactional_id=%s not fenced on cluster=%s (grant WRITE and "
                        "DESCRIBE on that TransactionalId): %s; its open transaction hides later records from "
                        "read_committed readers until it times out", settings.flow, name, settings.target_alias,
                        exc.args[0].str() if exc.args else exc)
    return fenced


_copiers: dict[str, Copier] = {}  # this worker's running copiers
# (flow, partitions) -> (first, last) passing write failure of their copiers here (monotonic)
_passing_failures: dict[tuple[str, frozenset[Key]], tuple[float, float]] = {}
_registry_lock = threading.Lock()


def copy_task(plan: SourcePlan, task: CopyTask) -> list[tuple[Any, ...]]:
    """An epoch's task: renew the copier of its partitions (in this Python worker, else in another
    of this host) or start one; watch it until the epoch ends (or its record cap, or a stop), with a
    successor after a copier that lapsed here; one summary row per partition of what they copied
    meanwhile."""
    install_lazy_zip_invalidation()  # a Python worker's: the driver copies nothing
    setup_logging()
    copier = _renewed(plan, task)
    if copier is None:
        rows = _renewed_next_door(plan, task)
        if rows is not None:
            return rows
        copier = _started(plan, task)
    return _watched(copier, task.limits, successor=lambda: _started(plan, task, successor=True))


def _watched(copier: Copier, limits: EpochLimits, beat: Callable[[], None] | None = None,
             successor: Callable[[], Copier] | None = None) -> list[tuple[Any, ...]]:
    """Watch a renewed or new copier until the epoch ends, its record cap or its end (``beat`` is
    called about every DOOR_BEAT_SECONDS meanwhile); the epoch's rows, or the copier's error. A
    copier that lapsed is followed by a ``successor`` while the epoch lasts: one row per partition
    sums them up (:func:`merged_rows`)."""
    now = time.monotonic()
    deadline, next_beat = now + limits.task_seconds(), now + DOOR_BEAT_SECONDS
    earlier: list[tuple[Any, ...]] = []
    followed = False  # the copier watched is a successor
    while True:
        mark = copier.mark()  # {} while a new copier claims: its rows then count from its start
        copied_before = _records(earlier) - sum(marked[0] for marked in mark.values())
        while not copier.ended.wait(WAIT_SECONDS):
            now = time.monotonic()
            if now >= deadline or copied_before + copier.records() >= limits.max_records:
                break
            if beat is not None and now >= next_beat:
                beat()
                next_beat = now + DOOR_BEAT_SECONDS
        if copier.error is not None:
            if followed and not copier.claimed.is_set():  # a successor the target did not take a claim of yet
                log.warning("flow=%s copier=%s (a successor) not claimed: the next epoch's copier goes on (%s)",
                            copier.settings.flow, copier.id, copier.error)
                return earlier
            raise copier.error
        rows = merged_rows(earlier, copier.rows_since(mark))
        if (successor is None or copier.reason != "lapsed"
                or time.monotonic() + SUCCESSOR_SECONDS >= deadline or _records(rows) >= limits.max_records):
            return rows
        earlier = rows
        time.sleep(SUCCESSOR_SECONDS)
        try:
            copier = successor()
        except Exception as exc:  # noqa: BLE001 - the lapsed copier's epoch stands; the next one goes on
            log.warning("flow=%s no successor of copier=%s started: the next epoch's copier goes on (%s: %s)",
                        copier.settings.flow, copier.id, type(exc).__name__, exc)
            return rows
        followed = True
        log.info("flow=%s copier=%s goes on after a lapsed copier of partitions=%s in the same epoch",
                 copier.settings.flow, copier.id, _named(copier.keys))


def merged_rows(earlier: list[tuple[Any, ...]], later: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """The summary rows (``writer.SUMMARY_FIELDS``) of two copiers of the same partitions, one after
    the other, as one row per partition: counts add up, the offsets span both (a successor that has
    copied nothing yet starts where the progress says, which may be short of its predecessor's
    acknowledged end, and knows no lag yet)."""
    merged = {(row[0], row[1]): row for row in earlier}
    for row in later:
        before = merged.get((row[0], row[1]))
        if before is None:
            merged[(row[0], row[1])] = row
            continue
        merged[(row[0], row[1])] = (
            row[0], row[1], row[2], before[3] + row[3], before[4] + row[4],
            before[5] if before[5] is not None else row[5], row[6] if row[6] is not None else before[6],
            max(before[7], row[7]), before[8] + row[8], [a + b for a, b in zip(before[9], row[9])],
            before[10] + row[10], row[11] if row[11] >= 0 else before[11], before[12])
    return list(merged.values())


def _records(rows: list[tuple[Any, ...]]) -> int:
    return sum(row[3] for row in rows)


def _renewed(plan: SourcePlan, task: CopyTask) -> Copier | None:
    keys = _partitions_of(task)
    with _registry_lock:
        found = [c for c in _copiers.values()
                 if c.settings.flow == plan.spec.flow and c.plan.query == plan.query and c.keys == keys]
    return next((copier for copier in found if copier.renew(task.epoch, task.limits)), None)


def _started(plan: SourcePlan, task: CopyTask, successor: bool = False) -> Copier:
    # A full collection walks every object of the worker (PySpark, NumPy, confluent-kafka: measured
    # 100-380 ms, once or twice every 10 s while copying), holding the GIL: the copy stood still
    # meanwhile, the main part of its p99 latency. What exists before the copy is long-lived: frozen,
    # the collector skips it.
    gc.freeze()
    copier = Copier(plan, task, successor=successor)
    with _registry_lock:
        _copiers[copier.id] = copier
    copier.start()
    return copier


def _partitions_of(task: CopyTask) -> frozenset[Key]:
    """The (topic, partition) keys a task copies: what names its copier, here and through its door."""
    return frozenset((r.topic, r.partition) for r in task.ranges)


def _wanted_until(limits: EpochLimits) -> float:
    return time.time() + limits.task_seconds() + max(LINGER_SECONDS, limits.linger_seconds)


NAMED_IN_LOG = 10  # a log line names this many partitions, then counts the rest (a copier may hold thousands)


def _named(keys: frozenset[Key]) -> str:
    names = [f"{topic}[{partition}]" for topic, partition in sorted(keys)[:NAMED_IN_LOG]]
    more = len(keys) - len(names)
    return ",".join(names) + (f",... ({len(keys)} partitions)" if more > 0 else "")


# -- the door: renewal by a task in another Python worker of the same host -------------------------
#
# Spark hands a task to whichever of the executor's idle Python workers comes first, so an epoch's
# task often lands beside, not in, the worker whose copier holds its partitions. Through the door it
# renews that copier and receives its rows, and the copy goes on: no hand-off within a host. The door
# is an abstract Unix socket (no file; private to the host's network namespace, so a task on
# another host never finds it) named after the flow, the query and the partitions; only processes
# of the copier's user are answered.


def _door_name(flow: str, query: str, keys: frozenset[Key]) -> bytes:
    digest = hashlib.sha256(json.dumps([flow, query, sorted(keys)]).encode()).hexdigest()[:40]
    return b"\0strait-copier-" + digest.encode()


class _Door:
    """A copier's door (see above): listening while the copier may be renewed."""

    def __init__(self, copier: Copier) -> None:
        self.copier = copier
        self.name = _door_name(copier.settings.flow, copier.plan.query, copier.keys)
        self._socket: socket.socket | None = None
        self._closed = False
        self._lock = threading.Lock()

    def open(self) -> None:
        """Listen, unless it is closed or an older copier of the same partitions here still listens
        (it is tried again at the next hold)."""
        with self._lock:
            if self._socket is not None or self._closed:
                return
            listening = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                listening.bind(self.name)
                listening.listen(8)
            except OSError:
                listening.close()
                return
            listening.settimeout(0.5)
            self._socket = listening
        threading.Thread(target=self._accept, args=(listening,), name=f"{self.copier.name}-door", daemon=True).start()

    def close(self) -> None:
        """Stop listening for good (the copier is stopping: the next copier may take the name)."""
        with self._lock:
            self._closed = True
            listening, self._socket = self._socket, None
        if listening is not None:
            listening.close()

    def _accept(self, listening: socket.socket) -> None:
        while not self._closed:
            try:
                conn, _address = listening.accept()
            except TimeoutError:
                continue
            except OSError:
                return  # closed
            threading.Thread(target=self._serve, args=(conn,), name=f"{self.copier.name}-renewal",
                             daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        """One task's renewal: acknowledge, beat while the epoch runs, then send its rows."""
        with conn:
            try:
                if not _same_user(conn):
                    return
                conn.settimeout(DOOR_ANSWER_SECONDS)
                request = _LineReader(conn).next()
                limits = EpochLimits(**request["limits"])
                renewed = self.copier.renew(int(request["epoch"]), limits)
                _send(conn, {"renewed": renewed})
                if not renewed:
                    return
                try:
                    rows = _watched(self.copier, limits, beat=lambda: _send(conn, {"alive": True}))
                except Exception as exc:  # noqa: BLE001 - the renewing task fails with it
                    _send(conn, {"error": f"{type(exc).__name__}: {exc}"})
                    return
                _send(conn, {"rows": rows})
            except (OSError, ValueError, KeyError, TypeError) as exc:
                log.info("flow=%s copier=%s renewal from next door ended: %s", self.copier.settings.flow,
                         self.copier.id, exc)


def _renewed_next_door(plan: SourcePlan, task: CopyTask) -> list[tuple[Any, ...]] | None:
    """The epoch's rows of the copier of the task's partitions in another Python worker of this host,
    renewed for the epoch; None when there is none, it does not answer or goes silent (the task then
    copies itself: its copier's claim fences the silent one)."""
    if not RENEW_NEXT_DOOR:
        return None
    keys = _partitions_of(task)
    flow = plan.spec.flow
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(DOOR_ANSWER_SECONDS)
        lines = _LineReader(conn)
        try:
            conn.connect(_door_name(flow, plan.query, keys))
            _send(conn, {"epoch": task.epoch, "limits": dataclasses.asdict(task.limits)})
            if not lines.next().get("renewed"):
                return None
        except (OSError, ValueError):
            return None  # no copier of these partitions here, or it is stopping or frozen
        log.info("flow=%s epoch=%d partitions=%s renewed the copier in another Python worker of this host", flow,
                 task.epoch, _named(keys))
        conn.settimeout(DOOR_SILENCE_SECONDS)
        try:
            while True:
                answer = lines.next()
                if "error" in answer:
                    raise NextDoorCopierError(f"flow {flow}: the copier of partitions {_named(keys)} failed: "
                                              f"{answer['error']}")
                if "rows" in answer:
                    return [tuple(row) for row in answer["rows"]]
        except (OSError, ValueError) as exc:
            log.warning("flow=%s epoch=%d partitions=%s the copier next door went silent (%s): this task copies",
                        flow, task.epoch, _named(keys), exc)
            return None


def _same_user(conn: socket.socket) -> bool:
    credentials = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    _pid, uid, _gid = struct.unpack("3i", credentials)
    return bool(uid == os.getuid())


def _send(conn: socket.socket, message: Mapping[str, Any]) -> None:
    conn.sendall(json.dumps(message, default=_plain).encode() + b"\n")


def _plain(value: Any) -> Any:
    """numpy's scalars as Python's."""
    return value.item()


class _LineReader:
    """JSON messages, one a line, from a socket (its timeout applies to each read)."""

    def __init__(self, conn: socket.socket) -> None:
        self._conn, self._buffer = conn, b""

    def next(self) -> dict[str, Any]:
        while b"\n" not in self._buffer:
            chunk = self._conn.recv(65536)
            if not chunk:
                raise ConnectionError("closed")
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        message = json.loads(line)
        if not isinstance(message, dict):
            raise ValueError(f"not a message: {line[:80]!r}")
        return message
