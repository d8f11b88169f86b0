"""Replication policies: how remote topics are named and how a name is traced back to its source.

The semantics are MirrorMaker 2's (Kafka 4.x ``connect-mirror-client``), edge cases included, so that
strait and MM2 agree on every topic name: MM2 tooling reading strait's topics, cycle detection in
mixed MM2/strait topologies, and migrations in both directions depend on it.

- :class:`DefaultReplicationPolicy` prefixes the source alias (``A.orders``) and parses names by
  splitting on the separator with Java's ``String.split`` rules; given the configuration's cluster
  aliases (``known_aliases``) it takes the longest alias a name starts with instead, so aliases
  that contain the separator (``cluster-1`` with ``-``) are traced right and cycles are caught
  where MM2's name-only check misses them.
- :class:`IdentityReplicationPolicy` keeps names unchanged (except heartbeat topics) and therefore
  cannot detect cycles; it is meant for one-way topologies and migrations.
- :func:`is_cycle` and :func:`should_replicate_topic` are MM2's per-flow replication decision.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass, field
from typing import Protocol

from strait.errors import ConfigError

HEARTBEATS_TOPIC = "heartbeats"
SEPARATOR_DEFAULT = "."
DEFAULT_POLICY_CLASS = "org.apache.kafka.connect.mirror.DefaultReplicationPolicy"
IDENTITY_POLICY_CLASS = "org.apache.kafka.connect.mirror.IdentityReplicationPolicy"
# Other class names guides write for the identity behaviour: KIP-382's "legacy mode" for MM1 users
# (under two package names) and Strimzi's own identity policy from before Kafka 3.0.
IDENTITY_ALIASES = (
    "org.apache.kafka.connect.mirror.LegacyReplicationPolicy",
    "org.apache.kafka.mirror.LegacyReplicationPolicy",
    "io.strimzi.kafka.connect.mirror.IdentityReplicationPolicy",
)

# Kafka's interface defaults hard-code "." regardless of any separator.
_INTERFACE_SEPARATOR = "."
_INTERNAL = "internal"
_CHECKPOINTS = "checkpoints"
_OFFSET_SYNCS_PREFIX = "mm2-offset-syncs"
_MM2_PREFIX = "mm2"


class TopicFilterLike(Protocol):
    """Anything that decides on topic names the way MM2's ``TopicFilter`` does."""

    def should_replicate_topic(self, topic: str) -> bool:
        """True when the topic passes the include/exclude lists."""
        ...


class ReplicationPolicy(abc.ABC):
    """MM2's ``ReplicationPolicy`` contract; non-abstract methods are the interface's defaults."""

    @abc.abstractmethod
    def format_remote_topic(self, source_alias: str, topic: str) -> str:
        """Name on the target cluster of ``topic`` replicated from cluster ``source_alias``."""

    @abc.abstractmethod
    def topic_source(self, topic: str) -> str | None:
        """Alias of the cluster ``topic`` was replicated from, or None for a local topic."""

    @abc.abstractmethod
    def upstream_topic(self, topic: str) -> str | None:
        """Name of ``topic`` one hop upstream, or None for a local topic."""

    def original_topic(self, topic: str) -> str:
        """Follow :meth:`upstream_topic` until it returns None or the same name (``B.A.t`` -> ``t``)."""
        seen = {topic}
        current = topic
        while True:
            upstream = self.upstream_topic(current)
            # Java recurses without a visited set; the set only protects against custom policies
            # whose upstream names go round in circles.
            if upstream is None or upstream in seen:
                return current
            seen.add(upstream)
            current = upstream

    def heartbeats_topic(self) -> str:
        """Name of the heartbeats topic, the same on every cluster: ``heartbeats``."""
        return HEARTBEATS_TOPIC

    def offset_syncs_topic(self, cluster_alias: str) -> str:
        """Offset-syncs topic named after the *other* cluster of the flow."""
        sep = _INTERFACE_SEPARATOR
        return f"{_OFFSET_SYNCS_PREFIX}{sep}{cluster_alias}{sep}{_INTERNAL}"

    def checkpoints_topic(self, cluster_alias: str) -> str:
        """Checkpoints topic on the target for groups of source cluster ``cluster_alias``."""
        sep = _INTERFACE_SEPARATOR
        return f"{cluster_alias}{sep}{_CHECKPOINTS}{sep}{_INTERNAL}"

    def is_heartbeats_topic(self, topic: str) -> bool:
        """True for ``heartbeats`` and every replicated copy of it (``A.heartbeats``, ...)."""
        return self.original_topic(topic) == self.heartbeats_topic()

    def is_checkpoints_topic(self, topic: str) -> bool:
        """True when the name ends with the checkpoints suffix (``.checkpoints.internal``)."""
        return topic.endswith(f"{_INTERFACE_SEPARATOR}{_CHECKPOINTS}{_INTERFACE_SEPARATOR}{_INTERNAL}")

    def is_mm2_internal_topic(self, topic: str) -> bool:
        """True for MM2's own topics: ``mm2*.internal`` (offset syncs, Connect stores) and checkpoints."""
        suffix = f"{_INTERFACE_SEPARATOR}{_INTERNAL}"
        return (topic.startswith(_MM2_PREFIX) and topic.endswith(suffix)) or self.is_checkpoints_topic(topic)

    def is_internal_topic(self, topic: str) -> bool:
        """True for topics never replicated: Kafka's (``__*``, ``.*``) and MM2's internal topics.

        Kafka 4.0 (KAFKA-17200) dropped the 3.x rule that also treated every ``*.internal`` and
        ``*-internal`` name as internal; this follows 4.x.
        """
        return topic.startswith("__") or topic.startswith(".") or self.is_mm2_internal_topic(topic)


