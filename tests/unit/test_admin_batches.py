"""The admin calls of a flow of thousands of partitions: requests cut to the size KRaft's controller
accepts, offsets of one call read whole, renewed clients kept alive for their calls in flight."""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future
from typing import Any

import pytest
from confluent_kafka import TopicPartition
from hypothesis import given
from hypothesis import strategies as st

from strait.kafka import admin


@given(st.lists(st.integers(1, 50), max_size=60), st.integers(1, 100))
def test_batches_keep_every_item_in_order_within_the_limit(weights: list[int], limit: int) -> None:
    batches = list(admin._batched(list(enumerate(weights)), lambda item: item[1], limit))
    assert [item for batch in batches for item in batch] == list(enumerate(weights))
    for batch in batches:
        assert batch
        assert len(batch) == 1 or sum(weight for _, weight in batch) <= limit


def test_ten_thousand_partitions_go_in_requests_kraft_accepts() -> None:
    topics = [("t%d" % i, 5) for i in range(2000)]  # 2,000 topics x 5 partitions: one request was refused
    batches = list(admin._batched(topics, lambda topic: topic[1] + 1))
    assert len(batches) > 1
    assert all(sum(partitions + 1 for _, partitions in batch) <= admin.MAX_RECORDS_PER_REQUEST for batch in batches)


class _Partition:
    def __init__(self) -> None:
        self.leader, self.error = 1, None


class _Topic:
    def __init__(self, partitions: int) -> None:
        self.error = None
        self.partitions = {p: _Partition() for p in range(partitions)}


class _Listed:
    def __init__(self, offset: int) -> None:
        self.offset = offset


class _SlowlySetAdmin:
    """Answers ListOffsets as librdkafka's thread does: one call's futures are set one after another."""

    def __init__(self, topics: dict[str, int]) -> None:
        self.topics = topics
        self.threads: list[threading.Thread] = []

    def list_topics(self, timeout: float) -> Any:
        return type("Metadata", (), {"topics": {name: _Topic(count) for name, count in self.topics.items()}})()

    def list_offsets(self, wanted: dict[TopicPartition, Any], **_kwargs: Any) -> dict[TopicPartition, Future]:
        futures = {tp: Future() for tp in wanted}

        def answer() -> None:
            for tp, future in futures.items():
                future.set_result(_Listed(tp.partition + 100))
                time.sleep(0.002)
        self.threads.append(threading.Thread(target=answer, daemon=True))
        self.threads[-1].start()
        return futures


def test_offsets_of_an_answered_call_are_all_read_while_its_futures_are_still_being_set() -> None:
    slow = _SlowlySetAdmin({"wide": 300})
    partitions = [TopicPartition("wide", p) for p in range(300)]
    offsets = admin.list_offsets_per_leader(slow, "A", partitions, "latest",  # type: ignore[arg-type]
                                            timeout=10, grace=0.1)
    assert offsets == {("wide", p): p + 100 for p in range(300)}


def test_a_renewed_admin_client_is_kept_alive_for_its_calls_in_flight(monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[object] = []
    monkeypatch.setattr(admin, "admin_client", lambda _config: made.append(object()) or made[-1])
    renewable = admin.RenewableAdmin({"bootstrap.servers": "x"})
    clients = []
    for _ in range(admin.RETIRED_ADMIN_CLIENTS + 2):
        clients.append(renewable.get())
        renewable.renew()
    assert renewable._retired == clients[-admin.RETIRED_ADMIN_CLIENTS:]
    assert renewable.get() is not clients[-1]


def test_a_new_listing_waits_for_a_given_up_call_being_answered_not_for_a_silent_one() -> None:
    answering, silent = [Future() for _ in range(200)], [Future() for _ in range(3)]
    answering[0].set_result(_Listed(0))  # librdkafka's thread began setting this call's futures
    admin._give_up([answering, silent], request_timeout=30.0)

    def set_the_rest() -> None:
        for future in answering[1:]:
            future.set_result(_Listed(1))
            time.sleep(0.002)
    threading.Thread(target=set_the_rest, daemon=True).start()
    began = time.monotonic()
    admin._after_calls_given_up()
    assert all(future.done() for future in answering)
    assert time.monotonic() - began < 5.0  # the silent call (its leader down) held nothing up
    for future in silent:
        future.set_result(_Listed(2))
    admin._after_calls_given_up()
    assert not admin._given_up
