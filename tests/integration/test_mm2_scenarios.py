"""MirrorMaker 2's own integration scenarios, re-run on strait from the clusters alone (issue 43.3).

Kafka's MM2 integration tests (``MirrorConnectorsIntegrationBaseTest`` and its transactional and
identity-policy variants) check a replicator only through what the clusters hold. The tests here
re-run those scenarios, written from their description, on strait's four services configured from
one MirrorMaker 2 properties file, as a user migrating from MM2 brings it. Every assertion is MM2's
or stricter: where MM2 lets a consumer on the target re-read up to ``offset.lag.max`` records, or
only asks a checkpoint to move the right way, strait's offsets must be exact.

The services start once for the module, and the first step of every scenario is staged before they
do (topics, records, committed groups), as MM2's tests create their topics before starting MM2:
their waits overlap instead of adding up. The module's clusters carry two pairs of aliases:
``primary``/``backup`` replicating both ways (MM2's base test), and ``west``/``east`` for a one-way
flow with the identity policy, replicate-from-latest and offset syncs on the target. The replicator
runs two flows at a time (two task slots here), so the last scenario's configuration version
replaces ``backup->primary`` with ``west->east``, as an operator would.

MM2's spelling of replicate-from-latest at the cluster level (``primary.consumer.auto.offset.reset``)
is test_resume_evidence's; a flow without offset syncs is test_replicator's.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import NewPartitions

from strait.records import Checkpoint, Heartbeat
from strait_lab.clients import Record, consume_all, create_topic, produce
from strait_lab.kafka import KafkaCluster
from strait_lab.redis import RedisServer
from strait_lab.services import StraitProcess
from tests.integration.test_configsync_support import alter, topic_config
from tests.oracle.mm2_oracle import TRANSLATE_TIMEOUT_MS, Mm2Oracle, offsets_by_partition, text_token, token_text
from tests.support.cli import strait
from tests.support.kafka import (
    NumberedLoad, commit_offsets, count, group_offsets, numbered_copies, produce_numbered, produce_transactions,
)
from tests.support.waiting import wait_for

pytestmark = pytest.mark.slow

PARTITIONS = 3
RECORDS = 300  # per topic, PARTITIONS-way
P = f"mm2s-{uuid.uuid4().hex[:6]}"  # the two-way flows' topics and groups
W = f"mm2w-{uuid.uuid4().hex[:6]}"  # the west->east flow's
IDENTITY = "org.apache.kafka.connect.mirror.IdentityReplicationPolicy"
COPY_SECONDS = 120.0


@dataclass
class Scenarios:
    """The module's clusters (``primary`` is A, ``backup`` is B), its Redis, its config file and its services."""

    primary: KafkaCluster
    backup: KafkaCluster
    redis: RedisServer
    config: Path
    services: dict[str, StraitProcess] = field(default_factory=dict)

    def apply(self, west_east: bool = False) -> None:
        """Store the module's MM2 file in Redis: two-way, or with ``west->east`` in place of ``backup->primary``."""
        self.config.write_text(_mm2_properties(self.primary, self.backup, west_east))
        strait("config", "apply", str(self.config), "--redis-url", self.redis.url, check=True)

    def on(self, alias: str) -> KafkaCluster:
        """The cluster behind an alias of the module's file."""
        return self.primary if alias in ("primary", "west") else self.backup


