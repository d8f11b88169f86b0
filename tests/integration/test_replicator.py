"""The PySpark replicator on real clusters: fidelity, syncs, discovery, bad input, metrics."""

from __future__ import annotations

import json
import os
import random
import re
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

from strait.config import load_config
from strait.config.store import apply_config
from strait_lab import class_archive
from strait_lab.clients import Record, consume_all, create_topic, produce
from strait_lab.kafka import KafkaCluster
from strait_lab.ports import free_port
from strait_lab.redis import RedisServer
from strait_lab.services import StraitProcess
from strait.offsets import PartitionTranslator, SyncPoint
from strait.records import OffsetSync
from strait_replicator.session import PLANNER_MODULES, available_cores
from tests.integration.compat_support import FULL as COMPAT_FULL
from tests.integration.replicator_support import driver_jvm_pids
from tests.support.cli import strait
from tests.support.config import flow_config, write_config
from tests.support.kafka import count, records_by_partition
from tests.support.waiting import wait_for

pytestmark = pytest.mark.slow

KEEP_FOREVER = {"retention.ms": "-1"}  # retention acts on record timestamps; tests use old ones
BIG = 1024 * 1024


def _mixed_records(n: int, partitions: int) -> list[Record]:
    rng = random.Random(7)
    records = []
    for i in range(n):
        shape = i % 10
        key = None if shape == 0 else f"key-{i}".encode()
        value = b"" if shape == 1 else None if shape == 2 else rng.randbytes(rng.randrange(1, 400))
        if i % 2500 == 3:
            value = rng.randbytes(BIG)  # 1 MiB values
        headers = tuple((f"h{j}", None if j == 3 else rng.randbytes(j * 3)) for j in range(20)) if shape == 4 else \
            (("trace", f"{i}".encode()),)
        timestamp = 1_000_000_000_000 + i * 37 if shape in (5, 6) else 1_700_000_000_000 + i
        records.append(Record(key, value, headers, timestamp, i % partitions))
    return records


def test_fidelity_of_mixed_records_byte_for_byte(
    source_cluster: KafkaCluster, target_cluster: KafkaCluster, replicator: Callable[..., StraitProcess],
    unique_name: Callable[[str], str], tmp_path: Path,
) -> None:
    topic = unique_name("fidelity")
    create_topic(source_cluster.admin(), topic, partitions=6, config={**KEEP_FOREVER, "max.message.bytes": str(2 * BIG)})
    sent = _mixed_records(50_000, 6)
    produce({**source_cluster.client_config(), "message.max.bytes": str(4 * BIG)}, topic, sent)
    config = write_config(tmp_path / "strait.yaml", flow_config(source_cluster, target_cluster, [topic]))

    process = replicator("--config", str(config))
    remote = f"A.{topic}"
    wait_for(lambda: count(target_cluster, remote) >= 50_000, 240, f"50,000 records on {remote}")

    source_records, target_records = records_by_partition(source_cluster, topic), records_by_partition(target_cluster, remote)
    assert sorted(target_records) == list(range(6))
    for partition in range(6):
        expected = [(r.key, r.value, r.headers, r.timestamp_ms) for r in source_records[partition]]
        got = [(r.key, r.value, r.headers, r.timestamp_ms) for r in target_records[partition]]
        assert got == expected, f"partition {partition} differs"
    # Counted when the epoch that copied them ends.
    wait_for(lambda: process.sample("strait_replicated_records_total", flow="A->B", topic=topic) == 50_000, 60,
             "the records counted")
    _check_offset_syncs_translate_exactly(source_cluster, topic, source_records, target_records)
    # The driver copied while Spark started the query, then handed the partitions to the first tasks:
    # the exact copies above span that hand-off.
    wait_for(lambda: "head start copier=" in process.log_text() and " ended reason=" in process.log_text(), 60,
             "the head start handed over")
    text = process.log_text()
    assert text.index("head start copier=") < text.index("query started"), "the head start began after the query"
    # one head start copier per core of this host, each handing its partitions to the query's tasks
    copiers = set(re.findall(r"head start copier=(\S+) copies partitions=", text))
    assert len(copiers) == min(available_cores(), 6), f"head start copiers {copiers}"
    wait_for(lambda: all(f"head start copier={c} ended reason=yield" in process.log_text() for c in copiers), 60,
             "every head start copier handing its partitions to the query's tasks")


