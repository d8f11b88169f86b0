"""Never copy twice: a replicator whose state is lost goes on where the copies on the target end.

Issue 24's drills on real clusters: the replicator's state dir deleted under load (after a SIGTERM
and after a SIGKILL), and a remote topic that already holds records no evidence explains.
"""

from __future__ import annotations

import os
import shutil
import signal
import time
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path

import pytest
from strait_lab.clients import Record, create_topic, produce
from strait_lab.kafka import KafkaCluster
from strait_lab.services import StraitProcess
from tests.integration.replicator_support import driver_jvm_pids, resume_evidence
from tests.support.config import flow_config, write_config
from tests.support.kafka import NumberedLoad, count, numbered_copies, produce_numbered, records_by_partition
from tests.support.waiting import wait_for

pytestmark = pytest.mark.slow

PARTITIONS = 3
RATE = 1_000  # records/s, spread over the partitions


def test_a_sigterm_while_the_query_starts_writes_the_head_starts_final_progress(
    source_cluster: KafkaCluster, target_cluster: KafkaCluster, unique_name: Callable[[str], str],
    tmp_path: Path, lab_root: Path,
) -> None:
    """A SIGTERM that finds the control loop inside a call into Spark (a query start took over 9 s on a loaded
    host; here the driver JVM is frozen once the session is up): the head start's copiers still write their final
    progress before the process exits, so a start with the state dir gone copies nothing twice."""
    topic = unique_name("frozen")
    create_topic(source_cluster.admin(), topic, partitions=PARTITIONS, config={"retention.ms": "-1"})
    config = write_config(tmp_path / "s.yaml", flow_config(source_cluster, target_cluster, [topic]))
    state = tmp_path / "state"
    load = NumberedLoad(source_cluster, topic, PARTITIONS, RATE)
    runs: list[StraitProcess] = []
    frozen: list[int] = []
    try:
        first = StraitProcess("replicator", ["--config", str(config), "--state-dir", str(state)],
                              lab_root / "replicator", name=f"replicator-frozen-0-{topic}")
        runs.append(first)
        first.start(timeout=120)
        # polled often: the JVM is frozen before the control loop's next pass (up to 1 s) starts the query
        wait_for(lambda: "executors offer" in first.log_text(), 120, "the Spark session up", interval=0.05)
        frozen = driver_jvm_pids(first)
        assert frozen, "no Spark driver JVM found under the replicator"
        for pid in frozen:
            os.kill(pid, signal.SIGSTOP)  # the control loop's next call into Spark, the query's start, hangs
        before = count(target_cluster, f"A.{topic}")
        # about 3 s: the control loop (a pass a second) is in its call into the frozen JVM by then
        wait_for(lambda: count(target_cluster, f"A.{topic}") > before + 3 * RATE, 60, "the head start copying")
        assert "query started" not in first.log_text(), "the query started before the JVM was frozen"
        assert first.process.pid is not None
        os.kill(first.process.pid, signal.SIGTERM)  # to the main process only: the JVM stays frozen
        wait_for(lambda: not first.process.alive(), 30, "the replicator's exit after its stop grace")
        first.stop()  # what is left of its process group
        shutil.rmtree(state, ignore_errors=True)
        second = StraitProcess("replicator", ["--config", str(config), "--state-dir", str(state)],
                               lab_root / "replicator", name=f"replicator-frozen-1-{topic}")
        runs.append(second)
        second.start(timeout=120)
        wait_for(lambda: resume_evidence(second, topic), 120, "the second run's resume line")
        assert resume_evidence(second, topic)[0] == ("strait-progress", "0"), \
            "the head start wrote the progress of every record it copied before the process exited"
    finally:
        load.stop()
        for pid in frozen:
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        for process in runs:
            process.stop()


def test_a_replicator_whose_state_is_lost_goes_on_where_the_copies_end(
    source_cluster: KafkaCluster, target_cluster: KafkaCluster, unique_name: Callable[[str], str],
    tmp_path: Path, lab_root: Path,
) -> None:
    topic = unique_name("lost")
    remote = f"A.{topic}"
    create_topic(source_cluster.admin(), topic, partitions=PARTITIONS, config={"retention.ms": "-1"})
    config = write_config(tmp_path / "s.yaml", flow_config(source_cluster, target_cluster, [topic]))
    state = tmp_path / "state"
    load = NumberedLoad(source_cluster, topic, PARTITIONS, RATE)
    runs: list[StraitProcess] = []
    try:
        for run, ending in enumerate(("sigterm", "sigkill", "end")):
            process = StraitProcess("replicator", ["--config", str(config), "--state-dir", str(state)],
                                    lab_root / "replicator", name=f"replicator-lost-{run}-{topic}")
            runs.append(process)
            process.start(timeout=120)
            before = count(target_cluster, remote)
            wait_for(lambda: count(target_cluster, remote) > before + 3 * RATE, 120, f"run {run} copying")
            time.sleep(3)  # past the catch-up burst: copying as the records come
            if ending == "sigterm":
                process.stop()
            elif ending == "sigkill":
                process.kill()
            shutil.rmtree(state, ignore_errors=True)  # a replaced host: the state dir is gone
            print(f"run {run} ended by {ending}; state dir deleted")
        total = load.stop()
        wait_for(lambda: count(target_cluster, remote) >= total, 180, f"{remote} to catch up")
        time.sleep(2)
    finally:
        load.stop()
        for process in runs:
            process.stop()

    copies = numbered_copies(target_cluster, remote)
    duplicates = 0
    for partition in range(PARTITIONS):
        expected = len(range(partition, total, PARTITIONS))
        got = copies.get(partition, [])
        assert set(got) == set(range(expected)), f"partition {partition} lost records"
        duplicates += len(got) - len(set(got))
    restarted = [resume_evidence(process, topic) for process in runs[1:]]
    print(f"duplicates after a SIGTERM and a SIGKILL, each with the state dir deleted: {duplicates} of {total} "
          f"records; evidence and bounds: {restarted}")
    assert all(lines and lines[0][0] == "strait-progress" for lines in restarted), restarted
    after_sigterm, after_sigkill = (int(lines[0][1]) for lines in restarted)
    assert after_sigterm == 0, "a graceful stop writes the progress of every record it copied"
    assert duplicates <= after_sigkill, "the bound reported after the SIGKILL holds"
    assert duplicates <= 2 * RATE, "a crash costs about a second of records, never the whole topic"


