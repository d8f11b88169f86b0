"""The shared retry policy: pauses stay within a few seconds, transient errors are told from others."""

from __future__ import annotations

from concurrent.futures import TimeoutError as FutureTimeout

import pytest
from confluent_kafka import KafkaError, KafkaException
from hypothesis import given
from hypothesis import strategies as st

from strait.kafka.admin import ClusterUnreachableError, KafkaAdminError, KafkaPermissionError, \
    KafkaRetriableError, explain_error
from strait.retry import CAP_SECONDS, CLUSTER_RETRY, Backoff, KeyedBackoff, error_kind, is_transient, \
    retry_transient

pytestmark = pytest.mark.unit


@given(st.integers(min_value=1, max_value=10_000))
def test_pause_never_exceeds_the_cap_and_never_shrinks(failures: int) -> None:
    delay = CLUSTER_RETRY.delay(failures)
    assert 0 < delay <= CAP_SECONDS
    assert CLUSTER_RETRY.delay(failures + 1) >= delay


def test_backoff_resets_after_a_success() -> None:
    backoff = Backoff()
    delays = [backoff.failed() for _ in range(20)]
    assert delays[0] == CLUSTER_RETRY.first and delays[-1] == CAP_SECONDS
    backoff.succeeded()
    assert backoff.failed() == CLUSTER_RETRY.first


def test_a_transient_item_failure_waits_seconds_a_refusal_longer() -> None:
    now = [0.0]
    backoff = KeyedBackoff(clock=lambda: now[0])
    transient = [backoff.failed("topic:a", transient=True) for _ in range(12)]
    refused = [backoff.failed("topic:b") for _ in range(12)]
    assert max(transient) == CAP_SECONDS
    assert max(refused) > 60


@pytest.mark.parametrize("code", [KafkaError.FENCED_LEADER_EPOCH, KafkaError.NOT_LEADER_FOR_PARTITION,
                                  KafkaError.UNKNOWN_LEADER_EPOCH, KafkaError.LEADER_NOT_AVAILABLE,
                                  KafkaError.COORDINATOR_LOAD_IN_PROGRESS, KafkaError.NOT_COORDINATOR,
                                  KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN])
def test_leader_moves_and_restarts_are_transient(code: int) -> None:
    exc = KafkaException(KafkaError(code))
    assert is_transient(exc)
    explained = explain_error(exc, "A", "listing latest offsets of t[0]")
    assert isinstance(explained, KafkaRetriableError) and is_transient(explained)
    assert "cluster A" in str(explained)


def test_a_future_that_times_out_is_an_unreachable_cluster() -> None:
    explained = explain_error(FutureTimeout(), "A", "listing offsets")
    assert isinstance(explained, ClusterUnreachableError) and is_transient(explained)
    assert error_kind(explained) == "unreachable"


def test_permission_and_unknown_errors_are_not_retried_as_transient() -> None:
    denied = explain_error(KafkaException(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED)), "B", "writing")
    assert isinstance(denied, KafkaPermissionError) and not is_transient(denied)
    assert error_kind(denied) == "permission"
    assert not is_transient(KafkaAdminError("cluster B: something else"))
    assert not is_transient(ValueError("a bug"))


def test_retry_transient_retries_until_it_works_then_renews_on_each_failure() -> None:
    answers: list[BaseException | str] = [ClusterUnreachableError("down"), KafkaRetriableError("moved"), "done"]
    renewed: list[BaseException] = []
    slept: list[float] = []

    def call() -> str:
        answer = answers.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return answer

    assert retry_transient(call, "listing", lambda: False, on_failure=renewed.append, sleep=slept.append) == "done"
    assert len(renewed) == 2 and slept == [CLUSTER_RETRY.delay(1), CLUSTER_RETRY.delay(2)]


def test_retry_transient_raises_other_errors_and_gives_up_when_stopped() -> None:
    def denied() -> None:
        raise KafkaPermissionError("cluster A: not authorized")

    with pytest.raises(KafkaPermissionError):
        retry_transient(denied, "listing", lambda: False, sleep=lambda _s: None)
    stops = iter([False, False, True])

    def down() -> None:
        raise ClusterUnreachableError("down")

    assert retry_transient(down, "listing", lambda: next(stops), sleep=lambda _s: None) is None
