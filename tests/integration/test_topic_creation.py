"""Topics created in several requests on a real cluster: every one exists with its partitions."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from strait.kafka import admin
from strait.kafka.admin import TopicSpec, create_topics
from strait_lab.kafka import KafkaCluster
from tests.support.waiting import wait_for


def test_many_topics_are_created_across_requests(target_cluster: KafkaCluster, unique_name: Callable[[str], str],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(admin, "MAX_RECORDS_PER_REQUEST", 10)  # 3 topics of 2 partitions per request
    names = [unique_name(f"many-{i}") for i in range(12)]
    created = create_topics(target_cluster.admin(), "B", [TopicSpec(name, 2, 1) for name in names])
    assert sorted(created) == sorted(names)
    admin_client = target_cluster.admin()

    def partitions() -> dict[str, int]:
        topics = admin_client.list_topics(timeout=10).topics
        return {name: len(topics[name].partitions) for name in names if name in topics}

    # the broker answering metadata may learn of the last topics a moment after the controller created them
    wait_for(lambda: partitions() == dict.fromkeys(names, 2), 30, "every topic with 2 partitions in the metadata")
    assert create_topics(target_cluster.admin(), "B", [TopicSpec(name, 2, 1) for name in names]) == []
