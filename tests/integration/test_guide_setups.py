"""Guide setups that must run, not only load, in one MM2 properties file and one replicator:

* MM1's advantage, kept: two regional clusters aggregated into one central topic with its own
  partition count, records placed by key, per-key order kept, `strait verify` checking it per key;
* the AMQ Streams guide's legacy mode: identity names, and its toggles honoured (no offset syncs,
  topics discovered once at start).
"""

from __future__ import annotations

import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka.admin import NewPartitions

from strait_lab.clients import Record, consume_all, create_topic, produce
from strait_lab.kafka import KafkaCluster
from strait_lab.services import StraitProcess
from strait.records import OffsetSync
from strait.verify_keys import key_partition
from tests.support.cli import strait
from tests.support.kafka import count, records_by_partition
from tests.support.waiting import wait_for

pytestmark = pytest.mark.slow

KEYS = 12
PER_KEY = 15
KEYLESS = 10
CENTRAL_PARTITIONS = 3
LEGACY_RECORDS = 50
KEEP = {"retention.ms": "-1"}


@dataclass(frozen=True)
class GuideLab:
    """Clusters A and B (regions, and the legacy flow's ends), C (the aggregate), the running replicator."""

    source: KafkaCluster
    target: KafkaCluster
    central: KafkaCluster
    config: Path
    aggregated: str  # the topic both regions have (the flows take every topic starting with its name)
    legacy_prefix: str  # topics of the legacy-mode flow A->B
    dry_run: subprocess.CompletedProcess[str]
    replicator: StraitProcess


def _regional_records(alias: str, partitions: int) -> list[Record]:
    """Keyed records placed on the source by key (as producers do), values naming region, key and rank."""
    records = [Record(f"key-{k}".encode(), f"{alias}/key-{k}/{n:03d}".encode(), partition=k % partitions)
               for n in range(PER_KEY) for k in range(KEYS)]
    records += [Record(None, f"{alias}/none/{n:03d}".encode(), partition=n % partitions) for n in range(KEYLESS)]
    return records


def _properties(source: KafkaCluster, target: KafkaCluster, central: KafkaCluster, aggregated: str,
                legacy_prefix: str) -> str:
    """The whole setup as an MM2 file: the aggregation flows and the AMQ guide's legacy-mode flow."""
    return f"""clusters = A, B, C
A.bootstrap.servers = {source.bootstrap_servers}
B.bootstrap.servers = {target.bootstrap_servers}
C.bootstrap.servers = {central.bootstrap_servers}
replication.factor = 1
refresh.topics.interval.seconds = 3
A->C.enabled = true
B->C.enabled = true
A->C.topics = {aggregated}.*
B->C.topics = {aggregated}.*
A->C.replication.policy.class = org.apache.kafka.connect.mirror.IdentityReplicationPolicy
B->C.replication.policy.class = org.apache.kafka.connect.mirror.IdentityReplicationPolicy
A->C.strait.target.partitions = {CENTRAL_PARTITIONS}
B->C.strait.target.partitions = {CENTRAL_PARTITIONS}
A->C.heartbeats.replication.enabled = false
B->C.heartbeats.replication.enabled = false
A->B.enabled = true
A->B.topics = {legacy_prefix}.*
A->B.replication.policy.class = org.apache.kafka.mirror.LegacyReplicationPolicy
A->B.refresh.topics.enabled = false
A->B.refresh.groups.enabled = false
A->B.emit.checkpoints.enabled = false
A->B.emit.heartbeats.enabled = false
A->B.sync.topic.configs.enabled = false
A->B.sync.group.offsets.enabled = false
A->B.emit.offset-syncs.enabled = false
"""


@pytest.fixture(scope="module")
def guide_lab(source_cluster: KafkaCluster, target_cluster: KafkaCluster,
              kafka_cluster_factory: Callable[..., KafkaCluster], lab_root: Path,
              tmp_path_factory: pytest.TempPathFactory) -> Iterator[GuideLab]:
    """A third cluster, the topics with their records, the file checked with --dry-run, one replicator."""
    central = kafka_cluster_factory("C")
    run = uuid.uuid4().hex[:6]
    aggregated, legacy_prefix = f"agg-{run}", f"legacy-{run}"
    for alias, cluster, partitions in (("A", source_cluster, 2), ("B", target_cluster, 4)):
        create_topic(cluster.admin(), aggregated, partitions=partitions, config=KEEP)
        produce(cluster.client_config(), aggregated, _regional_records(alias, partitions))
    create_topic(source_cluster.admin(), f"{legacy_prefix}-orders", partitions=2, config=KEEP)
    produce(source_cluster.client_config(), f"{legacy_prefix}-orders",
            [Record(b"k", f"order-{i}".encode(), partition=i % 2) for i in range(LEGACY_RECORDS)])
    folder = tmp_path_factory.mktemp("guides")
    config = folder / "guides.properties"
    config.write_text(_properties(source_cluster, target_cluster, central, aggregated, legacy_prefix))
    dry_run = strait("config", "apply", "--dry-run", str(config), timeout=180)
    process = StraitProcess("replicator", ["--config", str(config), "--state-dir", str(folder / "state")],
                            lab_root / "guides", name=f"replicator-guides-{run}")
    try:
        process.start(timeout=120)
        yield GuideLab(source_cluster, target_cluster, central, config, aggregated, legacy_prefix, dry_run,
                       process)
    finally:
        process.stop()
        central.kill()  # only this module uses it


