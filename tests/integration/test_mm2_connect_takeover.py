"""MirrorMaker 2 deployed as three connectors on a Kafka Connect cluster, replaced by strait without a
second copy (issue 27's Connect guide; the takeover of issue 24 from Connect's offsets topic).

A real Connect worker (distributed mode, the project's MM2 jars) runs the guide's three connector
JSON documents, posted to its REST API as the guide's script does. MM2 copies a topic; the worker
is stopped (its source task commits where it got to in the worker's ``offset.storage.topic``, under
the connector's own name). `strait config from-connect` turns the same JSON files into a flow; the
replicator started on it finds MM2's progress there and goes on: every record on the target once.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from strait_lab.clients import create_topic
from strait_lab.connect import BYTES, ConnectWorker
from strait_lab.kafka import KafkaCluster
from strait_lab.services import StraitProcess
from tests.integration.replicator_support import resume_evidence
from tests.support.cli import strait
from tests.support.kafka import count, numbered_copies, produce_numbered
from tests.support.waiting import wait_for

pytestmark = pytest.mark.slow

PARTITIONS = 3
RECORDS = 3_000  # before the switch, and as many after it


def _connectors(source: KafkaCluster, target: KafkaCluster, topic: str, run: str) -> dict[str, dict[str, object]]:
    """The guide's three connector documents (its names, its keys), for this lab's clusters and topic."""
    clusters = {"source.cluster.alias": "A", "target.cluster.alias": "B",
                "source.cluster.bootstrap.servers": source.bootstrap_servers,
                "target.cluster.bootstrap.servers": target.bootstrap_servers,
                "key.converter": BYTES, "value.converter": BYTES}
    kinds = {
        "MirrorSourceConnector": {"topics": topic, "tasks.max": "2", "replication.factor": "1",
                                  "offset-syncs.topic.replication.factor": "1", "sync.topic.acls.enabled": "false",
                                  "refresh.topics.interval.seconds": "5"},
        "MirrorCheckpointConnector": {"groups": f"{run}-.*", "tasks.max": "1",
                                      "checkpoints.topic.replication.factor": "1",
                                      "emit.checkpoints.interval.seconds": "5"},
        "MirrorHeartbeatConnector": {"tasks.max": "1", "heartbeats.topic.replication.factor": "1"},
    }
    return {kind: {"name": f"{run}-{kind.removeprefix('Mirror').removesuffix('Connector').lower()}",
                   "config": {"connector.class": f"org.apache.kafka.connect.mirror.{kind}", **clusters, **settings}}
            for kind, settings in kinds.items()}


def test_strait_takes_over_from_mm2_on_connect_where_its_source_connector_got_to(
        source_cluster: KafkaCluster, target_cluster: KafkaCluster, unique_name: Callable[[str], str],
        lab_root: Path, tmp_path: Path) -> None:
    run = f"mm2c-{uuid.uuid4().hex[:6]}"
    topic = unique_name("connect")
    remote = f"A.{topic}"
    create_topic(source_cluster.admin(), topic, partitions=PARTITIONS, config={"retention.ms": "-1"})
    produce_numbered(source_cluster, topic, PARTITIONS, RECORDS)
    documents = _connectors(source_cluster, target_cluster, topic, run)
    files = []
    for kind, document in documents.items():
        files.append(tmp_path / f"{kind}.json")
        files[-1].write_text(json.dumps(document, indent=2))

    worker = ConnectWorker(target_cluster, tmp_path / "connect", f"{run}-offsets", run)
    try:
        worker.start()
        for document in documents.values():
            worker.post(document)
        source_name = documents["MirrorSourceConnector"]["name"]
        wait_for(lambda: worker.running(str(source_name)), 120, "MM2's source connector running on Connect")
        wait_for(lambda: count(target_cluster, remote) == RECORDS, 180, f"MM2 copying {RECORDS} records to {remote}")
    finally:
        worker.stop()  # SIGTERM: the source task commits its offsets under the connector's name
    produce_numbered(source_cluster, topic, PARTITIONS, RECORDS, first=RECORDS)

    converted = strait("config", "from-connect", *map(str, files), "--offsets-topic", f"{run}-offsets")
    assert converted.returncode == 0, converted.stderr
    assert f"mm2_source_connector: {source_name}" in converted.stdout
    config = tmp_path / "from-connect.yaml"
    config.write_text(converted.stdout)
    process = StraitProcess("replicator", ["--config", str(config), "--state-dir", str(tmp_path / "state")],
                            lab_root / "connect-takeover", name=f"replicator-{topic}")
    try:
        process.start(timeout=180)
        wait_for(lambda: count(target_cluster, remote) >= 2 * RECORDS, 180, f"strait copying on to {remote}")
        evidence = resume_evidence(process, topic)
    finally:
        process.stop()
    copies = numbered_copies(target_cluster, remote)
    for partition in range(PARTITIONS):
        assert copies[partition] == list(range(2 * RECORDS // PARTITIONS)), \
            f"partition {partition}: not every record exactly once after the switch"
    assert evidence and all(kind == "mm2-offsets" for kind, _bound in evidence), evidence
