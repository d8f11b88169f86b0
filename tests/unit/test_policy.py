"""Replication policies against MirrorMaker 2's semantics, edge cases first, then properties."""

from __future__ import annotations

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st
from strait.errors import ConfigError
from strait.filters import TopicFilter
from strait.policy import (
    DEFAULT_POLICY_CLASS,
    IDENTITY_POLICY_CLASS,
    DefaultReplicationPolicy,
    IdentityReplicationPolicy,
    ReplicationPolicy,
    is_cycle,
    java_split,
    policy_from_name,
    should_replicate_topic,
)

DEFAULT = DefaultReplicationPolicy()
IDENTITY = IdentityReplicationPolicy()
IDENTITY_A = IdentityReplicationPolicy(source_cluster_alias="A")

# Characters of legal Kafka topic names, with and without the default separator.
TOPIC_CHARS = "abcXYZ019_-."
ALIAS_CHARS = "abcXYZ019_-"
aliases = st.text(ALIAS_CHARS, min_size=1, max_size=8)
topics = st.text(TOPIC_CHARS, min_size=1, max_size=20)


# --- Java String.split ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "separator", "pieces"),
    [
        ("a.b", ".", ["a", "b"]),
        ("a.", ".", ["a"]),
        (".b", ".", ["", "b"]),
        ("a..b", ".", ["a", "", "b"]),
        ("a..", ".", ["a"]),
        ("..", ".", []),
        ("", ".", [""]),
        ("plain", ".", ["plain"]),
        ("a__b__", "__", ["a", "b"]),
        ("abc", "", ["a", "b", "c"]),
        ("", "", [""]),
    ],
)
def test_java_split_drops_trailing_and_keeps_leading_empty_pieces(
    text: str, separator: str, pieces: list[str]
) -> None:
    assert java_split(text, separator) == pieces


# --- DefaultReplicationPolicy ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("topic", "source", "upstream", "original"),
    [
        ("a.b", "a", "b", "b"),
        ("a.b.c", "a", "b.c", "c"),
        ("a.", None, None, "a."),
        ("a..b", "a", ".b", "b"),
        (".b", "", "b", "b"),
        ("plain", None, None, "plain"),
        ("a.b.", "a", "b.", "b."),
        (".", None, None, "."),
        ("", None, None, ""),
        ("B.A.orders", "B", "A.orders", "orders"),
    ],
)
def test_default_policy_parses_names_like_java(
    topic: str, source: str | None, upstream: str | None, original: str
) -> None:
    assert DEFAULT.topic_source(topic) == source
    assert DEFAULT.upstream_topic(topic) == upstream
    assert DEFAULT.original_topic(topic) == original


def test_default_policy_formats_remote_topics_with_the_separator() -> None:
    assert DEFAULT.format_remote_topic("A", "orders") == "A.orders"
    assert DefaultReplicationPolicy("_").format_remote_topic("A", "orders") == "A_orders"
    assert DefaultReplicationPolicy("--").format_remote_topic("us-east", "t") == "us-east--t"


def test_custom_separator_parses_on_the_literal_separator() -> None:
    policy = DefaultReplicationPolicy("_")
    assert policy.topic_source("A_orders.v2") == "A"
    assert policy.upstream_topic("A_orders.v2") == "orders.v2"
    assert policy.topic_source("orders.v2") is None
    # A regex metacharacter as separator is still literal.
    star = DefaultReplicationPolicy("*")
    assert star.topic_source("A*t") == "A"
    assert star.topic_source("At") is None


def test_empty_separator_splits_between_characters_as_java_does() -> None:
    policy = DefaultReplicationPolicy("")
    assert policy.topic_source("abc") == "a"
    assert policy.upstream_topic("abc") == "bc"
    assert policy.topic_source("a") is None
    assert policy.checkpoints_topic("A") == "Acheckpointsinternal"


def test_dotted_local_names_look_remote_under_the_default_policy() -> None:
    assert DEFAULT.topic_source("orders.v2") == "orders"


