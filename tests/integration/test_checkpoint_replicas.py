"""Three checkpoint and three heartbeat replicas as processes.

One flow's consumer groups are spread over the checkpoint replicas by shard (each shard a leased
work item); a SIGKILLed replica's shards move to the survivors within one lease TTL and their
groups keep getting exact checkpoints.

Three flows (A1->B, A2->B, A3->B: three aliases of the source cluster) are spread one per replica
of each service; each flow has one heartbeat emitter at a time; a SIGKILLed replica's flow is
taken over within one lease TTL and keeps getting checkpoints and heartbeats; a replica frozen past
its lease (SIGSTOP) does not emit once it runs again while another replica holds its flow.

The offset syncs are written by the test the way the replicator writes them (a copy at the same
offsets), so the test needs no Spark query per flow; the checkpoint service reads them as usual.
"""

from __future__ import annotations

import os
import signal
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
import redis
from confluent_kafka import TopicPartition

from strait.coord.assignment import ShardItem
from strait.coord.leases import Leases
from strait.coord.membership import Membership
from strait.kafka.admin import create_topics, internal_topic
from strait_lab.clients import Record, consume_all, create_topic, produce
from strait_lab.kafka import KafkaCluster
from strait_lab.services import StraitProcess
from strait.records import Checkpoint, Heartbeat, OffsetSync, RecordFormatError
from tests.support.config import write_config
from tests.support.kafka import commit_offsets
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.slow]  # the take-overs within a lease TTL run alone (timed_part)

LEASE_TTL = 4.0
ALIASES = ("A1", "A2", "A3")
FLOWS = tuple(f"{alias}->B" for alias in ALIASES)
RECORDS = 10


def _config(source: KafkaCluster, target: KafkaCluster, prefix: str, redis_url: str) -> dict:
    clusters = {alias: {"bootstrap_servers": source.bootstrap_servers} for alias in ALIASES}
    flows = [{"source": alias, "target": "B", "topics": {"include": [f"{prefix}-{alias}-t"]},
              "groups": {"include": [f"{prefix}-{alias}-g"]}, "replication_factor": 1,
              "offset_syncs_topic_location": "target", "emit_heartbeats": {"interval_seconds": 1},
              "emit_checkpoints": {"interval_seconds": 1}, "checkpoint_shards": 1} for alias in ALIASES]
    return {"clusters": {**clusters, "B": {"bootstrap_servers": target.bootstrap_servers}}, "flows": flows,
            "redis_url": redis_url}


def _replicated(source: KafkaCluster, target: KafkaCluster, prefix: str, alias: str) -> None:
    """A topic on A and the syncs the replicator writes for its copy (same offsets) on B."""
    topic = f"{prefix}-{alias}-t"
    create_topic(source.admin(), topic, partitions=2)
    produce(source.client_config(), topic, [Record(b"k", f"{i}".encode(), partition=i % 2) for i in range(2 * RECORDS)])
    syncs_topic = f"mm2-offset-syncs.{alias}.internal"
    create_topics(target.admin(), "B", [internal_topic(syncs_topic, 1)])
    syncs = [OffsetSync(topic, p, up, up) for p in range(2) for up in (0, RECORDS - 1)]
    produce(target.client_config(), syncs_topic, [Record(s.key_bytes(), s.value_bytes(), partition=0) for s in syncs])


def _checkpoints(target: KafkaCluster, prefix: str, alias: str) -> dict[int, tuple[int, int]]:
    """The newest checkpoint per partition of the alias's group: (upstream, downstream)."""
    return _all_checkpoints(target, alias, prefix).get(f"{prefix}-{alias}-g", {})


def _heartbeat_times(source: KafkaCluster, alias: str) -> list[int]:
    times = []
    for record in consume_all(source.client_config(), "heartbeats", [0], timeout=30):
        try:
            heartbeat = Heartbeat.from_record(record.key, record.value)
        except RecordFormatError:
            continue
        if heartbeat.source_alias == alias and heartbeat.target_alias == "B":
            times.append(heartbeat.timestamp_ms)
    return sorted(times)


