"""Whole-configuration checks: identity loops, inline secrets, problem collection, masking helpers."""

from __future__ import annotations

import pytest

from strait.config import ClusterConfig, FlowConfig, Secret, SecretRef, StraitConfig
from strait.config.document import config_from_dict
from strait.config.secrets import mask_settings
from strait.config.validate import Problems, describe_inline_secrets, identity_loops, inline_secrets
from strait.errors import ConfigError
from strait.kafka.admin import SameClusterError, check_distinct_clusters


def _flow(source: str, target: str, policy: str = "default", enabled: bool = True) -> FlowConfig:
    return FlowConfig(source, target, enabled=enabled, replication_policy=policy)


def test_identity_loops_are_found_once_per_loop() -> None:
    flows = [_flow("A", "B", "identity"), _flow("B", "A", "identity"), _flow("B", "C"), _flow("C", "D")]
    loops = identity_loops(flows)
    assert [[f.name for f in loop] for loop in loops] == [["A->B", "B->A"]]


def test_long_loop_through_default_flows() -> None:
    flows = [_flow("A", "B"), _flow("B", "C"), _flow("C", "D", "identity"), _flow("D", "A")]
    assert [[f.name for f in loop] for loop in identity_loops(flows)] == [["C->D", "D->A", "A->B", "B->C"]]


def test_disabled_flows_break_loops() -> None:
    assert identity_loops([_flow("A", "B", "identity"), _flow("B", "A", enabled=False)]) == []


def test_inline_secrets_are_found_everywhere_they_can_hide() -> None:
    config = StraitConfig(
        clusters={
            "A": ClusterConfig("A", "a:1", client={"sasl.password": Secret("x"), "sasl.username": "u"},
                               producer={"ssl.key.password": Secret("y")}),
            "B": ClusterConfig("B", "b:1", client={"sasl.password": SecretRef("${env:PW}")}),
        },
        redis_url="redis://:inline@h:6379/0",
    )
    found = inline_secrets(config)
    assert describe_inline_secrets(found, "strait.yaml") == (
        "clusters.A.client.sasl.password, clusters.A.producer.ssl.key.password, redis_url")
    assert describe_inline_secrets(found, "mm2.properties") == (
        "A.sasl.password, A.producer.ssl.key.password, strait.redis.url")
    assert inline_secrets(StraitConfig(clusters={}, redis_url=SecretRef("redis://:${env:P}@h:1/0"))) == []


def test_problems_are_deduplicated_and_capped() -> None:
    problems = Problems("f.yaml")
    problems.raise_if_any()
    for index in range(30):
        problems.add(f"k{index}", "bad")
        problems.add(f"k{index}", "bad")
    with pytest.raises(ConfigError) as caught:
        problems.raise_if_any()
    message = str(caught.value)
    assert message.startswith("f.yaml: 30 problems:") and "... and 10 more" in message


def test_mask_settings_for_log_lines() -> None:
    assert mask_settings({"sasl.username": "u", "sasl.password": "p", "bootstrap.servers": "b"}) == {
        "sasl.username": "u", "sasl.password": "******", "bootstrap.servers": "b"}


def _two_way(aliases: tuple[str, str], servers: tuple[str, str], separator: str = "-") -> dict[str, object]:
    return {"clusters": {aliases[0]: {"bootstrap_servers": servers[0]}, aliases[1]: {"bootstrap_servers": servers[1]}},
            "flows": [{"source": aliases[0], "target": aliases[1], "separator": separator},
                      {"source": aliases[1], "target": aliases[0], "separator": separator}]}


def test_aliases_containing_the_separator_are_accepted_when_unambiguous() -> None:
    config = config_from_dict(_two_way(("cluster-1", "cluster-2"), ("a:9092", "b:9092")), "amq.yaml")
    assert config.flow("cluster-1->cluster-2").policy().topic_source("cluster-2-x") == "cluster-2"


def test_an_alias_plus_the_separator_starting_another_alias_is_refused() -> None:
    with pytest.raises(ConfigError) as raised:
        config_from_dict(_two_way(("cluster", "cluster-east"), ("a:9092", "b:9092")), "ambiguous.yaml")
    message = str(raised.value)
    assert "'cluster' and 'cluster-east' are ambiguous with separator '-'" in message and "ambiguous.yaml" in message


def test_one_cluster_under_two_aliases_is_refused() -> None:
    with pytest.raises(ConfigError) as raised:
        config_from_dict(_two_way(("east", "west"), ("k1:9092,k2:9092", "K2:9092")), "same.yaml")
    assert "clusters 'east' and 'west' share bootstrap servers k2:9092" in str(raised.value)


def test_aliases_reaching_the_same_cluster_id_are_refused_when_the_flow_starts() -> None:
    check_distinct_clusters("east->west", ("east", "id-1"), ("west", "id-2"))
    check_distinct_clusters("east->west", ("east", None), ("west", None))  # a broker that names no id
    with pytest.raises(SameClusterError) as raised:
        check_distinct_clusters("east->west", ("east", "id-1"), ("west", "id-1"))
    assert "clusters 'east' and 'west' are the same Kafka cluster (id id-1)" in str(raised.value)
