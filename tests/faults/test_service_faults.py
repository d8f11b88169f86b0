"""Control-plane drills under keyed load: the replica of each service (configsync, heartbeat,
checkpoint) doing the flow's work SIGKILLed, with a second replica taking over; Redis SIGKILLed and
restarted. The data plane is verified after each (nothing lost, duplicates within the bound)."""

from __future__ import annotations

import random
import re
import time
from collections.abc import Callable

import pytest
import redis
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

from strait.config.model import DEFAULT_CHECKPOINT_SHARDS
from strait.coord.assignment import ShardItem, shard_of
from strait.coord.leases import Leases
from strait.coord.membership import Membership
from strait_lab.clients import consume_all
from strait_lab.services import StraitProcess
from strait.records import Checkpoint, Heartbeat, RecordFormatError
from tests.faults.drill import FLOW, LEASE_TTL, PARTITIONS, Drill, DrillResult, Mode, Rig, record, start_all
from tests.support.cli import strait
from tests.support.kafka import commit_offsets, last_values
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.faults, pytest.mark.slow]

SERVICES = ("configsync", "heartbeat", "checkpoint")


def _work_item(rig: Rig, service: str) -> str:
    """What the drill's job needs: the flow, or for checkpoint the shard of the job's group."""
    if service != "checkpoint":
        return FLOW
    count = DEFAULT_CHECKPOINT_SHARDS
    return ShardItem(FLOW, shard_of(rig.group("services-sigkill"), count), count).name


def _holder(client: redis.Redis, service: str, replicas: list[StraitProcess], item: str = FLOW
            ) -> StraitProcess | None:
    """The live replica holding the lease of ``service`` on ``item`` (by default the flow) in Redis."""
    owner = Leases(client).owner(f"{service}:{item}")
    if owner is None:
        return None
    ports = {m.id: m.metadata.get("metrics_port") for m in Membership(client).live_members(service)}
    port = ports.get(owner.holder)
    return next((r for r in replicas if r.process.alive() and str(r.metrics_port) == port), None)


def _latest_heartbeat_ms(rig: Rig) -> int:
    """The newest heartbeat of the flow in the source's heartbeats topic (0: none yet)."""
    try:
        records = consume_all(rig.source.client_config(), "heartbeats", [0], timeout=20)
    except Exception:  # not created yet
        return 0
    newest = 0
    for r in records:
        try:
            heartbeat = Heartbeat.from_record(r.key, r.value)
        except RecordFormatError:
            continue
        if (heartbeat.source_alias, heartbeat.target_alias) == (rig.source.alias, rig.target.alias):
            newest = max(newest, heartbeat.timestamp_ms)
    return newest


def _checkpoints(rig: Rig, group: str) -> dict[int, tuple[int, int]]:
    """The newest checkpoint of each partition of ``group``: (upstream, downstream)."""
    latest: dict[int, tuple[int, int]] = {}
    try:
        records = consume_all(rig.target.client_config(), f"{rig.source.alias}.checkpoints.internal",
                              timeout=20)
    except Exception:  # not created yet
        return latest
    for r in sorted(records, key=lambda r: r.offset or 0):
        checkpoint = Checkpoint.from_record(r.key, r.value)
        if checkpoint.group == group:
            latest[checkpoint.partition] = (checkpoint.upstream_offset, checkpoint.downstream_offset)
    return latest


def _value_at(rig: Rig, topic: str, partition: int, offset: int) -> bytes | None:
    """The value of one target record."""
    consumer = Consumer({**rig.target.client_config(), "group.id": "strait-drill-peek",
                         "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(topic, partition, offset)])
        message = consumer.poll(20)
        assert message is not None and not message.error(), f"no record at {topic}[{partition}]@{offset}"
        assert message.offset() == offset, f"{topic}[{partition}]: asked for {offset}, got {message.offset()}"
        return message.value()
    finally:
        consumer.close()


def _topic_config(rig: Rig, admin_of: str, topic: str, name: str) -> str | None:
    cluster = rig.source if admin_of == "source" else rig.target
    resource = ConfigResource(ResourceType.TOPIC, topic)
    admin = cluster.admin()  # must outlive its futures
    entries = admin.describe_configs([resource])[resource].result(timeout=30)
    return entries[name].value if name in entries else None


def _set_retention(rig: Rig, topic: str, value: int) -> None:
    resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry("retention.ms", str(value), incremental_operation=AlterConfigOpType.SET)])
    admin = rig.source.admin()  # must outlive its futures
    admin.incremental_alter_configs([resource])[resource].result(timeout=30)


