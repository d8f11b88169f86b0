"""Read a MirrorMaker 2 ``connect-mirror-maker.properties`` file into a :class:`StraitConfig`.

Scoping is MM2's: ``x.y`` is global, ``<alias>.x`` belongs to a cluster, ``<src>-><tgt>.x`` to a
flow and overrides the global ``x``. Top-level client security settings (``security.protocol``,
``sasl.*``, ``ssl.*``) and ``consumer.*``/``producer.*``/``admin.*`` apply to every cluster that
does not set its own. A flow exists when any ``A->B.`` key names it; as in MM2 it is disabled until
``A->B.enabled=true``. ``consumer.auto.offset.reset`` (global, ``<alias>.consumer.``, a flow's
``consumer.`` or ``source.consumer.``; the flow's own wins over its source cluster's) is where a
partition starts when Kafka holds no evidence of an earlier copy: the flow's ``start``. MM2 keys
strait has no use for are logged, each with what strait does instead (:data:`_NOT_USED`); values
asking for what strait cannot do (a Java class, a transform) and unknown keys are errors. strait's
own extension keys: ``strait.redis.url``, ``[A->B.]strait.rate.limit.records.per.second``,
``[A->B.]strait.checkpoint.shards`` and ``[A->B.]strait.target.partitions``.
"""

from __future__ import annotations

import difflib
import logging
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from strait.config.document import ALIAS_PATTERN
from strait.config.model import (
    CLIENT_ROLES,
    DEFAULT_REDIS_URL,
    MAX_CHECKPOINT_SHARDS,
    MAX_TARGET_PARTITIONS,
    OFFSET_SYNCS_LOCATIONS,
    ClusterConfig,
    FlowConfig,
    StraitConfig,
)
from strait.config.properties import Property, parse_properties, read_properties_file
from strait.config.secrets import SecretRef, SettingValue, has_reference, is_secret_key, setting_value
from strait.config.validate import Problems, check_flows, policy_name, policy_problem, regex_problem
from strait.filters import USE_DEFAULTS_FROM_VALUES, parse_pattern_list
from strait.errors import ConfigError

log = logging.getLogger(__name__)

REDIS_URL_KEY = "strait.redis.url"
RATE_LIMIT_KEY = "strait.rate.limit.records.per.second"
CHECKPOINT_SHARDS_KEY = "strait.checkpoint.shards"
TARGET_PARTITIONS_KEY = "strait.target.partitions"
# MM2's worker setting for exactly-once copies (KIP-618/710): top level, or <target>. for the flows into
# that cluster; `preparing` (a rolling upgrade's first step) copies at least once, as it does in MM2.
EXACTLY_ONCE_KEY = "exactly.once.source.support"
EXACTLY_ONCE_VALUES = ("enabled", "preparing", "disabled")
# Where MM2's source consumer starts a partition it has no offset for: strait's flow ``start``.
OFFSET_RESET_KEYS = ("consumer.auto.offset.reset", "source.consumer.auto.offset.reset")
_OFFSET_RESET = "auto.offset.reset"
_INTERNAL_TOPIC_FACTORS = {
    "heartbeats.topic.replication.factor": "heartbeats_topic_replication_factor",
    "checkpoints.topic.replication.factor": "checkpoints_topic_replication_factor",
    "offset-syncs.topic.replication.factor": "offset_syncs_topic_replication_factor",
}

_SCHEDULES = {
    "refresh.topics": "refresh_topics",
    "refresh.groups": "refresh_groups",
    "sync.topic.configs": "sync_topic_configs",
    "sync.topic.acls": "sync_topic_acls",
    "emit.heartbeats": "emit_heartbeats",
    "emit.checkpoints": "emit_checkpoints",
    "sync.group.offsets": "sync_group_offsets",
}
_SELECTIONS = {
    "topics": ("topics", "include"),
    "topics.exclude": ("topics", "exclude"),
    "topics.blacklist": ("topics", "exclude"),
    "groups": ("groups", "include"),
    "groups.exclude": ("groups", "exclude"),
    "groups.blacklist": ("groups", "exclude"),
}
_LEGACY = {"topics.blacklist": "topics.exclude", "groups.blacklist": "groups.exclude",
           "config.properties.blacklist": "config.properties.exclude"}