def test_internal_topic_names_default() -> None:
    assert DEFAULT.heartbeats_topic() == "heartbeats"
    assert DEFAULT.checkpoints_topic("A") == "A.checkpoints.internal"
    assert DEFAULT.offset_syncs_topic("B") == "mm2-offset-syncs.B.internal"


def test_internal_topic_names_follow_a_custom_separator_when_enabled() -> None:
    policy = DefaultReplicationPolicy("_")
    assert policy.checkpoints_topic("A") == "A_checkpoints_internal"
    assert policy.offset_syncs_topic("B") == "mm2-offset-syncs_B_internal"
    assert policy.heartbeats_topic() == "heartbeats"
    assert policy.is_checkpoints_topic("A_checkpoints_internal")
    assert not policy.is_checkpoints_topic("A.checkpoints.internal")
    assert policy.is_mm2_internal_topic("mm2-offset-syncs_B_internal")
    assert not policy.is_mm2_internal_topic("mm2-offset-syncs.B.internal")


def test_internal_topic_names_use_a_dot_when_the_separator_flag_is_off() -> None:
    policy = DefaultReplicationPolicy("_", internal_topic_separator_enabled=False)
    assert policy.format_remote_topic("A", "t") == "A_t"
    assert policy.checkpoints_topic("A") == "A.checkpoints.internal"
    assert policy.offset_syncs_topic("B") == "mm2-offset-syncs.B.internal"
    assert policy.is_checkpoints_topic("A.checkpoints.internal")
    assert policy.is_internal_topic("mm2-offsets.A.internal")


@pytest.mark.parametrize(
    ("topic", "heartbeats"),
    [
        ("heartbeats", True),
        ("A.heartbeats", True),
        ("B.A.heartbeats", True),
        ("app-heartbeats", False),
        ("heartbeats.x", False),
        ("A.heartbeats.B", False),
    ],
)
def test_is_heartbeats_topic_follows_the_lineage(topic: str, heartbeats: bool) -> None:
    assert DEFAULT.is_heartbeats_topic(topic) is heartbeats


@pytest.mark.parametrize(
    ("topic", "mm2_internal", "internal"),
    [
        ("A.checkpoints.internal", True, True),
        ("mm2-offset-syncs.B.internal", True, True),
        ("mm2-offsets.A.internal", True, True),
        ("mm2-status.A.internal", True, True),
        ("mm2x.internal", True, True),
        ("__consumer_offsets", False, True),
        ("__x", False, True),
        (".hidden", False, True),
        (".b", False, True),
        # Kafka 4.x: other *.internal / *-internal names are ordinary topics (KAFKA-17200).
        ("x.internal", False, False),
        ("a-internal", False, False),
        ("connect-offsets", False, False),
        ("mm2.internalx", False, False),
        ("orders", False, False),
        ("heartbeats", False, False),
    ],
)
def test_internal_topics_follow_kafka_4(topic: str, mm2_internal: bool, internal: bool) -> None:
    assert DEFAULT.is_mm2_internal_topic(topic) is mm2_internal
    assert DEFAULT.is_internal_topic(topic) is internal


def test_policy_rejects_non_string_separator() -> None:
    with pytest.raises(ConfigError, match="separator"):
        DefaultReplicationPolicy(None)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="internal_topic_separator_enabled"):
        DefaultReplicationPolicy(".", "yes")  # type: ignore[arg-type]


# --- IdentityReplicationPolicy --------------------------------------------------------------------


def test_identity_keeps_names_except_heartbeat_like_ones() -> None:
    assert IDENTITY.format_remote_topic("A", "orders") == "orders"
    assert IDENTITY.format_remote_topic("A", "a.b") == "a.b"
    assert IDENTITY.format_remote_topic("A", "heartbeats") == "A.heartbeats"
    assert IDENTITY.format_remote_topic("A", "app-heartbeats") == "A.app-heartbeats"
    assert IdentityReplicationPolicy("_").format_remote_topic("A", "heartbeats") == "A_heartbeats"


