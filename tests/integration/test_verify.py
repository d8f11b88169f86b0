"""`strait verify` on a real replicator run: parity, then a target that lost records, rewritten timestamps,
and records someone else appended to a remote topic."""

from __future__ import annotations

import argparse
import json
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Producer, TopicPartition

from strait.cli import verify as verify_cli
from strait.config import load_config
from strait_lab.clients import Record, create_topic, produce
from strait_lab.kafka import KafkaCluster
from strait_lab.services import StraitProcess
from strait.verify import FlowParity, verify_flow
from tests.support.config import flow_config, write_config
from tests.support.kafka import count
from tests.support.waiting import wait_for

pytestmark = pytest.mark.slow


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    """`strait verify ARGV` through the command's own parser, in this process."""
    parser = argparse.ArgumentParser(prog="strait")
    verify_cli.register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["verify", *argv])
    code = args.handler(args)
    return code, capsys.readouterr().out


def test_verify_reports_parity_then_deleted_and_rewritten_records(
    source_cluster: KafkaCluster, target_cluster: KafkaCluster, replicator: Callable[..., StraitProcess],
    unique_name: Callable[[str], str], tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    prefix = unique_name("verify")
    kept, stamped = f"{prefix}.kept", f"{prefix}.stamped"
    create_topic(source_cluster.admin(), kept, partitions=2)
    create_topic(source_cluster.admin(), stamped, partitions=1)
    # The remote topic exists already and stamps its own time on every record: timestamps will differ.
    create_topic(target_cluster.admin(), f"A.{stamped}", partitions=1,
                 config={"message.timestamp.type": "LogAppendTime"})
    produce(source_cluster.client_config(), kept,
            [Record(f"k{i}".encode(), f"v{i}".encode(), (("n", f"{i}".encode()),), partition=i % 2)
             for i in range(400)])
    produce(source_cluster.client_config(), stamped,
            [Record(b"k", f"s{i}".encode(), timestamp_ms=1_700_000_000_000 + i) for i in range(30)])
    path = write_config(tmp_path / "strait.yaml", flow_config(source_cluster, target_cluster, [rf"{prefix}\..*"]))
    config = load_config(path)
    flow = config.flow("A->B")
    replicator("--config", str(path))
    wait_for(lambda: (count(target_cluster, f"A.{kept}"), count(target_cluster, f"A.{stamped}")) == (400, 30),
             180, "both topics replicated")

    def settled(topic: str) -> FlowParity | None:
        result = verify_flow(config, flow, [topic], timeout=10)
        return None if result.total("pending") else result  # syncs follow the records

    parity = wait_for(lambda: settled(kept), 60, f"offset syncs of {kept}")
    assert parity.ok and [p.partition for p in parity.partitions] == [0, 1]
    assert (parity.total("matched"), parity.total("duplicates")) == (400, 0)
    assert all(p.source_sha256 == p.target_sha256 and (p.source_start, p.source_end) == (0, 199)
               for p in parity.partitions)

    code, out = _cli(capsys, "--flow", "A->B", "--topic", kept, "--config", str(path), "--json")
    document = json.loads(out)
    assert code == 0 and document["ok"] and document["totals"]["matched"] == 400

    rewritten = wait_for(lambda: settled(stamped), 60, f"offset syncs of {stamped}")
    mismatch = rewritten.partitions[0].first_mismatch
    assert not rewritten.ok and rewritten.partitions[0].mismatched == 30
    assert mismatch is not None and (mismatch.kind, mismatch.source_offset, mismatch.target_offset) == \
        ("timestamp", 0, 0)
    assert mismatch.detail.startswith("timestamp: source 1700000000000, target ")

    admin = target_cluster.admin()
    admin.delete_records([TopicPartition(f"A.{kept}", 1, 25)])[TopicPartition(f"A.{kept}", 1, 25)].result(30)

    code, out = _cli(capsys, "--flow", "A->B", "--topic", kept, "--topic", f"A.{stamped}", "--config", str(path))
    assert code == 1, out
    assert f"{kept}[1] -> A.{kept}[1]: first mismatch (missing) at source offset 0, target offset 0" in out
    assert f"{stamped}[0] -> A.{stamped}[0]: first mismatch (timestamp) at source offset 0, target offset 0" in out
    assert out.splitlines()[-1].startswith("MISMATCH: flow A->B, 3 partition(s): 430 source records, 375 matched, "
                                           "30 mismatched, 25 missing")


def _load(cluster: KafkaCluster, topic: str, stop: threading.Event) -> Callable[[], int]:
    """Produce to both partitions of ``topic`` until ``stop`` is set; the returned join gives the count."""
    producer = Producer({**cluster.client_config(), "linger.ms": 5, "enable.idempotence": True})
    produced = [0]

    def run() -> None:
        while not stop.is_set():
            for _ in range(50):
                producer.produce(topic, f"v{produced[0]}".encode(), f"k{produced[0]}".encode(),
                                 partition=produced[0] % 2)
                produced[0] += 1
            producer.poll(0)
            time.sleep(0.02)
        assert producer.flush(30) == 0

    thread = threading.Thread(target=run, name="verify-load")
    thread.start()

    def join() -> int:
        stop.set()
        thread.join(60)
        return produced[0]

    return join


def test_verify_reports_records_appended_after_the_last_copy_not_the_replicators_own_tail(
    source_cluster: KafkaCluster, target_cluster: KafkaCluster, replicator: Callable[..., StraitProcess],
    unique_name: Callable[[str], str], tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    topic = unique_name("trailing")
    create_topic(source_cluster.admin(), topic, partitions=2)
    path = write_config(tmp_path / "strait.yaml", flow_config(source_cluster, target_cluster, [topic]))
    config = load_config(path)
    flow = config.flow("A->B")
    replicator("--config", str(path))
    produce(source_cluster.client_config(), topic, [Record(b"k", b"first", partition=p) for p in (0, 1)])
    wait_for(lambda: count(target_cluster, f"A.{topic}") == 2, 180, "the first records replicated")

    # While records flow, the target's tail holds copies whose syncs are not written yet, some of records
    # produced after verify read the source's watermarks: none of them is a stranger.
    join = _load(source_cluster, topic, threading.Event())
    try:
        rounds = [verify_flow(config, flow, [topic], timeout=10) for _ in range(6)]
    finally:
        produced = join()
    for result in rounds:
        assert [(p.unexpected_tail, p.unexpected, p.missing, p.mismatched) for p in result.partitions] == \
            [(0, 0, 0, 0)] * 2, result
    assert sum(result.total("target_tail") for result in rounds) > 0, "no round saw copies ahead of their syncs"

    def settled() -> FlowParity | None:
        result = verify_flow(config, flow, [topic], timeout=10)
        return result if result.ok and result.total("matched") == produced + 2 else None

    parity = wait_for(settled, 120, "the load replicated and synced")
    high = [p.target_end for p in parity.partitions]
    assert all(end is not None for end in high)

    strangers = [Record(b"k", b"stranger", partition=1), Record(None, b"x", partition=1),
                 Record(b"k0", b"v0", (("h", b"1"),), partition=1)]  # like a copy of source offset 0, but is none
    produce(target_cluster.client_config(), f"A.{topic}", strangers)

    result = verify_flow(config, flow, [topic], timeout=10)
    clean, dirty = result.partitions
    assert clean.ok and not result.ok
    assert (dirty.unexpected_tail, dirty.unexpected_tail_start, dirty.unexpected_tail_end, dirty.unexpected) == \
        (3, high[1] + 1, high[1] + 3, 0)
    assert dirty.first_mismatch is not None and (dirty.first_mismatch.kind, dirty.first_mismatch.target_offset) == \
        ("unexpected", high[1] + 1)

    code, out = _cli(capsys, "--flow", "A->B", "--topic", topic, "--config", str(path), "--json")
    document = json.loads(out)
    assert code == 1 and not document["ok"]
    assert (document["totals"]["unexpected_tail"], document["totals"]["matched"]) == (3, produced + 2)

    # Copies made after the strangers leave them in the middle of the partition: still reported.
    produce(source_cluster.client_config(), topic, [Record(b"k", b"last", partition=1)])
    later = wait_for(lambda: (r := verify_flow(config, flow, [topic], timeout=10)).total("matched") == produced + 3
                     and not r.total("pending") and r, 120, "the last record replicated")
    assert (later.partitions[1].unexpected, later.partitions[1].unexpected_tail, later.ok) == (3, 0, False)