def _mm2_properties(primary: KafkaCluster, backup: KafkaCluster, west_east: bool) -> str:
    lines = [
        "clusters = primary, backup" + (", west, east" if west_east else ""),
        f"primary.bootstrap.servers = {primary.bootstrap_servers}",
        f"backup.bootstrap.servers = {backup.bootstrap_servers}",
        "primary->backup.enabled = true",
        f"backup->primary.enabled = {str(not west_east).lower()}",
        # MM2's default topics are .*: remote topics match too, and cycle detection must skip them
        f"topics = .*{P}-.*",
        f"groups = {P}-.*",
        "replication.factor = 1",
        "checkpoints.topic.replication.factor = 1",
        "heartbeats.topic.replication.factor = 1",
        "offset-syncs.topic.replication.factor = 1",
        "refresh.topics.interval.seconds = 2",
        "refresh.groups.interval.seconds = 2",
        "sync.topic.configs.interval.seconds = 2",
        "emit.checkpoints.interval.seconds = 1",
        "sync.group.offsets.enabled = true",
        "sync.group.offsets.interval.seconds = 1",
        "config.properties.exclude = delete\\\\.retention\\\\..*",  # the properties file's escape of \.
        "backup->primary.use.defaults.from = source",
    ]
    if west_east:
        lines += [
            f"west.bootstrap.servers = {primary.bootstrap_servers}",
            f"east.bootstrap.servers = {backup.bootstrap_servers}",
            "west->east.enabled = true",
            f"west->east.topics = {W}-.*",
            f"west->east.groups = {W}-.*",
            f"west->east.replication.policy.class = {IDENTITY}",
            "west->east.offset-syncs.topic.location = target",
            "west->east.consumer.auto.offset.reset = latest",  # the flow-level spelling
            # On clusters the session shares, the identity copy of A's heartbeats would land in B's
            # own heartbeats topic, which every other flow of the session writes.
            "west->east.heartbeats.replication.enabled = false",
        ]
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def scenarios(source_cluster: KafkaCluster, target_cluster: KafkaCluster,
              redis_server_factory: Callable[..., RedisServer], lab_root: Path,
              tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scenarios]:
    """The four services on the module's MM2 file, started once the scenarios' first steps are staged."""
    folder = tmp_path_factory.mktemp("mm2-scenarios")
    lab = Scenarios(source_cluster, target_cluster, redis_server_factory(), folder / "mm2.properties")
    _stage(lab)
    lab.apply()
    try:
        for component in ("replicator", "configsync", "checkpoint", "heartbeat"):
            extra = ("--state-dir", str(folder / "state"), "--epoch-seconds", "5") if component == "replicator" \
                else ("--lease-ttl", "5")
            process = lab.services[component] = StraitProcess(
                component, ["--redis-url", lab.redis.url, *extra], lab_root / "mm2-scenarios",
                name=f"{component}-mm2-scenarios")
            process.start(timeout=120)
        yield lab
    finally:
        running = [p for p in lab.services.values() if p.process.alive()]
        for process in running:  # SIGTERM to all first: they stop in the time of the slowest
            process.process.terminate(group=False)  # as StraitProcess.stop: the main process only
        for process in running:
            process.stop()


# -- the first step of each scenario, staged before the services start -----------------------------