class _ServiceJob:
    """One service's job in the drill: a change to make and the condition that it was done."""

    def __init__(self, rig: Rig, drill: Drill, service: str, seed: int) -> None:
        self.rig, self.drill, self.service = rig, drill, service
        self.retention = 10**12 + seed
        self.since_ms = 0
        self.upstream: dict[int, int] = {}

    def request(self) -> None:
        """Ask for new work: a config to sync, offsets to checkpoint, a heartbeat after now."""
        self.since_ms = int(time.time() * 1000)
        if self.service == "configsync":
            self.retention += 1
            _set_retention(self.rig, self.drill.topic, self.retention)
        elif self.service == "checkpoint":
            tails = last_values(self.rig.target, self.rig.remote(self.drill.topic))
            self.upstream = {p: int((tails[p] or b"").split(b":")[1]) for p in range(PARTITIONS)}
            commit_offsets(self.rig.source, self.rig.group("services-sigkill"),
                           [TopicPartition(self.drill.topic, p, o) for p, o in self.upstream.items()])

    def done(self) -> bool:
        """Whether the requested work shows on the clusters."""
        if self.service == "configsync":
            value = _topic_config(self.rig, "target", self.rig.remote(self.drill.topic), "retention.ms")
            return value == str(self.retention)
        if self.service == "heartbeat":
            return _latest_heartbeat_ms(self.rig) > self.since_ms
        checkpoints = _checkpoints(self.rig, self.rig.group("services-sigkill"))
        return all(checkpoints.get(p, (-1, -1))[0] == o for p, o in self.upstream.items())

    def check_exact(self) -> None:
        """Checkpoints point at the copy of the committed record itself."""
        checkpoints = _checkpoints(self.rig, self.rig.group("services-sigkill"))
        for p, upstream in self.upstream.items():
            downstream = checkpoints[p][1]
            value = _value_at(self.rig, self.rig.remote(self.drill.topic), p, downstream)
            assert value == f"{p}:{upstream}".encode(), \
                f"checkpoint of partition {p}: upstream {upstream} -> downstream {downstream} holds {value!r}"


def test_service_replica_sigkill(rig: Rig, mode: Mode, replicas: Callable[..., list[StraitProcess]]) -> None:
    """Two replicas of each service; SIGKILL the replica holding the flow (all three services at once).

    Recovery per service: from the kill until work requested right after it is done by the
    survivor: a changed topic config on the target (configsync), a heartbeat newer than the kill
    (heartbeat), checkpoints of freshly committed group offsets (checkpoint), which must be exact.
    """
    client = rig.redis.client()
    drill = Drill.begin(rig, "services-sigkill", mode)
    try:
        started = replicas(*[s for s in SERVICES for _ in range(2)])
        group = {s: [r for r in started if r.component == s] for s in SERVICES}
        jobs = {s: _ServiceJob(rig, drill, s, random.randrange(10**6)) for s in SERVICES}
        for service, job in jobs.items():
            job.request()
            wait_for(job.done, 240, f"{service} doing its job before the fault", interval=1.0)
        times: dict[str, list[float]] = {s: [] for s in SERVICES}
        for injection in range(mode.injections):
            holders = {s: wait_for(lambda s=s: _holder(client, s, group[s], _work_item(rig, s)), 60,
                                   f"the {s} holder")
                       for s in SERVICES}
            killed = time.monotonic()
            for holder in holders.values():
                holder.kill()
            for service, job in jobs.items():
                job.request()
            _wait_each(jobs, killed, times)
            jobs["checkpoint"].check_exact()
            if injection + 1 < mode.injections:  # the killed replicas come back as the new standbys
                fresh = replicas(*SERVICES)
                group = {s: [r for r in group[s] if r.process.alive()] + fresh[i:i + 1]
                         for i, s in enumerate(SERVICES)}
            time.sleep(mode.between_seconds)
        data = drill.finish(report=False)
        for service in SERVICES:
            record(DrillResult(f"{service} replica sigkill", mode.name, len(times[service]),
                               round(max(times[service]), 1), data.produced, data.lost, data.duplicates,
                               data.duplicate_bound, tuple(round(t, 1) for t in times[service]),
                               "recovery: the survivor did the job"))
    finally:
        drill.abort()


