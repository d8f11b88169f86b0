"""strait against MirrorMaker 2's own Java classes: record bytes, policies, filters, real clusters.

The oracle (tests/oracle/Mm2Oracle.java) is compiled once per session against the resolved MM2
jars and kept running; each request is one stdin line, each answer one stdout line. Java's logs go
to a file, never into the answers.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest
from confluent_kafka.admin import AdminClient
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st
from strait.config.mm2_properties import CLIENT_SETTING, FLOW_KEYS, not_used, not_used_reason, parse_mm2_properties
from strait.errors import ConfigError
from strait.filters import ConfigPropertyFilter, FilterPatternError, GroupFilter, TopicFilter
from strait_lab.clients import Record, consume_all, create_topic, produce
from strait_lab.kafka import KafkaCluster
from tests.oracle.mm2_oracle import (
    TRANSLATE_TIMEOUT_MS,
    JavaRejected,
    Mm2Oracle,
    bytes_token,
    offsets_by_partition,
    text_token,
    token_bytes,
    token_text,
)
from tests.support.waiting import wait_for
from strait.policy import (
    DefaultReplicationPolicy,
    IdentityReplicationPolicy,
    ReplicationPolicy,
    is_cycle,
    should_replicate_topic,
)
from strait.records import (
    INT32_MAX,
    INT64_MAX,
    MAX_STRING_BYTES,
    Checkpoint,
    Heartbeat,
    OffsetSync,
    RecordFormatError,
)

DIFFERENTIAL = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# --- token encoding (see Mm2Oracle.java) -----------------------------------------------------------


def _bool(token: str) -> bool:
    assert token in ("true", "false"), token
    return token == "true"


def _list_token(patterns: Sequence[str] | None) -> str:
    return "-" if patterns is None else text_token(", ".join(patterns))


# --- strategies -----------------------------------------------------------------------------------

texts = st.text(st.characters(blacklist_categories=("Cs",)), max_size=60)
offsets = st.integers(0, INT64_MAX)
partitions = st.integers(0, INT32_MAX)
heartbeats = st.builds(Heartbeat, texts, texts, offsets)
checkpoints = st.builds(Checkpoint, texts, texts, partitions, offsets, offsets, texts)
offset_syncs = st.builds(OffsetSync, texts, partitions, offsets, offsets)
LONGEST = "\u00e9" * (MAX_STRING_BYTES // 2)  # 32766 UTF-8 bytes of two-byte characters

INTERESTING_TOPICS = [
    "",
    ".",
    "..",
    "a.",
    ".b",
    "a..b",
    "a.b.",
    "plain",
    "A.orders",
    "B.A.orders",
    "orders.v2",
    "heartbeats",
    "A.heartbeats",
    "B.A.heartbeats",
    "app-heartbeats",
    "A_heartbeats",
    "A.checkpoints.internal",
    "A_checkpoints_internal",
    "mm2-offset-syncs.B.internal",
    "mm2-offset-syncs_B_internal",
    "mm2-offsets.A.internal",
    "mm2x.internal",
    "x.internal",
    "a-internal",
    "__consumer_offsets",
    ".hidden",
    "foo.replica",
    "console-consumer-1",
    "connect-x",
]
pieces = st.sampled_from(
    ["A", "B", "C", "heartbeats", "checkpoints", "internal", "mm2", "", "x", "\u00e9", "\U0001f600"]
)
topic_names = st.one_of(
    st.sampled_from(INTERESTING_TOPICS),
    st.text("ab.A_-x\u00e9\U0001f600", max_size=12),
    st.builds(
        lambda parts, sep: sep.join(parts),
        st.lists(pieces, max_size=5),
        st.sampled_from([".", "_", "-", "__"]),
    ),
)
aliases = st.sampled_from(["A", "B", "C", "", "us-east", "x.y", "\u00e9"])
POLICIES: list[tuple[str, str, bool, str | None]] = [
    ("default", ".", True, None),
    ("default", "_", True, None),
    ("default", "_", False, None),
    ("default", "--", True, None),
    ("default", "", True, None),
    ("identity", ".", True, None),
    ("identity", ".", True, "A"),
    ("identity", "_", True, "B"),
]
PATTERNS = [
    ".*",
    "a.*",
    r".*\.replica",
    r"mm2.*\.internal",
    "__.*",
    "[ab]+",
    r"x\d",
    "(?i)abc",
    r"A\..*",
    "a|b",
    "(?i)a.*",
    "(?-i)b.*",
    "(?i:x).*",
    r"\w+",
    r".*[\-\.]internal",
]
pattern_lists = st.one_of(st.none(), st.lists(st.sampled_from(PATTERNS), max_size=3, unique=True))


def _python_policy(kind: str, separator: str, internal: bool, source_alias: str | None) -> ReplicationPolicy:
    if kind == "identity":
        return IdentityReplicationPolicy(separator, internal, source_alias)
    return DefaultReplicationPolicy(separator, internal)


def _filter_kwargs(include: Sequence[str] | None, exclude: Sequence[str] | None) -> dict[str, str]:
    kwargs = {}
    if include is not None:
        kwargs["include"] = ", ".join(include)
    if exclude is not None:
        kwargs["exclude"] = ", ".join(exclude)
    return kwargs


# --- records, byte for byte -----------------------------------------------------------------------


def _java_encode(oracle: Mm2Oracle, record: Heartbeat | Checkpoint | OffsetSync) -> tuple[bytes, bytes]:
    if isinstance(record, Heartbeat):
        answer = oracle.ask(
            "enc-heartbeat", text_token(record.source_alias), text_token(record.target_alias), str(record.timestamp_ms)
        )
    elif isinstance(record, Checkpoint):
        answer = oracle.ask(
            "enc-checkpoint",
            text_token(record.group),
            text_token(record.topic),
            str(record.partition),
            str(record.upstream_offset),
            str(record.downstream_offset),
            text_token(record.metadata),
        )
    else:
        answer = oracle.ask(
            "enc-offsetsync",
            text_token(record.topic),
            str(record.partition),
            str(record.upstream_offset),
            str(record.downstream_offset),
        )
    return token_bytes(answer[0]), token_bytes(answer[1])


def _java_decode(
    oracle: Mm2Oracle, kind: type, key: bytes, value: bytes
) -> Heartbeat | Checkpoint | OffsetSync:
    if kind is Heartbeat:
        s, t, ts = oracle.ask("dec-heartbeat", bytes_token(key), bytes_token(value))
        return Heartbeat(token_text(s) or "", token_text(t) or "", int(ts))
    if kind is Checkpoint:
        g, t, p, up, down, meta = oracle.ask("dec-checkpoint", bytes_token(key), bytes_token(value))
        return Checkpoint(token_text(g) or "", token_text(t) or "", int(p), int(up), int(down), token_text(meta) or "")
    t, p, up, down = oracle.ask("dec-offsetsync", bytes_token(key), bytes_token(value))
    return OffsetSync(token_text(t) or "", int(p), int(up), int(down))


def _assert_same_bytes_both_ways(oracle: Mm2Oracle, record: Heartbeat | Checkpoint | OffsetSync) -> None:
    java_key, java_value = _java_encode(oracle, record)
    assert (record.key_bytes(), record.value_bytes()) == (java_key, java_value)
    assert type(record).from_record(java_key, java_value) == record
    assert _java_decode(oracle, type(record), record.key_bytes(), record.value_bytes()) == record


@DIFFERENTIAL
@given(record=heartbeats)
@example(record=Heartbeat("A", "B", 1_700_000_000_000))
@example(record=Heartbeat("Zürich", "東京-\U0001f680", INT64_MAX))
@example(record=Heartbeat("", "", 0))
def test_heartbeat_bytes_match_java(oracle: Mm2Oracle, record: Heartbeat) -> None:
    _assert_same_bytes_both_ways(oracle, record)


@DIFFERENTIAL
@given(record=checkpoints)
@example(record=Checkpoint("g1", "A.t", 3, 100, 90))
@example(
    record=Checkpoint(
        "gr\u00fcppe", "A.\u8a02\u5355", INT32_MAX, INT64_MAX, INT64_MAX - 1, "\U0001f600 m\u0301"
    )
)
@example(record=Checkpoint(LONGEST, LONGEST, 0, 0, 0, LONGEST))
@example(record=Checkpoint("\x00", "t", 0, 2**32, 2**31, "\x00\n "))
def test_checkpoint_bytes_match_java(oracle: Mm2Oracle, record: Checkpoint) -> None:
    _assert_same_bytes_both_ways(oracle, record)


@DIFFERENTIAL
@given(record=offset_syncs)
@example(record=OffsetSync("t", 0, 5, 7))
@example(record=OffsetSync("t\u00f6pic-\U0001f4a5", INT32_MAX, INT64_MAX, 2**40))
def test_offset_sync_bytes_match_java(oracle: Mm2Oracle, record: OffsetSync) -> None:
    _assert_same_bytes_both_ways(oracle, record)


@pytest.mark.parametrize(
    "record",
    [Heartbeat("A", "B", 7), Checkpoint("g", "t", 1, 2, 3, "meta"), OffsetSync("t", 4, 5, 6)],
    ids=["heartbeat", "checkpoint", "offset-sync"],
)
def test_trailing_bytes_truncation_and_versions_agree_with_java(
    oracle: Mm2Oracle, record: Heartbeat | Checkpoint | OffsetSync
) -> None:
    kind = type(record)
    key, value = record.key_bytes(), record.value_bytes()
    # Trailing bytes: ignored by both.
    assert kind.from_record(key + b"\x01\x02\x03", value + b"\xff") == record
    assert _java_decode(oracle, kind, key + b"\x01\x02\x03", value + b"\xff") == record
    # Every truncation: rejected by both.
    for cut_key, cut_value in [(key[:n], value) for n in range(len(key))] + [
        (key, value[:n]) for n in range(len(value))
    ]:
        with pytest.raises(RecordFormatError):
            kind.from_record(cut_key, cut_value)
        with pytest.raises(JavaRejected):
            _java_decode(oracle, kind, cut_key, cut_value)
    # Another version number: Java reads the version-0 layout anyway, and so does strait.
    if kind is not OffsetSync:
        newer = b"\x00\x01" + value[2:] + b"future-field"
        assert kind.from_record(key, newer) == _java_decode(oracle, kind, key, newer) == record


# --- replication policies -------------------------------------------------------------------------


@DIFFERENTIAL
@given(config=st.sampled_from(POLICIES), alias=aliases, topic=topic_names)
def test_policies_match_java(
    oracle: Mm2Oracle, config: tuple[str, str, bool, str | None], alias: str, topic: str
) -> None:
    kind, separator, internal, source_alias = config
    # Java splits an empty separator between UTF-16 units; Kafka topic names are ASCII anyway.
    assume(separator or topic.isascii())
    policy = _python_policy(*config)
    answer = oracle.ask(
        "policy", kind, text_token(separator), str(internal).lower(), text_token(source_alias), text_token(alias), text_token(topic)
    )
    java = (
        [token_text(answer[i]) for i in range(4)] + [_bool(t) for t in answer[4:8]] + [token_text(t) for t in answer[8:]]
    )
    python = [
        policy.format_remote_topic(alias, topic),
        policy.topic_source(topic),
        policy.upstream_topic(topic),
        policy.original_topic(topic),
        policy.is_heartbeats_topic(topic),
        policy.is_checkpoints_topic(topic),
        policy.is_mm2_internal_topic(topic),
        policy.is_internal_topic(topic),
        policy.heartbeats_topic(),
        policy.checkpoints_topic(alias),
        policy.offset_syncs_topic(alias),
    ]
    assert python == java


@DIFFERENTIAL
@given(
    config=st.sampled_from(POLICIES),
    flow=st.sampled_from([("A", "B"), ("B", "A"), ("C", "B"), ("A", "C")]),
    heartbeats_enabled=st.booleans(),
    include=pattern_lists,
    exclude=pattern_lists,
    topic=topic_names,
)
def test_replication_decision_matches_mirror_source_connector(
    oracle: Mm2Oracle,
    config: tuple[str, str, bool, str | None],
    flow: tuple[str, str],
    heartbeats_enabled: bool,
    include: list[str] | None,
    exclude: list[str] | None,
    topic: str,
) -> None:
    kind, separator, internal, _ = config
    assume(separator or topic.isascii())
    source, target = flow
    # MM2 configures the identity policy with the flow's source alias.
    source_alias = source if kind == "identity" else None
    policy = _python_policy(kind, separator, internal, source_alias)
    topic_filter = TopicFilter(**_filter_kwargs(include, exclude))
    answer = oracle.ask(
        "replicate",
        kind,
        text_token(separator),
        str(internal).lower(),
        text_token(source_alias),
        text_token(source),
        text_token(target),
        str(heartbeats_enabled).lower(),
        _list_token(include),
        _list_token(exclude),
        text_token(topic),
    )
    assert should_replicate_topic(policy, topic_filter, topic, target, heartbeats_enabled) is _bool(answer[0])
    assert is_cycle(policy, topic, target) is _bool(answer[1])


# --- filters --------------------------------------------------------------------------------------


@DIFFERENTIAL
@given(include=pattern_lists, exclude=pattern_lists, name=topic_names)
def test_topic_and_group_filters_match_java(
    oracle: Mm2Oracle, include: list[str] | None, exclude: list[str] | None, name: str
) -> None:
    kwargs = _filter_kwargs(include, exclude)
    java_topic = oracle.ask("topic-filter", _list_token(include), _list_token(exclude), text_token(name))
    java_group = oracle.ask("group-filter", _list_token(include), _list_token(exclude), text_token(name))
    assert TopicFilter(**kwargs).should_replicate_topic(name) is _bool(java_topic[0])
    assert GroupFilter(**kwargs).should_replicate_group(name) is _bool(java_group[0])


GROUP_NAMES = ["my-app", "connect-cluster-offsets", "console-consumer-42"]


@pytest.mark.parametrize("name", [*INTERESTING_TOPICS, *GROUP_NAMES])
def test_default_filters_match_java(oracle: Mm2Oracle, name: str) -> None:
    assert TopicFilter().should_replicate_topic(name) is _bool(
        oracle.ask("topic-filter", "-", "-", text_token(name))[0]
    )
    assert GroupFilter().should_replicate_group(name) is _bool(
        oracle.ask("group-filter", "-", "-", text_token(name))[0]
    )


CONFIG_NAMES = [
    "follower.replication.throttled.replicas",
    "leader.replication.throttled.replicas",
    "message.timestamp.difference.max.ms",
    "log.message.timestamp.before.max.ms",
    "message.timestamp.before.max.ms",
    "message.timestamp.type",
    "unclean.leader.election.enable",
    "min.insync.replicas",
    "retention.ms",
    "cleanup.policy",
    "segment.bytes",
    "compression.type",
]


@DIFFERENTIAL
@given(
    exclude=st.one_of(
        st.none(), st.lists(st.sampled_from([r"retention\..*", ".*\\.ms", "cleanup.policy"]), max_size=2)
    ),
    use_defaults_from=st.sampled_from(["target", "source"]),
    name=st.sampled_from(CONFIG_NAMES),
)
def test_config_property_filter_matches_java(
    oracle: Mm2Oracle, exclude: list[str] | None, use_defaults_from: str, name: str
) -> None:
    config_filter = (
        ConfigPropertyFilter(use_defaults_from=use_defaults_from)
        if exclude is None
        else ConfigPropertyFilter(", ".join(exclude), use_defaults_from)
    )
    replicate, source_default = oracle.ask(
        "config-filter", _list_token(exclude), text_token(use_defaults_from), text_token(name)
    )
    assert config_filter.should_replicate_config_property(name) is _bool(replicate)
    assert config_filter.should_replicate_source_default(name) is _bool(source_default)


def test_empty_and_malformed_pattern_lists_are_treated_alike(oracle: Mm2Oracle) -> None:
    assert _bool(oracle.ask("topic-filter", text_token(""), "-", text_token("orders"))[0]) is False
    assert TopicFilter(include="").should_replicate_topic("orders") is False
    with pytest.raises(JavaRejected, match="must not be empty"):
        oracle.ask("topic-filter", text_token("a,,b"), "-", text_token("a"))
    with pytest.raises(FilterPatternError, match="empty entry"):
        TopicFilter(include="a,,b")


# --- real clusters --------------------------------------------------------------------------------


def _ensure_compacted_topic(admin: AdminClient, name: str) -> None:
    """Create a 1-partition compacted topic as MM2 does; an existing one is fine."""
    try:
        create_topic(admin, name, partitions=1, replication_factor=1, config={"cleanup.policy": "compact"})
    except Exception as exc:  # confluent-kafka raises KafkaException wrapping TOPIC_ALREADY_EXISTS
        if "TOPIC_ALREADY_EXISTS" not in str(exc):
            raise


def _delete_topics(admin: AdminClient, names: list[str]) -> None:
    for future in admin.delete_topics(names, operation_timeout=30).values():
        future.result(timeout=30)


def _write_checkpoints(cluster: KafkaCluster, topic: str, records: list[Checkpoint]) -> None:
    produce(
        cluster.client_config(),
        topic,
        [Record(key=c.key_bytes(), value=c.value_bytes(), partition=0) for c in records],
    )


def _checkpoint_or_none(record: Record) -> Checkpoint | None:
    try:
        return Checkpoint.from_record(record.key, record.value)
    except RecordFormatError:
        return None


def test_translate_offsets_returns_the_checkpoints_strait_wrote(
    oracle: Mm2Oracle, target_cluster: KafkaCluster, unique_name: Callable[[str], str]
) -> None:
    policy = DefaultReplicationPolicy()
    topic = policy.checkpoints_topic("A")
    assert topic == "A.checkpoints.internal"
    _ensure_compacted_topic(target_cluster.admin(), topic)
    group, other = unique_name("group"), unique_name("other")
    written = [
        Checkpoint(group, "A.orders", 0, 10, 9),
        Checkpoint(group, "A.orders", 1, 20, 19, "meta-1"),
        Checkpoint(other, "A.orders", 0, 99, 98, "not mine"),
        Checkpoint(group, "A.orders", 0, 15, 14, "sp\u00e4ter \u2713"),
        Checkpoint(group, "A.payments.v2", 3, 2**40, 2**40 - 5, "\U0001f680"),
        Checkpoint(group, "A.payments.v2", 3, 2**41, 2**41 - 5, ""),
    ]
    _write_checkpoints(target_cluster, topic, written)

    answer = oracle.ask(
        "translate", text_token(target_cluster.bootstrap_servers), "-", text_token("A"), text_token(group), TRANSLATE_TIMEOUT_MS
    )

    assert offsets_by_partition(answer, with_group=False) == {
        ("A.orders", "0"): (14, "sp\u00e4ter \u2713"),
        ("A.orders", "1"): (19, "meta-1"),
        ("A.payments.v2", "3"): (2**41 - 5, ""),
    }
    # The topic is shared within the session: keep this test's groups, skip others' records.
    read_back = [_checkpoint_or_none(r) for r in consume_all(target_cluster.client_config(), topic, [0])]
    assert [c for c in read_back if c is not None and c.group in (group, other)] == written


def test_mirror_client_reads_checkpoints_under_a_custom_separator(
    oracle: Mm2Oracle, target_cluster: KafkaCluster, unique_name: Callable[[str], str]
) -> None:
    policy = DefaultReplicationPolicy("_")
    alias = unique_name("src").replace("_", "-")
    topic = policy.checkpoints_topic(alias)
    assert topic == f"{alias}_checkpoints_internal"
    admin = target_cluster.admin()
    _ensure_compacted_topic(admin, topic)
    prefix = unique_name("grp").replace("_", "-")
    first, second, outsider = f"{prefix}-1", f"{prefix}-2", unique_name("outsider")
    remote = policy.format_remote_topic(alias, "orders")
    try:
        _write_checkpoints(
            target_cluster,
            topic,
            [
                Checkpoint(first, remote, 0, 5, 4, "a"),
                Checkpoint(second, remote, 1, 7, 6),
                Checkpoint(outsider, remote, 0, 1, 1),
                Checkpoint(first, remote, 0, 8, 7, "b"),
            ],
        )

        answer = oracle.ask(
            "remote-offsets",
            text_token(target_cluster.bootstrap_servers),
            text_token("_"),
            text_token(alias),
            text_token(f"{prefix}-.*"),
            TRANSLATE_TIMEOUT_MS,
        )

        assert offsets_by_partition(answer, with_group=True) == {
            (first, remote, "0"): (7, "b"),
            (second, remote, "1"): (6, ""),
        }
    finally:
        _delete_topics(admin, [topic])


def test_python_decodes_heartbeats_java_wrote(
    oracle: Mm2Oracle, source_cluster: KafkaCluster, unique_name: Callable[[str], str]
) -> None:
    topic = unique_name("hb")
    _ensure_compacted_topic(source_cluster.admin(), topic)
    sent = [
        Heartbeat("A", "B", 1_700_000_000_000),
        Heartbeat("A", "B", 1_700_000_001_000),
        Heartbeat("Z\u00fcrich", "\u6771\u4eac", 1_600_000_000_123),
        Heartbeat("", "", 1),
    ]
    tokens = [t for h in sent for t in (text_token(h.source_alias), text_token(h.target_alias), str(h.timestamp_ms))]

    assert oracle.ask("produce-heartbeats", text_token(source_cluster.bootstrap_servers), text_token(topic), *tokens) == ["4"]

    records = consume_all(source_cluster.client_config(), topic)
    assert [Heartbeat.from_record(r.key, r.value) for r in records] == sent
    assert [r.timestamp_ms for r in records] == [h.timestamp_ms for h in sent]
    assert {r.partition for r in records} == {0}


def test_mirror_client_topology_agrees_with_strait_names(
    oracle: Mm2Oracle, target_cluster: KafkaCluster, unique_name: Callable[[str], str]
) -> None:
    policy = DefaultReplicationPolicy()
    first_hop, second_hop = unique_name("x"), unique_name("y")
    heartbeats = policy.format_remote_topic(
        second_hop, policy.format_remote_topic(first_hop, policy.heartbeats_topic())
    )
    checkpoints = policy.checkpoints_topic(first_hop)
    admin = target_cluster.admin()
    for name in (heartbeats, checkpoints):
        create_topic(admin, name, partitions=1)
    bootstrap = text_token(target_cluster.bootstrap_servers)

    def listed() -> set[str]:
        return set(admin.list_topics(timeout=10).topics)

    try:
        # (a broker's metadata may lag a creation; other tests create and delete such topics meanwhile: the
        # oracle's listing lies between what is listed before and after it)
        wait_for(lambda: {heartbeats, checkpoints} <= listed(), 30, "the new topics in the cluster's metadata")
        before = listed()
        java_heartbeats = {token_text(t) for t in oracle.ask("heartbeat-topics", bootstrap, "-")}
        java_checkpoints = {token_text(t) for t in oracle.ask("checkpoint-topics", bootstrap, "-")}
        after = listed()

        assert heartbeats in java_heartbeats
        assert checkpoints in java_checkpoints
        for java, kind in ((java_heartbeats, policy.is_heartbeats_topic),
                           (java_checkpoints, policy.is_checkpoints_topic)):
            assert {t for t in before & after if kind(t)} <= java <= {t for t in before | after if kind(t)}
        assert {first_hop, second_hop} <= {token_text(t) for t in oracle.ask("upstream-clusters", bootstrap, "-")}
        assert oracle.ask("replication-hops", bootstrap, "-", text_token(second_hop)) == ["1"]
        assert oracle.ask("replication-hops", bootstrap, "-", text_token(first_hop)) == ["2"]
        assert oracle.ask("replication-hops", bootstrap, "-", text_token(unique_name("nowhere"))) == ["-1"]
        assert policy.topic_source(heartbeats) == second_hop
        assert policy.topic_source(policy.upstream_topic(heartbeats) or "") == first_hop
    finally:
        _delete_topics(admin, [heartbeats, checkpoints])


# --- whole guide configurations, as MM2 4.x reads them -----------------------------------------------

GUIDE_CLUSTERS = "clusters = src, dst\nsrc.bootstrap.servers = s:9092\ndst.bootstrap.servers = d:9092\n"
GUIDE_SHAPES = {
    # Strimzi / IBM Event Streams: identity names written with an empty separator
    "strimzi-identity": "replication.policy.class = org.apache.kafka.connect.mirror.IdentityReplicationPolicy\n"
                        "replication.policy.separator =\n",
    # an empty separator under the default policy: MM2 glues alias and name together
    "default-empty-separator": "replication.policy.separator =\n",
    # every guide's internal-topic factors, and MM2 3.7's switch for offset syncs
    "internal-factors": "replication.factor = 3\ncheckpoints.topic.replication.factor = 3\n"
                        "heartbeats.topic.replication.factor = 1\noffset-syncs.topic.replication.factor = 2\n"
                        "emit.offset-syncs.enabled = false\n",
    "per-flow-factors": "src->dst.checkpoints.topic.replication.factor = 1\nheartbeats.topic.replication.factor = 2\n"
                        "offset-syncs.topic.replication.factor = 3\nreplication.factor = 1\n",
}


@pytest.mark.parametrize("shape", sorted(GUIDE_SHAPES))
def test_guide_configurations_mean_what_mm2_makes_of_them(oracle: Mm2Oracle, shape: str) -> None:
    """The same properties text, read by strait and by MM2 4.x's own config classes."""
    text = GUIDE_CLUSTERS + "src->dst.enabled = true\n" + GUIDE_SHAPES[shape]
    flow = parse_mm2_properties(text, f"{shape}.properties").config.flow("src->dst")
    answer = oracle.ask("mm2-flow", text_token(text), text_token("src"), text_token("dst"), text_token("orders"))
    remote = flow.policy().format_remote_topic("src", "orders")

    assert remote == token_text(answer[0])
    if flow.separator or flow.replication_policy == "identity":
        assert flow.policy().topic_source(remote) == token_text(answer[1])
    else:  # MM2 splits between characters and takes "s"; strait matches the configured alias
        assert (flow.policy().topic_source(remote), token_text(answer[1])) == ("src", "s")
    assert flow.replication_factor == int(answer[2])
    if "replication.factor" in GUIDE_SHAPES[shape]:  # unset, strait's fall back to replication.factor
        assert [flow.internal_topic_replication_factor(kind) for kind in ("offset_syncs", "checkpoints", "heartbeats")] \
            == [int(token) for token in answer[3:6]]
    assert flow.emit_offset_syncs is _bool(answer[6])


