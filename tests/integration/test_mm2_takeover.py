"""Replacing MirrorMaker 2 without a second copy, and handing back to it (issue 24), against MM2 itself.

MM2 (dedicated mode, the project's Kafka jars) copies a topic A->B; it is stopped by SIGTERM or
SIGKILLed under load; strait's replicator then starts on the same clusters and reads where MM2 got
to from MM2's Connect offsets topic (or its offset syncs). Each source record must be on B exactly
once except the window strait reports. Then strait hands the flow back (`strait handover --to mm2`)
and MM2 goes on from strait's progress.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from strait_bench.options import BenchOptions
from strait_bench.systems import start_mm2
from strait_lab.clients import create_topic
from strait_lab.kafka import KafkaCluster
from strait_lab.services import StraitProcess
from tests.integration.replicator_support import (
    count, flow_config, numbered_copies, produce_numbered, resume_evidence, wait_for, write_config,
)

pytestmark = pytest.mark.slow

PARTITIONS = 3
MM2_SETTINGS = {"emit.heartbeats.enabled": "false", "offset.flush.interval.ms": "2000"}


def _exactly_once_except(target: KafkaCluster, remote: str, total: int) -> int:
    """Assert every sequence number up to ``total`` is on ``remote`` in each partition; the duplicates."""
    copies = numbered_copies(target, remote)
    duplicates = 0
    for partition in range(PARTITIONS):
        got = copies.get(partition, [])
        missing = sorted(set(range(len(range(partition, total, PARTITIONS)))) - set(got))
        assert not missing, (f"partition {partition} lost {len(missing)} records, {missing[:3]}..{missing[-3:]}; "
                             f"{len(got)} copies, first {got[:3]}, last {got[-3:]}")
        duplicates += len(got) - len(set(got))
    return duplicates


@pytest.mark.parametrize("ending", ["sigterm", "sigkill"])
def test_strait_takes_over_from_mirrormaker2_and_hands_back(
    source_cluster: KafkaCluster, target_cluster: KafkaCluster, unique_name: Callable[[str], str],
    tmp_path: Path, lab_root: Path, ending: str,
) -> None:
    topic = unique_name(f"mm2-{ending}")
    remote = f"A.{topic}"
    create_topic(source_cluster.admin(), topic, partitions=PARTITIONS, config={"retention.ms": "-1"})
    produced = produce_numbered(source_cluster, topic, PARTITIONS, 20_000, rate=20_000)
    mm2 = start_mm2(source_cluster, target_cluster, [topic], BenchOptions(), tmp_path / "mm2", MM2_SETTINGS)
    stop = threading.Event()
    under_load: list[int] = []
    try:
        wait_for(lambda: count(target_cluster, remote) >= produced, 180, "MirrorMaker 2 copying the first records")
        if ending == "sigterm":
            mm2.stop()
        else:  # mid-stream: records keep arriving, MM2 dies between two offset commits
            loader = threading.Thread(target=lambda: under_load.append(
                produce_numbered(source_cluster, topic, PARTITIONS, 10**9, rate=2_000, stop=stop, first=produced)),
                daemon=True)
            loader.start()
            wait_for(lambda: count(target_cluster, remote) >= produced + 3_000, 60, "MirrorMaker 2 copying under load")
            mm2.kill()
            stop.set()
            loader.join(60)
            produced += under_load[0]
    finally:
        stop.set()
        mm2.stop()
    produced += produce_numbered(source_cluster, topic, PARTITIONS, 10_000, rate=20_000, first=produced)

    config = write_config(tmp_path / "mm2.properties.yaml", flow_config(source_cluster, target_cluster, [topic]))
    strait = StraitProcess("replicator", ["--config", str(config), "--state-dir", str(tmp_path / "state")],
                           lab_root / "replicator", name=f"replicator-takeover-{topic}")
    try:
        strait.start(timeout=120)
        wait_for(lambda: count(target_cluster, remote) >= produced, 180, "strait catching up")
        time.sleep(2)
    finally:
        strait.stop()
    evidence, bound = resume_evidence(strait, topic)[0]
    duplicates = _exactly_once_except(target_cluster, remote, produced)
    print(f"MM2 {ending}: strait resumed from {evidence}, reported at most {bound} duplicates, found {duplicates}")
    assert evidence in ("mm2-offsets", "offset-syncs")
    if ending == "sigterm":
        assert evidence == "mm2-offsets" and duplicates == 0, "MM2 committed its offsets when it stopped"
    assert duplicates <= int(bound), "the reported bound holds"

    handed = subprocess.run([sys.executable, "-m", "strait.cli", "handover", "--to", "mm2", "--flow", "A->B",
                             "--config", str(config)], capture_output=True, text=True, timeout=120)
    assert handed.returncode == 0, handed.stderr
    assert f"wrote {PARTITIONS} partitions to mm2-offsets.A.internal" in handed.stdout
    produced += produce_numbered(source_cluster, topic, PARTITIONS, 5_000, rate=20_000, first=produced)
    mm2 = start_mm2(source_cluster, target_cluster, [topic], BenchOptions(), tmp_path / "mm2-back", MM2_SETTINGS)
    try:
        wait_for(lambda: count(target_cluster, remote) >= produced + duplicates, 180, "MirrorMaker 2 taking back over")
        time.sleep(5)  # anything MM2 would copy a second time arrives meanwhile
    finally:
        mm2.stop()
    after_handback = _exactly_once_except(target_cluster, remote, produced) - duplicates
    print(f"MM2 after the hand-back copied {after_handback} records a second time")
    assert after_handback == 0, "MirrorMaker 2 went on where strait's copies end"
