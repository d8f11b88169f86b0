"""strait's YAML configuration: defaults, flow_defaults, and errors naming file, key path and problem."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from strait.config import (
    DEFAULT_REDIS_URL,
    FlowConfig,
    Schedule,
    Secret,
    SecretRef,
    Selection,
    load_config,
    load_yaml,
)
from strait.errors import ConfigError
from strait.filters import GROUPS_EXCLUDE_DEFAULT, TOPICS_EXCLUDE_DEFAULT

DATA = Path(__file__).parents[1] / "data" / "config"
CLUSTERS = """
clusters:
  A: {bootstrap_servers: "a:9092"}
  B: {bootstrap_servers: "b:9092"}
  C: {bootstrap_servers: "c:9092"}
"""


def _write(tmp_path: Path, text: str, name: str = "strait.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def _error(tmp_path: Path, text: str) -> str:
    path = _write(tmp_path, text)
    with pytest.raises(ConfigError) as caught:
        load_yaml(path)
    message = str(caught.value)
    assert message.startswith(f"{path}: "), message
    return message


def test_minimal_file_gets_strait_defaults(tmp_path: Path) -> None:
    config = load_yaml(_write(tmp_path, CLUSTERS + "flows:\n  - {source: A, target: B}\n"))
    flow = config.flow("A->B")
    assert config.redis_url == DEFAULT_REDIS_URL
    assert flow == FlowConfig("A", "B")
    assert flow.enabled and flow.name == "A->B"
    assert flow.topics == Selection((".*",), TOPICS_EXCLUDE_DEFAULT)
    assert flow.groups == Selection((".*",), GROUPS_EXCLUDE_DEFAULT)
    assert flow.replication_policy == "default" and flow.separator == "." and flow.internal_topic_separator_enabled
    for schedule in (flow.refresh_topics, flow.refresh_groups, flow.sync_topic_configs, flow.sync_topic_acls):
        assert schedule == Schedule(True, 30)
    assert flow.emit_checkpoints == Schedule(True, 5)
    assert flow.emit_heartbeats == Schedule(True, 1)
    assert flow.sync_group_offsets == Schedule(False, 5)
    assert flow.offset_syncs_topic_location == "source"
    assert flow.replication_factor == 2
    assert flow.rate_limit_records_per_second is None
    assert flow.checkpoint_shards == 6
    assert flow.heartbeats_replication_enabled


def test_full_example_loads_with_references_kept(tmp_path: Path) -> None:
    config = load_yaml(DATA / "full.yaml")
    assert set(config.clusters) == {"primary", "backup", "dr"}
    assert isinstance(config.redis_url, SecretRef)
    jaas = config.clusters["primary"].client["sasl.jaas.config"]
    assert isinstance(jaas, SecretRef) and "${env:PRIMARY_SCRAM_PASSWORD}" in jaas.text
    assert [f.name for f in config.flows] == ["primary->backup", "backup->primary", "primary->dr"]
    assert [f.name for f in config.enabled_flows] == ["primary->backup", "primary->dr"]


def test_flow_defaults_merge_field_by_field(tmp_path: Path) -> None:
    config = load_yaml(_write(tmp_path, CLUSTERS + textwrap.dedent("""
    flow_defaults:
      sync_group_offsets: {enabled: true}
      topics: {include: ['orders.*']}
      replication_factor: 3
    flows:
      - {source: A, target: B, sync_group_offsets: {interval_seconds: 2.5}, topics: {exclude: []}}
      - {source: A, target: C, replication_factor: 1}
    """)))
    ab, ac = config.flows
    assert ab.sync_group_offsets == Schedule(True, 2.5)
    assert ab.topics == Selection(("orders.*",), ())
    assert ab.replication_factor == 3 and ac.replication_factor == 1
    assert ac.topics == Selection(("orders.*",), TOPICS_EXCLUDE_DEFAULT)


def test_client_scalars_become_strings_and_inline_secrets_are_wrapped(tmp_path: Path) -> None:
    config = load_yaml(_write(tmp_path, """
    clusters:
      A:
        bootstrap_servers: a:9092
        client: {sasl.password: hunter2, enable.idempotence: true, sasl.username: bob}
        producer: {linger.ms: 5, batch.num.messages: 1.5}
    """))
    cluster = config.clusters["A"]
    assert cluster.client == {"sasl.password": Secret("hunter2"), "enable.idempotence": "true", "sasl.username": "bob"}
    assert cluster.producer == {"linger.ms": "5", "batch.num.messages": "1.5"}


def test_policy_class_names_are_accepted_and_normalised(tmp_path: Path) -> None:
    config = load_yaml(_write(tmp_path, CLUSTERS + textwrap.dedent("""
    flows:
      - {source: A, target: B, replication_policy: org.apache.kafka.connect.mirror.IdentityReplicationPolicy}
    """)))
    assert config.flows[0].replication_policy == "identity"


def test_malformed_yaml_names_the_line(tmp_path: Path) -> None:
    message = _error(tmp_path, "clusters:\n  A: {bootstrap_servers: a:9092\n  B: x\n")
    assert "line 3" in message and "malformed YAML" in message


def test_repeated_key_is_refused(tmp_path: Path) -> None:
    message = _error(tmp_path, CLUSTERS + "  A: {bootstrap_servers: other:9092}\n")
    assert "key 'A' appears twice" in message


def test_unknown_keys_are_reported_with_a_suggestion(tmp_path: Path) -> None:
    message = _error(tmp_path, """
    clusters:
      A: {bootstrap_servers: "a:9092", clinet: {}}
      B: {bootstrap_servers: "b:9092"}
    flow:
      - {}
    flows:
      - {source: A, target: B, topic: {include: [x]}, sync_group_offsets: {enable: true}}
    """)
    assert "clusters.A.clinet: unknown key; did you mean 'client'?" in message
    assert "flow: unknown key; did you mean 'flows'?" in message
    assert "flows[0].topic: unknown key; did you mean 'topics'?" in message
    assert "flows[0].sync_group_offsets.enable: unknown key; did you mean 'enabled'?" in message


@pytest.mark.parametrize(("flow", "expected"), [
    ("{source: A, target: B, enabled: 'yes please'}", "flows[0].enabled: expected true or false, got a string"),
    ("{source: A, target: B, topics: {include: '.*'}}", "flows[0].topics.include: expected a list"),
    ("{source: A, target: B, topics: {include: [a, 7]}}", "flows[0].topics.include[1]: expected a string, got a number"),
    ("{source: A, target: B, emit_checkpoints: {interval_seconds: 0}}",
     "flows[0].emit_checkpoints.interval_seconds: expected a number of seconds above 0, got 0"),
    ("{source: A, target: B, replication_factor: 0}", "flows[0].replication_factor: expected a whole number"),
    ("{source: A, target: B, rate_limit_records_per_second: -5}", "flows[0].rate_limit_records_per_second"),
    ("{source: A, target: B, checkpoint_shards: 0}",
     "flows[0].checkpoint_shards: expected a whole number from 1 to 256, got 0"),
    ("{source: A, target: B, offset_syncs_topic_location: middle}",
     "flows[0].offset_syncs_topic_location: expected one of source, target, got 'middle'"),
    ("{source: A, target: B, separator: 7}", "flows[0].separator: expected a string, got a number (quote it)"),
    ("{source: A, target: B, replication_policy: identiy}", "did you mean 'identity'?"),
    ("{source: A}", "flows[0].target: missing"),
    ("[A, B]", "flows[0]: expected a mapping"),
])
def test_wrong_types_name_the_key_path(tmp_path: Path, flow: str, expected: str) -> None:
    assert expected in _error(tmp_path, CLUSTERS + f"flows:\n  - {flow}\n")


def test_regex_that_does_not_compile_names_its_index(tmp_path: Path) -> None:
    message = _error(tmp_path, CLUSTERS + "flows:\n  - {source: A, target: B, topics: {include: [a, b, 'c(']}}\n")
    assert "flows[0].topics.include[2]: invalid regular expression 'c('" in message


def test_cluster_problems(tmp_path: Path) -> None:
    message = _error(tmp_path, """
    clusters:
      A: {client: {}}
      "x.y": {bootstrap_servers: "h:1"}
      B: {bootstrap_servers: "b:9092", client: {bootstrap.servers: "c:1", acks: [1]}}
    """)
    assert "clusters.A.bootstrap_servers: missing" in message
    assert "clusters.x.y: a cluster alias is letters" in message
    assert "clusters.B.client.bootstrap.servers: set bootstrap_servers instead" in message
    assert "clusters.B.client.acks: expected a setting name and a scalar value" in message


def test_flow_naming_an_unknown_cluster(tmp_path: Path) -> None:
    message = _error(tmp_path, CLUSTERS + "flows:\n  - {source: A, target: D}\n")
    assert "flows[0] (A->D): target cluster 'D' is not defined (clusters: A, B, C)" in message


def test_flow_from_a_cluster_to_itself(tmp_path: Path) -> None:
    assert "source and target are both 'A'" in _error(tmp_path, CLUSTERS + "flows:\n  - {source: A, target: A}\n")


def test_duplicate_flows(tmp_path: Path) -> None:
    message = _error(tmp_path, CLUSTERS + "flows:\n  - {source: A, target: B}\n  - {source: A, target: B}\n")
    assert "flows[1] (A->B): flow A->B is defined twice (also at flows[0] (A->B))" in message


@pytest.mark.parametrize("flows", [
    [("A", "B", "identity"), ("B", "A", "identity")],
    [("A", "B", "identity"), ("B", "A", "default")],
    [("A", "B", "default"), ("B", "C", "identity"), ("C", "A", "default")],
])
def test_loops_with_the_identity_policy_are_refused(tmp_path: Path, flows: list[tuple[str, str, str]]) -> None:
    listed = "".join(f"  - {{source: {s}, target: {t}, replication_policy: {p}}}\n" for s, t, p in flows)
    message = _error(tmp_path, CLUSTERS + "flows:\n" + listed)
    assert "form a loop" in message and "identity replication policy" in message and "forever" in message
    assert message.count("form a loop") == 1


@pytest.mark.parametrize("flows", [
    "  - {source: A, target: B}\n  - {source: B, target: A}\n",  # default policy: names show the loop
    "  - {source: A, target: B, replication_policy: identity}\n"
    "  - {source: B, target: A, replication_policy: identity, enabled: false}\n",
    "  - {source: A, target: B, replication_policy: identity}\n"
    "  - {source: B, target: C, replication_policy: identity}\n",
])
def test_loops_the_policy_can_detect_or_that_do_not_run_are_accepted(tmp_path: Path, flows: str) -> None:
    assert load_yaml(_write(tmp_path, CLUSTERS + "flows:\n" + flows)).flows


def test_many_problems_are_reported_together(tmp_path: Path) -> None:
    message = _error(tmp_path, CLUSTERS + "flows:\n  - {source: A, target: B, enabled: 1, separator: 2}\nextra: 1\n")
    assert "3 problems" in message


def test_unreadable_and_empty_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="nope.yaml: cannot read"):
        load_yaml(tmp_path / "nope.yaml")
    assert "expected a mapping with clusters and flows, got nothing" in _error(tmp_path, "")


def test_load_config_picks_the_format(tmp_path: Path) -> None:
    assert load_config(DATA / "full.yaml") == load_config(DATA / "mm2-full.properties")
    plain = _write(tmp_path, CLUSTERS, name="strait.conf")
    assert set(load_config(plain).clusters) == {"A", "B", "C"}
    mm2 = _write(tmp_path, "clusters = A\nA.bootstrap.servers = a:1\n", name="mm2.conf")
    assert set(load_config(mm2).clusters) == {"A"}


def test_flow_builds_its_policy_and_filters() -> None:
    config = load_yaml(DATA / "full.yaml")
    backup, _, dr = config.flows
    assert backup.policy().format_remote_topic("primary", "orders.eu") == "primary.orders.eu"
    assert dr.policy().format_remote_topic("primary", "orders.eu") == "orders.eu"
    assert backup.topic_filter().should_replicate_topic("orders.eu")
    assert not backup.topic_filter().should_replicate_topic("payments.eu")
    assert dr.group_filter().should_replicate_group("app") and not dr.group_filter().should_replicate_group("batch-1")
    assert not dr.config_property_filter().should_replicate_config_property("retention.ms")


def test_a_consumer_offset_reset_is_refused_pointing_at_the_flows_start(tmp_path: Path) -> None:
    message = _error(tmp_path, """
    clusters:
      A: {bootstrap_servers: "a:9092", consumer: {auto.offset.reset: latest}}
      B: {bootstrap_servers: "b:9092"}
    flows:
      - {source: A, target: B}
    """)
    assert "clusters.A.consumer.auto.offset.reset: where a partition starts" in message and "flow's start" in message
