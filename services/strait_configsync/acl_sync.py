"""The ACLs step of a configsync pass: source topic ACLs copied to the target, stale ones reported or removed."""

from __future__ import annotations

import logging
from dataclasses import replace

from confluent_kafka.admin import AclBinding

from strait.kafka.acls import AuthorizerDisabledError, create_acls, delete_acls, describe_acls, describe_binding
from strait.kafka.admin import KafkaAdminError
from strait_configsync.acls import desired_acls
from strait_configsync.drift import FlowReport, capped
from strait_configsync.ownership import Ownership
from strait_configsync.passes import PassContext, PassState, signature

log = logging.getLogger(__name__)


class AclSync:
    """Creates the target ACLs the source's topic ACLs call for; stale ones are reported (or deleted)."""

    def __init__(self, sync: PassContext) -> None:
        self.sync = sync

    def run(self, report: FlowReport, state: PassState) -> FlowReport:
        if not self.sync.flow.sync_topic_acls.enabled:
            return replace(report, acl_sync="disabled", acls_wanted=0, acls_missing=(), acls_missing_count=0,
                           acls_deleted_on_source=(), acls_deleted_on_source_count=0)
        source_admin, target_admin = self.sync.clients()
        timeout = self.sync.options.admin_timeout
        try:
            source_acls = describe_acls(source_admin, self.sync.flow.source, timeout=timeout)
        except AuthorizerDisabledError:
            return replace(report, acl_sync="source has no authorizer", acls_wanted=0, acls_missing=(),
                           acls_missing_count=0, acls_deleted_on_source=(), acls_deleted_on_source_count=0)
        except KafkaAdminError as exc:
            self.sync.fail(state, "acls:source", "", exc)
            return replace(report, acl_sync="failed")
        wanted = desired_acls(self.sync.flow, source_acls, [t.source for t in state.topics])
        try:
            on_target = set(describe_acls(target_admin, self.sync.flow.target, timeout=timeout))
        except KafkaAdminError as exc:
            self.sync.fail(state, "acls:target", "", exc)
            return self._acl_report(report, wanted, wanted, set(), "failed")
        ownership = self.sync.fence.load_ownership()
        missing = wanted - on_target
        stale = (ownership.acls - wanted) & on_target
        created = self._apply_acls(state, "create", missing)
        deleted = self._apply_acls(state, "delete", stale) if self.sync.options.delete_acls else set()
        if stale - deleted and not self.sync.options.delete_acls:
            log.warning("flow=%s cluster=%s keeps %d ACLs deleted on %s (start with --delete-acls to remove): %s",
                        self.sync.flow.name, self.sync.flow.target, len(stale), self.sync.flow.source,
                        "; ".join(sorted(describe_binding(b) for b in stale))[:2000])
        present = (on_target | created) - deleted
        new = Ownership(ownership.configs, frozenset((wanted & present) | (stale - deleted)))
        if new != ownership:
            self.sync.fence.save_ownership(new)
        return self._acl_report(report, wanted, missing - created, stale - deleted, "ok")

    def _apply_acls(self, state: PassState, verb: str, bindings: set[AclBinding]) -> set[AclBinding]:
        key = f"acls:{verb}"
        sig = signature(sorted(map(describe_binding, bindings)))
        if not bindings or not self.sync.backoff.ready(key, sig):
            return set()
        self.sync.fence.check()
        call = create_acls if verb == "create" else delete_acls
        _, target_admin = self.sync.clients()
        try:
            result = call(target_admin, self.sync.flow.target, bindings, timeout=self.sync.options.admin_timeout)
        except KafkaAdminError as exc:
            self.sync.fail(state, key, sig, exc)
            return set()
        if result.failed:
            self.sync.fail(state, key, sig, result.failed[0][1])
        else:
            self.sync.backoff.succeeded(key)
        self.sync.action(f"acl_{verb}d", len(result.done))
        return set(result.done)

    @staticmethod
    def _acl_report(report: FlowReport, wanted: set[AclBinding], missing: set[AclBinding],
                    stale: set[AclBinding], status: str) -> FlowReport:
        return replace(report, acl_sync=status, acls_wanted=len(wanted),
                       acls_missing=capped(sorted(map(describe_binding, missing))), acls_missing_count=len(missing),
                       acls_deleted_on_source=capped(sorted(map(describe_binding, stale))),
                       acls_deleted_on_source_count=len(stale))