FLOW_KEYS = (
    *_SELECTIONS, "replication.policy.class", "replication.policy.separator",
    "replication.policy.internal.topic.separator.enabled", "offset-syncs.topic.location",
    "replication.factor", "heartbeats.replication.enabled", "config.properties.exclude",
    "config.properties.blacklist", "emit.offset-syncs.enabled", "use.defaults.from", *_INTERNAL_TOPIC_FACTORS,
    RATE_LIMIT_KEY, CHECKPOINT_SHARDS_KEY, TARGET_PARTITIONS_KEY, EXACTLY_ONCE_KEY, *OFFSET_RESET_KEYS,
    *(f"{prefix}.{suffix}" for prefix in _SCHEDULES for suffix in ("enabled", "interval.seconds")),
)

_DEFAULT_CLASSES = frozenset({
    "org.apache.kafka.connect.mirror.DefaultTopicFilter", "org.apache.kafka.connect.mirror.DefaultGroupFilter",
    "org.apache.kafka.connect.mirror.DefaultConfigPropertyFilter", "org.apache.kafka.clients.admin.ForwardingAdmin",
})
_CONNECT_STATE = ("strait keeps no Connect state: its progress is a topic beside the copies on the target "
                  "(strait-offsets.<source>.internal) and its configuration lives in Redis")


@dataclass(frozen=True)
class NotUsed:
    """MM2 or Connect settings that strait's own runtime replaces: what strait does instead, and
    the values it takes as they are (any other value asks for something strait does not do, and is refused)."""

    pattern: str
    instead: str
    takes: Callable[[str], bool] = lambda _value: True


_NOT_USED = (
    NotUsed(r"tasks\.max", "the replicator runs one copy task per Spark task slot (core), its flows sharing them"),
    NotUsed(r"(offset|config|status)\.storage\..+|.+\.storage\.replication\.factor", _CONNECT_STATE),
    NotUsed(r"offset\.flush\..+", "strait writes its progress beside the copies every 0.5 s, not on a flush interval"),
    NotUsed(r"(key|value|header)\.converter(\..+)?", "strait copies keys, values and headers as bytes, unchanged"),
    NotUsed(r"offset\.lag\.max", "strait writes offset syncs for the copied records every 0.5 s, so translation "
                                  "is exact, not within a lag of offsets"),
    NotUsed(r"(topic|group|config\.property)\.filter\.class",
            "strait runs no Java classes: it filters with the topics, groups and config.properties.exclude patterns",
            lambda value: value.strip() in _DEFAULT_CLASSES),
    NotUsed(r"forwarding\.admin\.class", "strait runs no Java classes: it creates and alters topics itself",
            lambda value: value.strip() in _DEFAULT_CLASSES),
    NotUsed(r"use\.incremental\.alter\.configs", "strait always changes topic configs incrementally, as MM2 4.0 does"),
    NotUsed(r"admin\.timeout\.ms|consumer\.poll\.timeout\.ms|scheduled\.rebalance\.max\.delay\.ms",
            "strait's clients retry with their own timeouts and backoff; flows move between replicas within "
            "a lease TTL"),
    NotUsed(r"metric\.reporters|metrics\..+|add\.source\.alias\.to\.metrics|metric\.names\.formats",
            "every strait process exports Prometheus metrics on /metrics, labelled by flow"),
    NotUsed(r"dedicated\.mode\.enable\.internal\.rest|listeners|rest\..+|config\.action\.reload",
            "strait's processes coordinate through Redis and serve no REST API; `strait config apply` changes the "
            "configuration live"),
    NotUsed(r"exactly\.once\.support|transaction\.boundary.*",
            "strait's exactly-once mode follows exactly.once.source.support; each copier commits its "
            "transaction every 0.02 s (every second while it copies a backlog)"),
    NotUsed(r"(source|target)\.cluster\.alias", "the flow's name (A->B) gives its clusters"),
    NotUsed(r"(checkpoints|heartbeats|offset-syncs|offset\.syncs)\.topic\.(?!location$|replication\.factor$).+",
            "strait creates the internal topics with one compacted partition and the broker's other defaults"),
    NotUsed(r"config\.providers(\..+)?", "strait resolves ${env:...} and ${file:...} references itself"),
    NotUsed(r"plugin\.path", "strait loads no plugins"),
    NotUsed(r"errors\..+", "a record strait cannot copy stops its flow with an error that names it; nothing is "
                           "skipped"),
    NotUsed(r"group\.id", "strait's copy consumers assign partitions and commit nothing, so no group is used"),
    NotUsed(r"(consumer|producer|admin)\.override\..+",
            "client settings are per cluster in strait: <alias>.consumer., <alias>.producer. or <alias>.admin."),
    NotUsed(r"name|enabled|connector\.class|connector\.plugin\.version|tasks\.max\.enforce",
            "a Kafka Connect connector's own setting; strait runs no Connect"),
    NotUsed(r"(predicates|transforms)(\..+)?", "strait copies records unchanged: it runs no transforms",
            lambda value: not value.strip()),
)