def _wait_each(jobs: dict[str, _ServiceJob], since: float, times: dict[str, list[float]]) -> None:
    """Poll every job until done; note each one's time since ``since``."""
    pending = dict(jobs)
    deadline = since + 240
    while pending and time.monotonic() < deadline:
        for service, job in list(pending.items()):
            if job.done():
                times[service].append(time.monotonic() - since)
                del pending[service]
        time.sleep(0.5)
    assert not pending, f"not taken over within 240s: {sorted(pending)} (lease TTL {LEASE_TTL}s)"


def test_redis_sigkill(rig: Rig, mode: Mode) -> None:
    """SIGKILL Redis and start it again empty (no persistence, a flushed instance), with no operator action.

    The configuration comes back from its durable topic, the replicator copies on meanwhile, the
    heartbeat lease is taken again; then every strait service (live from Redis, as in production) is
    restarted one by one and runs on the restored configuration, `strait config show` shows it, and a
    topic created after the restarts reaches the target. Recovery: from the kill until the target holds
    a record produced after it on every partition and a heartbeat was emitted under the new lease; the
    replicator's restart is a second recovery of its own (its replays count in the bound).
    """
    live = [rig.live_service(component, i) for i, component in enumerate(SERVICES)]
    drill = Drill.begin(rig, "redis-sigkill", mode)
    try:
        start_all(live)
        wait_for(lambda: _latest_heartbeat_ms(rig) > 0, 120, "heartbeats before the fault")
        restored: list[float] = []
        for n in range(mode.injections):
            assert rig.redis.process is not None
            drill.inject(rig.redis.process.kill)
            time.sleep(2)
            rig.redis.start(empty=True)
            back = time.monotonic()
            client = rig.redis.client()
            wait_for(lambda: client.hget("strait:doc:config", "latest"), 60,
                     "the configuration restored into the emptied Redis", interval=0.2)
            restored.append(time.monotonic() - back)
            copied_at = drill.wait_caught_up()
            wait_for(lambda: _holder(client, "heartbeat", live), 120, "the heartbeat lease taken again",
                     interval=0.5)
            leased_ms = int(time.time() * 1000)
            wait_for(lambda: _latest_heartbeat_ms(rig) > leased_ms, 120, "a heartbeat under the new lease",
                     interval=0.5)
            drill.recovered(at=max(copied_at, time.monotonic()))
            assert rig.replicator is not None and rig.replicator.process.alive(), "the replicator died with Redis"
            _restart_one_by_one(rig, live, n)
            drill.inject(lambda: _restart_replicator(rig))
            drill.recovered()
            _new_topic_reaches_the_target(rig, f"late-{n}")
            shown = strait("config", "show", "--redis-url", rig.redis.url, timeout=60)
            assert shown.returncode == 0 and f"source: {rig.source.alias}" in shown.stdout \
                and re.escape(drill.topic) in shown.stdout, shown.stdout + shown.stderr
            time.sleep(mode.between_seconds)
        drill.finish(note=f"redis restarted empty; config restored from Kafka in "
                          f"{', '.join(f'{t:.1f}' for t in restored)} s without re-apply; every service restarted")
    finally:
        drill.abort()
        for process in live:
            process.kill()


def _restart_one_by_one(rig: Rig, live: list[StraitProcess], round_: int) -> None:
    """Replace each live service replica by a new process, which must adopt the restored configuration."""
    for i, old in enumerate(list(live)):
        fresh = rig.live_service(old.component, 10 * (round_ + 1) + i)
        old.stop()
        start_all([fresh])
        live[i] = fresh
        wait_for(lambda: fresh.sample("strait_config_loaded", service=fresh.component) == 1, 60,
                 f"the restarted {fresh.component} on the restored configuration", interval=0.5)


def _restart_replicator(rig: Rig) -> None:
    assert rig.replicator is not None
    rig.replicator.stop()
    rig.start_replicator()


def _new_topic_reaches_the_target(rig: Rig, name: str) -> None:
    topic = rig.topic(name)
    rig.create_topic(topic)
    producer = Producer(rig.source.client_config())
    for i in range(30):
        producer.produce(topic, key=str(i).encode(), value=f"late-{i}".encode(), partition=i % PARTITIONS)
    assert producer.flush(30) == 0

    def copied() -> int:
        try:
            return len(consume_all(rig.target.client_config(), rig.remote(topic), timeout=10))
        except Exception:  # noqa: BLE001 - not created on the target yet
            return 0
    wait_for(lambda: copied() >= 30, 120, f"{topic}, created after the restarts, copied to {rig.remote(topic)}")
