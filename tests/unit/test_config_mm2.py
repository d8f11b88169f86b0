"""MirrorMaker 2 properties files: MM2's scoping and defaults, ignored and unknown keys, errors."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from strait.config import Schedule, Secret, SecretRef, Selection, load_mm2_properties, load_yaml
from strait.config.mm2_properties import parse_mm2_properties, read_mm2_properties
from strait.errors import ConfigError
from strait.filters import TOPICS_EXCLUDE_DEFAULT

DATA = Path(__file__).parents[1] / "data" / "config"
BASE = "clusters = A, B, C\nA.bootstrap.servers = a:9092\nB.bootstrap.servers = b:9092\nC.bootstrap.servers = c:9092\n"


def _load(text: str) -> object:
    return parse_mm2_properties(BASE + text, "mm2.properties").config


def _error(text: str) -> str:
    with pytest.raises(ConfigError) as caught:
        parse_mm2_properties(BASE + text, "mm2.properties")
    message = str(caught.value)
    assert message.startswith("mm2.properties: "), message
    return message


def test_every_listed_key_loads_to_the_same_config_as_its_yaml_twin() -> None:
    """The acceptance test: MM2 file and strait YAML mean the same thing."""
    assert load_mm2_properties(DATA / "mm2-full.properties") == load_yaml(DATA / "full.yaml")


def test_full_file_lists_ignored_keys_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="strait.config"):
        loaded = read_mm2_properties(DATA / "mm2-full.properties")
    assert "tasks.max" in loaded.ignored_keys and "primary->backup.tasks.max" in loaded.ignored_keys
    assert "dr.offset.storage.replication.factor" in loaded.ignored_keys
    assert "replication.factor" not in loaded.ignored_keys
    assert "MM2 setting not used file=" in caplog.text
    assert "key=tasks.max: the replicator runs one copy task per Spark task slot" in caplog.text
    assert "key=offset.lag.max: strait writes offset syncs for the copied records every 0.5 s" in caplog.text
    assert "deprecated MM2 key names" in caplog.text


def test_a_typical_mm2_file_loads_as_it_is() -> None:
    config = load_mm2_properties(DATA / "mm2-sample.properties")
    assert [(f.name, f.enabled, f.replication_factor) for f in config.flows] == [("A->B", True, 1), ("B->A", True, 1)]
    assert config.flows[0].topics == Selection((".*",), TOPICS_EXCLUDE_DEFAULT)


def test_flows_exist_when_named_and_are_disabled_by_default_as_in_mm2() -> None:
    config = _load("A->B.topics = x\nB->C.enabled = true\nC->A.enabled = false\n")
    assert [(f.name, f.enabled) for f in config.flows] == [("A->B", False), ("B->C", True), ("C->A", False)]
    assert _load("").flows == ()


def test_flow_keys_override_global_ones() -> None:
    config = _load("topics = a, b\nemit.checkpoints.interval.seconds = 9\nA->B.enabled = true\n"
                   "A->B.emit.checkpoints.interval.seconds = 2\nB->A.enabled = true\n")
    ab, ba = config.flows
    assert ab.topics.include == ba.topics.include == ("a", "b")
    assert ab.emit_checkpoints == Schedule(True, 2) and ba.emit_checkpoints == Schedule(True, 9)


def test_a_negative_interval_turns_the_task_off_as_in_mm2() -> None:
    flow = _load("A->B.enabled = true\nsync.topic.acls.interval.seconds = -1\nsync.topic.acls.enabled = true\n").flows[0]
    assert flow.sync_topic_acls == Schedule(False, 30)


def test_global_security_settings_reach_every_cluster_unless_overridden() -> None:
    config = _load("security.protocol = SASL_SSL\nsasl.mechanism = PLAIN\nB.security.protocol = SSL\n"
                   "producer.acks = all\nC.producer.acks = 1\n")
    assert config.clusters["A"].client == {"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN"}
    assert config.clusters["B"].client["security.protocol"] == "SSL"
    assert config.clusters["A"].producer == {"acks": "all"} and config.clusters["C"].producer == {"acks": "1"}


def test_secret_values_are_wrapped_or_referenced() -> None:
    config = _load("A.sasl.password = inline-pw\nB.sasl.password = ${env:B_PW}\nA.consumer.ssl.key.password = k\n")
    assert config.clusters["A"].client["sasl.password"] == Secret("inline-pw")
    assert config.clusters["B"].client["sasl.password"] == SecretRef("${env:B_PW}")
    assert config.clusters["A"].consumer["ssl.key.password"] == Secret("k")


def test_aliases_with_dashes_and_the_longest_match() -> None:
    text = ("clusters = us-east, us-east-2\nus-east.bootstrap.servers = e:1\nus-east-2.bootstrap.servers = e2:1\n"
            "us-east->us-east-2.enabled = true\nus-east-2.client.id = two\n")
    config = parse_mm2_properties(text).config
    assert config.flows[0].name == "us-east->us-east-2"
    assert config.clusters["us-east-2"].client == {"client.id": "two"} and config.clusters["us-east"].client == {}


def test_legacy_names_lose_to_current_ones_in_the_same_scope_but_a_flow_key_wins() -> None:
    config = _load("topics.blacklist = old\ntopics.exclude = new\nA->B.enabled = true\n"
                   "B->A.enabled = true\nB->A.topics.blacklist = flow-old\n")
    ab, ba = config.flows
    assert ab.topics.exclude == ("new",) and ba.topics.exclude == ("flow-old",)


def test_strait_extension_keys() -> None:
    config = _load("strait.redis.url = redis://r:6379/3\nA->B.enabled = true\n"
                   "A->B.strait.rate.limit.records.per.second = 100\nA->B.strait.checkpoint.shards = 4\n")
    assert config.redis_url == "redis://r:6379/3"
    assert config.flows[0].rate_limit_records_per_second == 100.0
    assert config.flows[0].checkpoint_shards == 4


def test_bad_checkpoint_shards_name_the_line_and_key() -> None:
    message = _error("A->B.enabled = true\nA->B.strait.checkpoint.shards = 0\n")
    assert "line 6: A->B.strait.checkpoint.shards: expected a whole number from 1 to 256, got '0'" in message


def test_unknown_keys_are_errors_with_suggestions() -> None:
    message = _error("topcs = x\nA->B.emit.checkpoint.interval.seconds = 5\nA.sasl.mechansim = PLAIN\nfoo.bar = 1\n")
    assert "line 5: topcs: unknown key; did you mean 'topics'?" in message
    assert "line 6: A->B.emit.checkpoint.interval.seconds: unknown key; did you mean " \
           "'A->B.emit.checkpoints.interval.seconds'?" in message
    assert "line 7: A.sasl.mechansim: unknown key; did you mean 'A.sasl.mechanism'?" in message
    assert "line 8: foo.bar: unknown key" in message


def test_cluster_level_unknown_key_hints_at_client_scopes() -> None:
    assert "settings for one kind of client go under A.consumer." in _error("A.max.poll.records = 5\n")


@pytest.mark.parametrize(("text", "expected"), [
    ("A->D.enabled = true\n", "line 5: A->D.enabled: flow A->D names a cluster not listed in clusters = A, B, C"),
    ("A->A.enabled = true\n", "source and target are both 'A'"),
    ("A->B.enabled = yes\n", "line 5: A->B.enabled: expected true or false, got 'yes'"),
    ("A->B.topics = a, b(\n", "line 5: A->B.topics entry 2: invalid regular expression 'b('"),
    ("topics = a,,b\n", "line 5: topics: pattern list 'a,,b' has an empty entry"),
    ("replication.factor = 0\n", "line 5: replication.factor: expected a whole number"),
    ("offset-syncs.topic.location = both\n", "expected source or target, got 'both'"),
    ("emit.heartbeats.interval.seconds = soon\n", "expected a number of seconds"),
    ("replication.policy.class = com.example.MyPolicy\n", "unknown replication policy 'com.example.MyPolicy'"),
    ("strait.target.partitions = 0\n", "line 5: strait.target.partitions: expected a partition count from 1"),
    ("A->B.enabled = true\nB->A.enabled = true\nreplication.policy.class = IdentityReplicationPolicy\n",
     "form a loop (A -> B -> A)"),
])
def test_value_errors_name_line_and_key(text: str, expected: str) -> None:
    assert expected in _error(text)


def test_missing_clusters_and_bootstrap() -> None:
    with pytest.raises(ConfigError, match="clusters: missing"):
        parse_mm2_properties("A.bootstrap.servers = a:1\n", "x")
    with pytest.raises(ConfigError, match="B.bootstrap.servers: missing"):
        parse_mm2_properties("clusters = A, B\nA.bootstrap.servers = a:1\n", "x")


def test_repeated_key_last_wins_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="strait.config"):
        config = _load("A->B.enabled = false\nA->B.enabled = true\n")
    assert config.flows[0].enabled
    assert "repeated key" in caplog.text and "A->B.enabled" in caplog.text


@pytest.mark.parametrize(("text", "start"), [
    ("", None),
    ("consumer.auto.offset.reset = latest\n", "latest"),
    ("A.consumer.auto.offset.reset = LATEST\n", "latest"),
    ("A->B.consumer.auto.offset.reset = latest\n", "latest"),
    ("A->B.source.consumer.auto.offset.reset = latest\n", "latest"),
    ("source.consumer.auto.offset.reset = earliest\n", "earliest"),
    # a flow's own key wins over its source cluster's, a cluster's over the global one
    ("A.consumer.auto.offset.reset = latest\nA->B.consumer.auto.offset.reset = earliest\n", "earliest"),
    ("consumer.auto.offset.reset = latest\nA.consumer.auto.offset.reset = earliest\n", "earliest"),
    # within one scope source.consumer. wins, whatever the order in the file
    ("A->B.source.consumer.auto.offset.reset = latest\nA->B.consumer.auto.offset.reset = earliest\n", "latest"),
    ("B.consumer.auto.offset.reset = latest\n", None),  # the target's consumer copies nothing
])
def test_the_consumer_offset_reset_is_where_a_partition_without_evidence_starts(text: str, start: str | None) -> None:
    config = _load("A->B.enabled = true\n" + text)
    assert config.flow("A->B").start == start
    assert "auto.offset.reset" not in config.cluster("A").consumer  # not passed to strait's own consumers


@pytest.mark.parametrize("value", ["none", "by_duration:PT1H", "soonest"])
def test_an_offset_reset_strait_cannot_honour_is_refused(value: str) -> None:
    message = _error(f"A->B.enabled = true\nA.consumer.auto.offset.reset = {value}\n")
    assert f"line 6: A.consumer.auto.offset.reset: strait starts a partition" in message and repr(value) in message


@pytest.mark.parametrize(("key", "instead"), [
    ("A->B.consumer.max.poll.records", "A.consumer.max.poll.records"),
    ("A->B.source.admin.request.timeout.ms", "A.admin.request.timeout.ms"),
    ("A->B.producer.linger.ms", "B.producer.linger.ms"),
    ("A->B.target.admin.request.timeout.ms", "B.admin.request.timeout.ms"),
])
def test_a_client_setting_of_one_flow_is_refused_naming_the_cluster_key(key: str, instead: str) -> None:
    message = _error(f"A->B.enabled = true\n{key} = 5\n")
    assert f"line 6: {key}: strait keeps client settings per cluster, not per flow: set {instead}" in message


@pytest.mark.parametrize(("line", "instead"), [
    ("topic.filter.class = com.example.MyFilter", "strait runs no Java classes: it filters with the topics, groups"),
    ("A->B.transforms = mask", "strait copies records unchanged: it runs no transforms"),
    ("forwarding.admin.class = com.example.Admin", "strait runs no Java classes: it creates and alters topics itself"),
])
def test_a_java_class_or_transform_strait_cannot_run_is_refused(line: str, instead: str) -> None:
    key = line.split(" = ")[0]
    assert f"line 6: {key}: {instead}" in _error(f"A->B.enabled = true\n{line}\n")


def test_mm2_defaults_of_class_keys_are_taken_as_they_are() -> None:
    loaded = parse_mm2_properties(BASE + "A->B.enabled = true\n"
                                  "topic.filter.class = org.apache.kafka.connect.mirror.DefaultTopicFilter\n"
                                  "A->B.transforms = \n", "mm2.properties")
    assert set(loaded.ignored_keys) == {"topic.filter.class", "A->B.transforms"}


@pytest.mark.parametrize(("text", "expected"), [
    ("A->B.enabled = true\nB->A.enabled = true\nexactly.once.source.support = enabled\n", {"A->B": True, "B->A": True}),
    # MM2's worker setting per target cluster: the flows into B
    ("A->B.enabled = true\nB->A.enabled = true\nB.exactly.once.source.support = enabled\n",
     {"A->B": True, "B->A": False}),
    # the cluster's setting wins over the top level one, a flow's own over both; preparing copies at least once
    ("A->B.enabled = true\nC->B.enabled = true\nexactly.once.source.support = enabled\n"
     "B.exactly.once.source.support = preparing\nC->B.exactly.once.source.support = ENABLED\n",
     {"A->B": False, "C->B": True}),
    ("A->B.enabled = true\n", {"A->B": False}),
])
def test_exactly_once_source_support_turns_on_the_exactly_once_mode_of_the_flows_into_a_cluster(
        text: str, expected: dict[str, bool]) -> None:
    config = _load(text)
    assert {flow.name: flow.exactly_once for flow in config.flows if flow.enabled} == expected  # type: ignore[attr-defined]


def test_a_bad_exactly_once_value_or_an_acks_it_cannot_use_is_refused_naming_the_key() -> None:
    message = _error("A->B.enabled = true\nB.exactly.once.source.support = required\n")
    assert "B.exactly.once.source.support" in message and "expected enabled, preparing, disabled" in message
    message = _error("A->B.enabled = true\nexactly.once.source.support = enabled\nB.producer.acks = 1\n")
    assert "exactly_once: cluster B's producer settings: acks=1 cannot be used" in message
    message = _error("A->B.enabled = true\nexactly.once.source.support = enabled\n"
                     "B.producer.max.in.flight.requests.per.connection = 10\n")
    assert "max.in.flight.requests.per.connection=10 cannot be used" in message
    message = _error("A->B.enabled = true\nexactly.once.source.support = enabled\nB.producer.max.in.flight = 0\n")
    assert "max.in.flight=0 cannot be used" in message
    message = _error("A->B.enabled = true\nexactly.once.source.support = enabled\nB.producer.transactional.id = mine\n")
    assert "transactional.id is strait's own (one per copier, from the flow's name): remove it" in message
    allowed = parse_mm2_properties(BASE + "A->B.enabled = true\nexactly.once.source.support = enabled\n"
                                   "B.producer.max.in.flight.requests.per.connection = 5\n", "mm2.properties")
    assert [flow.exactly_once for flow in allowed.config.flows if flow.enabled] == [True]  # type: ignore[attr-defined]


@pytest.mark.parametrize("line", ["B.producer.delivery.timeout.ms = 0\n", "B.producer.message.timeout.ms = soon\n"])
def test_a_delivery_timeout_the_hand_off_cannot_wait_for_is_refused_naming_the_key(line: str) -> None:
    message = _error("A->B.enabled = true\n" + line)
    key, value = (part.strip() for part in line.removeprefix("B.producer.").split("="))
    assert f"cluster B's producer settings: {key}={value} cannot be used" in message
