"""Topic, group and config-property filters against MirrorMaker 2's defaults and matching rules."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st
from strait.errors import ConfigError
from strait.filters import (
    CONFIG_PROPERTIES_EXCLUDE_DEFAULT,
    TOPICS_EXCLUDE_DEFAULT_KAFKA_3,
    ConfigPropertyFilter,
    FilterPatternError,
    GroupFilter,
    TopicFilter,
    parse_pattern_list,
)

names = st.text("abcxyz.-_019", max_size=15)


# --- defaults -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("topic", "replicate"),
    [
        ("orders", True),
        ("A.orders", True),
        ("foo.replica", False),
        ("replica", True),
        ("__consumer_offsets", False),
        ("__x", False),
        ("mm2-offsets.A.internal", False),
        ("mm2-offset-syncs.B.internal", False),
        ("mm2.internal", False),
        ("mm2xinternal", True),
        # Kafka 4.x default: other *.internal / *-internal user topics are replicated.
        ("x.internal", True),
        ("a-internal", True),
        ("", True),
    ],
)
def test_default_topic_filter(topic: str, replicate: bool) -> None:
    assert TopicFilter().should_replicate_topic(topic) is replicate


def test_kafka_3_topic_exclusions_remain_available() -> None:
    legacy = TopicFilter(exclude=TOPICS_EXCLUDE_DEFAULT_KAFKA_3)
    assert not legacy.should_replicate_topic("x.internal")
    assert not legacy.should_replicate_topic("a-internal")
    assert legacy.should_replicate_topic("internal")


@pytest.mark.parametrize(
    ("group", "replicate"),
    [
        ("app", True),
        ("console-consumer-123", False),
        ("console-consumer", True),
        ("connect-sink", False),
        ("connect", True),
        ("__strait", False),
        ("my-connect-group", True),
    ],
)
def test_default_group_filter(group: str, replicate: bool) -> None:
    assert GroupFilter().should_replicate_group(group) is replicate


@pytest.mark.parametrize("name", CONFIG_PROPERTIES_EXCLUDE_DEFAULT)
def test_default_config_property_filter_excludes_mm2_list(name: str) -> None:
    assert not ConfigPropertyFilter().should_replicate_config_property(name)


@pytest.mark.parametrize("name", ["retention.ms", "cleanup.policy", "segment.bytes", "min.insync.replicasx"])
def test_default_config_property_filter_keeps_other_properties(name: str) -> None:
    assert ConfigPropertyFilter().should_replicate_config_property(name)


def test_default_config_exclusions_cover_mm2_reference_list() -> None:
    for name in (
        "follower.replication.throttled.replicas",
        "leader.replication.throttled.replicas",
        "message.timestamp.difference.max.ms",
        "message.timestamp.type",
        "unclean.leader.election.enable",
        "min.insync.replicas",
    ):
        assert name in CONFIG_PROPERTIES_EXCLUDE_DEFAULT


def test_use_defaults_from() -> None:
    assert not ConfigPropertyFilter().should_replicate_source_default("retention.ms")
    assert ConfigPropertyFilter(use_defaults_from="source").should_replicate_source_default("retention.ms")
    with pytest.raises(ConfigError, match="'both'"):
        ConfigPropertyFilter(use_defaults_from="both")


# --- matching rules -------------------------------------------------------------------------------


def test_patterns_must_match_the_whole_name() -> None:
    topic_filter = TopicFilter(include=["orders"], exclude=[])
    assert topic_filter.should_replicate_topic("orders")
    assert not topic_filter.should_replicate_topic("orders2")
    assert not topic_filter.should_replicate_topic("my-orders")


def test_alternation_inside_one_pattern_still_needs_a_full_match() -> None:
    topic_filter = TopicFilter(include=["a|ab"], exclude=[])
    assert topic_filter.should_replicate_topic("ab")
    assert not topic_filter.should_replicate_topic("abc")


def test_exclusion_wins_over_inclusion() -> None:
    topic_filter = TopicFilter(include=["orders.*"], exclude=["orders-private"])
    assert topic_filter.should_replicate_topic("orders-public")
    assert not topic_filter.should_replicate_topic("orders-private")


def test_an_empty_include_list_matches_nothing() -> None:
    assert not TopicFilter(include=[], exclude=[]).should_replicate_topic("orders")
    assert not TopicFilter(include="", exclude="").should_replicate_topic("orders")
    assert not GroupFilter(include="  ").should_replicate_group("app")


def test_an_empty_exclude_list_excludes_nothing() -> None:
    assert TopicFilter(exclude=[]).should_replicate_topic("__consumer_offsets")
    assert ConfigPropertyFilter(exclude="").should_replicate_config_property("min.insync.replicas")


def test_java_regex_classes_are_ascii_like_java() -> None:
    digits = GroupFilter(include=[r"g\d+"], exclude=[])
    assert digits.should_replicate_group("g42")
    assert not digits.should_replicate_group("g\u0664\u0662")  # Arabic-Indic digits: not \d in Java
    assert GroupFilter(include=["(?i)app"], exclude=[]).should_replicate_group("APP")


@pytest.mark.parametrize(
    ("include", "name", "expected"),
    [
        (["(?i)orders"], "ORDERS", True),
        # Java: inline flags apply to the rest of the joined list, later entries included...
        (["a.*", "(?i)abc", "b.*"], "B1", True),
        (["(?i)abc", "b.*"], "B1", True),
        # ...but not to earlier entries.
        (["b.*", "(?i)abc"], "B1", False),
        (["(?i)x", "(?-i)b.*", "c"], "C", False),
        (["(?i)x", "(?-i)b.*", "c"], "X", True),
        (["(?i:x)", "y"], "Y", False),
    ],
)
def test_leading_inline_flags_apply_like_java(include: list[str], name: str, expected: bool) -> None:
    assert TopicFilter(include=include, exclude=[]).should_replicate_topic(name) is expected


@pytest.mark.parametrize("pattern", ["(?U)a", "(?d)a", "(?iu)a"])
def test_java_only_flags_are_rejected(pattern: str) -> None:
    with pytest.raises(FilterPatternError, match="not supported") as excinfo:
        GroupFilter(include=["x", pattern])
    assert excinfo.value.pattern == pattern


def test_flags_in_the_middle_of_an_entry_are_rejected_naming_the_entry() -> None:
    with pytest.raises(FilterPatternError) as excinfo:
        TopicFilter(include=["ok", "ab(?i)c"])
    assert excinfo.value.pattern == "ab(?i)c"


# --- pattern lists --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "patterns"),
    [
        ("a, b ,c", ("a", "b", "c")),
        ("  a  ", ("a",)),
        ("", ()),
        ("   ", ()),
        (r".*[\-\.]internal, .*\.replica, __.*", (r".*[\-\.]internal", r".*\.replica", "__.*")),
        (["a", "b"], ("a", "b")),
        (("x",), ("x",)),
        ([], ()),
        ("a,a", ("a", "a")),
    ],
)
def test_parse_pattern_list(value: str | list[str], patterns: tuple[str, ...]) -> None:
    assert parse_pattern_list(value) == patterns


def test_comma_string_and_list_give_equal_filters() -> None:
    assert TopicFilter("a, b", "c") == TopicFilter(["a", "b"], ["c"])
    assert TopicFilter("a, b", "c").include == ("a", "b")


@pytest.mark.parametrize("value", ["a,,b", "a,", ",a", ["a", ""]])
def test_empty_entries_are_rejected(value: str | list[str]) -> None:
    with pytest.raises(FilterPatternError, match="empty entry"):
        TopicFilter(include=value)


@pytest.mark.parametrize("value", [None, 5, [1], [None]])
def test_non_string_entries_are_rejected(value: object) -> None:
    with pytest.raises(ConfigError):
        TopicFilter(include=value)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("factory", "bad"),
    [
        (lambda p: TopicFilter(include=["ok", p]), "orders("),
        (lambda p: TopicFilter(exclude=p), "[a-"),
        (lambda p: GroupFilter(include=p), "*x"),
        (lambda p: GroupFilter(exclude=["a", p]), r"\p{Alpha}"),
        (lambda p: ConfigPropertyFilter(exclude=p), "a)"),
    ],
)
def test_a_bad_regex_raises_config_error_naming_the_pattern(factory: object, bad: str) -> None:
    with pytest.raises(FilterPatternError) as excinfo:
        factory(bad)  # type: ignore[operator]
    assert isinstance(excinfo.value, ConfigError)
    assert excinfo.value.pattern == bad
    assert repr(bad) in str(excinfo.value)


def test_filters_are_frozen() -> None:
    with pytest.raises(AttributeError):
        TopicFilter().include = ("x",)  # type: ignore[misc]


# --- properties -----------------------------------------------------------------------------------


@given(
    literals=st.lists(st.text("abcxyz.-_019", min_size=1, max_size=15), min_size=1, max_size=5), name=names
)
def test_escaped_literal_lists_match_exactly_their_members(literals: list[str], name: str) -> None:
    topic_filter = TopicFilter(include=[re.escape(x) for x in literals], exclude=[])
    assert topic_filter.should_replicate_topic(name) is (name in literals)


@given(
    include=st.lists(st.sampled_from(["a.*", ".*b", "c", "[xy]+", r"\d+"]), max_size=3),
    exclude=st.lists(st.sampled_from(["a.*", ".*b", "c", "[xy]+", r"\d+"]), max_size=3),
    name=names,
)
def test_filter_is_include_and_not_exclude_with_full_matches(
    include: list[str], exclude: list[str], name: str
) -> None:
    expected = any(re.fullmatch(p, name, re.ASCII) for p in include) and not any(
        re.fullmatch(p, name, re.ASCII) for p in exclude
    )
    assert TopicFilter(include, exclude).should_replicate_topic(name) is expected
    assert GroupFilter(include, exclude).should_replicate_group(name) is expected


@given(patterns=st.lists(st.text("abc.*", min_size=1, max_size=5), max_size=4))
def test_comma_joined_string_parses_back_to_the_list(patterns: list[str]) -> None:
    assert parse_pattern_list(", ".join(patterns)) == tuple(patterns)
