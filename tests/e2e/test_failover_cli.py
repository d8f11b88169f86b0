"""`strait failover` end to end: a copy made the way the replicator makes it (records on B, offset
syncs on A), a source group, then --dry-run, a real failover, and the exit codes for a copy that
lost a record and for a flow that does not drain."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis
from confluent_kafka import TopicPartition

from strait.config import load_config
from strait.config.store import apply_config, load_stored_config
from strait.kafka.admin import create_topics, internal_topic
from strait_lab.clients import Record, consume_all, create_topic, produce
from strait_lab.kafka import KafkaCluster
from strait.records import Checkpoint, OffsetSync
from strait.translation import committed_offsets
from tests.support.cli import strait
from tests.support.config import flow_config, write_config
from tests.support.kafka import commit_offsets

RECORDS = 20


def _copy(source: KafkaCluster, target: KafkaCluster, topic: str, partition: int, *, damage: int | None = None,
          upto: int = RECORDS) -> None:
    """Produce RECORDS records on A and copy the first ``upto`` to A.<topic> on B (one damaged when asked),
    with the syncs the replicator writes for a copy at the same offsets."""
    records = [Record(f"k{i}".encode(), f"p{partition}-{i}".encode(), (("h", b"x"),), 1_700_000_000_000 + i,
                      partition) for i in range(RECORDS)]
    produce(source.client_config(), topic, records)
    copies = [r if i != damage else Record(r.key, b"damaged", r.headers, r.timestamp_ms, partition)
              for i, r in enumerate(records[:upto])]
    produce(target.client_config(), f"A.{topic}", copies)
    syncs = [OffsetSync(topic, partition, 0, 0), OffsetSync(topic, partition, upto - 1, upto - 1)]
    produce(source.client_config(), "mm2-offset-syncs.B.internal",
            [Record(s.key_bytes(), s.value_bytes(), partition=0) for s in syncs])


def _setup(source: KafkaCluster, target: KafkaCluster, redis_url: str, tmp_path: Path, topic: str, group: str,
           **copy: Any) -> redis.Redis:
    create_topic(source.admin(), topic, partitions=2)
    create_topic(target.admin(), f"A.{topic}", partitions=2)
    create_topics(source.admin(), "A", [internal_topic("mm2-offset-syncs.B.internal", 1)])
    _copy(source, target, topic, 0)
    _copy(source, target, topic, 1, **copy)
    commit_offsets(source, group, [TopicPartition(topic, 0, 12, "m0"), TopicPartition(topic, 1, 5)])
    config = flow_config(source, target, [topic], redis_url=redis_url, groups={"include": [group]})
    client = redis.Redis.from_url(redis_url)
    apply_config(client, load_config(write_config(tmp_path / "strait.yaml", config)), "test")
    return client


def _target_offsets(target: KafkaCluster, topic: str, group: str) -> dict[int, int]:
    partitions = [TopicPartition(f"A.{topic}", p) for p in range(2)]
    return {c.partition: c.offset for c in committed_offsets(target.client_config(), "B", group, partitions)}


def test_failover_dry_run_then_real_moves_the_group_and_stops_the_flow(
    source_cluster: KafkaCluster, target_cluster: KafkaCluster, redis_url: str,
    unique_name: Callable[[str], str], tmp_path: Path,
) -> None:
    topic, group = unique_name("orders"), unique_name("billing")
    client = _setup(source_cluster, target_cluster, redis_url, tmp_path, topic, group)

    dry = strait("failover", "--flow", "A->B", "--dry-run", "--json", "--redis-url", redis_url, timeout=180)
    assert dry.returncode == 0, dry.stdout + dry.stderr
    report = json.loads(dry.stdout)
    assert report["dry_run"] and report["drained"] and report["clean"]
    (outcome,) = report["groups"]  # found through the flow's group filter
    assert outcome["group"] == group and outcome["state"] == "dry-run"
    rows = {p["partition"]: p for p in outcome["partitions"]}
    assert [(rows[p]["source_offset"], rows[p]["target_offset"], rows[p]["lost"], rows[p]["reread"])
            for p in (0, 1)] == [(12, 12, 0, 0), (5, 5, 0, 0)]
    assert _target_offsets(target_cluster, topic, group) == {}
    assert load_stored_config(client)[1].flow("A->B").enabled

    real = strait("failover", "--flow", "A->B", "--group", group, "--redis-url", redis_url, timeout=180)
    assert real.returncode == 0, real.stdout + real.stderr
    assert "failover of flow A->B: drained" in real.stdout
    line = next(line for line in real.stdout.splitlines() if line.startswith(group) and f" {topic} " in line
                and line.split()[3] == "0")
    assert line.split()[1:9] == ["written", topic, "0", "12", f"A.{topic}", "12", "0", "0"]
    assert _target_offsets(target_cluster, topic, group) == {0: 12, 1: 5}
    assert not load_stored_config(client)[1].flow("A->B").enabled
    checkpoints = [Checkpoint.from_record(r.key, r.value)
                   for r in consume_all(target_cluster.client_config(), "A.checkpoints.internal", [0])]
    assert {(c.partition, c.upstream_offset, c.downstream_offset, c.metadata)
            for c in checkpoints if c.group == group} == {(0, 12, 12, "m0"), (1, 5, 5, "")}


def test_failover_reports_lost_records_and_an_undrained_flow(
    source_cluster: KafkaCluster, target_cluster: KafkaCluster, redis_url: str,
    unique_name: Callable[[str], str], tmp_path: Path,
) -> None:
    topic, group = unique_name("orders"), unique_name("billing")
    client = _setup(source_cluster, target_cluster, redis_url, tmp_path, topic, group, damage=9)

    damaged = strait("failover", "--flow", "A->B", "--group", group, "--dry-run", "--json",
                     "--redis-url", redis_url, timeout=180)
    assert damaged.returncode == 3, damaged.stdout + damaged.stderr
    rows = {p["partition"]: p for p in json.loads(damaged.stdout)["groups"][0]["partitions"]}
    assert (rows[0]["lost"], rows[0]["reread"]) == (0, 0)
    assert (rows[1]["lost"], rows[1]["reread"]) == (1, 1)  # p1-9 unread on A; its copy on B differs

    produce(source_cluster.client_config(), topic, [Record(b"late", b"never copied", partition=0)])
    stuck = strait("failover", "--flow", "A->B", "--timeout", "3", "--redis-url", redis_url, timeout=180)
    assert stuck.returncode == 4, stuck.stdout + stuck.stderr
    assert f"behind: {topic}[0] end {RECORDS + 1} copied to {RECORDS} (1 records)" in stuck.stdout
    assert "nothing was changed" in stuck.stdout
    assert load_stored_config(client)[1].flow("A->B").enabled
    assert _target_offsets(target_cluster, topic, group) == {}

    missing = strait("failover", "--flow", "A->C", "--redis-url", redis_url, timeout=180)
    assert missing.returncode == 1 and "no flow 'A->C'" in missing.stderr