def test_identity_topic_source_is_the_configured_alias() -> None:
    assert IDENTITY.topic_source("orders") is None
    assert IDENTITY_A.topic_source("orders") == "A"
    assert IDENTITY_A.topic_source("x.y") == "A"
    assert IDENTITY_A.upstream_topic("orders") == "orders"
    assert IDENTITY_A.original_topic("orders") == "orders"


def test_identity_parses_heartbeat_lineage_with_the_default_rules() -> None:
    assert IDENTITY_A.topic_source("heartbeats") is None
    assert IDENTITY_A.topic_source("B.heartbeats") == "B"
    assert IDENTITY_A.upstream_topic("B.heartbeats") == "heartbeats"
    assert IDENTITY_A.original_topic("C.B.heartbeats") == "heartbeats"
    assert IDENTITY_A.is_heartbeats_topic("C.B.heartbeats")
    assert not IDENTITY_A.is_heartbeats_topic("orders")


def test_identity_policy_cannot_see_cycles() -> None:
    # A<->B with identity naming: "orders" from B looks like it came from A, upstream is itself.
    assert not is_cycle(IdentityReplicationPolicy(source_cluster_alias="B"), "orders", "A")
    # ...but the heartbeat lineage is still caught.
    assert is_cycle(IDENTITY_A, "A.heartbeats", "A")


def test_identity_policy_sees_a_cycle_only_when_its_own_alias_is_the_target() -> None:
    assert is_cycle(IDENTITY_A, "orders", "A")


# --- cycles and the replication decision ----------------------------------------------------------


@pytest.mark.parametrize(
    ("topic", "target", "cycle"),
    [
        ("orders", "A", False),
        ("A.orders", "A", True),
        ("A.orders", "C", False),
        ("B.A.orders", "A", True),
        ("C.B.A.orders", "A", True),
        ("C.B.A.orders", "D", False),
        ("orders.v2", "orders", True),
        (".orders", "", True),
        ("a.", "a", False),
    ],
)
def test_is_cycle_walks_the_upstream_names(topic: str, target: str, cycle: bool) -> None:
    assert is_cycle(DEFAULT, topic, target) is cycle


def test_should_replicate_topic_active_active() -> None:
    everything = TopicFilter()
    # Flow A->B replicates local topics of A...
    assert should_replicate_topic(DEFAULT, everything, "orders", "B")
    # ...but not B.orders (mirrored from B) back to B.
    assert not should_replicate_topic(DEFAULT, everything, "B.orders", "B")
    # A topic that came from elsewhere may go on to a third cluster.
    assert should_replicate_topic(DEFAULT, everything, "C.orders", "B")


def test_should_replicate_topic_skips_internal_topics_even_when_included() -> None:
    everything = TopicFilter(include=[".*"], exclude=[])
    for topic in ("__consumer_offsets", ".x", "A.checkpoints.internal", "mm2-offset-syncs.B.internal"):
        assert not should_replicate_topic(DEFAULT, everything, topic, "B")


def test_heartbeat_topics_bypass_the_filter_unless_heartbeat_replication_is_off() -> None:
    nothing = TopicFilter(include=[], exclude=[])
    assert should_replicate_topic(DEFAULT, nothing, "heartbeats", "B")
    assert should_replicate_topic(DEFAULT, nothing, "C.heartbeats", "B")
    assert not should_replicate_topic(DEFAULT, nothing, "B.heartbeats", "B")
    assert not should_replicate_topic(
        DEFAULT, nothing, "heartbeats", "B", heartbeats_replication_enabled=False
    )
    assert not should_replicate_topic(DEFAULT, nothing, "orders", "B")


def test_filter_exclusions_apply() -> None:
    only_orders = TopicFilter(include=["orders.*"], exclude=[r".*\.replica"])
    assert should_replicate_topic(DEFAULT, only_orders, "orders", "B")
    assert not should_replicate_topic(DEFAULT, only_orders, "payments", "B")
    assert not should_replicate_topic(DEFAULT, only_orders, "orders.replica", "B")


