"""`strait verify` end to end: a hand-made replication (copies and offset syncs) checked by the command."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

from strait.kafka.admin import create_topics, internal_topic
from strait_lab.clients import Record, create_topic, produce
from strait_lab.kafka import KafkaCluster
from strait.records import OffsetSync
from tests.support.cli import strait
from tests.support.config import flow_config, write_config

SYNCS = "mm2-offset-syncs.B.internal"


def _copy(target: KafkaCluster, source: KafkaCluster, topic: str, records: Sequence[Record],
          upstream: Sequence[int], downstream: Sequence[int], synced: bool = True) -> None:
    """Write copies to the remote topic and the syncs of their first and last record, as the replicator does."""
    produce(target.client_config(), f"A.{topic}", [replace(r, partition=0) for r in records])
    if not synced:
        return  # a crash before the syncs: these copies stay behind as duplicates
    syncs = [OffsetSync(topic, 0, up, down) for up, down in ((upstream[0], downstream[0]), (upstream[-1], downstream[-1]))]
    produce(source.client_config(), SYNCS, [Record(s.key_bytes(), s.value_bytes(), partition=0) for s in syncs])


def test_verify_exit_codes_report_and_json(
    source_cluster: KafkaCluster, target_cluster: KafkaCluster, unique_name: Callable[[str], str], tmp_path: Path,
) -> None:
    topic = unique_name("ledger")
    create_topic(source_cluster.admin(), topic)
    create_topic(target_cluster.admin(), f"A.{topic}")
    create_topics(source_cluster.admin(), "A", [internal_topic(SYNCS, 1)])
    records = [Record(f"k{i}".encode(), f"v{i}".encode(), (("h", b"x"),), 1_700_000_000_000 + i, 0)
               for i in range(20)]
    produce(source_cluster.client_config(), topic, records)
    config = str(write_config(tmp_path / "strait.yaml", flow_config(source_cluster, target_cluster, [topic])))

    _copy(target_cluster, source_cluster, topic, records[:10], range(0, 10), range(0, 10))  # batch 1
    behind = strait("verify", "--flow", "A->B", "--topic", topic, "--config", config)
    assert behind.returncode == 1, behind.stdout + behind.stderr
    assert f"{topic}[0] -> A.{topic}[0]: 10 record(s) not replicated yet" in behind.stdout

    _copy(target_cluster, source_cluster, topic, records[10:15], range(10, 15), range(10, 15), synced=False)
    _copy(target_cluster, source_cluster, topic, records[10:], range(10, 20), range(15, 25))  # batch 2 replayed
    text = strait("verify", "--flow", "A->B", "--topic", topic, "--config", config)
    assert text.returncode == 0, text.stdout + text.stderr
    row = next(line for line in text.stdout.splitlines() if line.startswith(topic))
    assert row.split()[1:5] == ["0", "0..19", "0..24", "20"] and row.endswith("ok")
    assert text.stdout.splitlines()[-1].startswith("PARITY: flow A->B, 1 partition(s): 20 source records, 20 matched")

    as_json = strait("verify", "--flow", "A->B", "--topic", topic, "--config", config, "--json")
    document = json.loads(as_json.stdout)
    assert as_json.returncode == 0 and document["ok"] and document["totals"]["duplicates"] == 5
    assert document["partitions"][0]["source_sha256"] == document["partitions"][0]["target_sha256"]

    unknown = strait("verify", "--flow", "A->B", "--topic", "nope", "--config", config)
    assert unknown.returncode == 1 and "flow A->B: topic(s) nope not replicated by this flow" in unknown.stderr


def test_verify_fails_on_records_appended_after_the_last_copy(
    source_cluster: KafkaCluster, target_cluster: KafkaCluster, unique_name: Callable[[str], str], tmp_path: Path,
) -> None:
    topic = unique_name("tail")
    create_topic(source_cluster.admin(), topic)
    create_topic(target_cluster.admin(), f"A.{topic}")
    create_topics(source_cluster.admin(), "A", [internal_topic(SYNCS, 1)])
    records = [Record(f"k{i}".encode(), f"v{i}".encode(), (), 1_700_000_000_000 + i, 0) for i in range(12)]
    produce(source_cluster.client_config(), topic, records)
    config = str(write_config(tmp_path / "strait.yaml", flow_config(source_cluster, target_cluster, [topic])))
    _copy(target_cluster, source_cluster, topic, records, range(0, 12), range(0, 12))
    # A replay of 8..11 by a restarted replicator whose syncs are not written yet: copies, not strangers.
    _copy(target_cluster, source_cluster, topic, records[8:], range(8, 12), range(12, 16), synced=False)

    in_flight = strait("verify", "--flow", "A->B", "--topic", topic, "--config", config, "--json")
    assert in_flight.returncode == 0, in_flight.stdout + in_flight.stderr
    clean = json.loads(in_flight.stdout)["partitions"][0]
    assert (clean["target_tail"], clean["unexpected_tail"]) == (4, 0)

    strangers = [Record(b"k3", b"not a copy", (), 1, 0), Record(None, b"x", (("h", b"y"),), 2, 0)]
    produce(target_cluster.client_config(), f"A.{topic}", strangers)  # someone else writes to the remote topic

    text = strait("verify", "--flow", "A->B", "--topic", topic, "--config", config)
    assert text.returncode == 1, text.stdout + text.stderr
    assert (f"{topic}[0] -> A.{topic}[0]: 2 target record(s) after the last copy are copies of no source record "
            f"(target offsets 16..17)") in text.stdout
    assert (f"{topic}[0] -> A.{topic}[0]: first mismatch (unexpected) at source offset -, target offset 16"
            in text.stdout)
    assert text.stdout.splitlines()[-1].startswith("MISMATCH: flow A->B, 1 partition(s): 12 source records")

    as_json = strait("verify", "--flow", "A->B", "--topic", topic, "--config", config, "--json")
    document = json.loads(as_json.stdout)
    partition = document["partitions"][0]
    assert as_json.returncode == 1 and not document["ok"] and document["totals"]["unexpected_tail"] == 2
    assert (partition["unexpected_tail"], partition["unexpected_tail_start"], partition["unexpected_tail_end"],
            partition["target_tail"], partition["matched"]) == (2, 16, 17, 6, 12)