def not_used_reason(scoped_key: str) -> str:
    """What strait does instead of an MM2 or Connect setting it does not use (``scoped_key`` may carry
    its cluster or flow, or a connector's name, in front); empty for a note that is no key's."""
    parts = scoped_key.split(": ", 1)[-1].split(".")
    keys = [".".join(parts[start:]) for start in range(len(parts))]  # the longest unscoped key first
    rule = next((rule for key in keys if (rule := not_used(key)) is not None), None)
    if rule is not None:
        return rule.instead
    if any(_CLIENT_SETTING.fullmatch(key) or _GLOBAL_CLIENT_SETTING.fullmatch(key) for key in keys):
        return "strait reads client settings per cluster (<alias>.<setting>), as MM2's dedicated mode does"
    return ""


def not_used(key: str) -> NotUsed | None:
    """The rule of an MM2 or Connect setting strait does not use (``key`` without its cluster or flow)."""
    return next((rule for rule in _NOT_USED if re.fullmatch(rule.pattern, key)), None)


_CLIENT_SETTING = re.compile(
    r"(security\..+|sasl\..+|ssl\..+|client\.id|client\.dns\.lookup|client\.rack|request\.timeout\.ms"
    r"|retry\.backoff(\.max)?\.ms|reconnect\.backoff(\.max)?\.ms|metadata\.max\.age\.ms"
    r"|connections\.max\.idle\.ms|socket\.connection\.setup\.timeout(\.max)?\.ms|receive\.buffer\.bytes"
    r"|send\.buffer\.bytes|default\.api\.timeout\.ms)"
)
# Security settings of the Java client and of librdkafka, to catch misspellings under sasl./ssl.
_KNOWN_SECURITY = frozenset({
    "security.protocol", "sasl.mechanism", "sasl.mechanisms", "sasl.jaas.config", "sasl.username",
    "sasl.password", "sasl.client.callback.handler.class", "sasl.oauthbearer.config",
    "ssl.protocol", "ssl.provider", "ssl.cipher.suites", "ssl.enabled.protocols", "ssl.keystore.type",
    "ssl.keystore.location", "ssl.keystore.password", "ssl.key.password", "ssl.keystore.key",
    "ssl.keystore.certificate.chain", "ssl.truststore.certificates", "ssl.truststore.type",
    "ssl.truststore.location", "ssl.truststore.password", "ssl.keymanager.algorithm",
    "ssl.trustmanager.algorithm", "ssl.endpoint.identification.algorithm", "ssl.secure.random.implementation",
    "ssl.engine.factory.class", "ssl.key.location", "ssl.key.pem", "ssl.certificate.location",
    "ssl.certificate.pem", "ssl.ca.location", "ssl.ca.pem", "ssl.crl.location", "ssl.curves.list",
    "ssl.sigalgs.list", "ssl.ca.certificate.stores", "ssl.engine.location", "ssl.engine.id",
})
_OPEN_SECURITY_PREFIXES = ("sasl.oauthbearer.", "sasl.login.", "sasl.kerberos.", "sasl.server.")
_GLOBAL_CLIENT_SETTING = re.compile(r"(bootstrap\.servers|security\..+|sasl\..+|ssl\..+)")
CLIENT_SETTING = _GLOBAL_CLIENT_SETTING  # top-level client settings every cluster inherits
_ROLE = re.compile(r"(consumer|producer|admin)\.(.+)")


@dataclass(frozen=True)
class Mm2File:
    """What an MM2 file gave: the configuration and the MM2 keys strait ignores."""

    config: StraitConfig
    ignored_keys: tuple[str, ...]