def _holders(client: redis.Redis, service: str, replicas: list[StraitProcess]) -> dict[str, int | None]:
    """For each flow, the index of the live replica holding its lease in Redis (None: no live holder)."""
    ports = {m.id: m.metadata.get("metrics_port") for m in Membership(client).live_members(service)}
    index = {str(r.metrics_port): i for i, r in enumerate(replicas) if r.process.alive()}
    held: dict[str, int | None] = {}
    for flow in FLOWS:
        owner = Leases(client).owner(f"{service}:{flow}#0/1" if service == "checkpoint" else f"{service}:{flow}")
        held[flow] = index.get(ports.get(owner.holder, "")) if owner is not None else None
    return held


def _one_each(client: redis.Redis, service: str, replicas: list[StraitProcess]) -> dict[str, int] | None:
    held = _holders(client, service, replicas)
    values = [h for h in held.values() if h is not None]
    return held if sorted(values) == [0, 1, 2] else None  # type: ignore[return-value]


def _emitted(replica: StraitProcess, flow: str) -> float:
    try:
        return replica.sample("strait_heartbeats_emitted_total", flow=flow) or 0.0
    except OSError:  # a frozen or killed replica does not answer
        return float("nan")


def _take_over_time(client: redis.Redis, service: str, replicas: list[StraitProcess], flow: str,
                    victim: int) -> tuple[int, float]:
    """Kill ``victim`` and measure until a live replica holds ``flow``'s lease."""
    replicas[victim].kill()
    killed = time.monotonic()
    holder = wait_for(lambda: (h := _holders(client, service, replicas)[flow]) is not None and h != victim
                      and (h,), 3 * LEASE_TTL, f"{service} {flow} taken over", interval=0.2)[0]
    return holder, time.monotonic() - killed


def test_three_replicas_spread_flows_fence_heartbeats_and_take_over(
    source_cluster: KafkaCluster, target_cluster: KafkaCluster, redis_url: str,
    services: Callable[..., StraitProcess], unique_name: Callable[[str], str], tmp_path: Path,
    timed_part: Callable[[], None],
) -> None:
    prefix = unique_name("rep")
    for alias in ALIASES:
        _replicated(source_cluster, target_cluster, prefix, alias)
        commit_offsets(source_cluster, f"{prefix}-{alias}-g", [TopicPartition(f"{prefix}-{alias}-t", p, o)
                                                               for p, o in enumerate((4, 7))])
    path = write_config(tmp_path / "strait.yaml", _config(source_cluster, target_cluster, prefix, redis_url))
    args = ("--config", str(path), "--lease-ttl", str(LEASE_TTL))
    checkpointers = [services("checkpoint", *args) for _ in range(3)]
    beaters = [services("heartbeat", *args) for _ in range(3)]
    client = redis.Redis.from_url(redis_url)

    spread = wait_for(lambda: _one_each(client, "checkpoint", checkpointers), 30, "one checkpoint flow per replica",
                      interval=0.5)
    beating = wait_for(lambda: _one_each(client, "heartbeat", beaters), 30, "one heartbeat flow per replica",
                       interval=0.5)
    for alias in ALIASES:
        wait_for(lambda a=alias: _checkpoints(target_cluster, prefix, a) == {0: (4, 4), 1: (7, 7)}, 60,
                 f"checkpoints of flow {alias}->B")
    wait_for(lambda: all(_emitted(beaters[beating[f]], f) >= 3 for f in FLOWS), 30, "heartbeats of every flow")
    # One emitter per flow at a time (the first replica held every flow until the others joined).
    counts = {flow: [_emitted(b, flow) for b in beaters] for flow in FLOWS}
    time.sleep(4)
    for flow in FLOWS:
        grew = [i for i, b in enumerate(beaters) if _emitted(b, flow) > counts[flow][i]]
        assert grew == [beating[flow]], f"{flow}: replicas {grew} emitted, holder is {beating[flow]}"

    # SIGKILL the replicas holding A2->B: both services hand the flow over within one lease TTL.
    timed_part()
    moved = "A2->B"
    # read again: a lease may have moved while this worker waited to be alone
    spread = wait_for(lambda: _one_each(client, "checkpoint", checkpointers), 30, "one checkpoint flow per replica",
                      interval=0.5)
    beating = wait_for(lambda: _one_each(client, "heartbeat", beaters), 30, "one heartbeat flow per replica",
                       interval=0.5)
    new_checkpointer, checkpoint_took = _take_over_time(client, "checkpoint", checkpointers, moved, spread[moved])
    new_beater, heartbeat_took = _take_over_time(client, "heartbeat", beaters, moved, beating[moved])
    print(f"hand-over after SIGKILL: checkpoint {checkpoint_took:.1f}s, heartbeat {heartbeat_took:.1f}s "
          f"(lease TTL {LEASE_TTL:.0f}s)")
    assert checkpoint_took <= LEASE_TTL + 1.5 and heartbeat_took <= LEASE_TTL + 1.5
    # the group moves on (and back on partition 1)
    commit_offsets(source_cluster, f"{prefix}-A2-g", [TopicPartition(f"{prefix}-A2-t", p, o)
                                                      for p, o in enumerate((9, 2))])
    wait_for(lambda: _checkpoints(target_cluster, prefix, "A2") == {0: (9, 9), 1: (2, 2)}, 30,
             "checkpoints of the moved flow from its new holder")
    before = _emitted(beaters[new_beater], moved)
    wait_for(lambda: _emitted(beaters[new_beater], moved) >= before + 3, 20, "heartbeats of the moved flow")
    for service, replicas in (("checkpoint", checkpointers), ("heartbeat", beaters)):  # 3 flows over 2 replicas
        wait_for(lambda s=service, r=replicas: sorted(Counter(_holders(client, s, r).values()).values()) == [1, 2]
                 and None not in _holders(client, s, r).values(), 2 * LEASE_TTL,
                 f"every {service} flow held by one of the two survivors", interval=0.5)

    # Freeze the heartbeat holder of A3->B past its lease; once it runs again, only one emitter.
    frozen_flow = "A3->B"
    frozen = _holders(client, "heartbeat", beaters)[frozen_flow]
    assert frozen is not None
    pid = beaters[frozen].process.pid
    assert pid is not None
    os.kill(pid, signal.SIGSTOP)
    try:
        wait_for(lambda: _holders(client, "heartbeat", beaters)[frozen_flow] not in (None, frozen), 3 * LEASE_TTL,
                 "the frozen replica's flow taken over", interval=0.2)
    finally:
        os.kill(pid, signal.SIGCONT)
    resumed = time.time()
    # Whichever thread runs first after SIGCONT notices: the keeper (renewal refused or local deadline
    # passed) or the worker (its fenced write or deadline check raises LeaseLostError).
    noticed = (f"lease lost name=heartbeat:{frozen_flow}", f"service=heartbeat flow={frozen_flow} lease lost")
    wait_for(lambda: any(line in beaters[frozen].log_text() for line in noticed), 2 * LEASE_TTL,
             "the resumed replica noticing its lease is gone", interval=0.5)
    time.sleep(6)
    window = [t for t in _heartbeat_times(source_cluster, "A3") if resumed * 1000 <= t <= resumed * 1000 + 6000]
    assert 3 <= len(window) <= 8, f"{len(window)} heartbeats of {frozen_flow} in 6 s at one per second"