def test_two_regions_aggregate_into_one_three_partition_topic_per_key(guide_lab: GuideLab) -> None:
    lab, topic = guide_lab, guide_lab.aggregated
    assert lab.dry_run.returncode == 0, lab.dry_run.stderr
    for name in ("A->C", "B->C"):  # the warning names the flow and its topics
        assert f"flow {name}: target_partitions 3" in lab.dry_run.stderr and topic in lab.dry_run.stderr
    total = 2 * (KEYS * PER_KEY + KEYLESS)
    wait_for(lambda: count(lab.central, topic) == total, 180, f"{total} records on C")

    by_partition = records_by_partition(lab.central, topic)
    assert len(lab.central.admin().list_topics(topic, timeout=30).topics[topic].partitions) == CENTRAL_PARTITIONS
    order: dict[tuple[str, bytes], list[str]] = {}
    for partition, records in by_partition.items():
        for record in records:
            region, _, rank = (record.value or b"").decode().split("/")
            if record.key is not None:  # placed where Kafka's default partitioner places the key
                assert partition == key_partition(record.key, CENTRAL_PARTITIONS), record
                order.setdefault((region, record.key), []).append(rank)
    assert len(order) == 2 * KEYS
    assert all(ranks == sorted(ranks) and len(ranks) == PER_KEY for ranks in order.values()), order
    keyless_partitions = {p for p, records in by_partition.items() for r in records if r.key is None}
    assert len(keyless_partitions) > 1, "keyless records must spread over the partitions"

    for name in ("A->C", "B->C"):
        verified = strait("verify", "--flow", name, "--topic", topic, "--config", str(lab.config),
                          timeout=180)
        assert verified.returncode == 0, verified.stdout + verified.stderr
        assert f"PARITY PER KEY: flow {name}, 1 topic(s), {KEYS * PER_KEY + KEYLESS} source record(s)" \
            in verified.stdout
    for cluster in (lab.source, lab.target):  # offsets do not map 1:1: no syncs
        assert "mm2-offset-syncs.C.internal" not in cluster.admin().list_topics(timeout=30).topics


def test_a_region_joining_the_aggregate_and_a_partition_added_later_are_copied(guide_lab: GuideLab) -> None:
    """The aggregated topic already holds one region's copies when another region's flow meets it, and
    a partition added to a region's topic has no progress: both start from their earliest offsets,
    explained by the other flow's progress and by the topic's other partitions."""
    lab = guide_lab
    late = f"{lab.aggregated}-late"
    per_region = KEYS * PER_KEY + KEYLESS
    create_topic(lab.source.admin(), late, partitions=2, config=KEEP)
    produce(lab.source.client_config(), late, _regional_records("A", 2))
    wait_for(lambda: count(lab.central, late) == per_region, 120, f"region A's {per_region} records on C")

    create_topic(lab.target.admin(), late, partitions=4, config=KEEP)
    produce(lab.target.client_config(), late, _regional_records("B", 4))
    wait_for(lambda: count(lab.central, late) == 2 * per_region, 120, "region B's records on C too")

    admin = lab.source.admin()  # must outlive its future
    admin.create_partitions([NewPartitions(late, 3)])[late].result(30)
    produce(lab.source.client_config(), late, [Record(b"key-added", b"A/key-added/000", partition=2)])
    wait_for(lambda: count(lab.central, late) == 2 * per_region + 1, 120, "the added partition's record on C")
    text = lab.replicator.log_text()
    for flow in ("A->C", "B->C"):
        assert f"flow={flow} topic={late} resumes evidence=shared-remote" in text, flow
    assert f"flow=B->C topic={late} remote={late} shared_with=A->C" in text
    assert "the target already holds records" not in text


def test_amq_legacy_mode_copies_with_identity_names_and_honours_its_toggles(guide_lab: GuideLab) -> None:
    lab = guide_lab
    orders, late = f"{lab.legacy_prefix}-orders", f"{lab.legacy_prefix}-late"
    wait_for(lambda: count(lab.target, orders) == LEGACY_RECORDS, 180, f"{orders} copied to B under its own name")
    assert {p: [r.value for r in rs] for p, rs in records_by_partition(lab.target, orders).items()} == \
        {p: [r.value for r in rs] for p, rs in records_by_partition(lab.source, orders).items()}

    create_topic(lab.source.admin(), late, partitions=1, config=KEEP)  # refresh.topics.enabled=false
    produce(lab.source.client_config(), late, [Record(b"k", b"late")])
    time.sleep(9)  # three refresh intervals of the other flows
    assert late not in lab.target.admin().list_topics(timeout=30).topics, "a topic created after start was copied"
    # Other tests' flows A->B share the syncs topic's name on A: no sync may name this flow's topic.
    syncs_topic = "mm2-offset-syncs.B.internal"
    if syncs_topic in lab.source.admin().list_topics(timeout=30).topics:
        syncs = [OffsetSync.from_record(r.key, r.value) for r in consume_all(lab.source.client_config(), syncs_topic)]
        assert not [s for s in syncs if s.topic.startswith(lab.legacy_prefix)], "offset syncs were written"