def test_a_remote_topic_with_records_no_evidence_explains_waits_for_the_users_choice(
    source_cluster: KafkaCluster, target_cluster: KafkaCluster, unique_name: Callable[[str], str],
    tmp_path: Path, lab_root: Path,
) -> None:
    topic = unique_name("unexplained")
    remote = f"A.{topic}"
    create_topic(source_cluster.admin(), topic, partitions=PARTITIONS)
    create_topic(target_cluster.admin(), remote, partitions=PARTITIONS)
    produce_numbered(source_cluster, topic, PARTITIONS, 300)
    _copy_without_trace(source_cluster, target_cluster, topic, remote, per_partition=10)
    config = write_config(tmp_path / "s.yaml", flow_config(source_cluster, target_cluster, [topic]))
    state = ["--state-dir", str(tmp_path / "state")]
    process = StraitProcess("replicator", ["--config", str(config), *state], lab_root / "replicator",
                            name=f"replicator-unexplained-{topic}")
    try:
        process.start(timeout=120)
        log = process.process.log_path
        wait_for(lambda: "no MirrorMaker 2 offsets and no offset syncs" in log.read_text(errors="replace"), 60,
                 "the flow to refuse to start its copy")
        text = log.read_text(errors="replace")
        assert f"{remote} (partitions 0, 1, 2, 30 records)" in text and "start: latest" in text
        time.sleep(3)
        assert count(target_cluster, remote) == 30, "nothing copied before the user chose"
    finally:
        process.stop()

    # The user says the remote is a copy of the source's (the command line's choice, over the flow's)
    process = StraitProcess("replicator", ["--config", str(config), *state, "--start", "from-target"],
                            lab_root / "replicator", name=f"replicator-from-target-{topic}")
    try:
        process.start(timeout=120)
        wait_for(lambda: count(target_cluster, remote) >= 300, 120, "the rest copied")
        time.sleep(2)
        assert resume_evidence(process, topic)[0] == ("from-target", "0")
    finally:
        process.stop()
    source, target = records_by_partition(source_cluster, topic), records_by_partition(target_cluster, remote)
    assert {p: [r.value for r in rs] for p, rs in target.items()} == \
        {p: [r.value for r in rs] for p, rs in source.items()}, "went on right after the remote's last record"


def _copy_without_trace(source: KafkaCluster, target: KafkaCluster, topic: str, remote: str,
                        per_partition: int) -> None:
    """The first records of each partition copied as another tool would: same partition, key, value,
    headers and timestamp, and no progress record, offset sync or Connect offset anywhere."""
    copies = [Record(r.key, r.value, partition=p, headers=r.headers, timestamp_ms=r.timestamp_ms)
              for p, records in records_by_partition(source, topic).items() for r in records[:per_partition]]
    produce(target.client_config(), remote, copies)


def test_mm2s_consumer_offset_reset_latest_copies_only_what_is_produced_after_the_start(
    source_cluster: KafkaCluster, target_cluster: KafkaCluster, unique_name: Callable[[str], str],
    replicator: Callable[..., StraitProcess], tmp_path: Path,
) -> None:
    """MM2's replicate-from-latest, as its guides write it (``A.consumer.auto.offset.reset = latest``):
    the partitions, with no evidence of an earlier copy, start at their end."""
    topic = unique_name("latest")
    create_topic(source_cluster.admin(), topic, partitions=PARTITIONS)
    produce_numbered(source_cluster, topic, PARTITIONS, 90)  # before the flow starts: never copied
    properties = tmp_path / "mm2.properties"
    properties.write_text("\n".join([
        "clusters = A, B", f"A.bootstrap.servers = {source_cluster.bootstrap_servers}",
        f"B.bootstrap.servers = {target_cluster.bootstrap_servers}", "A->B.enabled = true",
        f"A->B.topics = {topic}", "replication.factor = 1",
        "A.consumer.auto.offset.reset = latest", "A->B.refresh.topics.interval.seconds = 3", ""]))
    process = replicator("--config", str(properties))
    wait_for(lambda: resume_evidence(process, topic), 120, "the flow to decide where the topic starts")
    assert resume_evidence(process, topic)[0][0] == "empty-remote", resume_evidence(process, topic)
    after = [Record(f"k{i}".encode(), f"after-{i}".encode(), partition=i % PARTITIONS) for i in range(60)]
    produce(source_cluster.client_config(), topic, after)
    wait_for(lambda: count(target_cluster, f"A.{topic}") >= 60, 120, "the records produced after the start")
    time.sleep(2)  # anything older would have arrived with them
    copied = sorted(r.value for rs in records_by_partition(target_cluster, f"A.{topic}").values() for r in rs)
    assert copied == sorted(r.value for r in after), "only the records produced after the start are copied"
