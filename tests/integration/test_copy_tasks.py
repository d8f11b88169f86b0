"""The executor side of the replicator on real clusters: a stop written to the target ends the
running epoch task, a copier in another worker takes a partition over without two copiers ever
writing it at once, and a target that stops answering for a while ends a copier without failing
its task."""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from strait_lab.clients import Record, consume_all, create_topic, produce
from strait_bench.bounded import copy_ranges
from strait_lab.kafka import KafkaCluster
from strait.policy import DefaultReplicationPolicy
from strait_replicator import copier, writer
from strait.config.model import SyncsLocation
from strait.flow_spec import FlowSpec
from strait.progress import OffsetsTopic
from strait.translation import SyncIndex
from strait.verify_keys import key_partition
from strait_replicator.live import ControlWatch, Hold, hold_named, stop_record
from strait_replicator.source import CopyStreamReader, CopyTask, SourcePlan
from strait_replicator.state import EpochOffsets
from strait_replicator.writer import CopyRange, EpochLimits
from tests.support.kafka import (NumberedLoad, committed_records, count, numbered_copies, offsets_end,
                                 produce_transactions, records_by_partition)
from tests.support.waiting import slack, wait_for

NEXT_OFFSET = writer.SUMMARY_FIELDS.index("next_offset")
PARTITION = writer.SUMMARY_FIELDS.index("partition")


@pytest.fixture
def topics(source_cluster: KafkaCluster, target_cluster: KafkaCluster,
           unique_name: Callable[[str], str]) -> tuple[str, str, str]:
    topic, syncs = unique_name("epochs"), unique_name("epochs-syncs")
    remote = f"{source_cluster.alias}.{topic}"
    create_topic(source_cluster.admin(), topic, 2)
    create_topic(source_cluster.admin(), syncs, 1)
    create_topic(target_cluster.admin(), remote, 2)
    create_topic(target_cluster.admin(), _progress_topic(topic), 1)
    return topic, remote, syncs


def _progress_topic(topic: str) -> str:
    return f"{topic}-progress"


def _settings(source: KafkaCluster, target: KafkaCluster, topic: str, remote: str, syncs: str) -> FlowSpec:
    return FlowSpec(
        flow=f"{source.alias}->{target.alias}", source_alias=source.alias, target_alias=target.alias,
        policy=DefaultReplicationPolicy(), source_admin=source.client_config(),
        source_consumer=source.client_config(), target_consumer=target.client_config(),
        target_producer=target.client_config(), syncs=SyncsLocation(source.alias, syncs),
        syncs_producer=source.client_config(), remote_names={topic: remote},
        progress=SyncsLocation(target.alias, _progress_topic(topic)))


def _send(source: KafkaCluster, topic: str, first: int, count: int) -> list[Record]:
    records = [Record(f"k{i}".encode(), f"v{i}".encode(), partition=i % 2) for i in range(first, first + count)]
    produce(source.client_config(), topic, records)
    return records


def _values(records: list[Record], partition: int) -> list[bytes | None]:
    return [r.value for r in records if r.partition == partition]


def _task(epoch: int, topic: str, starts: dict[int, int], seconds: float,
          progress_from: tuple[tuple[int, int], ...] = ()) -> CopyTask:
    limits = EpochLimits(seconds=seconds, max_records=1_000_000, ends_at=time.time() + seconds)
    return CopyTask(epoch, tuple(CopyRange(topic, p, start) for p, start in starts.items()), limits, progress_from)


def _ends(rows: list[tuple]) -> dict[int, int]:
    return {row[PARTITION]: row[NEXT_OFFSET] for row in rows}


def _write_stop(target: KafkaCluster, topic: str, flow: str, query: str) -> None:
    key, value = stop_record(flow, query)
    produce(target.client_config(), _progress_topic(topic), [Record(key, value, partition=0)])


