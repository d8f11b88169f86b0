"""Which source ACLs a flow copies to its target, and how they change on the way.

MM2's rules for topic ACLs: an ALLOW WRITE grant is never copied (remote topics are written by the
replicator only), ALLOW ALL becomes ALLOW READ, everything else (DENY included) is copied as it is,
on the remote topic name. Beyond MM2:

* PREFIXED topic ACLs are copied with the prefix renamed by the policy (``orders-`` becomes
  ``A.orders-``) when the prefix covers at least one topic the flow replicates;
* consumer-group READ ACLs (LITERAL and PREFIXED, when the group filter accepts the name or the
  prefix taken as a name) are copied with the same name, so consumers that fail over keep their rights on the target;
* the literal ``*`` topic wildcard is not copied: MM2 turns it into a literal topic named ``A.*``,
  which grants nothing.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable

from confluent_kafka.admin import AclBinding, AclOperation, AclPermissionType, ResourcePatternType, ResourceType

from strait.config.model import FlowConfig
from strait.policy import should_replicate_topic

WILDCARD = "*"

AclKey = tuple[str, str, str, str, str, str, str]


def _adjusted(binding: AclBinding) -> AclBinding | None:
    allow = binding.permission_type == AclPermissionType.ALLOW
    if allow and binding.operation == AclOperation.WRITE:
        return None
    if allow and binding.operation == AclOperation.ALL:
        return _with(binding, operation=AclOperation.READ)
    return binding


def _with(binding: AclBinding, *, name: str | None = None, operation: AclOperation | None = None) -> AclBinding:
    return AclBinding(binding.restype, binding.name if name is None else name, binding.resource_pattern_type,
                      binding.principal, binding.host, binding.operation if operation is None else operation,
                      binding.permission_type)


def target_topic_acl(flow: FlowConfig, binding: AclBinding, replicated: Collection[str]) -> AclBinding | None:
    """The target binding for one source TOPIC binding, or None when the flow does not copy it.

    Args:
        replicated: source names of the topics the flow replicates (decides PREFIXED bindings).
    """
    policy = flow.policy()
    pattern = binding.resource_pattern_type
    if pattern == ResourcePatternType.LITERAL:
        if binding.name == WILDCARD or not should_replicate_topic(
                policy, flow.topic_filter(), binding.name, flow.target, flow.heartbeats_replication_enabled):
            return None
    elif pattern == ResourcePatternType.PREFIXED:
        if not any(topic.startswith(binding.name) for topic in replicated):
            return None
    else:
        return None
    adjusted = _adjusted(binding)
    return None if adjusted is None else _with(adjusted, name=flow.topic_names().remote(binding.name))


def target_group_acl(flow: FlowConfig, binding: AclBinding) -> AclBinding | None:
    """The target binding for one source GROUP binding (READ only), or None when not copied."""
    if binding.resource_pattern_type not in (ResourcePatternType.LITERAL, ResourcePatternType.PREFIXED):
        return None
    # a prefix is judged as the name of a group: `app-` passes a filter `app-.*`
    if binding.name == WILDCARD or not flow.group_filter().should_replicate_group(binding.name):
        return None
    adjusted = _adjusted(binding)
    if adjusted is None or adjusted.operation != AclOperation.READ:
        return None
    return adjusted


def desired_acls(flow: FlowConfig, source_acls: Iterable[AclBinding], replicated: Collection[str]) -> set[AclBinding]:
    """Every binding the flow wants on its target, derived from the source's bindings."""
    wanted: set[AclBinding] = set()
    for binding in source_acls:
        if binding.restype == ResourceType.TOPIC:
            mapped = target_topic_acl(flow, binding, replicated)
        elif binding.restype == ResourceType.GROUP:
            mapped = target_group_acl(flow, binding)
        else:
            mapped = None
        if mapped is not None:
            wanted.add(mapped)
    return wanted


def acl_key(binding: AclBinding) -> AclKey:
    """A binding as plain strings (for storage and sorting)."""
    return (binding.restype.name, binding.name, binding.resource_pattern_type.name, binding.principal,
            binding.host, binding.operation.name, binding.permission_type.name)


def acl_from_key(key: Iterable[str]) -> AclBinding:
    """The binding stored by :func:`acl_key`."""
    restype, name, pattern, principal, host, operation, permission = key
    return AclBinding(ResourceType[restype], name, ResourcePatternType[pattern], principal, host,
                      AclOperation[operation], AclPermissionType[permission])