def load_mm2_properties(path: str | Path) -> StraitConfig:
    """Load and validate an MM2 properties file; raises ConfigError naming file, line and key."""
    return read_mm2_properties(path).config


def read_mm2_properties(path: str | Path) -> Mm2File:
    """Like :func:`load_mm2_properties`, also returning the ignored MM2 keys."""
    path = Path(path)
    loaded = _Reader(read_properties_file(path), str(path)).read()
    log.info("loaded MM2 configuration file=%s clusters=%d flows=%d", path,
             len(loaded.config.clusters), len(loaded.config.flows))
    return loaded


def parse_mm2_properties(text: str, origin: str = "<text>") -> Mm2File:
    """Parse MM2 properties text (see :func:`load_mm2_properties`)."""
    try:
        entries = parse_properties(text)
    except ConfigError as exc:
        raise ConfigError(f"{origin}:{exc}") from None
    return _Reader(entries, origin).read()


class _Reader:
    """One pass over a file's entries: sort them into scopes, then build the model."""

    def __init__(self, entries: list[Property], origin: str) -> None:
        self.origin = origin
        self.problems = Problems(origin)
        self.entries = self._last_wins(entries)
        self.aliases: tuple[str, ...] = ()
        self.global_: dict[str, Property] = {}
        self.cluster_keys: dict[str, dict[str, Property]] = {}
        self.flow_keys: dict[tuple[str, str], dict[str, Property]] = {}
        self.cluster_resets: dict[str, Property] = {}  # <alias>.consumer.auto.offset.reset (or the global one)
        self.cluster_exactly_once: dict[str, Property] = {}  # <alias>.exactly.once.source.support
        self.ignored: list[str] = []

    def _last_wins(self, entries: list[Property]) -> dict[str, Property]:
        by_key: dict[str, Property] = {}
        for entry in entries:
            if entry.key in by_key and by_key[entry.key].value != entry.value:
                log.warning("repeated key, the last one wins file=%s key=%s lines=%d,%d",
                            self.origin, entry.key, by_key[entry.key].line, entry.line)
            by_key[entry.key] = entry
        return by_key

    def read(self) -> Mm2File:
        """Build the configuration, raising one ConfigError with every problem found."""
        self.aliases = self._clusters()
        for entry in self.entries.values():
            if entry.key != "clusters":
                self._sort(entry)
        clusters = {alias: cluster for alias in self.aliases if (cluster := self._cluster(alias))}
        self._flow_layer(self.global_, "")  # report bad global values even when no flow uses them
        flows = [self._flow(src, tgt) for src, tgt in self.flow_keys]
        redis_url = self._redis_url()
        self.problems.raise_if_any()
        config = StraitConfig(clusters=clusters, flows=tuple(flows), redis_url=redis_url)
        check_flows(config, self.problems, lambda _, flow: flow.name)
        self.problems.raise_if_any()
        self._warn_deprecated()
        for key in self.ignored:
            log.warning("MM2 setting not used file=%s key=%s: %s", self.origin, key, not_used_reason(key))
        return Mm2File(config, tuple(self.ignored))

    def _warn_deprecated(self) -> None:
        used = {key: current for key in self.entries for old, current in _LEGACY.items()
                if key == old or key.endswith(f".{old}")}
        if used:
            log.warning("deprecated MM2 key names (removed in Kafka 4.0) file=%s keys=%s replacements=%s",
                        self.origin, ",".join(used), ",".join(sorted(set(used.values()))))

    def _where(self, entry: Property) -> str:
        return f"line {entry.line}: {entry.key}"

    def _clusters(self) -> tuple[str, ...]:
        entry = self.entries.get("clusters")
        if entry is None:
            self.problems.add("clusters", "missing; list the cluster aliases, e.g. clusters = A, B")
            return ()
        aliases = tuple(_list(entry.value))
        for alias in aliases:
            if not ALIAS_PATTERN.fullmatch(alias):
                self.problems.add(self._where(entry),
                                  f"cluster alias {alias!r} must be letters, digits, '_' and '-'")
        if not aliases:
            self.problems.add(self._where(entry), "lists no cluster")
        return tuple(a for a in aliases if ALIAS_PATTERN.fullmatch(a))

    def _sort(self, entry: Property) -> None:
        key = entry.key
        if "->" in key:
            self._sort_flow_key(entry)
            return
        alias = _longest_prefix(key, self.aliases, ".")
        if alias is not None:
            self.cluster_keys.setdefault(alias, {})[key[len(alias) + 1:]] = entry
            return
        self.global_[key] = entry

    def _sort_flow_key(self, entry: Property) -> None:
        source, _, rest = entry.key.partition("->")
        target = _longest_prefix(rest, self.aliases, ".")
        if source not in self.aliases or target is None:
            named = f"{source}->{rest.split('.', 1)[0]}"
            listed = ", ".join(self.aliases)
            self.problems.add(self._where(entry),
                              f"flow {named} names a cluster not listed in clusters = {listed}")
            return
        self.flow_keys.setdefault((source, target), {})[rest[len(target) + 1:]] = entry

    # --- clusters ----------------------------------------------------------------------------------

    def _cluster(self, alias: str) -> ClusterConfig | None:
        own = self.cluster_keys.get(alias, {})
        scopes: dict[str, dict[str, SettingValue]] = {"client": {}, **{role: {} for role in CLIENT_ROLES}}
        servers: str | None = None
        for key, entry in self._cluster_entries(own).items():
            if key == "bootstrap.servers":
                servers = self._bootstrap(entry)
                continue
            if key == EXACTLY_ONCE_KEY:  # the mode of the flows into this cluster, not a client setting
                if key in own:
                    self.cluster_exactly_once[alias] = entry
                continue
            scope, setting = self._cluster_scope(key, entry, alias, key in own)
            if (scope, setting) == ("consumer", _OFFSET_RESET):  # the start of its flows, not a client setting
                self.cluster_resets[alias] = entry
            elif scope is not None:
                self._setting(scopes[scope], setting, entry)
        if servers is None:
            self.problems.add(f"{alias}.bootstrap.servers",
                              f"missing; cluster {alias} needs its bootstrap servers")
            return None
        return ClusterConfig(alias=alias, bootstrap_servers=servers, **scopes)

    def _cluster_entries(self, own: dict[str, Property]) -> dict[str, Property]:
        inherited = {key: entry for key, entry in self.global_.items() if _is_role_setting(key) or (
            _GLOBAL_CLIENT_SETTING.fullmatch(key) and not _misspelt_security_key(key))}
        return {**inherited, **own}

    def _cluster_scope(self, key: str, entry: Property, alias: str, own: bool) -> tuple[str | None, str]:
        if not_used(key) is not None:
            if own:
                self._ignore(entry, key)
            return None, key
        role = _ROLE.fullmatch(key)
        if role:
            return role.group(1), role.group(2)
        if _CLIENT_SETTING.fullmatch(key) and not _misspelt_security_key(key):
            return "client", key
        self._unknown(entry, [f"{alias}.{k}" for k in ("bootstrap.servers", *_KNOWN_SECURITY)],
                      hint=f"; settings for one kind of client go under {alias}.consumer., {alias}.producer. "
                           f"or {alias}.admin.")
        return None, key

    def _bootstrap(self, entry: Property) -> str | None:
        if not entry.value:
            self.problems.add(self._where(entry), "is empty")
            return None
        if has_reference(entry.value):
            self.problems.add(self._where(entry), "cannot be a ${...} reference")
            return None
        return entry.value

    def _setting(self, scope: dict[str, SettingValue], key: str, entry: Property) -> None:
        try:
            scope[key] = setting_value(key, entry.value)
        except ConfigError as exc:
            # A secret's reference text is kept out of the message, whatever is wrong with it.
            message = "invalid ${...} reference" if is_secret_key(key) else str(exc)
            self.problems.add(self._where(entry), message)

    # --- flows -------------------------------------------------------------------------------------

    def _flow(self, source: str, target: str) -> FlowConfig:
        own = self.flow_keys[(source, target)]
        enabled_entry = own.pop("enabled", None)
        enabled = _bool(enabled_entry, self) if enabled_entry else False
        layer = self._flow_layer({**self.global_, **own}, f"{source}->{target}.", own)
        if source in self.cluster_resets and not any(key in own for key in OFFSET_RESET_KEYS):
            self._put(layer, "start", None, _offset_reset(self.cluster_resets[source], self))
        if target in self.cluster_exactly_once and EXACTLY_ONCE_KEY not in own:
            self._put(layer, "exactly_once", None, _exactly_once(self.cluster_exactly_once[target], self))
        return FlowConfig.from_layers(source, target, layer, {"enabled": bool(enabled)})

    def _flow_layer(self, entries: Mapping[str, Property], prefix: str,
                    own: Mapping[str, Property] | None = None) -> dict[str, Any]:
        """Typed partial flow settings from the flow keys among ``entries``.

        Only keys in ``own`` (all keys when it is None) are reported when unknown.
        """
        layer: dict[str, Any] = {}
        # within one scope source.consumer. wins over consumer., as in MM2's source consumer settings
        kept = sorted(_without_shadowed_aliases(entries, own or {}).items(), key=lambda item: item[0] == OFFSET_RESET_KEYS[1])
        for key, entry in kept:
            schedule = _schedule_key(key)
            if key in _SELECTIONS:
                self._put(layer, *_SELECTIONS[key], self._regexes(entry))
            elif key in _SCALAR_READERS:
                name, parse = _SCALAR_READERS[key]
                self._put(layer, name, None, parse(entry, self))
            elif schedule is not None:
                self._schedule(layer, *schedule, entry)
            elif own is None or key in own:
                self._other_flow_key(key, entry, prefix)
        for partial in layer.values():
            if isinstance(partial, dict) and partial.pop(_OFF, False):
                partial["enabled"] = False
        return layer

    def _schedule(self, layer: dict[str, Any], name: str, part: str, entry: Property) -> None:
        if part == "enabled":
            self._put(layer, name, part, _bool(entry, self))
            return
        seconds = _interval(entry, self)
        if seconds is not _INVALID and seconds < 0:  # MM2 turns a task off with a negative interval
            self._put(layer, name, _OFF, True)
        else:
            self._put(layer, name, part, seconds)

    def _other_flow_key(self, key: str, entry: Property, prefix: str) -> None:
        if not prefix:
            self._global_other(key, entry)
        elif not_used(key) is not None or self._flow_client_setting(key):
            self._ignore(entry, key)
        elif (per_cluster := _per_cluster_key(key, prefix)) is not None:
            alias = per_cluster.split(".", 1)[0]
            self.problems.add(self._where(entry), (
                f"strait keeps client settings per cluster, not per flow: set {per_cluster} (it then applies "
                f"to every flow of cluster {alias})"))
        else:
            self._unknown(entry, [prefix + k for k in (*FLOW_KEYS, "enabled")])

    @staticmethod
    def _flow_client_setting(key: str) -> bool:
        """A client setting under a flow (MM2's connector ConfigDefs take them); strait's clients take
        their settings per cluster, so it is listed as not used."""
        client = _CLIENT_SETTING.fullmatch(key) or _GLOBAL_CLIENT_SETTING.fullmatch(key)
        return bool(client) and not _misspelt_security_key(key)

    def _global_other(self, key: str, entry: Property) -> None:
        if key == REDIS_URL_KEY or _is_role_setting(key):
            return
        if _GLOBAL_CLIENT_SETTING.fullmatch(key) and not _misspelt_security_key(key):
            return
        if not_used(key) is not None:
            self._ignore(entry, key)
            return
        self._unknown(entry, ["clusters", REDIS_URL_KEY, *FLOW_KEYS, *_KNOWN_SECURITY])

    def _put(self, layer: dict[str, Any], name: str, part: str | None, value: Any) -> None:
        if value is _INVALID:
            return
        if part is None:
            layer[name] = value
        else:
            layer.setdefault(name, {})[part] = value

    def _regexes(self, entry: Property) -> Any:
        try:
            patterns = parse_pattern_list(entry.value)
        except ConfigError as exc:
            return self.invalid(entry, str(exc))
        bad = [(i, p) for i, p in enumerate(patterns) if regex_problem(p)]
        for index, pattern in bad:
            self.problems.add(f"{self._where(entry)} entry {index + 1}", str(regex_problem(pattern)))
        return _INVALID if bad else patterns

    def _redis_url(self) -> SettingValue:
        entry = self.global_.get(REDIS_URL_KEY)
        if entry is None:
            return DEFAULT_REDIS_URL
        try:
            return SecretRef(entry.value) if has_reference(entry.value) else entry.value
        except ConfigError as exc:
            self.problems.add(self._where(entry), str(exc))
            return DEFAULT_REDIS_URL

    # --- reporting ---------------------------------------------------------------------------------

    def _ignore(self, entry: Property, key: str) -> None:
        """List ``entry`` (``key`` without its scope) as not used, or refuse a value strait cannot honour."""
        rule = not_used(key)
        if rule is not None and not rule.takes(entry.value):
            self.problems.add(self._where(entry), f"{rule.instead}; remove the key or set MM2's default")
        elif entry.key not in self.ignored:
            self.ignored.append(entry.key)

    def _unknown(self, entry: Property, known: list[str], hint: str = "") -> None:
        close = difflib.get_close_matches(entry.key, known, n=1, cutoff=0.75)
        suggestion = f"; did you mean {close[0]!r}?" if close else hint
        self.problems.add(self._where(entry), f"unknown key{suggestion}")

    def invalid(self, entry: Property, message: str) -> object:
        """Record a problem with an entry's value; returns the marker of an unusable value."""
        self.problems.add(self._where(entry), message)
        return _INVALID