@dataclass(frozen=True)
class DefaultReplicationPolicy(ReplicationPolicy):
    """MM2's default policy: remote topics are ``<source alias><separator><topic>``.

    ``internal_topic_separator_enabled`` (MM2's ``replication.policy.internal.topic.separator.enabled``)
    makes the checkpoints and offset-syncs topic names use the separator too; when False they use ``.``.
    """

    separator: str = SEPARATOR_DEFAULT
    internal_topic_separator_enabled: bool = True
    known_aliases: tuple[str, ...] = field(default=(), kw_only=True)

    def __post_init__(self) -> None:
        if not isinstance(self.separator, str):
            raise ConfigError(f"replication policy separator must be a string, got {self.separator!r}")
        if not isinstance(self.internal_topic_separator_enabled, bool):
            raise ConfigError(
                "replication policy internal_topic_separator_enabled must be true or false, "
                f"got {self.internal_topic_separator_enabled!r}"
            )

    def format_remote_topic(self, source_alias: str, topic: str) -> str:
        """``<source_alias><separator><topic>``."""
        return f"{source_alias}{self.separator}{topic}"

    def topic_source(self, topic: str) -> str | None:
        """The longest known alias the name starts with (followed by the separator and more); else the
        first piece of the name split on the separator, or None when there are fewer than two pieces.
        With an empty separator MM2 takes the first character as the source; a known alias is
        still matched whole here, so ``us-eastorders`` comes from ``us-east`` and cycles are caught.

        Java ``String.split`` rules: trailing empty pieces are dropped, a leading one is kept, so
        ``a.`` -> None, ``.b`` -> ``""`` and ``a..b`` -> ``a``.
        """
        known = [alias for alias in self.known_aliases
                 if topic.startswith(alias + self.separator)
                 and len(topic) > len(alias) + len(self.separator)]
        if known:
            return max(known, key=len)
        pieces = java_split(topic, self.separator)
        return pieces[0] if len(pieces) >= 2 else None

    def upstream_topic(self, topic: str) -> str | None:
        """Everything after ``<source><separator>``, or None for a local topic."""
        source = self.topic_source(topic)
        if source is None:
            return None
        return topic[len(source) + len(self.separator):]

    def _internal_separator(self) -> str:
        return self.separator if self.internal_topic_separator_enabled else _INTERFACE_SEPARATOR

    def _internal_suffix(self) -> str:
        return f"{self._internal_separator()}{_INTERNAL}"

    def _checkpoints_suffix(self) -> str:
        return f"{self._internal_separator()}{_CHECKPOINTS}{self._internal_suffix()}"

    def offset_syncs_topic(self, cluster_alias: str) -> str:
        """``mm2-offset-syncs.<alias>.internal`` with the internal separator."""
        return f"{_OFFSET_SYNCS_PREFIX}{self._internal_separator()}{cluster_alias}{self._internal_suffix()}"

    def checkpoints_topic(self, cluster_alias: str) -> str:
        """``<alias>.checkpoints.internal`` with the internal separator."""
        return f"{cluster_alias}{self._checkpoints_suffix()}"

    def is_checkpoints_topic(self, topic: str) -> bool:
        """True when the name ends with the checkpoints suffix under the internal separator."""
        return topic.endswith(self._checkpoints_suffix())

    def is_mm2_internal_topic(self, topic: str) -> bool:
        """True for ``mm2*<sep>internal`` names and checkpoints topics, under the internal separator."""
        return (
            topic.startswith(_MM2_PREFIX) and topic.endswith(self._internal_suffix())
        ) or self.is_checkpoints_topic(topic)