def _check_offset_syncs_translate_exactly(source: KafkaCluster, topic: str, source_records: dict, target_records: dict) -> None:
    translators: dict[int, PartitionTranslator] = {}
    for record in consume_all(source.client_config(), "mm2-offset-syncs.B.internal"):
        sync = OffsetSync.from_record(record.key, record.value)
        if sync.topic == topic:
            translators.setdefault(sync.partition, PartitionTranslator()).add(
                SyncPoint(sync.upstream_offset, sync.downstream_offset))
    for partition, records in source_records.items():
        target = {r.offset: r for r in target_records[partition]}
        for record in records[:: max(1, len(records) // 50)]:
            position = translators[partition].translate(record.offset)
            assert target[position].value == record.value and target[position].key == record.key
        assert translators[partition].translate(records[-1].offset + 1) == target_records[partition][-1].offset + 1


def test_remote_topic_with_fewer_partitions_is_grown(
    source_cluster: KafkaCluster, target_cluster: KafkaCluster, replicator: Callable[..., StraitProcess],
    unique_name: Callable[[str], str], tmp_path: Path,
) -> None:
    topic = unique_name("grow")
    create_topic(source_cluster.admin(), topic, partitions=4, config=KEEP_FOREVER)
    create_topic(target_cluster.admin(), f"A.{topic}", partitions=1, config=KEEP_FOREVER)
    produce(source_cluster.client_config(), topic, [Record(b"k", str(i).encode(), partition=i % 4) for i in range(40)])
    replicator("--config", str(write_config(tmp_path / "s.yaml", flow_config(source_cluster, target_cluster, [topic]))))
    wait_for(lambda: count(target_cluster, f"A.{topic}") == 40, 120, "all records in the grown topic")
    target = records_by_partition(target_cluster, f"A.{topic}")
    assert {p: len(r) for p, r in target.items()} == {0: 10, 1: 10, 2: 10, 3: 10}


def test_record_too_large_for_the_target_stops_the_flow_and_loses_nothing(
    source_cluster: KafkaCluster, target_cluster: KafkaCluster, replicator: Callable[..., StraitProcess],
    unique_name: Callable[[str], str], tmp_path: Path,
) -> None:
    topic = unique_name("large")
    remote = f"A.{topic}"
    create_topic(source_cluster.admin(), topic, partitions=1, config=KEEP_FOREVER)
    create_topic(target_cluster.admin(), remote, partitions=1, config={**KEEP_FOREVER, "max.message.bytes": "2000"})
    records = [Record(b"k", b"small-1"), Record(b"k", os.urandom(50_000)), Record(b"k", b"small-2")]
    produce(source_cluster.client_config(), topic, records)
    process = replicator("--config", str(write_config(tmp_path / "s.yaml", flow_config(source_cluster, target_cluster, [topic]))))

    wait_for(lambda: (process.sample("strait_errors_total", flow="A->B", kind="query") or 0) >= 1, 120, "an error metric")
    assert process.sample("strait_flow_state", flow="A->B", state="error") == 1
    log_text = process.process.log_path.read_text()
    assert f"topic {remote} partition 0 on cluster B failed" in log_text and "MSG_SIZE_TOO_LARGE" in log_text
    big = records[1].value
    assert big not in [r.value for r in consume_all(target_cluster.client_config(), remote)]

    resource = ConfigResource(ResourceType.TOPIC, remote, incremental_configs=[
        ConfigEntry("max.message.bytes", "1000000", incremental_operation=AlterConfigOpType.SET)])
    admin = target_cluster.admin()
    admin.incremental_alter_configs([resource])[resource].result(30)
    wait_for(lambda: count(target_cluster, remote) >= 3, 180, "the flow to recover after the target was fixed")
    values = [r.value for r in consume_all(target_cluster.client_config(), remote)]
    assert values[-3:] == [r.value for r in records] or values == [r.value for r in records]
    wait_for(lambda: process.sample("strait_flow_state", flow="A->B", state="running") == 1, 60, "running state")


def _planner_daemons(process: StraitProcess) -> list[str]:
    """Spark's Python planner daemons and their workers under the replicator's process."""
    found = []
    for child in psutil.Process(process.process.pid).children(recursive=True):
        try:
            command = " ".join(child.cmdline())
        except psutil.Error:  # ended meanwhile
            continue
        if any(module in command for module in PLANNER_MODULES):
            found.append(command)
    return found


def _driver_jvm_maps(process: StraitProcess) -> str:
    """The memory map of the replicator's Spark driver JVM (its java child)."""
    for pid in driver_jvm_pids(process):
        with open(f"/proc/{pid}/maps", encoding="utf-8") as maps:
            return maps.read()
    raise AssertionError("the replicator has no java child process")


def _planners_ended(process: StraitProcess) -> int:
    return process.log_text().count("ended Spark's idle planner daemons")


def test_live_control_from_redis_without_restart(
    source_cluster: KafkaCluster, target_cluster: KafkaCluster, replicator: Callable[..., StraitProcess],
    unique_name: Callable[[str], str], tmp_path: Path, redis_url: str, redis_server: RedisServer,
) -> None:
    prefix = unique_name("live")
    first, second = f"{prefix}-one", f"{prefix}-two"
    for topic in (first, second):
        create_topic(source_cluster.admin(), topic, partitions=2, config=KEEP_FOREVER)
    client = redis_server.client()

    def apply(**flow: object) -> None:
        config = flow_config(source_cluster, target_cluster, flow.pop("include", [first]), **flow)  # type: ignore[arg-type]
        apply_config(client, load_config(write_config(tmp_path / "live.yaml", config)), "live.yaml")

    apply()
    process = replicator("--redis-url", redis_url)
    pid = process.process.pid
    produce(source_cluster.client_config(), first, [Record(b"k", b"1", partition=0)])
    wait_for(lambda: count(target_cluster, f"A.{first}") == 1, 120, "replication while enabled")
    archive = class_archive.archive_path(class_archive.SPARK)
    assert archive.exists(), f"`make deps` recorded no Spark class archive at {archive}"
    assert str(archive) in _driver_jvm_maps(process), f"the Spark driver did not map {archive}"
    # Once the query runs its first epoch, Spark's planner daemons are ended (a restart starts them again).
    wait_for(lambda: _planners_ended(process) >= 1, 120, "Spark's idle planner daemons ended")
    wait_for(lambda: _planner_daemons(process) == [], 30, "the planner daemons gone")  # they exit within moments

    apply(enabled=False)
    wait_for(lambda: process.sample("strait_flow_state", flow="A->B", state="disabled") == 1, 60, "disabled")
    produce(source_cluster.client_config(), first, [Record(b"k", b"2", partition=1)])
    time.sleep(5)
    assert count(target_cluster, f"A.{first}") == 1  # a disabled flow copies nothing

    apply(include=[first, second])  # enabled again, with a wider topic filter
    produce(source_cluster.client_config(), second, [Record(b"k", b"3", partition=0)])
    wait_for(lambda: count(target_cluster, f"A.{first}") == 2, 120, "the record produced while disabled")
    wait_for(lambda: count(target_cluster, f"A.{second}") == 1, 120, "the topic added by the new filter")

    apply(include=[first, second], rate_limit_records_per_second=200)
    wait_for(lambda: process.sample("strait_flow_state", flow="A->B", state="running") == 1, 60, "running")
    # The query restarts with the limit (until then the one before, and its head start, copy unlimited)
    wait_for(lambda: "records_per_second=200.0" in process.log_text(), 60,
             "the query restarted with the limit")
    produce(source_cluster.client_config(), second, [Record(b"k", b"r", partition=i % 2) for i in range(3000)])
    time.sleep(5)
    assert count(target_cluster, f"A.{second}") < 1 + 2000  # 200 records/s cannot copy 3,000 in 5 s
    wait_for(lambda: count(target_cluster, f"A.{second}") == 3001, 120, "the rest at the limited rate")
    assert process.process.pid == pid and process.process.alive()  # one process throughout
    wait_for(lambda: _planners_ended(process) >= 2, 60, "the planner daemons ended again after the restarts")
    wait_for(lambda: _planner_daemons(process) == [], 60, "no planner daemon left")

    # Ctrl-C in a terminal stops the whole process group: Spark's JVM goes with the replicator, which
    # still ends as a stop (py4j logs the calls the JVM left unanswered)
    logged = len(process.log_text())
    process.process.terminate(group=True)
    wait_for(lambda: not process.process.alive(), 60, "the replicator's exit")
    assert process.process.returncode() == 0, process.log_text()[logged:]

    # Each query start published where its topics resumed and on what evidence, for `strait status`.
    status = strait("status", "--redis-url", redis_url, "--json", timeout=60)
    resumed = json.loads(status.stdout)["flows"][0]["resumed"]["topics"]
    assert resumed[first] == {"evidence": "strait-progress", "duplicates_at_most": 0}
    assert resumed[second]["evidence"] in ("strait-progress", "empty-remote")


def test_unreachable_target_is_an_error_of_that_flow_only(
    source_cluster: KafkaCluster, target_cluster: KafkaCluster, replicator: Callable[..., StraitProcess],
    unique_name: Callable[[str], str], tmp_path: Path,
) -> None:
    topic = unique_name("reach")
    create_topic(source_cluster.admin(), topic, partitions=1, config=KEEP_FOREVER)
    produce(source_cluster.client_config(), topic, [Record(b"k", b"v")])
    config = flow_config(source_cluster, target_cluster, [topic])
    config["clusters"]["C"] = {"bootstrap_servers": f"127.0.0.1:{free_port()}", "admin": {"request.timeout.ms": "3000"}}
    config["flows"].append({**config["flows"][0], "target": "C"})
    process = replicator("--config", str(write_config(tmp_path / "s.yaml", config)))

    wait_for(lambda: count(target_cluster, f"A.{topic}") == 1, 120, "the healthy flow")
    wait_for(lambda: (process.sample("strait_errors_total", flow="A->C", kind="discovery") or 0) >= 1, 120,
             "a discovery error of the broken flow")
    assert process.sample("strait_flow_state", flow="A->C", state="error") == 1
    assert process.sample("strait_flow_state", flow="A->B", state="running") == 1
    assert "cluster C" in process.process.log_path.read_text()


def test_metrics_cover_throughput_latency_lag_and_state(
    source_cluster: KafkaCluster, target_cluster: KafkaCluster, replicator: Callable[..., StraitProcess],
    unique_name: Callable[[str], str], tmp_path: Path,
) -> None:
    topic = unique_name("metrics")
    create_topic(source_cluster.admin(), topic, partitions=2, config=KEEP_FOREVER)
    produce(source_cluster.client_config(), topic, [Record(b"k", b"x" * 100, partition=i % 2) for i in range(1000)])
    process = replicator("--config", str(write_config(tmp_path / "s.yaml", flow_config(source_cluster, target_cluster, [topic]))),
                         "--epoch-seconds", "15")
    wait_for(lambda: process.sample("strait_replicated_records_total", flow="A->B", topic=topic) == 1000, 120, "counts")
    # Counted from the tasks' live reports, before the epoch that copied the records has ended.
    assert not process.sample("strait_replicator_batch_duration_seconds_count", flow="A->B")
    assert process.sample("strait_replicated_bytes_total", flow="A->B", topic=topic) == 1000 * 101
    assert process.sample("strait_replication_latency_seconds_count", flow="A->B", topic=topic) == 1000
    assert process.sample("strait_replication_latency_seconds_bucket", flow="A->B", topic=topic, le="+Inf") == 1000
    wait_for(lambda: process.sample("strait_source_lag_records", flow="A->B", topic=topic, partition="0") == 0, 60, "lag")
    wait_for(lambda: (process.sample("strait_replicator_batch_duration_seconds_count", flow="A->B") or 0) >= 1, 60,
             "the first epoch to end")
    assert process.sample("strait_offset_syncs_total", flow="A->B") >= 4  # both ends of each partition
    assert process.sample("strait_flow_state", flow="A->B", state="running") == 1
    assert process.sample("strait_service_up", service="replicator") == 1


def test_deleted_source_topic_stops_only_that_topic(
    source_cluster: KafkaCluster, target_cluster: KafkaCluster, replicator: Callable[..., StraitProcess],
    unique_name: Callable[[str], str], tmp_path: Path,
) -> None:
    prefix = unique_name("del")
    kept, deleted = f"{prefix}-kept", f"{prefix}-gone"
    for topic in (kept, deleted):
        create_topic(source_cluster.admin(), topic, partitions=2, config=KEEP_FOREVER)
        produce(source_cluster.client_config(), topic, [Record(b"k", b"before", partition=p) for p in (0, 1)])
    process = replicator("--config", str(write_config(tmp_path / "s.yaml", flow_config(
        source_cluster, target_cluster, [f"{prefix}-.*"]))))
    wait_for(lambda: count(target_cluster, f"A.{kept}") == 2 and count(target_cluster, f"A.{deleted}") == 2, 120,
             "both topics replicated")

    planned = process.sample("strait_flow_topics", flow="A->B")  # may include the session's heartbeats
    admin = source_cluster.admin()
    admin.delete_topics([deleted], operation_timeout=30)[deleted].result(30)
    time.sleep(2)
    produce(source_cluster.client_config(), kept, [Record(b"k", b"after", partition=p) for p in (0, 1)])
    wait_for(lambda: count(target_cluster, f"A.{kept}") == 4, 120, "the remaining topic to keep replicating")
    wait_for(lambda: process.sample("strait_flow_topics", flow="A->B") == planned - 1, 60,
             "the deleted topic dropped from the plan")
    assert count(target_cluster, f"A.{deleted}") == 2  # the remote copy is kept, never deleted
    log_text = process.process.log_path.read_text()
    assert f"topics no longer on A: {deleted}" in log_text


def test_offset_syncs_on_the_target_when_configured(
    source_cluster: KafkaCluster, target_cluster: KafkaCluster, replicator: Callable[..., StraitProcess],
    unique_name: Callable[[str], str], tmp_path: Path,
) -> None:
    topic = unique_name("synctarget")
    create_topic(source_cluster.admin(), topic, partitions=1, config=KEEP_FOREVER)
    produce(source_cluster.client_config(), topic, [Record(b"k", str(i).encode()) for i in range(10)])
    config = flow_config(source_cluster, target_cluster, [topic], offset_syncs_topic_location="target")
    replicator("--config", str(write_config(tmp_path / "s.yaml", config)))
    wait_for(lambda: count(target_cluster, f"A.{topic}") == 10, 120, "records")

    def syncs() -> list[OffsetSync]:
        records = consume_all(target_cluster.client_config(), "mm2-offset-syncs.A.internal")
        return [s for s in (OffsetSync.from_record(r.key, r.value) for r in records) if s.topic == topic]

    found = wait_for(syncs, 60, "offset syncs in mm2-offset-syncs.A.internal on the target")
    assert [(s.partition, s.upstream_offset, s.downstream_offset) for s in found] == [(0, 0, 0), (0, 9, 9)]


@pytest.mark.compat
def test_two_way_flows_with_aliases_containing_the_separator_never_loop(
    source_cluster: KafkaCluster, target_cluster: KafkaCluster, replicator: Callable[..., StraitProcess],
    unique_name: Callable[[str], str], tmp_path: Path,
) -> None:
    """The AMQ guide's two-way example: aliases cluster-1 and cluster-2, separator '-'.

    MM2's name-only cycle check reads cluster-1-orders as coming from cluster "cluster" and copies it
    back, then again with one more prefix, forever (without the fix, 12 prefixes within 10 s). Both
    flows here match every topic with the test's prefix, remote copies included: only the cycle check
    keeps them from looping. Records keep coming on both sides while the flows run, 2 minutes with
    `make test-compat`, 10 s in make test.
    """
    prefix = unique_name("twoway")
    one, two = f"{prefix}-on-one", f"{prefix}-on-two"
    create_topic(source_cluster.admin(), one, partitions=1, config=KEEP_FOREVER)
    create_topic(target_cluster.admin(), two, partitions=1, config=KEEP_FOREVER)
    flow = {"topics": {"include": [f".*{prefix}.*"]}, "separator": "-", "replication_factor": 1,
            "refresh_topics": {"enabled": True, "interval_seconds": 2}}
    config = {"clusters": {"cluster-1": {"bootstrap_servers": source_cluster.bootstrap_servers},
                           "cluster-2": {"bootstrap_servers": target_cluster.bootstrap_servers}},
              "flows": [{"source": "cluster-1", "target": "cluster-2", **flow},
                        {"source": "cluster-2", "target": "cluster-1", **flow}]}
    produce(source_cluster.client_config(), one, [Record(b"k", b"from cluster-1")])
    produce(target_cluster.client_config(), two, [Record(b"k", b"from cluster-2")])
    replicator("--config", str(write_config(tmp_path / "two-way.yaml", config)))

    wait_for(lambda: count(target_cluster, f"cluster-1-{one}") == 1, 180, "cluster-1's topic copied to cluster-2")
    wait_for(lambda: count(source_cluster, f"cluster-2-{two}") == 1, 180, "cluster-2's topic copied to cluster-1")
    sent, ends = 1, time.monotonic() + (120 if COMPAT_FULL else 10)  # 10 s: five topic refreshes of both flows
    while time.monotonic() < ends:
        produce(source_cluster.client_config(), one, [Record(b"k", f"from cluster-1 {sent}".encode())])
        produce(target_cluster.client_config(), two, [Record(b"k", f"from cluster-2 {sent}".encode())])
        sent += 1
        looped = [t for cluster in (source_cluster, target_cluster)
                  for t in cluster.admin().list_topics(timeout=30).topics if prefix in t and t.count("cluster-") > 1]
        assert not looped, f"topics copied back and forth: {looped}"
        time.sleep(1)
    for cluster, remote, origin in ((target_cluster, f"cluster-1-{one}", "cluster-1"),
                                    (source_cluster, f"cluster-2-{two}", "cluster-2")):
        wait_for(lambda: count(cluster, remote) >= sent, 60, f"{origin}'s records copied to {remote}")  # noqa: B023
        expected = {f"from {origin}".encode()} | {f"from {origin} {i}".encode() for i in range(1, sent)}
        assert {r.value for r in consume_all(cluster.client_config(), remote)} == expected  # each, at least once


def test_one_cluster_under_two_aliases_is_refused_when_the_flow_starts(
    source_cluster: KafkaCluster, replicator: Callable[..., StraitProcess], unique_name: Callable[[str], str],
    tmp_path: Path,
) -> None:
    """Two spellings of one cluster's address pass the file check; the cluster ids at start do not."""
    topic = unique_name("self")
    create_topic(source_cluster.admin(), topic, partitions=1, config=KEEP_FOREVER)
    produce(source_cluster.client_config(), topic, [Record(b"k", b"v")])
    other_spelling = source_cluster.bootstrap_servers.replace("127.0.0.1", "localhost")
    config = {"clusters": {"east": {"bootstrap_servers": source_cluster.bootstrap_servers},
                           "west": {"bootstrap_servers": other_spelling}},
              "flows": [{"source": "east", "target": "west", "topics": {"include": [topic]}, "replication_factor": 1}]}
    process = replicator("--config", str(write_config(tmp_path / "self.yaml", config)))
    wait_for(lambda: process.sample("strait_flow_state", flow="east->west", state="error") == 1, 120, "the flow in error")
    assert "clusters 'east' and 'west' are the same Kafka cluster" in process.process.log_path.read_text()
    assert f"east.{topic}" not in source_cluster.admin().list_topics(timeout=30).topics, "nothing may be copied"