_INVALID = object()
_OFF = "_off"


def _schedule_key(key: str) -> tuple[str, str] | None:
    for prefix, name in _SCHEDULES.items():
        if key == f"{prefix}.enabled":
            return name, "enabled"
        if key == f"{prefix}.interval.seconds":
            return name, "interval_seconds"
    return None


def _without_shadowed_aliases(entries: Mapping[str, Property],
                              own: Mapping[str, Property]) -> dict[str, Property]:
    """Drop a deprecated alias or its current name when both apply: the flow's own key wins over a
    global one (unlike MM2, which would let a global ``topics.exclude`` hide ``A->B.topics.blacklist``),
    and within one scope the current name wins."""
    kept = dict(entries)
    for alias, current in _LEGACY.items():
        if alias in kept and current in kept:
            flow_alias_only = alias in own and current not in own
            del kept[current if flow_alias_only else alias]
    return kept


def _per_cluster_key(key: str, prefix: str) -> str | None:
    """The cluster-level spelling of a flow's client setting (``A->B.`` ``consumer.x`` -> ``A.consumer.x``):
    MM2 gives its source connector's consumer the source's settings, its producer the target's."""
    side, _, rest = key.partition(".") if key.startswith(("source.", "target.")) else ("", "", key)
    role = _ROLE.fullmatch(rest)
    if role is None:
        return None
    source, target = prefix.rstrip(".").split("->")
    if not side:
        side = "target" if role.group(1) == "producer" else "source"
    return f"{source if side == 'source' else target}.{rest}"