KEY_SAMPLES = {"BOOLEAN": "true", "INT": "1", "SHORT": "1", "LONG": "1", "DOUBLE": "1.0", "STRING": "x",
               "LIST": "x", "CLASS": "com.example.Plugin", "PASSWORD": "${env:STRAIT_TEST_UNSET}"}


def test_every_key_mm2_defines_is_honoured_or_named_with_what_strait_does_instead(oracle: Mm2Oracle) -> None:
    """Each key of MM2 4.x's connector ConfigDefs (Connect's own included), set globally and for a
    flow with its default (or a value of its type): strait reads it, or lists it as not used with what
    it does instead, or refuses the value saying so (a Java class or transform strait cannot run).
    No key is silently ignored."""
    answer = oracle.ask("mm2-keys")
    keys = [(token_text(answer[i]), answer[i + 1], None if answer[i + 2] == "-" else token_text(answer[i + 2]))
            for i in range(0, len(answer), 3)]
    assert len(keys) > 100  # the three connectors' definitions, not an empty answer
    base = GUIDE_CLUSTERS + "src->dst.enabled = true\n"
    unexplained, unaccounted = [], []
    for name, kind, default in keys:
        value = default if default else KEY_SAMPLES[kind]
        for key in (name, f"src->dst.{name}"):
            try:
                loaded = parse_mm2_properties(f"{base}{key} = {value}\n", "keys.properties")
            except ConfigError as exc:
                rule = not_used(name)
                if rule is None or f"{key}: {rule.instead}" not in str(exc):
                    unexplained.append(f"{key}: {exc}")
                continue
            read = name in FLOW_KEYS or (key != name and name == "enabled") \
                or (key == name and CLIENT_SETTING.fullmatch(name))
            if not read and not (key in loaded.ignored_keys and not_used_reason(key)):
                unaccounted.append(key)
    assert not unexplained, "\n".join(unexplained)
    assert not unaccounted, unaccounted