def test_the_copy_loop_copies_exactly_from_each_start_in_order(
        source_cluster: KafkaCluster, target_cluster: KafkaCluster, topics: tuple[str, str, str]) -> None:
    """What every copier runs (writer.CopyLoop), bounded by a record cap as the bench's copy is: each
    partition from its start offset, every record once, in order, with key and value unchanged."""
    topic, remote, syncs = topics
    settings = _settings(source_cluster, target_cluster, topic, remote, syncs)
    sent = _send(source_cluster, topic, 0, 100)
    rows = copy_ranges([CopyRange(topic, 0, 20), CopyRange(topic, 1, 0)], settings,
                       EpochLimits(seconds=60.0, max_records=30 + 50))
    assert _ends(rows) == {0: 50, 1: 50}
    copied = records_by_partition(target_cluster, remote)
    assert [(r.key, r.value) for r in copied[0]] == [(r.key, r.value) for r in sent if r.partition == 0][20:]
    assert [r.value for r in copied[1]] == _values(sent, 1)


def test_a_copy_made_before_its_starts_are_known_fetches_nothing_until_started_then_from_those_starts(
        source_cluster: KafkaCluster, target_cluster: KafkaCluster, topics: tuple[str, str, str]) -> None:
    """A copier makes its copy (clients connected) before it claims the partitions and starts it
    where their last holder left them: until then nothing is fetched; then each partition is copied
    from the start given (or the earliest offset), not from the one it was made with."""
    topic, remote, syncs = topics
    sent = _send(source_cluster, topic, 0, 20)
    source = writer.SourceCopy([CopyRange(topic, 0, 0), CopyRange(topic, 1, 9)],
                               _settings(source_cluster, target_cluster, topic, remote, syncs))
    copied = 0
    try:
        assert source.copy(100, 1.0, time.time() + 60) == (0, 0), "records fetched before the copy was started"
        source.start([CopyRange(topic, 0, 4), CopyRange(topic, 1, None)])
        with pytest.raises(RuntimeError, match="once"):
            source.start()
        deadline = time.monotonic() + 30
        while copied < 16 and time.monotonic() < deadline:
            copied += source.copy(100, 0.5, time.time() + 60)[0]
    finally:
        left = source.close(10.0)
    assert copied == 16 and left == 0
    on_target = records_by_partition(target_cluster, remote)
    assert [r.value for r in on_target[0]] == _values(sent, 0)[4:]
    assert [r.value for r in on_target[1]] == _values(sent, 1)


def _copy_until(source: writer.SourceCopy, topic: str, sent: int, ends: dict[int, int], timeout: float = 30.0) -> None:
    """Run the copy until ``sent`` records are sent and each partition's fetch saw its end at ``ends``."""
    copied, deadline = 0, time.monotonic() + timeout
    while copied < sent or any(source.copied[(topic, p)].sent().reached < end for p, end in ends.items()):
        assert time.monotonic() < deadline, f"{copied} of {sent} records copied"
        copied += source.copy(100, 0.2, time.time() + 60)[0]


def test_a_copy_settles_only_the_partitions_that_moved_unless_asked_for_every_one(
        source_cluster: KafkaCluster, target_cluster: KafkaCluster, topics: tuple[str, str, str]) -> None:
    """A copier of 5,000 partitions passed over all of them every half second (settle, lag, progress)
    and spent its time there instead of copying: a settle now takes the partitions whose records were
    sent, acknowledged or whose end moved since the last one, and every partition only when asked."""
    topic, remote, syncs = topics
    settings = _settings(source_cluster, target_cluster, topic, remote, syncs)
    _send(source_cluster, topic, 0, 10)
    source = writer.SourceCopy([CopyRange(topic, 0, 0), CopyRange(topic, 1, 0)], settings)
    sync_writer = writer.SyncWriter(settings, Producer(writer.syncs_producer_settings(settings.syncs_producer)))
    try:
        source.start()
        _copy_until(source, topic, 10, {0: 5, 1: 5})
        source.flush(30.0)
        assert sorted(p.partition for p in source.settle(sync_writer, everything=False)) == [0, 1]
        assert source.records == 10
        assert source.settle(sync_writer, everything=False) == [], "nothing moved since the last settle"
        produce(source_cluster.client_config(), topic, [Record(b"k", b"v", partition=1)] * 2)
        _copy_until(source, topic, 2, {1: 7})
        source.flush(30.0)
        assert [p.partition for p in source.settle(sync_writer, everything=False)] == [1]
        assert source.records == 12
        assert len(source.settle(sync_writer, everything=True)) == 2
        sync_writer.flush(30.0)
    finally:
        assert source.close(10.0) == 0
    assert {p: len(records) for p, records in records_by_partition(target_cluster, remote).items()} == {0: 5, 1: 7}


