"""Which failed writes end a copier quietly (the next copier goes on from the progress) and which fail
its task: a write that timed out or met a broker restarting is passing, for the flush timeout at
most; a record the target refuses is not."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import pytest
from confluent_kafka import KafkaError

from strait_replicator import copier, writer
from strait_replicator.live import Hold
from strait.flow_spec import FlowSpec
from strait.policy import DefaultReplicationPolicy
from strait_replicator.writer import (CopiedPartition, CopyRange, CopySetupError, PassingWriteError,
                                      ReplicationWriteError, SentState, SourceCopy, is_passing, next_offset_of,
                                      write_error)

pytestmark = pytest.mark.unit

PASSING = [KafkaError._MSG_TIMED_OUT, KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.NOT_ENOUGH_REPLICAS,
           KafkaError.REQUEST_TIMED_OUT, KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN]
REFUSED = [KafkaError.MSG_SIZE_TOO_LARGE, KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.INVALID_RECORD,
           KafkaError._UNKNOWN_TOPIC]


@pytest.mark.parametrize("code", PASSING)
def test_a_timed_out_or_moving_write_is_passing(code: int) -> None:
    assert is_passing(KafkaError(code))
    assert type(write_error("m", [KafkaError(code)])) is PassingWriteError


@pytest.mark.parametrize("code", REFUSED)
def test_a_refused_write_fails_the_task(code: int) -> None:
    assert not is_passing(KafkaError(code))
    error = write_error("m", [KafkaError(KafkaError._MSG_TIMED_OUT), KafkaError(code)])
    assert type(error) is ReplicationWriteError, "one refused record among timed-out ones is not passing"
    hold = write_error("m", [KafkaError(code)], refused=copier.HandOffError)
    assert type(hold) is copier.HandOffError, "a copier's refused hold fails its hand-off"


def test_writes_not_acknowledged_in_time_without_an_error_are_passing() -> None:
    assert isinstance(write_error("m", []), PassingWriteError)


def _copier(copied_records: int, flush_timeout: float = 120.0) -> copier.Copier:
    """A copier of flow F's partition t[0] as far as the bound on passing failures looks at it."""
    bare = copier.Copier.__new__(copier.Copier)
    bare.settings = SimpleNamespace(flow="F", flush_timeout=flush_timeout)
    bare.keys = frozenset({("t", 0)})
    bare.copied = {("t", 0): SimpleNamespace(records=copied_records)}
    return bare


