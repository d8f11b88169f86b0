"""`strait offsets translate` end to end: real offset syncs and a real source group, text and --json."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from confluent_kafka import TopicPartition

from strait.kafka.admin import create_topics, internal_topic
from strait_lab.clients import Record, create_topic, produce
from strait_lab.kafka import KafkaCluster
from strait.records import OffsetSync
from tests.support.cli import strait
from tests.support.config import flow_config, write_config
from tests.support.kafka import commit_offsets


def test_translate_prints_exact_offsets_and_what_is_not_replicated(
    source_cluster: KafkaCluster, target_cluster: KafkaCluster, unique_name: Callable[[str], str], tmp_path: Path,
) -> None:
    topic, group = unique_name("orders"), unique_name("billing")
    create_topic(source_cluster.admin(), topic, partitions=2)
    produce(source_cluster.client_config(), topic, [Record(b"k", b"v", partition=i % 2) for i in range(40)])
    # What the replicator writes for partition 0: source 0..9 at 100..109, a hole at 10..14, 15..19 at 110..114.
    syncs = [OffsetSync(topic, 0, up, down) for up, down in ((0, 100), (9, 109), (15, 110), (19, 114))]
    create_topics(source_cluster.admin(), "A", [internal_topic("mm2-offset-syncs.B.internal", 1)])
    produce(source_cluster.client_config(), "mm2-offset-syncs.B.internal",
            [Record(s.key_bytes(), s.value_bytes(), partition=0) for s in syncs])
    commits = [TopicPartition(topic, 0, 12, "ckpt"), TopicPartition(topic, 1, 7)]
    commit_offsets(source_cluster, group, commits)
    config = write_config(tmp_path / "strait.yaml", flow_config(source_cluster, target_cluster, [topic]))

    result = strait("offsets", "translate", "--flow", "A->B", "--group", group, "--config", str(config),
                    "--json")

    assert result.returncode == 3, result.stdout + result.stderr  # partition 1 is not replicated yet
    rows = {row["partition"]: row for row in json.loads(result.stdout)["partitions"]}
    assert (rows[0]["remote_topic"], rows[0]["upstream"], rows[0]["downstream"], rows[0]["metadata"]) == \
        (f"A.{topic}", 12, 110, "ckpt")
    assert rows[1]["downstream"] is None and "not replicated" in rows[1]["reason"]

    text = strait("offsets", "translate", "--flow", "A->B", "--group", group, "--config", str(config))
    assert text.returncode == 3
    line = next(line for line in text.stdout.splitlines() if line.startswith(topic) and " 0 " in line)
    assert line.split()[:5] == [topic, "0", "12", f"A.{topic}", "110"]

    missing = strait("offsets", "translate", "--flow", "A->C", "--group", group, "--config", str(config))
    assert missing.returncode == 1 and "no flow 'A->C'" in missing.stderr
