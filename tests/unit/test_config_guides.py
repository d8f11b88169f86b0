"""Configurations as the guides our users follow write them: AMQ Streams' legacy mode, Strimzi's
identity policy with an empty separator, every guide's internal-topic replication factors, MM1's
consumer and producer files, and MM1's repartitioning (target partition control)."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pytest

from strait.config import SecretRef, load_yaml
from strait.config.mm1 import Mm1Setup, from_mm1
from strait.config.mm2_properties import parse_mm2_properties
from strait.config.validate import config_warnings, repartition_warning
from strait.errors import ConfigError
from strait.remote_topics import replicated_topics
from strait_checkpoint.app import checkpoint_items
from strait_replicator.writer import producer_settings

pytestmark = pytest.mark.unit

DATA = Path(__file__).parents[1] / "data" / "config"
CLUSTERS = "clusters = source, target\nsource.bootstrap.servers = s:9092\ntarget.bootstrap.servers = t:9092\n"
# The AMQ Streams guide's legacy mode: MM1 behaviour from an MM2 file.
AMQ_LEGACY = """source->target.enabled = true
source->target.topics = .*
replication.policy.class = {policy}
refresh.topics.enabled = false
refresh.groups.enabled = false
emit.checkpoints.enabled = false
emit.heartbeats.enabled = false
sync.topic.configs.enabled = false
sync.topic.acls.enabled = false
sync.group.offsets.enabled = false
emit.offset-syncs.enabled = false
"""


@pytest.mark.parametrize("policy", ["org.apache.kafka.mirror.LegacyReplicationPolicy",
                                    "org.apache.kafka.connect.mirror.LegacyReplicationPolicy"])
def test_amq_legacy_mode_loads_as_mm1_behaviour_with_its_toggles(policy: str) -> None:
    config = parse_mm2_properties(CLUSTERS + AMQ_LEGACY.format(policy=policy), "legacy.properties").config
    flow = config.flow("source->target")

    assert flow.replication_policy == "identity"
    assert flow.policy().format_remote_topic("source", "orders") == "orders"
    assert not any(s.enabled for s in (flow.refresh_topics, flow.refresh_groups, flow.emit_checkpoints,
                                       flow.emit_heartbeats, flow.sync_topic_configs, flow.sync_topic_acls,
                                       flow.sync_group_offsets))
    assert not flow.writes_offset_syncs and not flow.emits_checkpoints
    assert checkpoint_items(config) == set()  # no checkpoint replica takes the flow
    assert config_warnings(config) == []


def test_strimzi_identity_with_an_empty_separator_loads_from_properties_and_yaml(tmp_path: Path) -> None:
    text = CLUSTERS + ("source->target.enabled = true\nreplication.policy.separator =\n"
                       "replication.policy.class = io.strimzi.kafka.connect.mirror.IdentityReplicationPolicy\n")
    from_properties = parse_mm2_properties(text, "strimzi.properties").config.flow("source->target")
    yaml_file = tmp_path / "strimzi.yaml"
    yaml_file.write_text("clusters:\n  source: {bootstrap_servers: 's:9092'}\n  target: {bootstrap_servers: 't:9092'}\n"
                         "flows:\n  - {source: source, target: target, replication_policy: identity, separator: ''}\n")
    from_yaml = load_yaml(yaml_file).flow("source->target")

    for flow in (from_properties, from_yaml):
        assert (flow.replication_policy, flow.separator) == ("identity", "")
        assert flow.policy().format_remote_topic("source", "orders") == "orders"


def test_an_empty_separator_under_the_default_policy_warns_and_traces_whole_aliases() -> None:
    text = CLUSTERS + "source->target.enabled = true\ntarget->source.enabled = true\nreplication.policy.separator =\n"
    config = parse_mm2_properties(text, "glued.properties").config
    back = config.flow("target->source")

    assert back.policy().topic_source("sourceorders") == "source"
    assert not replicated_topics(back, {"sourceorders": 1}), "a copy must not go back where it came from"
    assert any("empty separator" in w and "sourceorders" in w for w in config_warnings(config))


def test_an_alias_that_begins_another_is_refused_with_an_empty_separator() -> None:
    text = ("clusters = us, useast\nus.bootstrap.servers = a:9092\nuseast.bootstrap.servers = b:9092\n"
            "us->useast.enabled = true\nreplication.policy.separator =\n")
    with pytest.raises(ConfigError, match="'us' and 'useast' are ambiguous"):
        parse_mm2_properties(text, "ambiguous.properties")


def test_internal_topic_replication_factors_are_honoured_in_properties_and_yaml(tmp_path: Path) -> None:
    text = CLUSTERS + ("source->target.enabled = true\nreplication.factor = 2\ncheckpoints.topic.replication.factor = 3\n"
                       "heartbeats.topic.replication.factor = 3\noffset-syncs.topic.replication.factor = 3\n")
    flow = parse_mm2_properties(text, "guide.properties").config.flow("source->target")
    yaml_file = tmp_path / "factors.yaml"
    yaml_file.write_text("clusters:\n  source: {bootstrap_servers: 's:9092'}\n  target: {bootstrap_servers: 't:9092'}\n"
                         "flows:\n  - {source: source, target: target, replication_factor: 2, "
                         "checkpoints_topic_replication_factor: 3, heartbeats_topic_replication_factor: 3, "
                         "offset_syncs_topic_replication_factor: 3}\n")

    assert flow == load_yaml(yaml_file).flow("source->target")
    assert [flow.internal_topic_replication_factor(k) for k in ("heartbeats", "checkpoints", "offset_syncs")] == [3] * 3
    unset = parse_mm2_properties(CLUSTERS + "source->target.enabled = true\n", "p").config.flow("source->target")
    assert unset.internal_topic_replication_factor("checkpoints") == unset.replication_factor


def test_a_repartitioning_flow_sizes_remote_topics_and_drops_syncs_and_checkpoints() -> None:
    text = CLUSTERS + "source->target.enabled = true\nsource->target.strait.target.partitions = 3\n"
    config = parse_mm2_properties(text, "aggregate.properties").config
    flow = config.flow("source->target")
    topics = replicated_topics(flow, {"orders": 8, "payments": 1})

    assert [(t.remote, t.partitions, t.remote_partitions) for t in topics] == \
        [("source.orders", 8, 3), ("source.payments", 1, 3)]
    assert flow.emit_checkpoints.enabled and not flow.emits_checkpoints and not flow.writes_offset_syncs
    assert checkpoint_items(config) == set()
    warning = repartition_warning(flow, [t.remote for t in topics])
    assert "target_partitions 3" in warning and "source.orders, source.payments" in warning
    assert "could not be listed" in repartition_warning(flow, None)


def test_fewer_acks_than_all_turn_idempotence_off_and_keep_one_request_in_flight() -> None:
    assert producer_settings({})["enable.idempotence"] == "true"
    mm1 = producer_settings({"acks": "1", "compression.type": "lz4"})
    assert (mm1["enable.idempotence"], mm1["max.in.flight.requests.per.connection"], mm1["compression.type"]) == \
        ("false", "1", "lz4")


# -- MirrorMaker 1 ---------------------------------------------------------------------------------

CONSUMER = """bootstrap.servers=src1:9093,src2:9093
group.id=mm1-mirror
auto.offset.reset=earliest
security.protocol=SASL_SSL
sasl.mechanism=SCRAM-SHA-512
sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username="mirror" password="s3cret";
ssl.truststore.type=PEM
ssl.truststore.location=/etc/mm1/ca.pem
fetch.min.bytes=1024
key.deserializer=org.apache.kafka.common.serialization.ByteArrayDeserializer
"""
PRODUCER = """bootstrap.servers=dst1:9093
security.protocol=SASL_SSL
sasl.mechanism=SCRAM-SHA-512
sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username="mirror" password="t0p";
acks=1
compression.type=lz4
batch.size=65536
linger.ms=20
buffer.memory=67108864
"""


@pytest.fixture
def mm1_files(tmp_path: Path) -> tuple[Path, Path]:
    consumer, producer = tmp_path / "consumer.properties", tmp_path / "producer.properties"
    consumer.write_text(CONSUMER)
    producer.write_text(PRODUCER)
    return consumer, producer


def test_mm1_files_and_flags_make_a_one_way_identity_flow(mm1_files: tuple[Path, Path]) -> None:
    consumer, producer = mm1_files
    made = from_mm1(Mm1Setup(consumer, producer, "orders.*, payments", num_streams=4))
    source, target = made.config.cluster("source"), made.config.cluster("target")
    flow = made.config.flow("source->target")

    assert (source.bootstrap_servers, target.bootstrap_servers) == ("src1:9093,src2:9093", "dst1:9093")
    assert flow.topics.include == ("orders.*", "payments")
    assert (flow.replication_policy, flow.replication_factor) == ("identity", -1)
    assert not (flow.emit_heartbeats.enabled or flow.emits_checkpoints or flow.writes_offset_syncs
                or flow.sync_topic_configs.enabled or flow.sync_topic_acls.enabled)
    assert dict(target.producer) == {"acks": "1", "compression.type": "lz4", "batch.size": "65536", "linger.ms": "20"}
    assert dict(source.consumer) == {"fetch.min.bytes": "1024"}
    assert source.client["security.protocol"] == "SASL_SSL" and source.client["ssl.truststore.location"] == "/etc/mm1/ca.pem"
    assert source.client["sasl.jaas.config"] == SecretRef(f"${{file:{consumer.resolve()}:sasl.jaas.config}}")
    assert {f"{consumer}: group.id", f"{producer}: buffer.memory"} <= set(made.unused)


def test_mm1_secrets_resolve_from_the_mm1_files_themselves(mm1_files: tuple[Path, Path]) -> None:
    consumer, producer = mm1_files
    made = from_mm1(Mm1Setup(consumer, producer, "orders"))
    settings = made.config.cluster("source").librdkafka_config("consumer")

    assert (settings["sasl.username"], settings["sasl.password"]) == ("mirror", "s3cret")
    assert settings["ssl.ca.location"] == "/etc/mm1/ca.pem"


def test_mm1_with_checkpoints_asked_for_writes_syncs_and_checkpoints(mm1_files: tuple[Path, Path]) -> None:
    flow = from_mm1(Mm1Setup(*mm1_files, "orders", checkpoints=True, heartbeats=True)).config.flow("source->target")
    assert flow.writes_offset_syncs and flow.emits_checkpoints and flow.emit_heartbeats.enabled


@pytest.mark.parametrize(("change", "expected"), [
    ({"whitelist": " , "}, "--whitelist: is empty"),
    ({"whitelist": "orders("}, "--whitelist: invalid regular expression 'orders('"),
    ({"num_streams": 0}, "--num.streams: expected at least 1"),
    ({"consumer_config": Path("/nonexistent/consumer.properties")}, "/nonexistent/consumer.properties: cannot read"),
])
def test_mm1_mistakes_name_the_flag_or_file(mm1_files: tuple[Path, Path], change: dict[str, object],
                                             expected: str) -> None:
    consumer, producer = mm1_files
    setup = {"consumer_config": consumer, "producer_config": producer, "whitelist": "orders", **change}
    with pytest.raises(ConfigError, match=expected.replace("(", r"\(")):
        from_mm1(Mm1Setup(**setup))  # type: ignore[arg-type]


def test_mm1_file_without_bootstrap_servers_is_named(mm1_files: tuple[Path, Path],
                                                     caplog: pytest.LogCaptureFixture) -> None:
    consumer, producer = mm1_files
    producer.write_text("acks=all\n")
    with caplog.at_level(logging.INFO), pytest.raises(ConfigError, match=f"{producer}: bootstrap.servers is missing"):
        from_mm1(Mm1Setup(consumer, producer, "orders"))


# -- Strimzi ---------------------------------------------------------------------------------------

def test_strimzi_resource_reads_as_written_with_secrets_from_their_mounts(tmp_path: Path) -> None:
    from strait.config.strimzi import load_strimzi

    secrets = tmp_path / "secrets"
    (secrets / "mm2-user").mkdir(parents=True)
    (secrets / "mm2-user" / "password").write_text("scram-pw")
    loaded = load_strimzi(DATA / "strimzi-mm2.yaml", secrets)
    config = loaded.config
    flow = config.flow("my-source-cluster->my-target-cluster")
    source, target = config.cluster("my-source-cluster"), config.cluster("my-target-cluster")

    assert flow.enabled and (flow.replication_policy, flow.separator) == ("identity", "")
    assert flow.policy().format_remote_topic("my-source-cluster", "orders.eu") == "orders.eu"
    assert flow.topics.include == (r"orders\..*", "payments") and flow.topics.exclude == (r".*\.tmp",)
    assert flow.groups.include == ("billing-.*",)
    assert (flow.replication_factor, flow.internal_topic_replication_factor("offset_syncs"),
            flow.internal_topic_replication_factor("checkpoints")) == (3, 3, 3)
    assert flow.sync_group_offsets.enabled and not flow.sync_topic_acls.enabled
    assert not flow.emit_heartbeats.enabled  # no heartbeatConnector in the resource
    client = source.librdkafka_config("consumer")
    assert (client["security.protocol"], client["sasl.mechanism"], client["sasl.username"], client["sasl.password"]) \
        == ("SASL_SSL", "SCRAM-SHA-512", "mm2-user", "scram-pw")
    assert client["ssl.ca.location"] == str(secrets / "my-source-cluster-cluster-ca-cert" / "ca.crt")
    assert target.client["ssl.keystore.certificate.chain"] == \
        SecretRef(f"${{file:{secrets / 'mm2-tls-user' / 'user.crt'}}}")
    assert "my-target-cluster.config.storage.replication.factor" in loaded.ignored_keys


@pytest.mark.parametrize(("old", "new", "expected"), [
    ("kind: KafkaMirrorMaker2", "kind: KafkaConnect", "not a KafkaMirrorMaker2 resource (kind: KafkaConnect)"),
    ("type: scram-sha-512", "type: oauth", "authentication.type: 'oauth' is not supported"),
    ('targetCluster: "my-target-cluster"', 'targetCluster: "nowhere"',
     "flow my-source-cluster->nowhere names a cluster not listed"),
])
def test_strimzi_mistakes_name_the_field(tmp_path: Path, old: str, new: str, expected: str) -> None:
    from strait.config.strimzi import load_strimzi

    resource = tmp_path / "mm2.yaml"
    resource.write_text((DATA / "strimzi-mm2.yaml").read_text().replace(old, new))
    with pytest.raises(ConfigError, match=re.escape(expected)):
        load_strimzi(resource, tmp_path)