def test_passing_failures_are_tolerated_for_the_flush_timeout_unless_a_copier_copied_between(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Copiers of the same partitions failing one after the other for the moment only: each ends
    quietly until the chain lasts longer than the flush timeout; a copier that copied a record, or a
    failure long after the last, starts a new chain."""
    now = [1000.0]
    monkeypatch.setattr(copier.time, "monotonic", lambda: now[0])
    monkeypatch.setattr(copier, "_passing_failures", {})
    assert _copier(0)._failing_for() == 0.0
    now[0] += 90
    assert _copier(0)._failing_for() == 90.0
    now[0] += 60
    assert _copier(0)._failing_for() == 150.0, "a chain of failures 90 and 60 s apart lasts 150 s"
    now[0] += 60
    assert _copier(5)._failing_for() == 0.0, "a copier that copied records failed from now on only"
    now[0] += 121
    assert _copier(0)._failing_for() == 0.0, "a failure more than the flush timeout after the last starts anew"


def test_records_sent_but_never_acknowledged_are_not_copied_however_far_the_fetch_got() -> None:
    """A copier that lapsed reports where its acknowledged copy ends, not the end of partition its
    consumer saw: the epoch's loss and stall checks judge from there."""
    unsettled = SentState(unsettled=3, first_unsettled=100, last_sent=102, reached=103)
    assert next_offset_of(unsettled, records=0, last=-1, start=100) == 100
    assert next_offset_of(unsettled, records=5, last=99, start=95) == 100
    settled = SentState(last_sent=102, reached=103)  # all acknowledged and settled: the end seen counts
    assert next_offset_of(settled, records=8, last=102, start=95) == 103
    assert next_offset_of(SentState(), records=0, last=-1, start=None) == -1, "nothing known of an earliest start"
    part = CopiedPartition(CopyRange("t", 0, 100), "A.t", 0)
    assert part.next_offset() == 100 and part.summary()[7] == 100 and part.bytes == 0, "before the copy starts"


def _row(partition: int, records: int, first: int | None, last: int | None, next_offset: int, start: int,
         syncs: int = 1, lag: int = 0) -> tuple:
    return ("t", partition, "A.t", records, records * 10, first, last, next_offset, syncs, [records, 0], 0.5 * records,
            lag, start)


def test_a_lapsed_copier_and_its_successor_in_one_epoch_sum_up_to_one_row_per_partition() -> None:
    lapsed = [_row(0, 100, 0, 99, 100, 0), _row(1, 0, None, None, 50, 50)]
    # the successor resumes partition 0 from the progress (80: 20 copied again), copies nothing of 1 yet
    successor = [_row(0, 70, 80, 149, 150, 80, lag=3), _row(1, 0, None, None, 50, 50)]
    merged = {row[1]: row for row in copier.merged_rows(lapsed, successor)}
    assert merged[0] == ("t", 0, "A.t", 170, 1700, 0, 149, 150, 2, [170, 0], 85.0, 3, 0)
    assert merged[1] == ("t", 1, "A.t", 0, 0, None, None, 50, 2, [0, 0], 0.0, 0, 50)
    # a successor that has copied nothing yet starts where the progress says (80) and knows no lag:
    # the lapsed one's acknowledged end and lag stand
    waiting = {row[1]: row for row in copier.merged_rows(lapsed, [_row(0, 0, None, None, 80, 80, syncs=0, lag=-1)])}
    assert waiting[0][7] == 100 and waiting[0][11] == 0 and waiting[0][3] == 100
    # a successor still claiming has no rows yet: the lapsed one's stand
    assert copier.merged_rows(lapsed, []) == lapsed and copier.merged_rows([], successor) == successor


def test_a_client_setting_librdkafka_refuses_stops_the_copy_at_once_naming_flow_side_and_setting() -> None:
    """The native loop makes its clients from the flow's settings: one librdkafka refuses is named
    with the flow and the client it was meant for, before anything is read or written."""
    spec = FlowSpec(flow="A->B", source_alias="A", target_alias="B", policy=DefaultReplicationPolicy(),
                    source_consumer={"bootstrap.servers": "127.0.0.1:1", "fetch.wait.max.ms": "often"},
                    target_producer={"bootstrap.servers": "127.0.0.1:1"})
    with pytest.raises(CopySetupError, match=r"flow A->B: .* cluster A .*source consumer setting fetch.wait.max.ms"):
        SourceCopy([CopyRange("t", 0, 0)], spec)
    spec = replace(spec, source_consumer={"bootstrap.servers": "127.0.0.1:1"},
                   target_producer={"bootstrap.servers": "127.0.0.1:1", "linger.ms": "-5"})
    with pytest.raises(CopySetupError, match=r"target producer setting linger.ms"):
        SourceCopy([CopyRange("t", 0, 0)], spec)


def test_a_holder_claimed_in_part_copies_on_until_the_rest_is_claimed_or_a_few_seconds_passed() -> None:
    """A head start copier holds many partitions and the first epoch's tasks claim theirs a second or
    so apart: handing all over at the first claim would leave the rest uncopied until theirs."""
    keys = frozenset({("t", 0), ("t", 1), ("t", 2)})
    holder = SimpleNamespace(keys=keys, _partly_claimed_at=None, settings=SimpleNamespace(flow="A->B"), id="old")

    def claim(copier_id: str, *partitions: int) -> Hold:
        return Hold("A->B", copier_id, frozenset(("t", p) for p in partitions), "q", 10, 0.0)
    def hands_over(claims: list[Hold], now: float, who: SimpleNamespace = holder) -> bool:
        claimed = frozenset().union(*(hold.partitions for hold in claims)) & keys
        return copier.Copier._hands_over(who, claimed, claims, now)  # type: ignore[arg-type]
    first = [claim("a", 0, 1)]
    assert not hands_over(first, 100.0)
    assert not hands_over(first, 100.0 + copier.PARTLY_CLAIMED_SECONDS - 0.1)
    assert hands_over([*first, claim("b", 2)], 100.5)
    assert hands_over(first, 100.0 + copier.PARTLY_CLAIMED_SECONDS)
    assert hands_over([claim("c", 0, 1, 2)], 0.0, SimpleNamespace(**{**vars(holder), "_partly_claimed_at": None}))


# -- exactly once: how a transaction's end answers what joined it -----------------------------------

class _Native:
    """The native copy's transaction steps as the copy loop meets them (an answer per step)."""

    def __init__(self, **answers: tuple[int, str, int, int, int] | None) -> None:
        self.answers, self.steps, self.produced = answers, [], []

    def transaction(self, step: str, _timeout: float) -> tuple[int, str, int, int, int] | None:
        self.steps.append(step)
        return self.answers.get(step)

    def produce(self, topic: str, partition: int, key: bytes | None, value: bytes | None,
                headers: list[tuple[str, bytes]]) -> int:
        self.produced.append((topic, partition, key, value, headers))
        return 0


def _transactions(native: _Native) -> writer.CopyTransactions:
    source = SimpleNamespace(settings=SimpleNamespace(flow="A->B", target_alias="B"), native=native,
                             transactional_id="strait-A->B-c1")
    return writer.CopyTransactions(source)  # type: ignore[arg-type]


def _joined(transactions: writer.CopyTransactions) -> list[KafkaError | None]:
    answers: list[KafkaError | None] = []
    transactions.start(1.0)
    transactions.produce("progress", key=b"k", value=b"v", on_delivery=lambda err, _msg: answers.append(err))
    return answers


def test_exactly_once_what_joined_a_transaction_is_acknowledged_when_it_commits() -> None:
    native = _Native()
    transactions = _transactions(native)
    answers = _joined(transactions)
    assert answers == [], "answered before the commit"
    transactions.commit(1.0)
    assert answers == [None] and native.steps == ["init", "begin", "commit"] and not transactions.open


def test_exactly_once_a_commit_that_fails_aborts_and_ends_the_copier_for_a_successor() -> None:
    native = _Native(commit=(KafkaError.REQUEST_TIMED_OUT, "timed out", 0, 0, 1))
    transactions = _transactions(native)
    answers = _joined(transactions)
    with pytest.raises(PassingWriteError, match="strait-A->B-c1 on cluster B, committing"):
        transactions.commit(1.0)
    assert native.steps == ["init", "begin", "commit", "abort"] and answers[0] is not None


def test_exactly_once_a_fenced_copier_stops_as_one_a_newer_claim_took_over() -> None:
    native = _Native(commit=(KafkaError._FENCED, "fenced", 1, 0, 0))
    transactions = _transactions(native)
    _joined(transactions)
    with pytest.raises(writer.FencedError):
        transactions.commit(1.0)
    assert native.steps == ["init", "begin", "commit"], "a fenced producer can abort nothing"


def test_exactly_once_the_copy_producer_is_transactional_under_the_copiers_own_id() -> None:
    spec = FlowSpec("A->B", "A", "B", DefaultReplicationPolicy(), target_producer={"message.timeout.ms": "5000"})
    settings = writer.copy_producer_settings(spec, writer.transactional_id(spec.flow, "c1"))
    assert settings["transactional.id"] == "strait-A->B-c1" and settings["enable.idempotence"] == "true"
    assert int(settings["message.timeout.ms"]) <= int(settings["transaction.timeout.ms"])
    assert "transactional.id" not in writer.copy_producer_settings(spec, None)


def test_exactly_once_a_delivery_timeout_longer_than_the_transactions_lengthens_them() -> None:
    spec = FlowSpec("A->B", "A", "B", DefaultReplicationPolicy(), target_producer={"message.timeout.ms": "90000"})
    settings = writer.copy_producer_settings(spec, "strait-A->B-c1")
    assert settings["transaction.timeout.ms"] == "90000"


@pytest.mark.parametrize(("partitions", "seconds"), [(0, 30), (12, 30), (1_250, 30), (5_000, 120), (10_000, 240),
                                                     (50_000, 300)])
def test_a_wide_copy_waits_longer_for_its_deliveries(partitions: int, seconds: int) -> None:
    spec = FlowSpec("A->B", "A", "B", DefaultReplicationPolicy())
    assert writer.copy_message_timeout_ms(spec, partitions) == seconds * 1000
    assert writer.copy_producer_settings(spec, None, partitions)["message.timeout.ms"] == str(seconds * 1000)


def test_exactly_once_a_wide_copy_keeps_the_default_delivery_and_transaction_timeouts() -> None:
    spec = FlowSpec("A->B", "A", "B", DefaultReplicationPolicy(), exactly_once=True)
    assert writer.copy_message_timeout_ms(spec, 5_000) == 30_000
    settings = writer.copy_producer_settings(spec, "strait-A->B-c1", 5_000)
    assert settings["message.timeout.ms"] == "30000" and settings["transaction.timeout.ms"] == "30000"
    assert writer.commit_timeout(spec) == 35.0


@pytest.mark.parametrize("partitions", [12, 5_000])
def test_the_users_delivery_timeout_holds_at_any_width(partitions: int) -> None:
    spec = FlowSpec("A->B", "A", "B", DefaultReplicationPolicy(), target_producer={"message.timeout.ms": "45000"})
    assert writer.copy_message_timeout_ms(spec, partitions) == 45_000
    assert writer.copy_producer_settings(spec, None, partitions)["message.timeout.ms"] == "45000"


def test_slow_commits_are_logged_with_where_their_time_went_at_most_once_per_interval(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    clock = [100.0]
    monkeypatch.setattr(writer.time, "monotonic", lambda: clock[0])
    source = SimpleNamespace(settings=SimpleNamespace(flow="A->B"), native=None, transactional_id="strait-A->B-c1")
    transactions = writer.CopyTransactions(source)  # type: ignore[arg-type]
    with caplog.at_level("INFO", logger=writer.__name__):
        transactions.note_slow(0.3, 0.1, 0.05, 0.15)  # the first at once
        clock[0] += 1
        transactions.note_slow(0.9, 0.1, 0.1, 0.7)
        transactions.note_slow(0.4, 0.3, 0.0, 0.1)
        clock[0] += writer.SLOW_COMMIT_LOG_SECONDS
        transactions.note_slow(0.5, 0.2, 0.1, 0.2)  # then the slowest of those since
    lines = [r.getMessage() for r in caplog.records]
    assert lines == [
        "flow=A->B transactional_id=strait-A->B-c1 slow commits=1 slowest seconds=0.300 flush=0.100 settle=0.050 "
        "commit=0.150",
        "flow=A->B transactional_id=strait-A->B-c1 slow commits=3 slowest seconds=0.900 flush=0.100 settle=0.100 "
        "commit=0.700"]
