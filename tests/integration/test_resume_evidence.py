"""Never copy twice: a replicator whose state is lost goes on where the copies on the target end.

Issue 24's drills on real clusters: the replicator's state dir deleted under load (after a SIGTERM
and after a SIGKILL), and a remote topic that already holds records no evidence explains.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from strait_lab.clients import create_topic
from strait_lab.kafka import KafkaCluster
from strait_lab.services import StraitProcess
from tests.integration.replicator_support import (
    NumberedLoad, count, flow_config, numbered_copies, produce_numbered, resume_evidence, wait_for, write_config,
)

pytestmark = pytest.mark.slow

PARTITIONS = 3
RATE = 1_000  # records/s, spread over the partitions


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
    produce_numbered(target_cluster, remote, PARTITIONS, 30)  # copied by something that left no trace
    config = write_config(tmp_path / "s.yaml", flow_config(source_cluster, target_cluster, [topic]))
    process = StraitProcess("replicator", ["--config", str(config), "--state-dir", str(tmp_path / "state")],
                            lab_root / "replicator", name=f"replicator-unexplained-{topic}")
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

    write_config(config, flow_config(source_cluster, target_cluster, [topic], start="latest"))
    process = StraitProcess("replicator", ["--config", str(config), "--state-dir", str(tmp_path / "state")],
                            lab_root / "replicator", name=f"replicator-latest-{topic}")
    try:
        process.start(timeout=120)
        wait_for(lambda: resume_evidence(process, topic), 60, "the copy to start")
        assert resume_evidence(process, topic)[0][0] == "start-latest"
        produce_numbered(source_cluster, topic, PARTITIONS, 30, first=300)
        wait_for(lambda: count(target_cluster, remote) >= 60, 60, "the new records copied")
        time.sleep(2)
        assert count(target_cluster, remote) == 60, "only what was produced after the start"
    finally:
        process.stop()