def _longest_prefix(key: str, aliases: tuple[str, ...], separator: str) -> str | None:
    matches = [alias for alias in aliases if key.startswith(alias + separator)]
    return max(matches, key=len) if matches else None


def _misspelt_security_key(key: str) -> bool:
    """A sasl./ssl. key that is not a known setting but close to one (other unknown ones pass through)."""
    if key in _KNOWN_SECURITY or key.startswith(_OPEN_SECURITY_PREFIXES):
        return False
    if not key.startswith(("sasl.", "ssl.")):
        return False
    return bool(difflib.get_close_matches(key, _KNOWN_SECURITY, n=1, cutoff=0.8))


def _is_role_setting(key: str) -> bool:
    return _ROLE.fullmatch(key) is not None and not_used(key) is None


def _list(text: str) -> list[str]:
    return [item.strip() for item in text.split(",") if item.strip()]


def _bool(entry: Property, reader: _Reader) -> Any:
    lowered = entry.value.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    return reader.invalid(entry, f"expected true or false, got {entry.value!r}")


def _number(text: str) -> float | None:
    try:
        return float(int(text))
    except ValueError:
        try:
            return float(text)
        except ValueError:
            return None


def _interval(entry: Property, reader: _Reader) -> Any:
    seconds = _number(entry.value)
    if seconds is None or seconds == 0:
        return reader.invalid(entry, "expected a number of seconds (negative turns the task off), "
                                     f"got {entry.value!r}")
    return seconds