SHARDS = 6


def _groups_covering_every_shard(prefix: str, flow: str, per_shard: int = 2) -> list[str]:
    """Group names such that each of the flow's shards gets at least ``per_shard`` of them."""
    shards, groups = ShardItem.all_of(flow, SHARDS), []
    while any(sum(s.owns(g) for g in groups) < per_shard for s in shards):
        groups.append(f"{prefix}-S-g{len(groups)}")
    return groups


def _all_checkpoints(target: KafkaCluster, alias: str, prefix: str) -> dict[str, dict[int, tuple[int, int]]]:
    """The newest checkpoint per group (of this test) and partition: (upstream, downstream)."""
    latest: dict[str, dict[int, tuple[int, int]]] = {}
    try:
        records = consume_all(target.client_config(), f"{alias}.checkpoints.internal", [0], timeout=20)
    except Exception:  # not created yet
        return latest
    for record in records:
        checkpoint = Checkpoint.from_record(record.key, record.value)
        if not checkpoint.group.startswith(prefix):
            continue
        latest.setdefault(checkpoint.group, {})[checkpoint.partition] = (checkpoint.upstream_offset,
                                                                         checkpoint.downstream_offset)
    return latest


def _shard_holders(client: redis.Redis, flow: str, replicas: list[StraitProcess]) -> dict[ShardItem, int | None]:
    """For each shard of the flow, the index of the live replica holding its lease (None: no live holder)."""
    ports = {m.id: m.metadata.get("metrics_port") for m in Membership(client).live_members("checkpoint")}
    index = {str(r.metrics_port): i for i, r in enumerate(replicas) if r.process.alive()}
    held: dict[ShardItem, int | None] = {}
    for shard in ShardItem.all_of(flow, SHARDS):
        owner = Leases(client).owner(f"checkpoint:{shard.name}")
        held[shard] = index.get(ports.get(owner.holder, "")) if owner is not None else None
    return held