def _stage(lab: Scenarios) -> None:
    a, b = lab.primary, lab.backup
    create_topic(a.admin(), f"{P}-t1", partitions=PARTITIONS, config={"cleanup.policy": "compact"})
    create_topic(b.admin(), f"{P}-t1", partitions=PARTITIONS)
    produce_numbered(a, f"{P}-t1", PARTITIONS, RECORDS)
    produce_numbered(b, f"{P}-t1", PARTITIONS, RECORDS)

    create_topic(a.admin(), f"{P}-empty", partitions=PARTITIONS)
    produce_numbered(a, f"{P}-empty", PARTITIONS - 1, RECORDS)  # the last partition stays empty
    commit_offsets(a, f"{P}-g-empty", [TopicPartition(f"{P}-empty", p, RECORDS // 2 if p < PARTITIONS - 1 else 0)
                                       for p in range(PARTITIONS)])

    create_topic(a.admin(), f"{P}-plain", partitions=PARTITIONS)
    produce_numbered(a, f"{P}-plain", PARTITIONS, RECORDS)
    create_topic(a.admin(), f"{P}-txn", partitions=PARTITIONS)
    produce_transactions(a, f"{P}-txn", PARTITIONS)
    for topic in (f"{P}-plain", f"{P}-txn"):
        commit_offsets(a, f"{P}-g-sync", [TopicPartition(topic, p, end) for p, end in _ends(a, topic).items()])

    create_topic(a.admin(), f"{P}-behind", partitions=PARTITIONS)
    produce_numbered(a, f"{P}-behind", PARTITIONS, 10 * RECORDS)

    for topic in (f"{P}-nc-full", f"{P}-nc-empty"):
        create_topic(a.admin(), topic, partitions=1)
    produce_numbered(a, f"{P}-nc-full", 1, 30)
    commit_offsets(a, f"{P}-g-nc", [TopicPartition(f"{P}-nc-full", 0, 30), TopicPartition(f"{P}-nc-empty", 0, 0)])

    create_topic(a.admin(), f"{P}-restart", partitions=PARTITIONS)
    produce_numbered(a, f"{P}-restart", PARTITIONS, RECORDS)
    commit_offsets(a, f"{P}-g-restart", [TopicPartition(f"{P}-restart", p, RECORDS // PARTITIONS)
                                         for p in range(PARTITIONS)])

    create_topic(a.admin(), f"{P}-cfg", partitions=1, config={"delete.retention.ms": "1000", "retention.bytes": "1000"})
    create_topic(a.admin(), f"{P}-tdef", partitions=1, config={"retention.bytes": "1000"})
    create_topic(b.admin(), f"{P}-sdef", partitions=1)

    # west->east is not in the file yet: these records were produced before it starts from the latest
    create_topic(a.admin(), f"{W}-latest", partitions=PARTITIONS)
    produce_numbered(a, f"{W}-latest", PARTITIONS, 90)
    create_topic(a.admin(), f"{W}-sentinel", partitions=1)


# -- reading the clusters ----------------------------------------------------------------------------

def _ends(cluster: KafkaCluster, topic: str) -> dict[int, int]:
    """Each partition's end offset (the high watermark)."""
    consumer = Consumer({**cluster.client_config(), "group.id": f"ends-{uuid.uuid4().hex[:6]}"})
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in sorted(partitions)}
    finally:
        consumer.close()


def _topics(cluster: KafkaCluster) -> set[str]:
    return set(cluster.admin().list_topics(timeout=10).topics)


def _has(cluster: KafkaCluster, topic: str, records: int) -> bool:
    return topic in _topics(cluster) and count(cluster, topic) >= records


def _remote_offsets(oracle: Mm2Oracle, cluster: KafkaCluster, source_alias: str, group: str) -> dict[tuple[str, int], int]:
    """What MM2's ``MirrorClient.remoteConsumerOffsets`` reads from the checkpoints on ``cluster``."""
    answer = oracle.ask("remote-offsets", text_token(cluster.bootstrap_servers), "-", text_token(source_alias),
                        text_token(group), TRANSLATE_TIMEOUT_MS)
    return {(str(topic), int(partition)): offset
            for (_group, topic, partition), (offset, _meta) in offsets_by_partition(answer, with_group=True).items()}


def _checkpoints(cluster: KafkaCluster, source_alias: str, group: str) -> list[Checkpoint]:
    """Every checkpoint of ``group`` in ``<source_alias>.checkpoints.internal``, in the order written."""
    return [c for c in (Checkpoint.from_record(r.key, r.value)
                        for r in consume_all(cluster.client_config(), f"{source_alias}.checkpoints.internal"))
            if c.group == group]


def _assert_monotonic(checkpoints: list[Checkpoint]) -> None:
    """MM2's check: no checkpoint of a partition goes below an earlier one."""
    last: dict[tuple[str, int], Checkpoint] = {}
    for checkpoint in checkpoints:
        key = (checkpoint.topic, checkpoint.partition)
        before = last.get(key)
        assert before is None or (checkpoint.upstream_offset >= before.upstream_offset
                                  and checkpoint.downstream_offset >= before.downstream_offset), (before, checkpoint)
        last[key] = checkpoint


def _heartbeats(cluster: KafkaCluster, topic: str) -> set[tuple[str, str]]:
    """The (source alias, target alias) pairs of the heartbeats in ``topic``."""
    return {(h.source_alias, h.target_alias) for h in (Heartbeat.from_record(r.key, r.value)
                                                        for r in consume_all(cluster.client_config(), topic))}


def _config(cluster: KafkaCluster, topic: str, name: str) -> str | None:
    return topic_config(cluster, topic)[name][0]


def _read_again(cluster: KafkaCluster, group: str, topic: str, seconds: float) -> int:
    """How many records a member of ``group`` that fails over to ``topic`` reads in ``seconds`` once it
    has its partitions (from the group's offsets; a partition without one from the earliest)."""
    consumer = Consumer({**cluster.client_config(), "group.id": group, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})
    read = 0
    try:
        consumer.subscribe([topic])
        joined = time.monotonic() + 30
        deadline = float("inf")
        while time.monotonic() < min(deadline, joined):
            read += sum(1 for m in consumer.consume(100, timeout=0.5) if not m.error())
            if deadline == float("inf") and consumer.assignment():  # read on for ``seconds`` once it has its partitions
                deadline, joined = time.monotonic() + seconds, float("inf")
        assert consumer.assignment(), f"group {group} got no partitions of {topic} in 30 s"
        return read
    finally:
        consumer.close()


# -- the scenarios -----------------------------------------------------------------------------------

def test_two_way_replication_with_config_sync_heartbeats_checkpoints_and_topics_created_later(
    scenarios: Scenarios, oracle: Mm2Oracle,
) -> None:
    """MM2's testReplication: a topic of the same name on both clusters, replicated both ways."""
    a, b, t1 = scenarios.primary, scenarios.backup, f"{P}-t1"
    wait_for(lambda: _has(b, f"primary.{t1}", RECORDS) and _has(a, f"backup.{t1}", RECORDS), COPY_SECONDS,
             "the topic copied both ways")
    assert count(b, f"primary.{t1}") == RECORDS and count(a, f"backup.{t1}") == RECORDS
    assert count(a, t1) == RECORDS and count(b, t1) == RECORDS, "the local topics hold only their own records"
    wait_for(lambda: _config(b, f"primary.{t1}", "cleanup.policy") == "compact", 60, "cleanup.policy synced")
    # cycle detection: a remote topic never goes back to the cluster it came from
    assert f"primary.backup.{t1}" not in _topics(b) and f"backup.primary.{t1}" not in _topics(a)

    wait_for(lambda: ("primary", "backup") in _heartbeats(a, "heartbeats")
             and ("primary", "backup") in _heartbeats(b, "heartbeats")
             and ("backup", "primary") in _heartbeats(a, "heartbeats"), 60, "heartbeats on both clusters")
    wait_for(lambda: _has(b, "primary.heartbeats", 1) and _has(a, "backup.heartbeats", 1), COPY_SECONDS,
             "the heartbeats copied both ways")
    for cluster, upstream in ((b, "primary"), (a, "backup")):
        bootstrap = text_token(cluster.bootstrap_servers)
        assert upstream in {token_text(t) for t in oracle.ask("upstream-clusters", bootstrap, "-")}
        assert oracle.ask("replication-hops", bootstrap, "-", text_token(upstream)) == ["1"]

    # checkpoints on all partitions, both ways; MM2 asks for offsets above zero, strait for exact ones
    per_partition = RECORDS // PARTITIONS
    commit_offsets(a, f"{P}-g-two-way", [TopicPartition(t1, p, per_partition) for p in range(PARTITIONS)])
    commit_offsets(b, f"{P}-g-two-way", [TopicPartition(t1, p, per_partition - 1) for p in range(PARTITIONS)])
    wanted_b = {(f"primary.{t1}", p): per_partition for p in range(PARTITIONS)}
    wanted_a = {(f"backup.{t1}", p): per_partition - 1 for p in range(PARTITIONS)}
    wait_for(lambda: _remote_offsets(oracle, b, "primary", f"{P}-g-two-way") == wanted_b, 60, "checkpoints on B")
    wait_for(lambda: _remote_offsets(oracle, a, "backup", f"{P}-g-two-way") == wanted_a, 60, "checkpoints on A")
    for cluster, upstream in ((b, "primary"), (a, "backup")):
        topics = {token_text(t) for t in oracle.ask("checkpoint-topics", text_token(cluster.bootstrap_servers), "-")}
        assert f"{upstream}.checkpoints.internal" in topics
    _assert_monotonic(_checkpoints(b, "primary", f"{P}-g-two-way"))

    # topics created later, on either side
    create_topic(a.admin(), f"{P}-t2", partitions=PARTITIONS)
    create_topic(b.admin(), f"{P}-t3", partitions=PARTITIONS)
    produce_numbered(a, f"{P}-t2", PARTITIONS, 90)
    produce_numbered(b, f"{P}-t3", PARTITIONS, 90)
    wait_for(lambda: _has(b, f"primary.{P}-t2", 90) and _has(a, f"backup.{P}-t3", 90), COPY_SECONDS,
             "the topics created later copied")
    assert count(b, f"primary.{P}-t2") == 90 and count(a, f"backup.{P}-t3") == 90


def test_a_partition_added_later_is_created_on_the_target_and_copied(scenarios: Scenarios) -> None:
    """Partition growth (MM2 creates the new partitions on the remote topic and copies them)."""
    a, b, topic = scenarios.primary, scenarios.backup, f"{P}-grow"
    create_topic(a.admin(), topic, partitions=2)
    produce_numbered(a, topic, 2, 40)
    wait_for(lambda: _has(b, f"primary.{topic}", 40), COPY_SECONDS, "the topic copied")
    admin = a.admin()  # must outlive its future
    admin.create_partitions([NewPartitions(topic, 4)])[topic].result(timeout=30)
    produce_numbered(a, topic, 4, 80, first=40)  # 20 more to each partition, the new ones included
    wait_for(lambda: numbered_copies(b, f"primary.{topic}") == numbered_copies(a, topic), COPY_SECONDS,
             "every partition copied, the new ones too")
    assert len(_ends(b, f"primary.{topic}")) == 4
    assert scenarios.services["replicator"].sample("strait_flow_topics", flow="primary->backup") >= 2


def test_an_empty_partition_beside_full_ones_translates_exactly(scenarios: Scenarios) -> None:
    """MM2's testReplicationWithEmptyPartition, stricter: the group's offsets are synced exactly where
    records were copied and nowhere else (no checkpoint where nothing was mirrored, as MM2), so a
    consumer failing over reads nothing again and starts the empty partition at its beginning."""
    a, b, topic, group = scenarios.primary, scenarios.backup, f"{P}-empty", f"{P}-g-empty"
    remote = f"primary.{topic}"
    half = RECORDS // 2
    wait_for(lambda: _has(b, remote, RECORDS), COPY_SECONDS, "the topic copied")
    assert _ends(b, remote) == _ends(a, topic) == {0: half, 1: half, 2: 0}
    wait_for(lambda: {p: o for p, o in group_offsets(b, group, remote, PARTITIONS).items() if p < 2} == {0: half, 1: half},
             60, "the group's offsets synced")
    assert group_offsets(b, group, remote, PARTITIONS) == {0: half, 1: half}, "nothing written for the empty one"
    assert _read_again(b, group, remote, 5) == 0, "a consumer failing over re-reads nothing"


def test_one_way_group_offset_sync_lands_exactly_at_the_remote_ends_plain_and_transactional(
    scenarios: Scenarios,
) -> None:
    """MM2's testOneWayReplicationWithAutoOffsetSync and its transactional variant: a group that read
    everything on the source is, on the target, exactly at the remote topics' ends (MM2 allows
    offset.lag.max behind), markers and aborted records included in the gaps."""
    a, b, group = scenarios.primary, scenarios.backup, f"{P}-g-sync"
    for topic in (f"{P}-plain", f"{P}-txn"):
        committed = sum(1 for _ in consume_all(a.client_config(), topic))
        remote = f"primary.{topic}"
        wait_for(lambda: _has(b, remote, committed), COPY_SECONDS, f"{topic} copied")
        ends = _ends(b, remote)
        assert sum(ends.values()) == committed
        wait_for(lambda: group_offsets(b, group, remote, PARTITIONS) == ends, 60, f"the group synced on {remote}")
        if topic.endswith("txn"):
            assert ends != _ends(a, topic), "the source's markers are gaps the translation crossed"
        assert _read_again(b, group, remote, 3) == 0, "nothing re-read on the target"


def test_translation_follows_a_group_deep_in_the_backlog_forward_and_back(
    scenarios: Scenarios, oracle: Mm2Oracle,
) -> None:
    """MM2's testOffsetTranslationBehindReplicationFlow: a group commits at 90 % of a long backlog, then
    rewinds to 10 %; MM2 asks the checkpoints to move forward then back, strait for exactly those offsets."""
    a, b, topic, group = scenarios.primary, scenarios.backup, f"{P}-behind", f"{P}-g-behind"
    per_partition = 10 * RECORDS // PARTITIONS
    wait_for(lambda: _has(b, f"primary.{topic}", 10 * RECORDS), COPY_SECONDS, "the backlog copied")
    for fraction in (0.9, 0.1):
        at = int(per_partition * fraction)
        commit_offsets(a, group, [TopicPartition(topic, p, at) for p in range(PARTITIONS)])
        wanted = {(f"primary.{topic}", p): at for p in range(PARTITIONS)}
        wait_for(lambda: _remote_offsets(oracle, b, "primary", group) == wanted, 60, f"checkpoints at {fraction:.0%}")


def test_no_checkpoint_for_a_topic_nothing_was_mirrored_from_until_it_is(
    scenarios: Scenarios, oracle: Mm2Oracle,
) -> None:
    """MM2's testNoCheckpointsIfNoRecordsAreMirrored: a group committed on a copied topic and on an
    empty one has a checkpoint for the first only; once records are copied, for both (exact)."""
    a, b, group = scenarios.primary, scenarios.backup, f"{P}-g-nc"
    full, empty = f"primary.{P}-nc-full", f"primary.{P}-nc-empty"
    wait_for(lambda: _has(b, full, 30) and empty in _topics(b), COPY_SECONDS, "both topics on the target")
    wait_for(lambda: _remote_offsets(oracle, b, "primary", group).get((full, 0)) == 30, 60, "the copied topic's checkpoint")
    time.sleep(3)  # three more checkpoint rounds: none may name the empty topic
    assert (empty, 0) not in _remote_offsets(oracle, b, "primary", group)

    produce_numbered(a, f"{P}-nc-empty", 1, 20)
    commit_offsets(a, group, [TopicPartition(f"{P}-nc-empty", 0, 20)])
    wait_for(lambda: _remote_offsets(oracle, b, "primary", group) == {(full, 0): 30, (empty, 0): 20}, 60,
             "a checkpoint for the topic once its records are copied")


def test_a_restart_mid_stream_copies_every_record_once_and_checkpoints_never_go_back(
    scenarios: Scenarios,
) -> None:
    """MM2's testRestartReplication, with records produced while the flow restarts: exact counts on the
    target, group offsets synced exactly before and after, checkpoints never backwards."""
    a, b, topic, group = scenarios.primary, scenarios.backup, f"{P}-restart", f"{P}-g-restart"
    remote = f"primary.{topic}"
    per_partition = RECORDS // PARTITIONS
    wait_for(lambda: group_offsets(b, group, remote, PARTITIONS) == dict.fromkeys(range(PARTITIONS), per_partition),
             COPY_SECONDS, "the group synced before the restart")
    load = NumberedLoad(a, topic, PARTITIONS, rate=200, first=RECORDS)
    try:
        time.sleep(2)
        strait("flow", "restart", "primary->backup", "--redis-url", scenarios.redis.url, "--wait", "120", check=True,
               timeout=180, show=True)
        time.sleep(2)
    finally:
        produced = RECORDS + load.stop()
    wait_for(lambda: count(b, remote) >= produced, COPY_SECONDS, "every record copied after the restart")
    assert numbered_copies(b, remote) == numbered_copies(a, topic), "each record copied once, in order"
    ends = _ends(a, topic)
    commit_offsets(a, group, [TopicPartition(topic, p, end) for p, end in ends.items()])
    wait_for(lambda: group_offsets(b, group, remote, PARTITIONS) == ends, 60, "the group synced after the restart")
    _assert_monotonic(_checkpoints(b, "primary", group))


def test_synced_topic_configs_keep_the_excluded_ones_set_on_the_target(scenarios: Scenarios) -> None:
    """MM2's testSyncTopicConfigs: with ``config.properties.exclude = delete\\.retention\\..*``, a value set
    on the remote topic for an excluded config stays, one for a synced config goes back to the source's."""
    a, b, topic = scenarios.primary, scenarios.backup, f"{P}-cfg"
    remote = f"primary.{topic}"
    wait_for(lambda: remote in _topics(b) and _config(b, remote, "retention.bytes") == "1000", 60, "the remote topic")
    alter(b, remote, {"delete.retention.ms": "2000", "retention.bytes": "2000"})
    wait_for(lambda: _config(b, remote, "retention.bytes") == "1000", 30, "retention.bytes back to the source's")
    assert _config(a, topic, "delete.retention.ms") == "1000"
    assert _config(b, remote, "delete.retention.ms") == "2000", "the excluded config keeps the target's value"


def test_the_target_default_returns_when_the_source_drops_its_value(scenarios: Scenarios) -> None:
    """MM2's testReplicateTargetDefault (``use.defaults.from = target``, the default)."""
    a, b, topic = scenarios.primary, scenarios.backup, f"{P}-tdef"
    remote = f"primary.{topic}"
    wait_for(lambda: remote in _topics(b) and _config(b, remote, "retention.bytes") == "1000", 60, "the synced value")
    alter(a, topic, delete=["retention.bytes"])
    wait_for(lambda: _config(b, remote, "retention.bytes") == "-1", 30, "the target's default back")


def test_the_source_default_is_synced_with_use_defaults_from_source(scenarios: Scenarios) -> None:
    """MM2's testReplicateSourceDefault, on ``backup->primary`` (``use.defaults.from = source``): a value
    set on the remote topic goes back to the source's default; an excluded config keeps the target's."""
    a, b, topic = scenarios.primary, scenarios.backup, f"{P}-sdef"
    remote = f"backup.{topic}"
    wait_for(lambda: remote in _topics(a), 60, "the remote topic")
    alter(a, remote, {"delete.retention.ms": "2000", "retention.bytes": "2000"})
    wait_for(lambda: _config(a, remote, "retention.bytes") == _config(b, topic, "retention.bytes") == "-1", 30,
             "retention.bytes back to the source's default")
    assert _config(a, remote, "delete.retention.ms") == "2000", "the excluded config keeps the target's value"


def test_replicate_from_latest_with_the_flow_spelling_identity_policy_and_syncs_on_the_target(
    scenarios: Scenarios, oracle: Mm2Oracle,
) -> None:
    """MM2's testReplicateFromLatest with ``west->east.consumer.auto.offset.reset = latest``, on a flow
    with the identity policy (IdentityReplicationIntegrationTest) and ``offset-syncs.topic.location =
    target`` (testOffsetSyncsTopicsOnTarget): only the records produced after the flow started are
    copied, under the source's topic names; the offset syncs are on the target only; a group's
    checkpoint is exact although the remote offsets start at 0 where the source's start at 30."""
    a, b = scenarios.primary, scenarios.backup
    topic, sentinel, group = f"{W}-latest", f"{W}-sentinel", f"{W}-g"
    scenarios.apply(west_east=True)

    def sentinel_copied() -> bool:  # proof that the flow runs and has passed the topics' ends
        produce(a.client_config(), sentinel, [Record(b"s", b"sentinel")])
        return _has(b, sentinel, 1)
    wait_for(sentinel_copied, 180, "the west->east flow copying", interval=2)
    after = [Record(f"k{i}".encode(), f"after-{i}".encode(), partition=i % PARTITIONS) for i in range(90)]
    produce(a.client_config(), topic, after)
    wait_for(lambda: _has(b, topic, 90), COPY_SECONDS, "the records produced after the start")
    time.sleep(2)  # anything older would have arrived with them
    assert sorted(r.value for r in consume_all(b.client_config(), topic)) == sorted(r.value for r in after)
    assert f"west.{topic}" not in _topics(b), "the identity policy keeps the source's name"

    assert "mm2-offset-syncs.west.internal" in _topics(b)
    assert "mm2-offset-syncs.east.internal" not in _topics(a)
    ends = _ends(a, topic)
    commit_offsets(a, group, [TopicPartition(topic, p, end) for p, end in ends.items()])
    remote_ends = _ends(b, topic)
    assert remote_ends == {p: end - 30 for p, end in ends.items()}
    wait_for(lambda: _remote_offsets(oracle, b, "west", group) == {(topic, p): end for p, end in remote_ends.items()},
             60, "the group's checkpoints on the target")
