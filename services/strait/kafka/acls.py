"""ACLs on a cluster: describe, create and delete bindings, with errors naming cluster and binding.

A cluster without an authorizer answers ACL calls with SECURITY_DISABLED; :func:`describe_acls`
turns that into :class:`AuthorizerDisabledError` so callers can tell "no ACLs to sync" from a failure.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

from strait.kafka.admin import DEFAULT_TIMEOUT, KafkaAdminError, explain_error

log = logging.getLogger(__name__)

ALL_ACLS = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
                            AclOperation.ANY, AclPermissionType.ANY)


class AuthorizerDisabledError(KafkaAdminError):
    """The cluster has no authorizer configured, so it has no ACLs."""


@dataclass(frozen=True)
class AclResult:
    """What an ACL create or delete call did, binding by binding."""

    done: tuple[AclBinding, ...] = ()
    failed: tuple[tuple[AclBinding, KafkaAdminError], ...] = ()


def describe_binding(binding: AclBinding) -> str:
    """A binding as an operator reads it: ``ALLOW User:x READ on TOPIC A.orders (LITERAL) from *``."""
    return (f"{binding.permission_type.name} {binding.principal} {binding.operation.name} on "
            f"{binding.restype.name} {binding.name} ({binding.resource_pattern_type.name}) from {binding.host}")


def _security_disabled(exc: KafkaException) -> bool:
    error = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
    return error is not None and error.code() == KafkaError.SECURITY_DISABLED


def describe_acls(admin: AdminClient, alias: str, binding_filter: AclBindingFilter = ALL_ACLS,
                  timeout: float = DEFAULT_TIMEOUT) -> list[AclBinding]:
    """Every ACL binding matching the filter.

    Raises:
        AuthorizerDisabledError: the cluster has no authorizer.
        KafkaAdminError: the call failed (permission: DESCRIBE on the CLUSTER resource).
    """
    try:
        return list(admin.describe_acls(binding_filter, request_timeout=timeout).result(timeout=timeout))
    except KafkaException as exc:
        if _security_disabled(exc):
            raise AuthorizerDisabledError(f"cluster {alias} has no authorizer configured; it keeps no ACLs") from None
        raise explain_error(exc, alias, "describing ACLs") from None


def create_acls(admin: AdminClient, alias: str, bindings: Iterable[AclBinding],
                timeout: float = DEFAULT_TIMEOUT) -> AclResult:
    """Create the bindings (existing ones are a no-op on the broker); failures are reported per binding."""
    wanted = list(dict.fromkeys(bindings))  # the client refuses duplicates in one request
    if not wanted:
        return AclResult()
    try:
        futures = admin.create_acls(wanted, request_timeout=timeout)
    except KafkaException as exc:
        raise explain_error(exc, alias, "creating ACLs") from None
    done, failed = [], []
    for binding, future in futures.items():
        try:
            future.result(timeout=timeout)
            done.append(binding)
            log.info("created ACL cluster=%s acl=%r", alias, describe_binding(binding))
        except KafkaException as exc:
            failed.append((binding, _acl_error(exc, alias, "creating", binding)))
    return AclResult(tuple(done), tuple(failed))


def delete_acls(admin: AdminClient, alias: str, bindings: Iterable[AclBinding],
                timeout: float = DEFAULT_TIMEOUT) -> AclResult:
    """Delete exactly these bindings (each used as a filter that matches only itself)."""
    by_filter = {exact_filter(b): b for b in dict.fromkeys(bindings)}
    if not by_filter:
        return AclResult()
    try:
        futures = admin.delete_acls(list(by_filter), request_timeout=timeout)
    except KafkaException as exc:
        raise explain_error(exc, alias, "deleting ACLs") from None
    done, failed = [], []
    for binding_filter, future in futures.items():
        binding = by_filter[binding_filter]
        try:
            future.result(timeout=timeout)
            done.append(binding)
            log.info("deleted ACL cluster=%s acl=%r", alias, describe_binding(binding))
        except KafkaException as exc:
            failed.append((binding, _acl_error(exc, alias, "deleting", binding)))
    return AclResult(tuple(done), tuple(failed))


def exact_filter(binding: AclBinding) -> AclBindingFilter:
    """A filter that matches this one binding and nothing else."""
    return AclBindingFilter(binding.restype, binding.name, binding.resource_pattern_type, binding.principal,
                            binding.host, binding.operation, binding.permission_type)


def _acl_error(exc: KafkaException, alias: str, verb: str, binding: AclBinding) -> KafkaAdminError:
    action = f"{verb} ACL {describe_binding(binding)}"
    if _security_disabled(exc):
        return AuthorizerDisabledError(f"cluster {alias}: {action}: the cluster has no authorizer configured")
    return explain_error(exc, alias, action)