def _tracked(replica: StraitProcess, flow: str) -> float | None:
    try:
        return replica.sample("strait_groups_checkpointed", flow=flow)
    except OSError:
        return None


def test_groups_of_one_flow_spread_over_replicas_by_shard_and_move_when_one_dies(
    source_cluster: KafkaCluster, target_cluster: KafkaCluster, redis_url: str,
    services: Callable[..., StraitProcess], unique_name: Callable[[str], str], tmp_path: Path,
    timed_part: Callable[[], None],
) -> None:
    prefix, flow = unique_name("shard"), "S->B"
    _replicated(source_cluster, target_cluster, prefix, "S")
    groups = _groups_covering_every_shard(prefix, flow)
    topic = f"{prefix}-S-t"
    for group in groups:
        commit_offsets(source_cluster, group, [TopicPartition(topic, 0, 4), TopicPartition(topic, 1, 7)])
    config = {"clusters": {"S": {"bootstrap_servers": source_cluster.bootstrap_servers},
                           "B": {"bootstrap_servers": target_cluster.bootstrap_servers}},
              "flows": [{"source": "S", "target": "B", "topics": {"include": [topic]},
                         "groups": {"include": [f"{prefix}-S-g.*"]}, "replication_factor": 1,
                         "offset_syncs_topic_location": "target", "emit_heartbeats": {"enabled": False},
                         "emit_checkpoints": {"interval_seconds": 1}, "checkpoint_shards": SHARDS}],
              "redis_url": redis_url}
    path = write_config(tmp_path / "strait.yaml", config)
    replicas = [services("checkpoint", "--config", str(path), "--lease-ttl", str(LEASE_TTL)) for _ in range(3)]
    client = redis.Redis.from_url(redis_url)

    def two_shards_each() -> dict[ShardItem, int | None] | None:
        held = _shard_holders(client, flow, replicas)
        return held if Counter(held.values()) == Counter({0: 2, 1: 2, 2: 2}) else None

    held = wait_for(two_shards_each, 30, "two shards per replica", interval=0.5)
    expected = {group: {0: (4, 4), 1: (7, 7)} for group in groups}
    wait_for(lambda: _all_checkpoints(target_cluster, "S", prefix) == expected, 60, "checkpoints of every group")
    mine = {i: sum(1 for g in groups if any(s.owns(g) for s, h in held.items() if h == i)) for i in range(3)}
    wait_for(lambda: [_tracked(r, flow) for r in replicas] == [mine[i] for i in range(3)], 20,
             f"each replica checkpointing only its shards' groups {mine}")
    assert all(count >= 2 * 2 for count in mine.values()) and sum(mine.values()) == len(groups)

    victim = 1
    timed_part()
    held = wait_for(two_shards_each, 30, "two shards per replica still", interval=0.5)  # moved while waiting?
    replicas[victim].kill()
    killed = time.monotonic()
    survivors_hold_all = wait_for(
        lambda: (h := _shard_holders(client, flow, replicas)) and None not in h.values()
        and victim not in h.values() and h, 3 * LEASE_TTL, "the killed replica's shards taken over", interval=0.2)
    took = time.monotonic() - killed
    print(f"shard hand-over after SIGKILL: {took:.1f}s (lease TTL {LEASE_TTL:.0f}s)")
    assert took <= LEASE_TTL + 1.5
    assert sorted(Counter(survivors_hold_all.values()).values()) == [3, 3]
    for shard, holder in held.items():  # the survivors kept the shards they held
        if holder != victim:
            assert survivors_hold_all[shard] == holder, f"{shard.name} moved from survivor {holder}"
    for group in groups:  # every group moves on, the killed replica's among them
        commit_offsets(source_cluster, group, [TopicPartition(topic, 0, 9), TopicPartition(topic, 1, 2)])
    moved_on = {group: {0: (9, 9), 1: (2, 2)} for group in groups}
    wait_for(lambda: _all_checkpoints(target_cluster, "S", prefix) == moved_on, 60, "checkpoints of every group after the kill")
    wait_for(lambda: sum(_tracked(replicas[i], flow) or 0 for i in (0, 2)) == len(groups), 20,
             "the survivors checkpointing every group")
