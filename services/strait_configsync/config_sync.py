"""The configs step of a configsync pass: topic configs copied within the flow's property filter."""

from __future__ import annotations

from dataclasses import replace

from strait.kafka.configs import ConfigChange, alter_topic_configs, carried_configs, describe_topic_configs
from strait_configsync.configs import drifted_keys, plan_configs
from strait_configsync.drift import ConfigDrift, FlowReport, capped
from strait_configsync.ownership import Ownership
from strait_configsync.passes import PassContext, PassState, change_signature


class ConfigSync:
    """Sets the configs strait owns on each remote topic; reports the keys that drifted."""

    def __init__(self, sync: PassContext) -> None:
        self.sync = sync

    def run(self, report: FlowReport, state: PassState) -> FlowReport:
        if not self.sync.flow.sync_topic_configs.enabled:
            return replace(report, config_drift=(), config_drift_count=0)
        source_admin, target_admin = self.sync.clients()
        present = [t for t in state.topics if t.remote in state.target_partitions]
        timeout = self.sync.options.admin_timeout
        source = describe_topic_configs(source_admin, self.sync.flow.source, [t.source for t in present], timeout)
        target = describe_topic_configs(target_admin, self.sync.flow.target, [t.remote for t in present], timeout)
        ownership = self.sync.fence.load_ownership()
        allowed = self.sync.flow.config_property_filter()
        owned: dict[str, frozenset[str]] = {}
        changes: dict[str, ConfigChange] = {}
        drift: dict[str, list[str]] = {}
        for topic in present:
            before = ownership.configs.get(topic.remote, frozenset())
            owned[topic.remote] = before
            error = source.errors.get(topic.source) or target.errors.get(topic.remote)
            if error is not None:
                self.sync.fail(state, f"config:{topic.remote}", "describe", error)
                continue
            wanted = carried_configs(source.configs[topic.source], allowed)
            current = target.configs[topic.remote]
            plan = plan_configs(wanted, current, before)
            if not plan.change or self.sync.backoff.ready(f"config:{topic.remote}", change_signature(plan.change)):
                owned[topic.remote] = plan.owned_after
                if plan.change:
                    changes[topic.remote] = plan.change
            drift[topic.remote] = drifted_keys(wanted, current)
        self.sync.fence.check()
        failed = alter_topic_configs(target_admin, self.sync.flow.target, changes, timeout)
        for remote, change in changes.items():
            key = f"config:{remote}"
            if remote in failed:
                self.sync.fail(state, key, change_signature(change), failed[remote])
                owned[remote] = ownership.configs.get(remote, frozenset())
                continue
            self.sync.backoff.succeeded(key)
            drift[remote] = []
            self.sync.action("config_set", len(change.set))
            self.sync.action("config_deleted", len(change.delete))
        new = Ownership({t: k for t, k in owned.items() if k}, ownership.acls)
        if new != ownership:
            self.sync.fence.save_ownership(new)
        drifted = [ConfigDrift(topic, tuple(keys)) for topic, keys in sorted(drift.items()) if keys]
        return replace(report, config_drift=capped(drifted), config_drift_count=len(drifted))