def _policy(entry: Property, reader: _Reader) -> Any:
    problem = policy_problem(entry.value)
    return reader.invalid(entry, problem) if problem else policy_name(entry.value)


def _separator(entry: Property, _reader: _Reader) -> Any:
    # MM2 takes an empty separator as written (Strimzi's identity examples set one), so strait does too.
    return entry.value


def _choice(choices: tuple[str, ...]) -> Callable[[Property, _Reader], Any]:
    """A reader of a value that must be one of ``choices`` (any case)."""
    def read(entry: Property, reader: _Reader) -> Any:
        lowered = entry.value.strip().lower()
        if lowered in choices:
            return lowered
        return reader.invalid(entry, f"expected {' or '.join(choices)}, got {entry.value!r}")
    return read


def _replication_factor(entry: Property, reader: _Reader) -> Any:
    try:
        value = int(entry.value)
    except ValueError:
        value = 0
    if value >= 1 or value == -1:
        return value
    return reader.invalid(entry, f"expected a whole number of at least 1 (or -1 for the broker default), "
                                 f"got {entry.value!r}")


def _target_partitions(entry: Property, reader: _Reader) -> Any:
    value = int(entry.value) if entry.value.isdigit() else 0
    if 1 <= value <= MAX_TARGET_PARTITIONS:
        return value
    return reader.invalid(entry, f"expected a partition count from 1 to {MAX_TARGET_PARTITIONS}, got {entry.value!r}")


