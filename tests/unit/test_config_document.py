"""The mapping/JSON form: an exact round trip, references kept, inline secrets refused or masked."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from strait.config import (
    MASK,
    ClusterConfig,
    FlowConfig,
    Schedule,
    Secret,
    SecretRef,
    Selection,
    StraitConfig,
    config_from_dict,
    config_to_dict,
    load_yaml,
)
from strait.config.validate import identity_loops
from strait.errors import ConfigError

DATA = Path(__file__).parents[1] / "data" / "config"
ALIASES = ("A", "B", "dc-1", "us_east")
REGEXES = (".*", r"orders\..*", "a|b", "[a-z]+-v[0-9]", "__.*", "x(?:y)?")
PLAIN_KEYS = ("security.protocol", "sasl.mechanism", "client.id", "acks", "linger.ms")
SECRET_KEYS = ("sasl.password", "sasl.jaas.config", "ssl.key.password", "basic.auth.user.info")
plain_text = st.text(st.characters(blacklist_characters="${}", blacklist_categories=("Cs",)), max_size=20)
references = st.sampled_from(("${env:PW}", "${SECRET_1}", "${file:/run/s/pw}", "${file:/etc/k.properties:pw}",
                              'L required username="u" password="${env:X}";'))
RESTART_MARKS = st.sampled_from((None, "2026-11-26T10:00:00.000Z", "2026-11-26T10:00:00.001Z"))


def _json_round_trip(config: StraitConfig) -> StraitConfig:
    text = json.dumps(config_to_dict(config, secrets="references"))
    return config_from_dict(json.loads(text), "round trip")


@st.composite
def settings_maps(draw: st.DrawFn) -> dict[str, object]:
    plain = draw(st.dictionaries(st.sampled_from(PLAIN_KEYS), plain_text, max_size=3))
    secret = draw(st.dictionaries(st.sampled_from(SECRET_KEYS), references.map(SecretRef), max_size=2))
    return {**plain, **secret}


@st.composite
def flows(draw: st.DrawFn, source: str, target: str) -> FlowConfig:
    schedules = st.builds(Schedule, st.booleans(), st.floats(0.001, 1e6, allow_nan=False, allow_infinity=False))
    selections = st.builds(Selection, st.lists(st.sampled_from(REGEXES), max_size=3).map(tuple),
                           st.lists(st.sampled_from(REGEXES), max_size=3).map(tuple))
    return FlowConfig(
        source=source, target=target, enabled=draw(st.booleans()),
        topics=draw(selections), groups=draw(selections),
        replication_policy=draw(st.sampled_from(("default", "identity"))),
        separator=draw(st.sampled_from((".", "_", "--"))),
        internal_topic_separator_enabled=draw(st.booleans()),
        refresh_topics=draw(schedules), refresh_groups=draw(schedules), sync_topic_configs=draw(schedules),
        sync_topic_acls=draw(schedules), emit_heartbeats=draw(schedules), emit_checkpoints=draw(schedules),
        sync_group_offsets=draw(schedules),
        offset_syncs_topic_location=draw(st.sampled_from(("source", "target"))),
        replication_factor=draw(st.one_of(st.just(-1), st.integers(1, 5))),
        rate_limit_records_per_second=draw(st.one_of(st.none(), st.floats(0.5, 1e7, allow_nan=False))),
        heartbeats_replication_enabled=draw(st.booleans()),
        config_properties_exclude=tuple(draw(st.lists(st.sampled_from(REGEXES), max_size=3))),
        restarted_at=draw(RESTART_MARKS),
    )


@st.composite
def configs(draw: st.DrawFn) -> StraitConfig:
    aliases = draw(st.lists(st.sampled_from(ALIASES), min_size=2, max_size=4, unique=True))
    # every alias its own cluster: one cluster under two aliases is refused
    clusters = {alias: ClusterConfig(alias, draw(st.sampled_from((f"{alias}-h:9092", f"{alias}-h1:9093,{alias}-h2:9093"))),
                                     client=draw(settings_maps()), consumer=draw(settings_maps()),
                                     producer=draw(settings_maps()), admin=draw(settings_maps()))
                for alias in aliases}
    pairs = draw(st.lists(st.tuples(st.sampled_from(aliases), st.sampled_from(aliases))
                          .filter(lambda pair: pair[0] != pair[1]), max_size=4, unique=True))
    flow_list = tuple(draw(flows(source, target)) for source, target in pairs)
    assume(not identity_loops(flow_list))
    redis_url = draw(st.sampled_from(("redis://h:6379/0", SecretRef("redis://:${env:REDIS_PW}@h:6379/1"))))
    return StraitConfig(clusters=clusters, flows=flow_list, redis_url=redis_url)


@settings(max_examples=150, deadline=None)
@given(configs())
def test_json_round_trip_reproduces_the_model_exactly(config: StraitConfig) -> None:
    assert _json_round_trip(config) == config


def test_full_example_round_trips() -> None:
    config = load_yaml(DATA / "full.yaml")
    assert _json_round_trip(config) == config


def test_every_setting_is_explicit_in_the_document() -> None:
    document = config_to_dict(load_yaml(DATA / "full.yaml"), secrets="references")
    flow = document["flows"][2]
    assert flow["replication_policy"] == "identity" and flow["sync_group_offsets"] == {
        "enabled": True, "interval_seconds": 15}
    assert "flow_defaults" not in document
    assert document["clusters"]["backup"]["client"]["ssl.keystore.password"] == "${env:BACKUP_KEYSTORE_PASSWORD}"


def test_inline_secrets_are_refused_when_storing_and_masked_when_showing() -> None:
    config = StraitConfig(clusters={"A": ClusterConfig("A", "a:1", client={"sasl.password": Secret("hunter2")})})
    with pytest.raises(ConfigError, match=r"clusters\.A\.client\.sasl\.password: an inline secret cannot be stored"):
        config_to_dict(config, secrets="references")
    shown = config_to_dict(config, secrets="mask")
    assert shown["clusters"]["A"]["client"]["sasl.password"] == MASK
    assert "hunter2" not in json.dumps(shown)


def test_inline_redis_password_is_refused_when_storing_and_masked_when_showing() -> None:
    config = StraitConfig(clusters={}, redis_url="redis://:hunter2@h:6379/0")
    with pytest.raises(ConfigError, match="redis_url: an inline password cannot be stored"):
        config_to_dict(config, secrets="references")
    assert config_to_dict(config)["redis_url"] == "redis://:******@h:6379/0"


def test_equal_configs_hash_alike() -> None:
    from strait.config import load_mm2_properties

    yaml_config, mm2_config = load_yaml(DATA / "full.yaml"), load_mm2_properties(DATA / "mm2-full.properties")
    assert hash(yaml_config) == hash(mm2_config) and len({yaml_config, mm2_config}) == 1


@settings(max_examples=200, deadline=None)
@given(configs(), st.lists(RESTART_MARKS, min_size=4, max_size=4))
def test_a_flow_restarts_exactly_when_its_restart_mark_takes_a_new_value(
    served: StraitConfig, marks: list[str | None],
) -> None:
    flows = tuple(replace(flow, restarted_at=mark) for flow, mark in zip(served.flows, marks))
    newer = replace(served, flows=flows)
    expected = {flow.name for flow, old in zip(newer.flows, served.flows)
                if flow.restarted_at is not None and flow.restarted_at != old.restarted_at}
    assert newer.restarted_flows(served) == expected
    assert newer.restarted_flows(None) == frozenset()  # a service's first version: nothing ran yet
    assert newer.restarted_flows(newer) == frozenset()
    dropped = replace(newer, flows=newer.flows[1:])  # a flow removed: nothing to restart
    assert served.restarted_flows(dropped) <= {f.name for f in served.flows[1:]}
