"""configsync's pure rules: ACL mapping, ownership-aware config plans, backoff, reports."""

from __future__ import annotations

from confluent_kafka.admin import AclBinding, AclOperation, AclPermissionType, ConfigSource, ResourcePatternType, ResourceType

from strait.config.model import FlowConfig, Selection
from strait.filters import ConfigPropertyFilter
from strait.kafka.configs import ConfigValue
from strait_configsync.acls import desired_acls
from strait.kafka.configs import carried_configs
from strait_configsync.configs import plan_configs
from strait_configsync.drift import ConfigDrift, ErrorNote, FlowReport, PartitionMismatch
from strait_configsync.ownership import Ownership
from strait.retry import KeyedBackoff, RetryPolicy

FLOW = FlowConfig("A", "B", topics=Selection(("orders.*", "pay"), ()), groups=Selection(("app-.*",), ()))
TOPIC, GROUP = ResourceType.TOPIC, ResourceType.GROUP
LIT, PRE = ResourcePatternType.LITERAL, ResourcePatternType.PREFIXED
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
OP = AclOperation


def acl(restype: ResourceType, name: str, op: AclOperation, perm: AclPermissionType = ALLOW,
        pattern: ResourcePatternType = LIT, principal: str = "User:u") -> AclBinding:
    return AclBinding(restype, name, pattern, principal, "*", op, perm)


def test_topic_acls_follow_mm2_rules() -> None:
    source = [
        acl(TOPIC, "orders", OP.READ), acl(TOPIC, "orders", OP.WRITE), acl(TOPIC, "orders", OP.ALL),
        acl(TOPIC, "orders", OP.WRITE, DENY), acl(TOPIC, "orders", OP.ALL, DENY), acl(TOPIC, "orders", OP.DESCRIBE),
        acl(TOPIC, "other", OP.READ), acl(TOPIC, "*", OP.READ), acl(ResourceType.BROKER, "kafka-cluster", OP.ALTER),
    ]
    assert desired_acls(FLOW, source, ["orders"]) == {
        acl(TOPIC, "A.orders", OP.READ), acl(TOPIC, "A.orders", OP.WRITE, DENY),
        acl(TOPIC, "A.orders", OP.ALL, DENY), acl(TOPIC, "A.orders", OP.DESCRIBE),
    }


def test_prefixed_topic_acls_are_renamed_when_they_cover_a_replicated_topic() -> None:
    source = [acl(TOPIC, "orders-", OP.READ, pattern=PRE), acl(TOPIC, "pa", OP.ALL, pattern=PRE),
              acl(TOPIC, "zzz", OP.READ, pattern=PRE), acl(TOPIC, "orders-", OP.WRITE, pattern=PRE)]
    assert desired_acls(FLOW, source, ["orders-eu", "pay"]) == {
        acl(TOPIC, "A.orders-", OP.READ, pattern=PRE), acl(TOPIC, "A.pa", OP.READ, pattern=PRE)}


def test_group_read_acls_are_copied_with_their_name() -> None:
    source = [acl(GROUP, "app-1", OP.READ), acl(GROUP, "other", OP.READ), acl(GROUP, "app-", OP.READ, pattern=PRE),
              acl(GROUP, "app-2", OP.ALL), acl(GROUP, "app-3", OP.DELETE), acl(GROUP, "app-4", OP.READ, DENY)]
    assert desired_acls(FLOW, source, []) == {
        acl(GROUP, "app-1", OP.READ), acl(GROUP, "app-", OP.READ, pattern=PRE), acl(GROUP, "app-2", OP.READ),
        acl(GROUP, "app-4", OP.READ, DENY)}


def _value(value: str, source: ConfigSource = ConfigSource.DYNAMIC_TOPIC_CONFIG) -> ConfigValue:
    return ConfigValue(value, source)


def test_carried_configs_are_source_overrides_minus_exclusions_and_with_use_defaults_from_source_its_defaults() -> None:
    source = {"retention.ms": _value("1000"), "min.insync.replicas": _value("2"),
              "segment.bytes": _value("1073741824", ConfigSource.DEFAULT_CONFIG),
              "cleanup.policy": _value("delete", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG),
              "log.dirs": _value("/data", ConfigSource.STATIC_BROKER_CONFIG),
              "message.format.version": ConfigValue("3.0", ConfigSource.DEFAULT_CONFIG, read_only=True),
              "max.message.bytes": ConfigValue("100", ConfigSource.DYNAMIC_TOPIC_CONFIG, sensitive=True)}
    assert carried_configs(source, ConfigPropertyFilter()) == {"retention.ms": "1000"}
    assert carried_configs(source, ConfigPropertyFilter(use_defaults_from="source")) == {
        "retention.ms": "1000", "segment.bytes": "1073741824", "cleanup.policy": "delete"}


def test_plan_sets_only_differences_and_never_touches_target_only_overrides() -> None:
    target = {"retention.ms": _value("5"), "max.message.bytes": _value("2048"),
              "segment.ms": _value("604800000", ConfigSource.DEFAULT_CONFIG)}
    plan = plan_configs({"retention.ms": "1000", "segment.ms": "604800000"}, target, frozenset())
    assert dict(plan.change.set) == {"retention.ms": "1000"} and plan.change.delete == ()
    assert plan.owned_after == {"retention.ms"}


def test_plan_deletes_only_owned_keys_the_source_dropped() -> None:
    target = {"retention.ms": _value("1000"), "max.message.bytes": _value("2048"), "segment.ms": _value("9")}
    plan = plan_configs({}, target, frozenset({"retention.ms", "cleanup.policy"}))
    assert plan.change.delete == ("retention.ms",) and not plan.change.set
    assert plan.owned_after == frozenset()


def test_plan_claims_values_strait_put_there() -> None:
    plan = plan_configs({"retention.ms": "1000"}, {"retention.ms": _value("1000")}, frozenset())
    assert not plan.change and plan.owned_after == {"retention.ms"}


def test_backoff_grows_and_resets_on_a_new_change() -> None:
    now = [0.0]
    backoff = KeyedBackoff(RetryPolicy(first=1, cap=4), clock=lambda: now[0])
    assert backoff.failed("t", "a") == 1 and not backoff.ready("t", "a")
    now[0] = 1.0
    assert backoff.ready("t", "a") and backoff.failed("t", "a") == 2
    assert backoff.failed("t", "a") == 4 and backoff.failed("t", "a") == 4
    assert backoff.ready("t", "b")
    backoff.succeeded("t")
    assert backoff.ready("t", "a")


def test_report_and_ownership_round_trip() -> None:
    report = FlowReport("A->B", "m1", 1.0, 3, 1, ("A.x",), 1, (PartitionMismatch("A.y", 2, 4),), 1,
                        (ConfigDrift("A.z", ("retention.ms",)),), 1, 2, ("ALLOW User:u READ",), 1,
                        errors=(ErrorNote("permission", "cluster B: no"),))
    assert FlowReport.from_dict(report.to_dict()) == report
    assert report.state == "error" and report.acl_drift == 1
    ownership = Ownership({"A.x": frozenset({"retention.ms"})}, frozenset({acl(TOPIC, "A.x", OP.READ)}))
    assert Ownership.decode(ownership.encode()) == ownership