@dataclass(frozen=True)
class IdentityReplicationPolicy(DefaultReplicationPolicy):
    """MM2's identity policy: remote topics keep their name, so cycles cannot be detected.

    Names ending with ``heartbeats`` are the exception: they get the default prefix, so heartbeat
    lineage (and topology discovery) still works; a user topic such as ``app-heartbeats`` is
    prefixed too. Every other topic is reported as coming from ``source_cluster_alias`` (MM2's
    ``source.cluster.alias``), or from nowhere when it is not set. Use it for one-way flows only.
    """

    source_cluster_alias: str | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.source_cluster_alias is not None and not isinstance(self.source_cluster_alias, str):
            raise ConfigError(f"source cluster alias must be a string, got {self.source_cluster_alias!r}")

    def _looks_like_heartbeat(self, topic: str) -> bool:
        return topic.endswith(self.heartbeats_topic())

    def format_remote_topic(self, source_alias: str, topic: str) -> str:
        """The topic unchanged, except heartbeat-like names, which get the default prefix."""
        if self._looks_like_heartbeat(topic):
            return super().format_remote_topic(source_alias, topic)
        return topic

    def topic_source(self, topic: str) -> str | None:
        """The configured source alias, or the default parse for heartbeat-like names."""
        if self._looks_like_heartbeat(topic):
            return super().topic_source(topic)
        return self.source_cluster_alias

    def upstream_topic(self, topic: str) -> str | None:
        """The topic itself, or the default parse for heartbeat-like names."""
        if self._looks_like_heartbeat(topic):
            return super().upstream_topic(topic)
        return topic


def java_split(text: str, separator: str) -> list[str]:
    """``text.split(Pattern.quote(separator))`` as Java computes it.

    Trailing empty pieces are removed; a leading empty piece is kept when the separator is not
    empty. An empty separator splits between characters without a leading empty piece (Java
    splits between UTF-16 units, which differs only for characters outside the BMP, never
    found in Kafka topic names).
    """
    if separator:
        pieces = text.split(separator)
    else:
        pieces = list(text) if text else [""]
    if len(pieces) == 1:
        # Java returns the input itself when nothing matched, even when it is empty.
        return pieces
    while pieces and pieces[-1] == "":
        pieces.pop()
    return pieces


def is_cycle(policy: ReplicationPolicy, topic: str, target_alias: str) -> bool:
    """True when ``topic`` already passed through ``target_alias`` (so a flow to it would loop).

    MM2's check: walk the upstream names while each has a source; a source equal to the target
    alias is a cycle. With the configuration's aliases known to the policy, each source is the
    longest alias the name starts with. Under the identity policy the walk stops at once, so cycles
    go unseen.
    """
    seen: set[str] = set()
    current = topic
    while current not in seen:
        seen.add(current)
        source = policy.topic_source(current)
        if source is None:
            return False
        if source == target_alias:
            return True
        upstream = policy.upstream_topic(current)
        if upstream is None or upstream == current:
            return False
        current = upstream
    return False


def should_replicate_topic(
    policy: ReplicationPolicy,
    topic_filter: TopicFilterLike,
    topic: str,
    target_alias: str,
    heartbeats_replication_enabled: bool = True,
) -> bool:
    """MM2's decision for one topic of a flow to ``target_alias``.

    The topic must pass the filter (heartbeat topics bypass it unless heartbeat replication is
    off), must not be internal to the policy, and must not form a cycle.
    """
    wanted = topic_filter.should_replicate_topic(topic) or (
        heartbeats_replication_enabled and policy.is_heartbeats_topic(topic)
    )
    return wanted and not policy.is_internal_topic(topic) and not is_cycle(policy, topic, target_alias)


_POLICY_NAMES = {
    "default": DefaultReplicationPolicy,
    "defaultreplicationpolicy": DefaultReplicationPolicy,
    DEFAULT_POLICY_CLASS.lower(): DefaultReplicationPolicy,
    "identity": IdentityReplicationPolicy,
    "identityreplicationpolicy": IdentityReplicationPolicy,
    IDENTITY_POLICY_CLASS.lower(): IdentityReplicationPolicy,
    "legacy": IdentityReplicationPolicy,
    "legacyreplicationpolicy": IdentityReplicationPolicy,
    **{name.lower(): IdentityReplicationPolicy for name in IDENTITY_ALIASES},
}


def policy_from_name(
    name: str,
    separator: str = SEPARATOR_DEFAULT,
    internal_separator_enabled: bool = True,
    source_cluster_alias: str | None = None,
    known_aliases: tuple[str, ...] = (),
) -> ReplicationPolicy:
    """The policy for MM2's ``replication.policy.class`` value or a short name (``default``, ``identity``).

    The legacy-mode and Strimzi class names (:data:`IDENTITY_ALIASES`) mean the identity policy.

    ``source_cluster_alias`` only matters for the identity policy; ``known_aliases`` (the
    configuration's cluster aliases) only for the default one. Raises :class:`ConfigError`
    naming the value when it is not a known policy.
    """
    policy_class = _POLICY_NAMES.get(name.strip().lower()) if isinstance(name, str) else None
    if policy_class is None:
        raise ConfigError(
            f"unknown replication policy {name!r}: use 'default', 'identity', "
            f"{DEFAULT_POLICY_CLASS}, {IDENTITY_POLICY_CLASS} or {IDENTITY_ALIASES[0]}"
        )
    if policy_class is IdentityReplicationPolicy:
        return IdentityReplicationPolicy(separator, internal_separator_enabled, source_cluster_alias)
    return DefaultReplicationPolicy(separator, internal_separator_enabled, known_aliases=tuple(known_aliases))