# --- factory --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "expected_type"),
    [
        ("default", DefaultReplicationPolicy),
        ("Default", DefaultReplicationPolicy),
        (DEFAULT_POLICY_CLASS, DefaultReplicationPolicy),
        (f"  {DEFAULT_POLICY_CLASS} ", DefaultReplicationPolicy),
        ("DefaultReplicationPolicy", DefaultReplicationPolicy),
        ("identity", IdentityReplicationPolicy),
        (IDENTITY_POLICY_CLASS, IdentityReplicationPolicy),
    ],
)
def test_policy_from_name_accepts_java_class_and_short_names(name: str, expected_type: type) -> None:
    policy = policy_from_name(name, "_", False)
    assert type(policy) is expected_type
    assert isinstance(policy, DefaultReplicationPolicy)
    assert policy.separator == "_"
    assert policy.internal_topic_separator_enabled is False


def test_policy_from_name_passes_the_source_alias_to_identity() -> None:
    policy = policy_from_name("identity", source_cluster_alias="A")
    assert policy == IdentityReplicationPolicy(".", True, "A")
    assert policy.topic_source("t") == "A"


@pytest.mark.parametrize(
    "name", ["com.example.MyPolicy", "", "defaults", "org.apache.kafka.connect.mirror.Foo"]
)
def test_policy_from_name_rejects_unknown_names_naming_the_value(name: str) -> None:
    with pytest.raises(ConfigError) as excinfo:
        policy_from_name(name)
    assert repr(name) in str(excinfo.value)
    assert "identity" in str(excinfo.value)


def test_policies_are_frozen_and_comparable() -> None:
    assert DefaultReplicationPolicy() == DefaultReplicationPolicy(".", True)
    assert DefaultReplicationPolicy("_") != DefaultReplicationPolicy()
    with pytest.raises(AttributeError):
        DEFAULT.separator = "_"  # type: ignore[misc]


def test_original_topic_stops_on_a_custom_policy_that_loops() -> None:
    class Looping(ReplicationPolicy):
        def format_remote_topic(self, source_alias: str, topic: str) -> str:
            return topic

        def topic_source(self, topic: str) -> str | None:
            return "X"

        def upstream_topic(self, topic: str) -> str | None:
            return {"a": "b", "b": "a"}[topic]

    assert Looping().original_topic("a") == "b"
    assert not is_cycle(Looping(), "a", "A")


# --- properties -----------------------------------------------------------------------------------


def _parseable(separator: str, alias: str, topic: str) -> bool:
    """MM2's preconditions for a lossless round trip of ``<alias><sep><topic>``.

    The separator's first occurrence must be the one after the alias, and the topic must hold more
    than separators (Java drops trailing empty pieces).
    """
    return (alias + separator).find(separator) == len(alias) and any(topic.split(separator))


@given(alias=aliases, topic=topics)
def test_upstream_of_a_remote_name_is_the_topic(alias: str, topic: str) -> None:
    assume(_parseable(".", alias, topic))
    remote = DEFAULT.format_remote_topic(alias, topic)
    assert DEFAULT.topic_source(remote) == alias
    assert DEFAULT.upstream_topic(remote) == topic


@given(separator=st.sampled_from([".", "_", "--", "::", "*", "\\"]), alias=aliases, topic=topics)
def test_round_trip_with_any_separator(separator: str, alias: str, topic: str) -> None:
    assume(_parseable(separator, alias, topic))
    policy = DefaultReplicationPolicy(separator)
    remote = policy.format_remote_topic(alias, topic)
    assert policy.topic_source(remote) == alias
    assert policy.upstream_topic(remote) == topic


@pytest.mark.parametrize(
    ("separator", "alias", "topic", "source"),
    [
        # A topic made only of separators loses its lineage: the trailing empty pieces are dropped.
        (".", "A", ".", None),
        (".", "A", "..", None),
        # An alias ending in part of a multi-character separator shifts the split.
        ("--", "-", "t", ""),
        ("--", "us-", "t", "us"),
    ],
)
def test_round_trip_fails_where_mm2_fails(separator: str, alias: str, topic: str, source: str | None) -> None:
    policy = DefaultReplicationPolicy(separator)
    assert policy.topic_source(policy.format_remote_topic(alias, topic)) == source