def _rate_limit(entry: Property, reader: _Reader) -> Any:
    value = _number(entry.value)
    if value is not None and value > 0:
        return value
    return reader.invalid(entry, f"expected records per second above 0, got {entry.value!r}")


def _shards(entry: Property, reader: _Reader) -> Any:
    value = int(entry.value) if entry.value.isdigit() else 0
    if 1 <= value <= MAX_CHECKPOINT_SHARDS:
        return value
    return reader.invalid(entry, f"expected a whole number from 1 to {MAX_CHECKPOINT_SHARDS}, got {entry.value!r}")


def _offset_reset(entry: Property, reader: _Reader) -> Any:
    lowered = entry.value.strip().lower()
    if lowered in ("earliest", "latest"):
        return lowered
    return reader.invalid(entry, (
        f"strait starts a partition that Kafka holds no evidence of an earlier copy for at earliest or latest "
        f"(the flow's start), got {entry.value!r}: MM2's 'none' fails the copy and 'by_duration:' starts "
        f"by time, neither of which strait does"))


def _exactly_once(entry: Property, reader: _Reader) -> Any:
    lowered = entry.value.strip().lower()
    if lowered in EXACTLY_ONCE_VALUES:
        return lowered == "enabled"
    return reader.invalid(entry, f"expected {', '.join(EXACTLY_ONCE_VALUES)}, got {entry.value!r}")


def _config_excludes(entry: Property, reader: _Reader) -> Any:
    return reader._regexes(entry)


_SCALAR_READERS: dict[str, tuple[str, Callable[[Property, _Reader], Any]]] = {
    "replication.policy.class": ("replication_policy", _policy),
    "replication.policy.separator": ("separator", _separator),
    "replication.policy.internal.topic.separator.enabled": ("internal_topic_separator_enabled", _bool),
    "offset-syncs.topic.location": ("offset_syncs_topic_location", _choice(OFFSET_SYNCS_LOCATIONS)),
    "replication.factor": ("replication_factor", _replication_factor),
    "heartbeats.replication.enabled": ("heartbeats_replication_enabled", _bool),
    "config.properties.exclude": ("config_properties_exclude", _config_excludes),
    "config.properties.blacklist": ("config_properties_exclude", _config_excludes),
    "emit.offset-syncs.enabled": ("emit_offset_syncs", _bool),
    "use.defaults.from": ("use_defaults_from", _choice(USE_DEFAULTS_FROM_VALUES)),
    **{key: (name, _replication_factor) for key, name in _INTERNAL_TOPIC_FACTORS.items()},
    TARGET_PARTITIONS_KEY: ("target_partitions", _target_partitions),
    RATE_LIMIT_KEY: ("rate_limit_records_per_second", _rate_limit),
    CHECKPOINT_SHARDS_KEY: ("checkpoint_shards", _shards),
    EXACTLY_ONCE_KEY: ("exactly_once", _exactly_once),
    **{key: ("start", _offset_reset) for key in OFFSET_RESET_KEYS},
}
