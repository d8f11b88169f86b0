"""Smoke tests of the lab's real components: Kafka round trips, Redis, Prometheus scraping."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from prometheus_client import CollectorRegistry, Counter, start_http_server

from strait_lab.clients import Record, consume_all, create_topic, produce
from strait_lab.kafka import KafkaCluster
from strait_lab.ports import free_port
from strait_lab.prometheus import PrometheusServer
from strait_lab.redis import RedisServer

PARTITIONS = 6
COUNT = 10_000


def _records() -> list[Record]:
    old = 1_500_000_000_000  # 2017: explicit timestamps far from "now"
    return [
        Record(
            key=f"key-{i % 997}".encode(),
            value=bytes([i % 251]) * (i % 300) + f"|{i}".encode(),
            headers=(("trace", f"t{i}".encode()), ("empty", b""), ("trace", b"dup")),
            timestamp_ms=old + i * 1000,
            partition=i % PARTITIONS,
        )
        for i in range(COUNT)
    ]


@pytest.mark.parametrize("cluster_fixture", ["source_cluster", "target_cluster"])
def test_keyed_records_round_trip_byte_identical(
    cluster_fixture: str, request: pytest.FixtureRequest, unique_name: Callable[[str], str]
) -> None:
    cluster: KafkaCluster = request.getfixturevalue(cluster_fixture)
    topic = unique_name("smoke")
    # Retention works on record timestamps: keep the 2017 records from being deleted on arrival.
    create_topic(cluster.admin(), topic, partitions=PARTITIONS, config={"retention.ms": "-1"})
    sent = _records()
    assert produce(cluster.client_config(), topic, sent) == COUNT

    received = consume_all(cluster.client_config(), topic)

    assert len(received) == COUNT
    by_partition = {p: [r for r in received if r.partition == p] for p in range(PARTITIONS)}
    for p in range(PARTITIONS):
        expected = [r for r in sent if r.partition == p]
        got = by_partition[p]
        assert [r.offset for r in got] == list(range(len(expected)))  # order kept, no gaps
        assert [(r.key, r.value, r.headers, r.timestamp_ms) for r in got] == [
            (r.key, r.value, r.headers, r.timestamp_ms) for r in expected
        ]


def test_redis_round_trip(redis_url: str, redis_server: RedisServer) -> None:
    client = redis_server.client()
    client.set("strait:smoke", b"\x00\xffbytes")
    client.hset("strait:smoke:h", mapping={"a": "1"})
    assert client.get("strait:smoke") == b"\x00\xffbytes"
    assert client.hgetall("strait:smoke:h") == {b"a": b"1"}


def test_prometheus_scrapes_a_live_target(prometheus_server: PrometheusServer) -> None:
    registry = CollectorRegistry()
    counter = Counter("strait_smoke_events_total", "smoke test events", registry=registry)
    counter.inc(7)
    port = free_port()
    server, thread = start_http_server(port, addr="127.0.0.1", registry=registry)
    job = f"smoke-{port}"
    try:
        prometheus_server.add_target(f"127.0.0.1:{port}", job=job)
        deadline = time.monotonic() + 30
        result: list = []
        while time.monotonic() < deadline:
            result = prometheus_server.query(f'strait_smoke_events_total{{job="{job}"}}')
            if result:
                break
            time.sleep(0.5)
        assert result, "Prometheus never scraped the target"
        assert float(result[0]["value"][1]) == 7.0
        assert prometheus_server.query(f'up{{job="{job}"}}')[0]["value"][1] == "1"
    finally:
        prometheus_server.remove_target(f"127.0.0.1:{port}")
        server.shutdown()
        thread.join(5)