@given(
    hops=st.lists(aliases, min_size=0, max_size=5),
    topic=st.one_of(st.just("heartbeats"), st.text(ALIAS_CHARS, min_size=1, max_size=20)),
)
def test_original_topic_over_multi_hop_names(hops: list[str], topic: str) -> None:
    name = topic
    for alias in hops:
        name = DEFAULT.format_remote_topic(alias, name)
    assert DEFAULT.original_topic(name) == topic
    assert DEFAULT.is_heartbeats_topic(name) is (topic == "heartbeats")


@given(
    hops=st.lists(aliases, min_size=1, max_size=5),
    topic=st.text(ALIAS_CHARS, min_size=1, max_size=20),
    target=aliases,
)
def test_cycle_exactly_when_the_target_is_on_the_path(hops: list[str], topic: str, target: str) -> None:
    name = topic
    for alias in hops:
        name = DEFAULT.format_remote_topic(alias, name)
    assert is_cycle(DEFAULT, name, target) is (target in hops)


@given(topic=st.text(TOPIC_CHARS, max_size=20))
def test_upstream_is_a_strict_suffix_or_none(topic: str) -> None:
    upstream = DEFAULT.upstream_topic(topic)
    source = DEFAULT.topic_source(topic)
    assert (upstream is None) is (source is None)
    if upstream is not None and source is not None:
        assert topic == f"{source}.{upstream}"
        assert len(upstream) < len(topic)


@given(text=st.text(max_size=30), separator=st.text(min_size=1, max_size=3))
def test_java_split_has_no_trailing_empty_piece_and_rejoins(text: str, separator: str) -> None:
    pieces = java_split(text, separator)
    if len(pieces) > 1:
        assert pieces[-1] != ""
    assert text.startswith(separator.join(pieces))
    assert set(text[len(separator.join(pieces)) :]) <= set(separator)


@given(alias=aliases, topic=topics)
def test_identity_round_trip_keeps_non_heartbeat_names(alias: str, topic: str) -> None:
    assume(not topic.endswith("heartbeats"))
    policy = IdentityReplicationPolicy(source_cluster_alias=alias)
    remote = policy.format_remote_topic(alias, topic)
    assert remote == topic
    assert policy.topic_source(remote) == alias
    assert policy.original_topic(remote) == topic


_ALIAS = st.text(alphabet="ab-1", min_size=1, max_size=6).filter(lambda a: not a.startswith("-") and not a.endswith("-"))


def _unambiguous(aliases: list[str], separator: str) -> bool:
    return not any(b != a and b.startswith(a + separator) for a in aliases for b in aliases)


@given(st.lists(_ALIAS, min_size=2, max_size=4, unique=True), st.data())
def test_known_aliases_trace_every_hop_even_when_aliases_contain_the_separator(aliases: list[str],
                                                                               data: st.DataObject) -> None:
    assume(_unambiguous(aliases, "-"))
    policy = policy_from_name("default", "-", known_aliases=tuple(aliases))
    hops = data.draw(st.lists(st.sampled_from(aliases), min_size=1, max_size=3))
    topic = "orders"
    for alias in reversed(hops):
        topic = policy.format_remote_topic(alias, topic)
    assert policy.topic_source(topic) == hops[0]
    for alias in aliases:
        assert is_cycle(policy, topic, alias) == (alias in hops), (topic, alias)


def test_the_amq_two_way_example_is_a_cycle_only_with_known_aliases() -> None:
    mm2_like = policy_from_name("default", "-")
    aware = policy_from_name("default", "-", known_aliases=("cluster-1", "cluster-2"))
    assert mm2_like.topic_source("cluster-1-foo") == "cluster"  # MM2's reading: the loop goes unseen
    assert not is_cycle(mm2_like, "cluster-1-foo", "cluster-1")
    assert aware.topic_source("cluster-1-foo") == "cluster-1" and aware.upstream_topic("cluster-1-foo") == "foo"
    assert is_cycle(aware, "cluster-1-foo", "cluster-1") and not is_cycle(aware, "cluster-1-foo", "cluster-2")
    assert aware.topic_source("other-foo") == "other"  # names of unknown clusters parse as MM2 parses them
