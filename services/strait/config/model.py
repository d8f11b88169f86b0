"""strait's configuration model: clusters, flows and where the coordination Redis is.

Every class is a frozen dataclass; mappings are read-only views. Values of client settings are
plain strings, :class:`SecretRef` (resolved only when a client is built) or :class:`Secret` (inline,
masked when printed). Defaults are MM2's except where MM2 is slow: strait refreshes topics, groups,
configs and ACLs every 30 s, checkpoints every 5 s, heartbeats every 1 s, syncs group offsets every
5 s when enabled.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from types import MappingProxyType
from typing import Any, Literal

from strait.config.clients import librdkafka_settings
from strait.config.keystores import KeyStoreError
from strait.config.secrets import SecretRef, SettingValue, has_reference, mask_url, resolve_value
from strait.errors import ConfigError
from strait.filters import (
    CONFIG_PROPERTIES_EXCLUDE_DEFAULT,
    GROUPS_EXCLUDE_DEFAULT,
    GROUPS_INCLUDE_DEFAULT,
    TOPICS_EXCLUDE_DEFAULT,
    TOPICS_INCLUDE_DEFAULT,
    ConfigPropertyFilter,
    GroupFilter,
    TopicFilter,
)
from strait.policy import ReplicationPolicy, policy_from_name
from strait.records import MIRROR_SOURCE_CONNECTOR

DEFAULT_REDIS_URL = "redis://127.0.0.1:19079/0"
POLICY_NAMES = ("default", "identity")
OFFSET_SYNCS_LOCATIONS = ("source", "target")
START_CHOICES = ("earliest", "latest", "from-target")
CLIENT_ROLES = ("consumer", "producer", "admin")
DEFAULT_CHECKPOINT_SHARDS = 6  # spreads evenly over 1, 2, 3 or 6 checkpoint replicas
MAX_CHECKPOINT_SHARDS = 256
MAX_TARGET_PARTITIONS = 10000

Role = Literal["consumer", "producer", "admin"]
InternalTopic = Literal["heartbeats", "checkpoints", "offset_syncs"]


def _frozen_mapping(values: Mapping[str, Any]) -> Mapping[str, Any]:
    return MappingProxyType(dict(values))


def _empty() -> Mapping[str, SettingValue]:
    return MappingProxyType({})


@dataclass(frozen=True)
class Selection:
    """Include and exclude regex lists; a name must fully match an include and no exclude."""

    include: tuple[str, ...]
    exclude: tuple[str, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "include", tuple(self.include))
        object.__setattr__(self, "exclude", tuple(self.exclude))


@dataclass(frozen=True)
class Schedule:
    """A periodic task of a flow: whether it runs and how often."""

    enabled: bool
    interval_seconds: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "interval_seconds", float(self.interval_seconds))


@dataclass(frozen=True)
class ClusterConfig:
    """One Kafka cluster: its alias, bootstrap servers and client settings (incl. security).

    ``client`` applies to every client of the cluster; ``consumer``, ``producer`` and ``admin``
    override it for that kind of client (MM2's ``<alias>.consumer.*`` and so on). Keys are Kafka
    client property names as the user wrote them (Java or librdkafka spelling).
    """

    alias: str
    bootstrap_servers: str
    client: Mapping[str, SettingValue] = field(default_factory=_empty)
    consumer: Mapping[str, SettingValue] = field(default_factory=_empty)
    producer: Mapping[str, SettingValue] = field(default_factory=_empty)
    admin: Mapping[str, SettingValue] = field(default_factory=_empty)

    def __post_init__(self) -> None:
        for name in ("client", *CLIENT_ROLES):
            object.__setattr__(self, name, _frozen_mapping(getattr(self, name)))

    def __hash__(self) -> int:
        scopes = tuple(tuple(sorted(getattr(self, name).items())) for name in ("client", *CLIENT_ROLES))
        return hash((self.alias, self.bootstrap_servers, scopes))

    def unresolved_settings(self, role: Role | None = None) -> dict[str, SettingValue]:
        """Settings for one kind of client before resolution: bootstrap, shared, then role overrides."""
        merged: dict[str, SettingValue] = {"bootstrap.servers": self.bootstrap_servers, **self.client}
        if role is not None:
            merged.update(getattr(self, role))
        return merged

    def settings(self, role: Role | None = None, environ: Mapping[str, str] | None = None,
                 skip: tuple[str, ...] = ()) -> dict[str, str]:
        """Resolved settings with the keys as written (for Java clients, e.g. Spark's ``kafka.*``).

        Secrets are resolved here, at use time, and never cached; raises ConfigError naming the
        cluster, key and reference when one cannot be resolved.
        """
        source = os.environ if environ is None else environ
        resolved: dict[str, str] = {}
        for key, value in self.unresolved_settings(role).items():
            if key in skip:
                continue
            try:
                resolved[key] = resolve_value(value, source)
            except ConfigError as exc:
                raise ConfigError(f"cluster {self.alias}: {key}: {exc}") from None
        return resolved

    def librdkafka_config(self, role: Role | None = None,
                          environ: Mapping[str, str] | None = None) -> dict[str, str]:
        """A confluent-kafka (librdkafka) config dict with secrets resolved.

        Java-only settings an MM2 file carries are translated (``sasl.jaas.config`` for PLAIN and
        SCRAM to ``sasl.username``/``sasl.password``, PEM truststores to ``ssl.ca.location``, JKS and
        PKCS#12 stores to PEM text, :mod:`strait.config.clients`).
        """
        source = os.environ if environ is None else environ
        jaas = self.unresolved_settings(role).get("sasl.jaas.config")
        settings = self.settings(role, source, skip=("sasl.jaas.config",))
        try:
            # references inside the JAAS options are resolved after parsing; a reference to the whole
            # value (``${file:/etc/mm1/consumer.properties:sasl.jaas.config}``) before
            if isinstance(jaas, SecretRef) and not jaas.text.lstrip().startswith("${"):
                return librdkafka_settings(settings, jaas.text, _jaas_option_resolver(source))
            return librdkafka_settings(settings, None if jaas is None else resolve_value(jaas, source))
        except KeyStoreError as exc:
            raise KeyStoreError(f"cluster {self.alias}: {exc}") from None
        except ConfigError as exc:
            raise ConfigError(f"cluster {self.alias}: {exc}") from None


def _jaas_option_resolver(environ: Mapping[str, str]) -> Callable[[str], str]:
    """Resolves references in one JAAS option value, after the JAAS text itself was parsed."""

    def resolve(text: str) -> str:
        if not has_reference(text):
            return text
        try:
            return SecretRef(text).resolve(environ)
        except ConfigError as exc:
            raise ConfigError(f"sasl.jaas.config: {exc}") from None

    return resolve


@dataclass(frozen=True)
class FlowConfig:
    """One replication flow from ``source`` to ``target`` (named ``"A->B"``) and how it runs.

    ``replication_factor`` is MM2's 2 for remote topics (``-1`` uses the target broker's default):
    a disaster-recovery copy should never be single-replica by accident. The heartbeats,
    checkpoints and offset-syncs topics take their own factor when set (MM2's
    ``*.topic.replication.factor``), else ``replication_factor``. ``emit_offset_syncs`` off (MM2's
    ``emit.offset-syncs.enabled=false``, MM1's legacy mode) writes no offset syncs, so the flow has
    no checkpoints. ``target_partitions`` gives every remote topic that many partitions and places
    records by key hash (MM1's repartitioning); offsets then no longer map 1:1, so such topics get
    no offset syncs and no checkpoints. ``rate_limit_records_per_second``
    of None means unlimited. ``checkpoint_shards`` splits the flow's consumer groups (by a hash of
    the group id) into that many work items, which the checkpoint replicas share; use at least as
    many shards as replicas. ``use_defaults_from`` (MM2's ``use.defaults.from``): ``target`` leaves a
    remote topic the target's defaults, ``source`` also carries the values the source topic has
    from its defaults (:func:`strait.kafka.configs.carried_configs`). ``start`` (``earliest``, ``latest`` or ``from-target``) is where the
    copy of a partition starts when Kafka holds no evidence of an earlier copy (:mod:`strait.progress`);
    ``mm2_offsets_topic`` is the Connect offsets topic MirrorMaker 2 kept its progress in, on the
    target (default ``mm2-offsets.<source>.internal``, dedicated mode's), and ``mm2_source_connector``
    the name its MirrorSourceConnector ran under (default ``MirrorSourceConnector``, dedicated mode's;
    on a Connect cluster, the name the connector was created with). ``restarted_at`` is set by
    `strait flow restart` (to its UTC time; any text works): each time it takes a new value, every
    service ends its work on the flow and starts it again from what the clusters hold
    (:meth:`restart_requested`); a version without it asks for nothing. ``exactly_once`` (MM2's
    ``exactly.once.source.support=enabled``) writes each copier's records, progress and, when they
    live on the target, offset syncs in one transaction on the target: a consumer of the remote topics
    with ``isolation.level=read_committed`` then reads every source record once, through any crash.
    """

    source: str
    target: str
    enabled: bool = True
    topics: Selection = Selection(TOPICS_INCLUDE_DEFAULT, TOPICS_EXCLUDE_DEFAULT)
    groups: Selection = Selection(GROUPS_INCLUDE_DEFAULT, GROUPS_EXCLUDE_DEFAULT)
    replication_policy: str = "default"
    separator: str = "."
    internal_topic_separator_enabled: bool = True
    refresh_topics: Schedule = Schedule(True, 30.0)
    refresh_groups: Schedule = Schedule(True, 30.0)
    sync_topic_configs: Schedule = Schedule(True, 30.0)
    sync_topic_acls: Schedule = Schedule(True, 30.0)
    emit_heartbeats: Schedule = Schedule(True, 1.0)
    emit_checkpoints: Schedule = Schedule(True, 5.0)
    sync_group_offsets: Schedule = Schedule(False, 5.0)
    offset_syncs_topic_location: str = "source"
    replication_factor: int = 2
    heartbeats_topic_replication_factor: int | None = None
    checkpoints_topic_replication_factor: int | None = None
    offset_syncs_topic_replication_factor: int | None = None
    emit_offset_syncs: bool = True
    target_partitions: int | None = None
    rate_limit_records_per_second: float | None = None
    heartbeats_replication_enabled: bool = True
    config_properties_exclude: tuple[str, ...] = CONFIG_PROPERTIES_EXCLUDE_DEFAULT
    use_defaults_from: str = "target"
    checkpoint_shards: int = DEFAULT_CHECKPOINT_SHARDS
    start: str | None = None
    mm2_offsets_topic: str | None = None
    mm2_source_connector: str | None = None
    restarted_at: str | None = None
    exactly_once: bool = False
    # Derived, not a setting: every cluster alias of the configuration (the policy traces remote
    # topics to them), filled in by StraitConfig.
    cluster_aliases: tuple[str, ...] = field(default=(), compare=False, repr=False,
                                             metadata={"derived": True})

    def __post_init__(self) -> None:
        object.__setattr__(self, "config_properties_exclude", tuple(self.config_properties_exclude))
        if self.rate_limit_records_per_second is not None:
            rate = float(self.rate_limit_records_per_second)
            object.__setattr__(self, "rate_limit_records_per_second", rate)

    @property
    def name(self) -> str:
        """The flow's name, ``"<source>-><target>"`` as in MM2."""
        return f"{self.source}->{self.target}"

    def policy(self) -> ReplicationPolicy:
        """The flow's replication policy (its source alias set, as MM2 sets it for identity)."""
        return policy_from_name(self.replication_policy, self.separator,
                                self.internal_topic_separator_enabled, source_cluster_alias=self.source,
                                known_aliases=self.cluster_aliases)

    def topic_names(self) -> FlowTopics:
        """Every topic name of the flow: remote names, heartbeats, checkpoints, offset syncs and where they live."""
        return FlowTopics(self.source, self.target, self.policy(), self.offset_syncs_topic_location == "target",
                          self.mm2_offsets_topic, self.mm2_source_connector)

    def restart_requested(self, before: FlowConfig | None) -> bool:
        """Whether this version of the flow asks for a restart of the work on it ``before`` served.

        Only a new ``restarted_at`` does: a file applied without the key (None) asks for nothing.
        """
        return before is not None and self.restarted_at is not None and self.restarted_at != before.restarted_at

    def internal_topic_replication_factor(self, kind: InternalTopic) -> int:
        """Replication factor of the flow's heartbeats, checkpoints or offset-syncs topic."""
        own = getattr(self, f"{kind}_topic_replication_factor")
        return self.replication_factor if own is None else own

    @property
    def repartitions(self) -> bool:
        """True when remote topics have their own partition count (records placed by key hash)."""
        return self.target_partitions is not None

    @property
    def writes_offset_syncs(self) -> bool:
        """True when the replicator writes offset syncs: enabled, and offsets map 1:1 (no repartitioning)."""
        return self.no_offset_syncs_reason() is None

    def no_offset_syncs_reason(self) -> str | None:
        """Why the flow writes no offset syncs (``target_partitions`` or ``emit_offset_syncs`` off), or None."""
        if self.repartitions:
            return f"target_partitions is {self.target_partitions}"
        return None if self.emit_offset_syncs else "emit_offset_syncs is off"

    @property
    def emits_checkpoints(self) -> bool:
        """True when checkpoints are wanted and possible (they are translated from the offset syncs)."""
        return self.emit_checkpoints.enabled and self.writes_offset_syncs

    def topic_filter(self) -> TopicFilter:
        """The flow's topic filter."""
        return TopicFilter(self.topics.include, self.topics.exclude)

    def group_filter(self) -> GroupFilter:
        """The flow's consumer-group filter."""
        return GroupFilter(self.groups.include, self.groups.exclude)

    def config_property_filter(self) -> ConfigPropertyFilter:
        """Which topic config properties the flow never syncs."""
        return ConfigPropertyFilter(self.config_properties_exclude, self.use_defaults_from)

    @classmethod
    def from_layers(cls, source: str, target: str, *layers: Mapping[str, Any]) -> FlowConfig:
        """Build a flow from partial settings, later layers winning (defaults, then the flow's own).

        A layer maps field names to values; for ``Selection`` and ``Schedule`` fields the value is
        itself a partial mapping of their fields, merged field by field.
        """
        merged = merge_layers(*layers)
        base = cls(source=source, target=target)
        values: dict[str, Any] = {}
        for name, value in merged.items():
            current = getattr(base, name)
            values[name] = replace(current, **value) if isinstance(current, (Selection, Schedule)) else value
        return replace(base, **values)


FLOW_FIELDS = tuple(f.name for f in fields(FlowConfig) if not f.metadata.get("derived"))
NESTED_FLOW_FIELDS: Mapping[str, type] = MappingProxyType({
    f.name: type(f.default) for f in fields(FlowConfig) if isinstance(f.default, (Selection, Schedule))
})


@dataclass(frozen=True)
class SyncsLocation:
    """Where a flow's offset syncs live: cluster alias and topic name."""

    alias: str
    topic: str


@dataclass(frozen=True)
class FlowTopics:
    """The one home of a flow's topic names, all from its replication policy (MM2's naming rules)."""

    source: str
    target: str
    policy: ReplicationPolicy
    syncs_on_target: bool = False
    mm2_offsets_topic: str | None = None
    mm2_source_connector: str | None = None

    def remote(self, topic: str) -> str:
        """The name of source ``topic``'s copy on the target (``A.orders``)."""
        return self.policy.format_remote_topic(self.source, topic)

    def checkpointed(self, topic: str) -> str:
        """The target-side name a checkpoint of source ``topic`` carries: a topic that came from the
        target goes home unprefixed (MM2's rule), any other is its remote name."""
        if self.policy.topic_source(topic) == self.target:
            return self.policy.original_topic(topic)
        return self.remote(topic)

    @property
    def heartbeats(self) -> str:
        """The heartbeats topic, on the source (emitted) and on the target."""
        return self.policy.heartbeats_topic()

    @property
    def remote_heartbeats(self) -> str:
        """The source's heartbeats as copied to the target (``A.heartbeats``)."""
        return self.remote(self.heartbeats)

    @property
    def checkpoints(self) -> str:
        """The flow's checkpoints topic, on the target (``A.checkpoints.internal``)."""
        return self.policy.checkpoints_topic(self.source)

    @property
    def offset_syncs(self) -> SyncsLocation:
        """The offset-syncs topic: on the source named after the target, or (``target``) the other way round."""
        if self.syncs_on_target:
            return SyncsLocation(self.target, self.policy.offset_syncs_topic(self.source))
        return SyncsLocation(self.source, self.policy.offset_syncs_topic(self.target))


    @property
    def progress(self) -> SyncsLocation:
        """strait's progress topic, on the target (:mod:`strait.progress`)."""
        return SyncsLocation(self.target, f"strait-offsets.{self.source}.internal")

    @property
    def mm2_offsets(self) -> SyncsLocation:
        """MirrorMaker 2's Connect offsets topic for this source, on the target."""
        return SyncsLocation(self.target, self.mm2_offsets_topic or dedicated_mm2_offsets_topic(self.source))

    @property
    def mm2_connector(self) -> str:
        """The name MM2's MirrorSourceConnector keeps its offsets under in that topic."""
        return self.mm2_source_connector or MIRROR_SOURCE_CONNECTOR


def merge_layers(*layers: Mapping[str, Any]) -> dict[str, Any]:
    """Merge partial flow settings; nested partial mappings merge one level deep."""
    merged: dict[str, Any] = {}
    for layer in layers:
        for name, value in layer.items():
            if name in NESTED_FLOW_FIELDS and isinstance(value, Mapping):
                merged[name] = {**merged.get(name, {}), **value}
            else:
                merged[name] = value
    return merged


@dataclass(frozen=True)
class StraitConfig:
    """The whole configuration: clusters by alias, flows, and the coordination Redis URL."""

    clusters: Mapping[str, ClusterConfig]
    flows: tuple[FlowConfig, ...] = ()
    redis_url: SettingValue = DEFAULT_REDIS_URL

    def __post_init__(self) -> None:
        object.__setattr__(self, "clusters", _frozen_mapping(self.clusters))
        aliases = tuple(sorted(self.clusters))
        object.__setattr__(self, "flows", tuple(flow if flow.cluster_aliases == aliases
                                                else replace(flow, cluster_aliases=aliases) for flow in self.flows))

    def __hash__(self) -> int:
        return hash((tuple(sorted(self.clusters.items())), self.flows, self.redis_url))

    def __repr__(self) -> str:
        redis_url = mask_url(self.redis_url) if isinstance(self.redis_url, str) else self.redis_url
        clusters = dict(self.clusters)
        return f"StraitConfig(clusters={clusters!r}, flows={self.flows!r}, redis_url={redis_url!r})"

    __str__ = __repr__

    def cluster(self, alias: str) -> ClusterConfig:
        """The cluster with this alias; raises ConfigError when there is none."""
        if alias not in self.clusters:
            raise ConfigError(f"no cluster {alias!r}; clusters are {', '.join(self.clusters) or 'none'}")
        return self.clusters[alias]

    def flow(self, name: str) -> FlowConfig:
        """The flow named ``"A->B"``; raises ConfigError when there is none."""
        for flow in self.flows:
            if flow.name == name:
                return flow
        raise ConfigError(f"no flow {name!r}; flows are {', '.join(f.name for f in self.flows) or 'none'}")

    def restarted_flows(self, before: StraitConfig | None) -> frozenset[str]:
        """The flows this version asks to restart, compared with the version ``before`` that was served."""
        if before is None:
            return frozenset()
        served = {flow.name: flow for flow in before.flows}
        return frozenset(flow.name for flow in self.flows if flow.restart_requested(served.get(flow.name)))

    @property
    def enabled_flows(self) -> tuple[FlowConfig, ...]:
        """The flows that replicate."""
        return tuple(flow for flow in self.flows if flow.enabled)


def dedicated_mm2_offsets_topic(source: str) -> str:
    """The Connect offsets topic MirrorMaker 2 in dedicated mode keeps for ``source`` on the target."""
    return f"mm2-offsets.{source}.internal"
