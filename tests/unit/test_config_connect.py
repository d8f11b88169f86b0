"""MM2's Kafka Connect connector configs (JSON, as posted to Connect's REST API) as strait flows."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from strait.config.connect import load_connect
from strait.config.secrets import SecretRef
from strait.errors import ConfigError

PACKAGE = "org.apache.kafka.connect.mirror."
CLUSTERS = {"source.cluster.alias": "primary", "target.cluster.alias": "backup",
            "source.cluster.bootstrap.servers": "p:9092", "target.cluster.bootstrap.servers": "b:9092"}


def _write(folder: Path, name: str, document: Any) -> Path:
    path = folder / f"{name}.json"
    path.write_text(json.dumps(document))
    return path


def _source(**config: Any) -> dict[str, Any]:
    return {"name": "mm2-msc", "config": {"connector.class": PACKAGE + "MirrorSourceConnector", **CLUSTERS, **config}}


def test_the_three_connectors_make_one_flow_with_connects_progress_location(tmp_path: Path) -> None:
    source = _write(tmp_path, "msc", _source(**{
        "tasks.max": "4", "key.converter": "org.apache.kafka.connect.converters.ByteArrayConverter",
        "topics": "orders.*,payments", "replication.factor": 3, "sync.topic.acls.enabled": False,
        "source.cluster.security.protocol": "SASL_SSL", "source.cluster.sasl.password": "${env:PW}",
        "source.consumer.fetch.min.bytes": "1024", "target.admin.request.timeout.ms": "60000",
        "producer.override.compression.type": "lz4", "errors.tolerance": "all"}))
    checkpoint = _write(tmp_path, "mcc", {  # the bare config map of PUT /connectors/<name>/config
        "name": "mm2-cpc", "connector.class": "MirrorCheckpointConnector", **CLUSTERS, "groups": "billing-.*",
        "emit.checkpoints.interval.seconds": "10"})
    loaded = load_connect([source, checkpoint], "connect-offsets")
    flow = loaded.config.flow("primary->backup")
    assert (flow.mm2_offsets_topic, flow.mm2_source_connector) == ("connect-offsets", "mm2-msc")
    assert flow.topic_names().mm2_connector == "mm2-msc"
    assert flow.topics.include == ("orders.*", "payments") and flow.groups.include == ("billing-.*",)
    assert flow.replication_factor == 3 and not flow.sync_topic_acls.enabled
    assert flow.emit_checkpoints.enabled and flow.emit_checkpoints.interval_seconds == 10
    assert not flow.emit_heartbeats.enabled, "no heartbeat connector: no heartbeats"
    primary, backup = loaded.config.cluster("primary"), loaded.config.cluster("backup")
    assert primary.bootstrap_servers == "p:9092" and primary.client["security.protocol"] == "SASL_SSL"
    assert primary.client["sasl.password"] == SecretRef("${env:PW}")
    assert primary.consumer == {"fetch.min.bytes": "1024"} and backup.admin == {"request.timeout.ms": "60000"}
    assert backup.producer == {"compression.type": "lz4"}, "Connect's producer writes the copies to the target"
    assert set(loaded.ignored_keys) >= {"mm2-msc: tasks.max", "mm2-msc: key.converter", "mm2-msc: errors.tolerance"}


@pytest.mark.parametrize(("documents", "problem"), [
    ([{"name": "x", "config": {"connector.class": PACKAGE + "MirrorCheckpointConnector", **CLUSTERS}}],
     r"flow primary->backup has no MirrorSourceConnector"),
    ([{"name": "x", "config": {"connector.class": "com.example.Other", **CLUSTERS}}],
     r"connector x: connector.class 'com.example.Other' is not one of MM2's"),
    ([{"config": {"connector.class": PACKAGE + "MirrorSourceConnector"}}], r"name: missing"),
    ([_source(), _source()], r"flow primary->backup already has a MirrorSourceConnector \(mm2-msc in "),
    ([_source(topics=["a", "b"])], r"connector mm2-msc: topics: expected a string"),
])
def test_connector_mistakes_name_the_file_and_connector(tmp_path: Path, documents: list[Any], problem: str) -> None:
    paths = [_write(tmp_path, f"c{i}", document) for i, document in enumerate(documents)]
    with pytest.raises(ConfigError, match=problem):
        load_connect(paths, "connect-offsets")


def test_a_file_that_is_not_json_is_named(tmp_path: Path) -> None:
    path = tmp_path / "broken.json"
    path.write_text("{name: mm2")
    with pytest.raises(ConfigError, match=r"broken\.json: not JSON"):
        load_connect([path], "connect-offsets")


def test_where_connectors_disagree_the_source_connectors_value_is_used_and_the_other_named(tmp_path: Path) -> None:
    source = _write(tmp_path, "msc", _source(topics="x"))
    checkpoint = _write(tmp_path, "mcc", {"name": "mm2-cpc", "config": {
        "connector.class": PACKAGE + "MirrorCheckpointConnector", **CLUSTERS, "topics": "y",
        "target.cluster.bootstrap.servers": "elsewhere:9092"}})
    for files in ([source, checkpoint], [checkpoint, source]):  # the order on the command line does not matter
        loaded = load_connect(files, "connect-offsets")
        assert loaded.config.flow("primary->backup").topics.include == ("x",)
        assert loaded.config.cluster("backup").bootstrap_servers == "b:9092"
        assert {"mm2-cpc: topics (differs from mm2-msc's, which is used)",
                "mm2-cpc: bootstrap.servers (differs from mm2-msc's, which is used)"} <= set(loaded.ignored_keys)


def test_a_connectors_own_offsets_topic_is_where_its_progress_is_read(tmp_path: Path) -> None:
    source = _write(tmp_path, "msc", _source(**{"offsets.storage.topic": "mm2-own-offsets",
                                                "exactly.once.support": "required"}))
    loaded = load_connect([source], "connect-offsets")
    assert loaded.config.flow("primary->backup").mm2_offsets_topic == "mm2-own-offsets"
    assert "mm2-msc: exactly.once.support" in loaded.ignored_keys


def test_a_pem_value_spanning_lines_stays_one_value(tmp_path: Path) -> None:
    pem = "-----BEGIN CERTIFICATE-----\nMIIBsz\\CCAVmgAwIBAgI=\n-----END CERTIFICATE-----"
    source = _write(tmp_path, "msc", _source(**{"target.cluster.ssl.truststore.certificates": pem}))
    assert load_connect([source], "connect-offsets").config.cluster("backup").client["ssl.truststore.certificates"] == pem


def test_two_flows_giving_one_cluster_alias_different_settings_are_refused(tmp_path: Path) -> None:
    back = {"source.cluster.alias": "backup", "target.cluster.alias": "primary",
            "source.cluster.bootstrap.servers": "b:9092", "target.cluster.bootstrap.servers": "p:9092"}
    forth = _write(tmp_path, "forth", _source(**{"source.cluster.security.protocol": "SASL_SSL"}))
    agreeing = _write(tmp_path, "back", {"name": "mm2-msc-back", "config": {
        "connector.class": PACKAGE + "MirrorSourceConnector", **back, "target.cluster.security.protocol": "SASL_SSL"}})
    loaded = load_connect([forth, agreeing], "connect-offsets")
    assert {f.name for f in loaded.config.flows} == {"primary->backup", "backup->primary"}

    differing = _write(tmp_path, "back", {"name": "mm2-msc-back", "config": {
        "connector.class": PACKAGE + "MirrorSourceConnector", **back, "target.cluster.bootstrap.servers": "p2:9092"}})
    with pytest.raises(ConfigError, match=r"back\.json: connector mm2-msc-back: cluster primary's bootstrap.servers "
                                          r"differs from the value connector mm2-msc \(.*forth\.json\) gives it"):
        load_connect([forth, differing], "connect-offsets")
