"""Admin requests cut to the size KRaft's controller accepts (a flow of thousands of topics)."""

from __future__ import annotations

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
