"""Topic configs as they stand on a cluster, which of them a flow carries to the target, and
incremental changes to them, one result per topic.

These calls report each topic's failure separately, so one topic that is gone, locked or rejects a
value does not stop the others from being read or changed.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource, ResourceType

from strait.filters import ConfigPropertyFilter
from strait.kafka.admin import DEFAULT_TIMEOUT, KafkaAdminError, explain_error

log = logging.getLogger(__name__)

# What a broker answers when it refuses a value, rather than the caller's right to change it.
_REJECTION_CODES = (KafkaError.INVALID_CONFIG, KafkaError.POLICY_VIOLATION, KafkaError.INVALID_REQUEST)


class ConfigRejectedError(KafkaAdminError):
    """The broker refused a config value (invalid, or in conflict with the topic's other configs)."""


@dataclass(frozen=True)
class ConfigValue:
    """One config entry of a topic: its value and where the value comes from."""

    value: str | None
    source: ConfigSource
    read_only: bool = False
    sensitive: bool = False

    @property
    def is_topic_override(self) -> bool:
        """True when the value is set on the topic itself (not a broker or built-in default)."""
        return self.source == ConfigSource.DYNAMIC_TOPIC_CONFIG


@dataclass(frozen=True)
class ConfigChange:
    """Incremental changes to one topic's config: keys to SET and keys to DELETE (back to default)."""

    set: Mapping[str, str] = field(default_factory=dict)
    delete: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.set or self.delete)


@dataclass(frozen=True)
class DescribedConfigs:
    """Every entry of each topic that could be described, and an error for each that could not."""

    configs: Mapping[str, Mapping[str, ConfigValue]]
    errors: Mapping[str, KafkaAdminError]


def carried_configs(source: Mapping[str, ConfigValue], allowed: ConfigPropertyFilter) -> dict[str, str]:
    """The source topic's configs a flow puts on its remote topic (at creation and at every sync).

    The values set on the topic itself, within the flow's property filter (read-only and sensitive
    entries never). With ``use_defaults_from: source`` (MM2's ``use.defaults.from=source``) also the
    values it has from the source's defaults, dynamic broker ones included, so the remote topic
    behaves as on the source whatever the target's defaults; as in MM2, a broker's static
    (server.properties) values are not carried. Otherwise the target's own defaults apply.
    """
    return {
        name: entry.value for name, entry in source.items()
        if entry.value is not None and not entry.read_only and not entry.sensitive
        and allowed.should_replicate_config_property(name)
        and (entry.is_topic_override or (allowed.should_replicate_source_default(name)
                                         and entry.source != ConfigSource.STATIC_BROKER_CONFIG))
    }


def describe_topic_configs(admin: AdminClient, alias: str, topics: Iterable[str],
                           timeout: float = DEFAULT_TIMEOUT) -> DescribedConfigs:
    """All config entries (with their source) of each topic; failures are reported per topic."""
    resources = [ConfigResource(ResourceType.TOPIC, topic) for topic in topics]
    configs: dict[str, dict[str, ConfigValue]] = {}
    errors: dict[str, KafkaAdminError] = {}
    if not resources:
        return DescribedConfigs(configs, errors)
    try:
        futures = admin.describe_configs(resources, request_timeout=timeout)
    except KafkaException as exc:
        raise explain_error(exc, alias, "describing topic configs") from None
    for resource, future in futures.items():
        try:
            entries: dict[str, ConfigEntry] = future.result(timeout=timeout)
        except KafkaException as exc:
            errors[resource.name] = explain_error(exc, alias, f"describing configs of topic {resource.name}")
            continue
        configs[resource.name] = {
            name: ConfigValue(entry.value, ConfigSource(entry.source), bool(entry.is_read_only),
                              bool(entry.is_sensitive))
            for name, entry in entries.items()
        }
    return DescribedConfigs(configs, errors)


def alter_topic_configs(admin: AdminClient, alias: str, changes: Mapping[str, ConfigChange],
                        timeout: float = DEFAULT_TIMEOUT) -> dict[str, KafkaAdminError]:
    """Apply each topic's SETs and DELETEs with incremental alter; returns the topics that failed.

    A failed topic is left unchanged (the broker applies a resource's entries all or none).
    """
    resources = [_resource(topic, change) for topic, change in changes.items() if change]
    if not resources:
        return {}
    try:
        futures = admin.incremental_alter_configs(resources, request_timeout=timeout)
    except KafkaException as exc:
        raise explain_error(exc, alias, "altering topic configs") from None
    failed: dict[str, KafkaAdminError] = {}
    for resource, future in futures.items():
        topic, change = resource.name, changes[resource.name]
        try:
            future.result(timeout=timeout)
        except KafkaException as exc:
            failed[topic] = _alter_error(exc, alias, topic, change)
            continue
        log.info("altered configs cluster=%s topic=%s set=%s deleted=%s",
                 alias, topic, dict(change.set), list(change.delete))
    return failed


def _resource(topic: str, change: ConfigChange) -> ConfigResource:
    entries = [ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)
               for name, value in sorted(change.set.items())]
    entries += [ConfigEntry(name, None, incremental_operation=AlterConfigOpType.DELETE)
                for name in sorted(change.delete)]
    return ConfigResource(ResourceType.TOPIC, topic, incremental_configs=entries)


def _alter_error(exc: KafkaException, alias: str, topic: str, change: ConfigChange) -> KafkaAdminError:
    action = f"altering configs of topic {topic} (set {sorted(change.set)}, delete {sorted(change.delete)})"
    error = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
    if error is not None and error.code() in _REJECTION_CODES:
        return ConfigRejectedError(f"cluster {alias}: {action}: the broker rejected it ({error.str()}); "
                                   f"fix the value on the source or the conflicting override on cluster {alias}")
    return explain_error(exc, alias, action)
