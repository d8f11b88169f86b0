"""`strait verify` on a real replicator run: parity, then a target that lost records, and rewritten timestamps."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from confluent_kafka import TopicPartition

from strait.cli import verify as verify_cli
from strait.config import load_config
from strait.lab.clients import Record, create_topic, produce
from strait.lab.kafka import KafkaCluster
from strait.lab.services import StraitProcess
from strait.verify import FlowParity, verify_flow
from tests.integration.replicator_support import count, flow_config, wait_for, write_config

pytestmark = pytest.mark.slow


@pytest.fixture
def replicator(tmp_path: Path, lab_root: Path) -> Iterator[Callable[[Path], StraitProcess]]:
    started: list[StraitProcess] = []

    def start(config: Path) -> StraitProcess:
        process = StraitProcess("replicator", ["--config", str(config), "--state-dir", str(tmp_path / "state")],
                                lab_root / "replicator", name=f"replicator-verify-{tmp_path.name}")
        started.append(process)
        process.start(timeout=120)
        return process

    yield start
    for process in started:
        process.stop()


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    """`strait verify ARGV` through the command's own parser, in this process."""
    parser = argparse.ArgumentParser(prog="strait")
    verify_cli.register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["verify", *argv])
    code = args.handler(args)
    return code, capsys.readouterr().out


def test_verify_reports_parity_then_deleted_and_rewritten_records(
    source_cluster: KafkaCluster, target_cluster: KafkaCluster, replicator: Callable[[Path], StraitProcess],
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
    replicator(path)
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