def test_a_copy_that_caught_up_hands_its_freed_memory_back_once_per_stretch_of_records(
        source_cluster: KafkaCluster, target_cluster: KafkaCluster, topics: tuple[str, str, str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """glibc keeps what librdkafka's queues freed: a head start copier held 550-730 MB in the driver
    after it caught up. A copy that catches up after TRIM_AFTER_RECORDS hands it back, then not again
    until it copied as many more."""
    topic, remote, syncs = topics
    trims: list[int] = []
    monkeypatch.setattr(writer, "TRIM_AFTER_RECORDS", 8)
    monkeypatch.setattr(writer, "return_freed_memory", lambda: trims.append(1) or True)
    _send(source_cluster, topic, 0, 10)
    settings = _settings(source_cluster, target_cluster, topic, remote, syncs)
    rows = copy_ranges([CopyRange(topic, 0, 0), CopyRange(topic, 1, 0)], settings,
                       EpochLimits(seconds=2.0, max_records=1_000))
    assert _ends(rows) == {0: 5, 1: 5}
    assert trims == [1], "one trim once the 10 records were copied and the copy waited for more"


def test_the_native_loop_keeps_every_field_and_a_repartitioned_copy_places_records_by_key(
        source_cluster: KafkaCluster, target_cluster: KafkaCluster, topics: tuple[str, str, str],
        unique_name: Callable[[str], str]) -> None:
    """The C copy loop (writer.SourceCopy) sends key, value, headers (repeated names, empty and null
    values) and timestamp as they are, keyless records and tombstones included; repartitioned, each
    keyed record lands where Kafka's partitioner puts its key, every record once."""
    topic, remote, syncs = topics
    sent = [Record(f"k{i}".encode() if i % 5 else None, None if i % 7 == 3 else f"v{i}".encode() * (i % 4),
                   (("h", b"1"), ("h", f"{i}".encode()), ("empty", b""), ("null", None)) if i % 3 else (),
                   1_600_000_000_000 + i, i % 2) for i in range(60)]
    produce(source_cluster.client_config(), topic, sent)
    settings = _settings(source_cluster, target_cluster, topic, remote, syncs)
    rows = copy_ranges([CopyRange(topic, 0, 0), CopyRange(topic, 1, 0)], settings,
                       EpochLimits(seconds=60.0, max_records=60))
    assert _ends(rows) == {0: 30, 1: 30} and sum(row[3] for row in rows) == 60
    fields = ["key", "value", "headers", "timestamp_ms"]
    copied = records_by_partition(target_cluster, remote)
    for partition in (0, 1):
        assert [[getattr(r, f) for f in fields] for r in copied[partition]] == \
            [[getattr(r, f) for f in fields] for r in sent if r.partition == partition]

    spread = unique_name("spread")
    create_topic(target_cluster.admin(), spread, 3)
    rows = copy_ranges([CopyRange(topic, 0, 0), CopyRange(topic, 1, 0)],
                       replace(settings, repartition=True, remote_names={topic: spread},
                               target_producer={**dict(settings.target_producer), "partitioner": "murmur2_random"}),
                       EpochLimits(seconds=60.0, max_records=60))
    assert _ends(rows) == {0: 30, 1: 30} and sum(row[8] for row in rows) == 0, "no offset syncs when repartitioned"
    placed = records_by_partition(target_cluster, spread)
    assert sorted(r.timestamp_ms for records in placed.values() for r in records) == [r.timestamp_ms for r in sent]
    for partition, records in placed.items():
        assert all(key_partition(r.key, 3) == partition for r in records if r.key is not None)


def test_a_stop_record_ends_the_running_task_and_the_planner_plans_no_epoch_after_it(
        source_cluster: KafkaCluster, target_cluster: KafkaCluster, topics: tuple[str, str, str],
        tmp_path: Path) -> None:
    """Tasks and planner learn of a stop from the target alone (no file): another query's stop is no
    stop; this query's ends the running task within moments and the planner repeats the last epoch."""
    topic, remote, syncs = topics
    settings = _settings(source_cluster, target_cluster, topic, remote, syncs)
    where = OffsetsTopic(target_cluster.client_config(), settings.progress, source_cluster.alias)
    where.read()
    started_at = tuple(sorted(where.positions.items()))  # where the progress topic ended when the query started
    where.close()
    last = EpochOffsets(3, {(topic, 0): 0, (topic, 1): 0}, {(topic, 0): 0, (topic, 1): 0})
    plan = SourcePlan(((topic, 2),), 1, str(tmp_path), settings, epoch_seconds=60.0, max_records_per_epoch=10**6,
                      query="q-this", last_epoch=last)
    reader = CopyStreamReader(plan)
    try:
        sent = _send(source_cluster, topic, 0, 100)
        _write_stop(target_cluster, topic, settings.flow, "q-other")
        planned = EpochOffsets.from_json(reader.latestOffset())
        assert planned.epoch == 4 and planned.until == {(topic, 0): 50, (topic, 1): 50}, "another query's stop"
        rows: list[tuple] = []
        task = threading.Thread(target=lambda: rows.extend(reader.read(_task(4, topic, {0: 0, 1: 0}, 60.0,
                                                                             started_at))))
        began = time.monotonic()
        task.start()
        wait_for(lambda: count(target_cluster, remote) == 100, 30, "the epoch's copies")
        _write_stop(target_cluster, topic, settings.flow, "q-this")
        task.join(30)
        assert not task.is_alive() and time.monotonic() - began < 30, "the stop record did not end the 60 s task"
        assert _ends(rows) == {0: 50, 1: 50}
        assert EpochOffsets.from_json(reader.latestOffset()) == planned, "a new epoch was planned after the stop"
    finally:
        reader.stop()  # DataSourceStreamReader's: nothing to release
    copied = records_by_partition(target_cluster, remote)
    assert [[r.value for r in copied[p]] for p in (0, 1)] == [_values(sent, 0), _values(sent, 1)]



# -- the hand-off between copiers in two Python workers --------------------------------------------

def _copier_worker(plan: SourcePlan, task: CopyTask, rows: Any, stay_seconds: float, next_door: bool = True) -> None:
    """A Python worker process: runs one epoch task, then stays (its copier goes on) as Spark's do.
    Without ``next_door`` it takes no copier of another worker here for a neighbour (another host's)."""
    copier.RENEW_NEXT_DOOR = next_door
    rows.put(copier.copy_task(plan, task))
    time.sleep(stay_seconds)


def _plan(settings: FlowSpec, topic: str, tmp_path: Path) -> SourcePlan:
    return SourcePlan(((topic, 2),), 1, str(tmp_path), settings, epoch_seconds=3.0, max_records_per_epoch=10**9,
                      query="q-handoff")


def _quick_timeout_plan(source: KafkaCluster, target: KafkaCluster, topics: tuple[str, str, str],
                        tmp_path: Path) -> tuple[FlowSpec, SourcePlan]:
    """Settings and plan whose copy producer times records out after 3 s (a frozen copier's lease and
    fence, or a frozen target, last seconds, not the default 30)."""
    topic, remote, syncs = topics
    producer = {**target.client_config(), "message.timeout.ms": "3000"}
    settings = replace(_settings(source, target, topic, remote, syncs), target_producer=producer)
    return settings, _plan(settings, topic, tmp_path)


def _read_to(target: KafkaCluster, source: KafkaCluster, topic: str) -> tuple[tuple[int, int], ...]:
    """Where the progress topic ends now (what a planner hands its tasks)."""
    where = OffsetsTopic(target.client_config(), SyncsLocation(target.alias, _progress_topic(topic)), source.alias)
    try:
        where.read()
        return tuple(sorted(where.positions.items()))
    finally:
        where.close()


def _end_workers(*workers: Any) -> None:
    """Kill the copier workers (thawed first: a frozen one would not die), even half-started ones."""
    for worker in workers:
        if worker is not None and worker.pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(worker.pid, signal.SIGCONT)
            worker.kill()
            worker.join(10)


def _descents(sequence: list[int]) -> int:
    return sum(1 for before, after in zip(sequence, sequence[1:]) if after <= before)


@pytest.mark.parametrize("mode", ["next-door", "handed-over", "holder-frozen"])
def test_a_copier_in_another_worker_takes_over_and_two_never_write_one_partition(
        source_cluster: KafkaCluster, target_cluster: KafkaCluster, topics: tuple[str, str, str],
        tmp_path: Path, mode: str) -> None:
    """Worker A's copier copies a steady load; the next epoch's task lands in worker B. On the same
    host (next-door), B renews A's copier through its door and gets its rows: the copy goes on in A,
    no other copier ever holds the partitions. As if on another host, handed over, A stops, writes its
    final progress and releases: B goes on from there, every record exactly once. Frozen (SIGSTOP)
    with its copier mid-copy, A answers nothing: B waits until A's lease and its producer's message
    timeout have passed, then copies; A, thawed, writes nothing more. Either way each partition's
    copy is in order with at most one step back (records A sent as it froze, copied again by B): no
    interleaving."""
    freeze = mode == "holder-frozen"
    topic, remote, syncs = topics
    settings, plan = _quick_timeout_plan(source_cluster, target_cluster, topics, tmp_path)
    context = multiprocessing.get_context("spawn")
    rows_a, rows_b = context.Queue(), context.Queue()
    load = NumberedLoad(source_cluster, topic, 2, rate=400)
    read_to = _read_to(target_cluster, source_cluster, topic)
    worker_a = context.Process(target=_copier_worker, args=(plan, _task(1, topic, {0: 0, 1: 0}, 3.0, read_to),
                                                            rows_a, 60.0))
    worker_b: Any = None
    try:
        worker_a.start()
        rows_a.get(timeout=60)  # A's task ended; its copier goes on
        wait_for(lambda: count(target_cluster, remote) > 1_000, 30, "A's copier copying after its task")
        if freeze:
            os.kill(worker_a.pid, signal.SIGSTOP)
        frozen_at = time.monotonic()
        task_b = replace(_task(2, topic, {0: 0, 1: 0}, 6.0, _read_to(target_cluster, source_cluster, topic)),
                         holds=_holds(target_cluster, topic))
        worker_b = context.Process(target=_copier_worker, args=(plan, task_b, rows_b, 30.0, mode == "next-door"))
        worker_b.start()
        copied_at_freeze = count(target_cluster, remote)
        wait_for(lambda: count(target_cluster, remote) > copied_at_freeze + 400, 60, "B copying")
        took_over = time.monotonic() - frozen_at
        if freeze:
            assert took_over >= copier.LEASE_SECONDS, \
                f"B copied {took_over:.1f} s after A froze: it did not wait for A's lease"
            os.kill(worker_a.pid, signal.SIGCONT)
            time.sleep(4)  # A thaws: it must find its lease gone and B's claim
        # B's task reports when its epoch ends; the load runs until then, so that a slow start of B's
        # process (spawned: seconds on a loaded machine) cannot leave it nothing to copy
        copied_by_b = sum(row[writer.SUMMARY_FIELDS.index("records")] for row in rows_b.get(timeout=60))
        sent = load.stop()
        wait_for(lambda: _copied_through(target_cluster, remote, sent), 60, "every record copied")
        time.sleep(1)
        _write_stop(target_cluster, topic, settings.flow, plan.query)
    finally:
        load.stop()
        _end_workers(worker_a, worker_b)
    copies = numbered_copies(target_cluster, remote)
    for partition, sequence in copies.items():
        assert set(sequence) == set(range(sent // 2 + (partition < sent % 2))), f"partition {partition} lost records"
        assert _descents(sequence) <= (1 if freeze else 0), \
            f"partition {partition}: copies interleave or repeat ({_descents(sequence)} steps back)"
    holders = _holders(target_cluster, topic)
    if mode == "next-door":
        assert len(holders) == 1, f"B's task started a copier of its own beside A's: holders {holders}"
        assert copied_by_b > 0, "B's task, renewing A's copier, reported nothing copied"
    else:
        assert len(holders) == 2, f"holders {holders}: B's task did not take over with a copier of its own"
    print(f"{mode}: B copied {took_over:.1f} s after the hand-off began; B's rows {copied_by_b} records; "
          f"duplicates {sum(len(s) - len(set(s)) for s in copies.values())}")


def test_a_target_frozen_past_the_message_timeout_ends_the_copier_quietly_and_a_successor_goes_on_in_its_epoch(
        source_cluster: KafkaCluster, target_cluster: KafkaCluster, topics: tuple[str, str, str],
        tmp_path: Path) -> None:
    """The target's broker frozen (SIGSTOP, as a broker restarting on a slow machine looks) past the
    copy producer's message timeout while a copier copies: the copier stops without failing its task
    (its records timed out: a passing state, not a refusal), and the same task starts a successor that
    goes on from the progress on the target within seconds of the thaw, not at the next epoch: no
    record lost, no interleaving (one step back at most: records the frozen broker took but never
    acknowledged: not the epoch's copy again); the task's rows count both copiers' records."""
    topic, remote, syncs = topics
    settings, plan = _quick_timeout_plan(source_cluster, target_cluster, topics, tmp_path)
    context = multiprocessing.get_context("spawn")
    rows = context.Queue()
    epoch_seconds = 60.0
    load = NumberedLoad(source_cluster, topic, 2, rate=800)
    worker = context.Process(target=_copier_worker, args=(
        plan, _task(1, topic, {0: 0, 1: 0}, epoch_seconds, _read_to(target_cluster, source_cluster, topic)),
        rows, 30.0))
    broker = target_cluster.nodes[0]
    try:
        worker.start()
        wait_for(lambda: count(target_cluster, remote) > 6000, 60, "the copier copying")
        copied_before = count(target_cluster, remote)
        broker.signal(signal.SIGSTOP)
        try:
            # Past the message timeout (3 s), short of the KRaft session timeout (9 s): the session's
            # cluster B fences no broker of its own, for the tests after this one.
            time.sleep(6)
        finally:
            broker.signal(signal.SIGCONT)
        thawed = time.monotonic()
        copied_at_thaw = count(target_cluster, remote)
        wait_for(lambda: len(_holders(target_cluster, topic)) == 2, 30, "a successor's claim")
        wait_for(lambda: count(target_cluster, remote) > copied_at_thaw + 400, 30, "the successor copying")
        went_on = time.monotonic() - thawed
        assert went_on < epoch_seconds / 2, f"the copy went on {went_on:.0f}s after the thaw: not within its epoch"
        sent = load.stop()
        wait_for(lambda: _copied_through(target_cluster, remote, sent), 60, "every record copied")
        _write_stop(target_cluster, topic, settings.flow, plan.query)
        copied = sum(row[3] for row in rows.get(timeout=60))  # the task ended without an error
    finally:
        broker.signal(signal.SIGCONT)
        load.stop()
        if worker.pid is not None:
            worker.kill()
            worker.join(10)
    copies = numbered_copies(target_cluster, remote)
    for partition, sequence in copies.items():
        assert set(sequence) == set(range(sent // 2 + (partition < sent % 2))), f"partition {partition} lost records"
        assert _descents(sequence) <= 1, f"partition {partition}: copies interleave ({_descents(sequence)} steps back)"
    assert copied >= sent, f"the task's rows count {copied} records of {sent}: the successor's are missing"
    duplicates = sum(len(s) - len(set(s)) for s in copies.values())
    # what the frozen broker took unacknowledged and the last progress interval, not the epoch's copy again
    assert duplicates < copied_before, f"{duplicates} duplicates: the successor did not start from the progress"
    print(f"the copy went on {went_on:.1f}s after the thaw; duplicates {duplicates} of {copied_before} copied before")


def _copied_through(target: KafkaCluster, remote: str, sent: int) -> bool:
    copies = numbered_copies(target, remote)
    return sum(len(set(s)) for s in copies.values()) >= sent


def _hold_records(target: KafkaCluster, topic: str) -> list[tuple[str, Hold | None]]:
    """The copiers' holds and releases (None) in the progress topic, in order: (copier, hold)."""
    records: list[tuple[str, Hold | None]] = []

    def note(key: bytes | None, value: bytes | None, offset: int) -> None:
        held = hold_named(key, value, offset)
        if held is not None:
            records.append((held[1], held[2]))
    where = OffsetsTopic(target.client_config(), SyncsLocation(target.alias, _progress_topic(topic)), "none",
                         on_raw=note)
    try:
        where.read()
    finally:
        where.close()
    return records


def _holders(target: KafkaCluster, topic: str) -> set[str]:
    """Every copier that ever held one of the topic's partitions."""
    return {holder for holder, hold in _hold_records(target, topic) if hold is not None}


def _holds(target: KafkaCluster, topic: str) -> tuple[Hold, ...]:
    """The copiers' holds in the progress topic, as the planner reads them."""
    holds: dict[str, Hold] = {}
    for holder, hold in _hold_records(target, topic):
        if hold is None:
            holds.pop(holder, None)
        else:
            holds[holder] = hold
    return tuple(holds.values())


# -- exactly once: the hand-off fenced through the target's transactions ---------------------------

def _control_holds(target: KafkaCluster, topic: str, flow: str) -> tuple[Hold, ...]:
    """The copiers' holds not released, read as copiers read them (read_uncommitted: behind an open
    transaction of a frozen copier too)."""
    watch = ControlWatch(target.client_config(), _progress_topic(topic), {})
    try:
        high = offsets_end(target, _progress_topic(topic))
        wait_for(lambda: watch.read_past(0, high - 1), 30, "the control records read")
        return tuple(watch.control.holds_of(flow).values())
    finally:
        watch.close()


def test_exactly_once_a_claimant_fences_a_frozen_holder_and_a_read_committed_consumer_reads_each_record_once(
        source_cluster: KafkaCluster, target_cluster: KafkaCluster, topics: tuple[str, str, str],
        tmp_path: Path) -> None:
    """Exactly once, as if on two hosts: worker A's copier copies a steady load in transactions; the
    next epoch's task lands in worker B while A is frozen (SIGSTOP) mid-copy, a transaction open: B
    waits for A's lease only (not its message timeout), fences A through the target
    (``init_transactions`` under A's transactional.id aborts the open transaction), and goes on from
    the committed progress; A, thawed, commits nothing more. A read_committed consumer of the remote
    partitions reads every record once, in order. (A hand-over between live copiers in this mode is
    the replicator SIGKILL test's: its head start copiers hand over to the first epoch's tasks.)"""
    topic, remote, syncs = topics
    settings, plan = _quick_timeout_plan(source_cluster, target_cluster, topics, tmp_path)
    settings = replace(settings, exactly_once=True)
    plan = replace(plan, spec=settings)
    context = multiprocessing.get_context("spawn")
    rows_a, rows_b = context.Queue(), context.Queue()
    load = NumberedLoad(source_cluster, topic, 2, rate=400)
    worker_a = context.Process(target=_copier_worker, args=(
        plan, _task(1, topic, {0: 0, 1: 0}, 3.0, _read_to(target_cluster, source_cluster, topic)), rows_a, 60.0,
        False))
    worker_b: Any = None
    try:
        worker_a.start()
        rows_a.get(timeout=60)  # A's task ended; its copier goes on
        wait_for(lambda: committed_records(target_cluster, remote) > 1_000, 30, "A's copier committing after its task")
        read_to, starts = _planned(target_cluster, source_cluster, topic)  # the next epoch planned
        os.kill(worker_a.pid, signal.SIGSTOP)
        frozen_at = time.monotonic()
        task_b = replace(_task(2, topic, starts, 6.0, read_to),
                         holds=_control_holds(target_cluster, topic, settings.flow))
        worker_b = context.Process(target=_copier_worker, args=(plan, task_b, rows_b, 30.0, False))
        worker_b.start()
        committed_at_freeze = committed_records(target_cluster, remote)
        wait_for(lambda: committed_records(target_cluster, remote) > committed_at_freeze + 400, 60, "B committing")
        took_over = time.monotonic() - frozen_at
        # a transaction nobody fenced would hold the read_committed consumer back for its 30 s timeout
        assert copier.LEASE_SECONDS <= took_over < copier.LEASE_SECONDS + slack(10.0), \
            f"B committed {took_over:.1f} s after A froze: not after A's lease, or not by fencing A"
        os.kill(worker_a.pid, signal.SIGCONT)
        time.sleep(4)  # A thaws: its commit must fail, fenced
        rows_b.get(timeout=60)
        sent = load.stop()
        wait_for(lambda: committed_records(target_cluster, remote) >= sent, 60, "every record committed")
        _write_stop(target_cluster, topic, settings.flow, plan.query)
    finally:
        load.stop()
        _end_workers(worker_a, worker_b)
    copies = numbered_copies(target_cluster, remote)  # read_committed
    for partition, sequence in copies.items():
        assert sequence == list(range(sent // 2 + (partition < sent % 2))), \
            f"partition {partition}: not each record once in order ({len(sequence)} read, " \
            f"{len(sequence) - len(set(sequence))} twice, {_descents(sequence)} steps back)"
    assert len(_holders(target_cluster, topic)) == 2, "B's task did not take over with a copier of its own"
    print(f"B committed {took_over:.1f} s after A froze; every record once")


def _planned(target: KafkaCluster, source: KafkaCluster, topic: str) -> tuple[tuple[tuple[int, int], ...],
                                                                             dict[int, int]]:
    """Where the progress topic ends now and where it says each partition goes on: what a planner
    hands the next epoch's tasks."""
    where = OffsetsTopic(target.client_config(), SyncsLocation(target.alias, _progress_topic(topic)), source.alias)
    try:
        found = where.read()
        return tuple(sorted(where.positions.items())), {p: found[(topic, p)].next_offset if (topic, p) in found
                                                        else 0 for p in (0, 1)}
    finally:
        where.close()




def test_exactly_once_a_source_with_transactions_is_copied_committed_only_and_translates_exactly(
        source_cluster: KafkaCluster, target_cluster: KafkaCluster, topics: tuple[str, str, str],
        unique_name: Callable[[str], str], tmp_path: Path) -> None:
    """Exactly once, the offset syncs on the target (in the copy's transactions): a source with
    committed and aborted transactions of its own is copied committed records only, each once and in
    order, and every source offset from the first one copied (records, markers, aborted records)
    translates through the syncs, read_committed, to exactly the target offset a consumer resumes at,
    with the copy's own commit markers in the target's log."""
    topic, remote, _syncs = topics
    syncs = unique_name("eos-syncs")
    create_topic(target_cluster.admin(), syncs, 1)
    settings = replace(_settings(source_cluster, target_cluster, topic, remote, syncs), exactly_once=True,
                       syncs=SyncsLocation(target_cluster.alias, syncs), syncs_producer=target_cluster.client_config())
    produce_transactions(source_cluster, topic, 2)
    _send(source_cluster, topic, 0, 50)
    plan = replace(_plan(settings, topic, tmp_path), spec=settings)
    source = records_by_partition(source_cluster, topic)  # read_committed: the committed records
    rows = copier.copy_task(plan, _task(1, topic, {0: 0, 1: 0}, 4.0, _read_to(target_cluster, source_cluster, topic)))
    try:
        wait_for(lambda: _committed_counts(target_cluster, remote) == {p: len(source[p]) for p in (0, 1)}, 30,
                 "every committed source record on the target")
    finally:
        _write_stop(target_cluster, topic, settings.flow, plan.query)
    assert sum(row[writer.SUMMARY_FIELDS.index("records")] for row in rows) <= sum(map(len, source.values()))
    copied = records_by_partition(target_cluster, remote)
    index = SyncIndex()
    for record in consume_all(target_cluster.client_config(), syncs):
        index.add_record(record.offset or 0, record.key, record.value, record.headers)
    for p in (0, 1):
        assert [(r.key, r.value, r.headers) for r in copied[p]] == [(r.key, r.value, r.headers) for r in source[p]]
        history = index.history(topic, p)
        assert history is not None, f"no offset syncs for partition {p}"
        pairs = [(s.offset or 0, c.offset or 0) for s, c in zip(source[p], copied[p])]
        # From the first record copied on: the commit markers in the syncs topic read as holes, as
        # compaction leaves, so the index does not vouch for offsets below a partition's first sync.
        for upstream in range(pairs[0][0], pairs[-1][0] + 1):
            expected = next(down for up, down in pairs if up >= upstream)
            assert history.translate(upstream) == expected, f"partition {p}: source offset {upstream}"
        assert history.translate(pairs[-1][0] + 1) == pairs[-1][1] + 1


def _committed_counts(target: KafkaCluster, remote: str) -> dict[int, int]:
    try:
        copied = records_by_partition(target, remote)
    except Exception:  # noqa: BLE001 - not there yet
        return {}
    return {p: len(records) for p, records in copied.items()}
