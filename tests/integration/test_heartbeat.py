"""The heartbeat service on real clusters: MM2 heartbeats on both clusters (read by MM2's own classes),
age and latency of the copy, topology, fencing."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path

import pytest

from strait_lab.clients import consume_all
from strait_lab.kafka import KafkaCluster
from strait_lab.services import StraitProcess
from strait.records import Heartbeat, RecordFormatError
from tests.oracle.mm2_oracle import Mm2Oracle, bytes_token, text_token, token_text
from tests.support.cli import strait
from tests.support.config import flow_config, write_config
from tests.support.waiting import wait_for

pytestmark = pytest.mark.slow


def _heartbeats(cluster: KafkaCluster, topic: str) -> list[Heartbeat]:
    return [heartbeat for heartbeat, _key, _value in _heartbeat_records(cluster, topic)]


def _heartbeat_records(cluster: KafkaCluster, topic: str) -> list[tuple[Heartbeat, bytes, bytes]]:
    """Each heartbeat in the topic with its record's key and value (other records skipped: the
    session clusters' topics may hold corrupt ones of the bad-input tests)."""
    found = []
    for record in consume_all(cluster.client_config(), topic, [0]):
        try:
            found.append((Heartbeat.from_record(record.key, record.value), record.key, record.value))
        except RecordFormatError:
            pass
    return found


def _read_by_mm2(oracle: Mm2Oracle, cluster: KafkaCluster, source: str, target: str) -> Heartbeat:
    """The newest (source, target) heartbeat in the cluster's ``heartbeats``, decoded by MM2's Heartbeat class."""
    *_, (_heartbeat, key, value) = [r for r in _heartbeat_records(cluster, "heartbeats")
                                    if (r[0].source_alias, r[0].target_alias) == (source, target)]
    java_source, java_target, timestamp = oracle.ask("dec-heartbeat", bytes_token(key), bytes_token(value))
    return Heartbeat(token_text(java_source) or "", token_text(java_target) or "", int(timestamp))


def _value(process: StraitProcess, name: str, **labels: str) -> float:
    value = process.sample(name, **labels)
    return math.nan if value is None else value


def test_heartbeats_flow_to_the_target_with_age_latency_and_topology(
    source_cluster: KafkaCluster, target_cluster: KafkaCluster, redis_url: str, oracle: Mm2Oracle,
    services: Callable[..., StraitProcess], unique_name: Callable[[str], str], tmp_path: Path,
) -> None:
    config = flow_config(source_cluster, target_cluster, [unique_name("nothing")], redis_url=redis_url)
    path = write_config(tmp_path / "strait.yaml", config)
    first = services("heartbeat", "--config", str(path), "--lease-ttl", "3")
    second = services("heartbeat", "--config", str(path), "--lease-ttl", "3")

    wait_for(lambda: any(h.source_alias == "A" and h.target_alias == "B" for h in _heartbeats(source_cluster, "heartbeats")),
             60, "heartbeats from A to B in A's heartbeats topic")
    # As MM2's heartbeat connector of A->B writes them: into the target's own heartbeats topic.
    wait_for(lambda: any(h.source_alias == "A" and h.target_alias == "B" for h in _heartbeats(target_cluster, "heartbeats")),
             60, "heartbeats from A to B in B's heartbeats topic")
    for cluster in (source_cluster, target_cluster):  # MM2's own classes read strait's heartbeats on both
        read = _read_by_mm2(oracle, cluster, "A", "B")
        assert (read.source_alias, read.target_alias) == ("A", "B") and read.timestamp_ms > 0, cluster.alias

    def emitted_by_each() -> list[float] | None:
        counts = [_value(p, "strait_heartbeats_emitted_total", flow="A->B") for p in (first, second)]
        return counts if any(count > 0 for count in counts) else None

    # Cluster A is the session's: it may hold heartbeats of earlier tests. The holder counts its own.
    emitted = wait_for(emitted_by_each, 60, "one replica counting its heartbeats")
    assert sorted(0 if math.isnan(e) else e for e in emitted)[0] == 0, f"two emitters at once: {emitted}"
    holder = first if emitted[0] > 0 else second
    # Before any copy arrives the age is a real number counting from when the flow was taken, never NaN.
    age_before_copy = _value(holder, "strait_heartbeat_age_seconds", flow="A->B")
    assert not math.isnan(age_before_copy), "heartbeat age must be a number before the first copy"
    wait_for(lambda: _value(holder, "strait_heartbeat_age_seconds", flow="A->B") >= age_before_copy + 2, 10,
             "the heartbeat age growing while nothing is replicated")

    services("replicator", "--config", str(path))
    wait_for(lambda: _value(holder, "strait_end_to_end_latency_seconds_count", flow="A->B") >= 3, 240,
             "end-to-end latency samples once A.heartbeats is replicated")
    wait_for(lambda: _value(holder, "strait_heartbeat_age_seconds", flow="A->B") < 5, 30,
             "a heartbeat age under 5 s")
    # Heartbeats emitted before the replicator started (here or by earlier tests on the session
    # cluster) arrive late, truthfully; the recent ones must arrive within seconds.
    before = _value(holder, "strait_end_to_end_latency_seconds_bucket", flow="A->B", le="10.0")
    before = 0.0 if math.isnan(before) else before
    wait_for(lambda: _value(holder, "strait_end_to_end_latency_seconds_bucket", flow="A->B", le="10.0") >= before + 3,
             30, "heartbeats arriving within 10 s")

    client = __import__("redis").Redis.from_url(redis_url)
    topology = wait_for(lambda: client.get("strait:topology:B"), 60, "B's topology in Redis")
    assert json.loads(topology)["upstream_clusters"].get("A") == 1
    assert "A.heartbeats" in json.loads(topology)["heartbeat_topics"]
    shown = strait("status", "--redis-url", redis_url, timeout=60)
    assert "B <- A (1 hop)" in shown.stdout, shown.stdout  # the topology in `strait status`
    # MirrorClient (RemoteClusterUtils) answers on strait's clusters as on MM2's.
    bootstrap = text_token(target_cluster.bootstrap_servers)
    assert {"heartbeats", "A.heartbeats"} <= {token_text(t) for t in oracle.ask("heartbeat-topics", bootstrap, "-")}
    assert "A" in {token_text(t) for t in oracle.ask("upstream-clusters", bootstrap, "-")}
    assert oracle.ask("replication-hops", bootstrap, "-", text_token("A")) == ["1"]
    assert "heartbeats" in {token_text(t) for t in oracle.ask("heartbeat-topics",
                                                              text_token(source_cluster.bootstrap_servers), "-")}
    for cluster in ("A", "B"):
        assert _value(holder, "strait_heartbeats_emitted_total", flow="A->B", cluster=cluster) > 0, cluster

    holder.stop()  # its lease is released: the other replica takes over the flow
    other = second if holder is first else first
    before = _value(other, "strait_heartbeats_emitted_total", flow="A->B")
    wait_for(lambda: _value(other, "strait_heartbeats_emitted_total", flow="A->B") > (0 if math.isnan(before) else before) + 2,
             30, "the surviving replica emitting")
