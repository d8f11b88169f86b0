"""strait's configuration document: the mapping form of :class:`StraitConfig`.

The YAML file and the JSON stored in Redis share this one schema, so a configuration survives a
round trip exactly. Reading reports every problem with its key path (``flows[0].topics.include[2]``)
and suggests the closest key for a misspelt one.

Schema::

    redis_url: redis://host:6379/0            # optional; a password must be a ${...} reference
    clusters:
      <alias>:
        bootstrap_servers: host:9092
        client: {<kafka client setting>: value}          # every client of this cluster
        consumer: {...}  producer: {...}  admin: {...}   # per kind of client, over `client`
    flow_defaults: {<flow setting>: value}               # optional; under every flow's own settings
    flows:
      - {source: A, target: B, enabled: true, <flow setting>: value, ...}

Flow settings are the fields of :class:`FlowConfig`; ``topics``/``groups`` take ``include`` and
``exclude`` lists, the schedules (``refresh_topics`` ...) take ``enabled`` and ``interval_seconds``.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Mapping
from typing import Any, Literal

from strait.config.model import (
    CLIENT_ROLES,
    DEFAULT_REDIS_URL,
    FLOW_FIELDS,
    MAX_CHECKPOINT_SHARDS,
    MAX_TARGET_PARTITIONS,
    NESTED_FLOW_FIELDS,
    OFFSET_SYNCS_LOCATIONS,
    START_CHOICES,
    ClusterConfig,
    FlowConfig,
    Schedule,
    Selection,
    StraitConfig,
)
from strait.config.secrets import (
    MASK,
    Secret,
    SecretRef,
    SettingValue,
    has_reference,
    is_secret_key,
    mask_url,
    setting_value,
)
from strait.config.validate import Problems, check_flows, policy_name, policy_problem, regex_problem
from strait.filters import USE_DEFAULTS_FROM_VALUES
from strait.errors import ConfigError

ALIAS_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*")
TOP_LEVEL_KEYS = ("redis_url", "clusters", "flow_defaults", "flows")
CLUSTER_KEYS = ("bootstrap_servers", "client", *CLIENT_ROLES)
OFFSET_RESET = "auto.offset.reset"
FLOW_SETTING_KEYS = tuple(f for f in FLOW_FIELDS if f not in ("source", "target", "enabled"))
SELECTION_KEYS = ("include", "exclude")
SCHEDULE_KEYS = ("enabled", "interval_seconds")

SecretsMode = Literal["mask", "references"]


class _Invalid:
    """Marks a value that was reported as a problem (parsing goes on to find the others)."""


INVALID = _Invalid()


def config_from_dict(raw: Any, origin: str) -> StraitConfig:
    """Build and validate a configuration from its mapping form; ``origin`` names it in errors."""
    problems = Problems(origin)
    top = _mapping(raw, "", problems, "a mapping with clusters and flows")
    if top is INVALID:
        problems.raise_if_any()
    _unknown_keys(top, TOP_LEVEL_KEYS, "", problems)
    redis_url = _redis_url(top.get("redis_url", DEFAULT_REDIS_URL), problems)
    clusters = _clusters(top.get("clusters"), problems)
    defaults = _flow_settings(top.get("flow_defaults", {}), "flow_defaults", problems)
    flows = _flows(top.get("flows", []), defaults, problems)
    problems.raise_if_any()
    config = StraitConfig(clusters=clusters, flows=tuple(flows), redis_url=redis_url)
    check_flows(config, problems, lambda index, flow: f"flows[{index}] ({flow.name})")
    problems.raise_if_any()
    return config


def config_to_dict(config: StraitConfig, secrets: SecretsMode = "mask") -> dict[str, Any]:
    """The mapping form of a configuration, every setting explicit.

    ``references`` keeps ``${...}`` references as written and refuses inline secrets (what may be
    stored); ``mask`` shows references too but masks inline secrets (what may be printed).
    """
    return {
        "redis_url": _show(config.redis_url, "redis_url", secrets),
        "clusters": {alias: _cluster_dict(cluster, secrets) for alias, cluster in config.clusters.items()},
        "flows": [_flow_dict(flow) for flow in config.flows],
    }


def _show(value: SettingValue, key: str, secrets: SecretsMode) -> str:
    if isinstance(value, Secret):
        if secrets == "references":
            raise ConfigError(f"{key}: an inline secret cannot be stored; use ${{env:VAR}} or ${{file:...}}")
        return MASK
    if isinstance(value, SecretRef):
        return value.text
    if key == "redis_url":
        if secrets == "references" and mask_url(value) != value:
            raise ConfigError("redis_url: an inline password cannot be stored; use ${env:VAR} or ${file:...}")
        return mask_url(value)
    return value


def _cluster_dict(cluster: ClusterConfig, secrets: SecretsMode) -> dict[str, Any]:
    out: dict[str, Any] = {"bootstrap_servers": cluster.bootstrap_servers}
    for scope in ("client", *CLIENT_ROLES):
        out[scope] = {k: _show(v, f"clusters.{cluster.alias}.{scope}.{k}", secrets)
                      for k, v in getattr(cluster, scope).items()}
    return out


def _flow_dict(flow: FlowConfig) -> dict[str, Any]:
    out: dict[str, Any] = {"source": flow.source, "target": flow.target, "enabled": flow.enabled}
    for name in FLOW_SETTING_KEYS:
        value = getattr(flow, name)
        if isinstance(value, Selection):
            out[name] = {"include": list(value.include), "exclude": list(value.exclude)}
        elif isinstance(value, Schedule):
            out[name] = {"enabled": value.enabled, "interval_seconds": _number(value.interval_seconds)}
        elif isinstance(value, float):
            out[name] = _number(value)
        elif isinstance(value, tuple):
            out[name] = list(value)
        else:
            out[name] = value
    return out


def _number(value: float) -> float | int:
    """Whole numbers print as such (30, not 30.0); reading turns them back into floats."""
    return int(value) if value.is_integer() else value


# --- reading -------------------------------------------------------------------------------------


def _join(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else key


def _type_name(value: Any) -> str:
    return {dict: "a mapping", list: "a list", str: "a string", bool: "a boolean", int: "a number",
            float: "a number", type(None): "nothing (null)"}.get(type(value), type(value).__name__)


def _mapping(value: Any, path: str, problems: Problems, what: str = "a mapping of keys to values") -> Any:
    if isinstance(value, Mapping):
        return value
    problems.add(path, f"expected {what}, got {_type_name(value)}")
    return INVALID


def _unknown_keys(raw: Mapping[Any, Any], known: tuple[str, ...], path: str, problems: Problems) -> None:
    for key in raw:
        if key in known:
            continue
        close = difflib.get_close_matches(str(key), known, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else f"; known keys: {', '.join(known)}"
        problems.add(_join(path, str(key)), f"unknown key{hint}")


def _string(value: Any, path: str, problems: Problems) -> Any:
    if isinstance(value, str) and value:
        return value
    got = "an empty string" if value == "" else _type_name(value)
    hint = " (quote it)" if isinstance(value, (int, float)) else ""
    problems.add(path, f"expected a string, got {got}{hint}")
    return INVALID


def _separator(value: Any, path: str, problems: Problems) -> Any:
    # MM2 takes an empty separator as written (Strimzi's identity examples set one), so strait does too.
    return value if value == "" else _string(value, path, problems)


def _bool(value: Any, path: str, problems: Problems) -> Any:
    if isinstance(value, bool):
        return value
    problems.add(path, f"expected true or false, got {_type_name(value)}")
    return INVALID


def _positive_number(value: Any, path: str, problems: Problems) -> Any:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
        return float(value)
    problems.add(path, f"expected a number of seconds above 0, got {_describe(value)}")
    return INVALID


def _describe(value: Any) -> str:
    if isinstance(value, (int, float, str)) and not isinstance(value, bool):
        return repr(value)
    return _type_name(value)


def _one_of(value: Any, choices: tuple[str, ...], path: str, problems: Problems) -> Any:
    if isinstance(value, str) and value in choices:
        return value
    problems.add(path, f"expected one of {', '.join(choices)}, got {_describe(value)}")
    return INVALID


def _regex_list(value: Any, path: str, problems: Problems) -> Any:
    if not isinstance(value, list):
        problems.add(path, f"expected a list of regular expressions, got {_type_name(value)}")
        return INVALID
    items = [_string(item, _join(path, i), problems) for i, item in enumerate(value)]
    for i, item in enumerate(items):
        problem = regex_problem(item) if isinstance(item, str) else None
        if problem:
            problems.add(_join(path, i), problem)
    return tuple(items) if all(isinstance(item, str) for item in items) else INVALID


def _redis_url(value: Any, problems: Problems) -> Any:
    url = _string(value, "redis_url", problems)
    if url is INVALID:
        return url
    try:
        return SecretRef(url) if has_reference(url) else url
    except ConfigError as exc:
        problems.add("redis_url", str(exc))
        return INVALID


def _clusters(value: Any, problems: Problems) -> dict[str, ClusterConfig]:
    if value is None:
        problems.add("clusters", "missing; define at least the clusters your flows name")
        return {}
    raw = _mapping(value, "clusters", problems)
    if raw is INVALID:
        return {}
    clusters = {}
    for alias, body in raw.items():
        path = _join("clusters", str(alias))
        if not isinstance(alias, str) or not ALIAS_PATTERN.fullmatch(alias):
            problems.add(path, "a cluster alias is letters, digits, '_' and '-' "
                               "(quote it if YAML reads it as a number or boolean)")
            continue
        cluster = _cluster(alias, body, path, problems)
        if cluster is not None:
            clusters[alias] = cluster
    return clusters


def _cluster(alias: str, value: Any, path: str, problems: Problems) -> ClusterConfig | None:
    raw = _mapping(value, path, problems)
    if raw is INVALID:
        return None
    _unknown_keys(raw, CLUSTER_KEYS, path, problems)
    servers = _bootstrap_servers(raw, path, problems)
    scopes = {scope: _client_settings(raw.get(scope, {}), _join(path, scope), problems)
              for scope in ("client", *CLIENT_ROLES)}
    if "bootstrap.servers" in scopes["client"]:
        problems.add(_join(_join(path, "client"), "bootstrap.servers"), "set bootstrap_servers instead")
    for scope in ("client", "consumer"):
        if OFFSET_RESET in scopes[scope]:
            problems.add(_join(_join(path, scope), OFFSET_RESET), (
                "where a partition starts when Kafka holds no evidence of an earlier copy is the flow's "
                "start (earliest, latest or from-target); strait's consumers set their own reset"))
    if servers is INVALID:
        return None
    return ClusterConfig(alias=alias, bootstrap_servers=servers, **scopes)


def _bootstrap_servers(raw: Mapping[str, Any], path: str, problems: Problems) -> Any:
    where = _join(path, "bootstrap_servers")
    if "bootstrap_servers" not in raw:
        problems.add(where, "missing")
        return INVALID
    value = raw["bootstrap_servers"]
    if isinstance(value, list) and value and all(isinstance(server, str) and server for server in value):
        value = ",".join(value)
    servers = _string(value, where, problems)
    if isinstance(servers, str) and has_reference(servers):
        problems.add(where, "cannot be a ${...} reference")
        return INVALID
    return servers


def _client_scalar(value: Any) -> str | None:
    """A client setting value as a string (booleans as ``true``/``false``), or None if not a scalar."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (str, int, float)):
        return str(value)
    return None


def _client_settings(value: Any, path: str, problems: Problems) -> dict[str, SettingValue]:
    raw = _mapping(value, path, problems)
    if raw is INVALID:
        return {}
    settings: dict[str, SettingValue] = {}
    for key, item in raw.items():
        where = _join(path, str(key))
        text = _client_scalar(item)
        if not isinstance(key, str) or text is None:
            problems.add(where, f"expected a setting name and a scalar value, got {_type_name(item)}")
            continue
        try:
            settings[key] = setting_value(key, text)
        except ConfigError as exc:
            problems.add(where, str(exc) if not is_secret_key(key) else "invalid ${...} reference")
    return settings


def _flows(value: Any, defaults: dict[str, Any], problems: Problems) -> list[FlowConfig]:
    if not isinstance(value, list):
        problems.add("flows", f"expected a list of flows, got {_type_name(value)}")
        return []
    flows = []
    for index, item in enumerate(value):
        path = _join("flows", index)
        raw = _mapping(item, path, problems)
        if raw is INVALID:
            continue
        _unknown_keys(raw, ("source", "target", "enabled", *FLOW_SETTING_KEYS), path, problems)
        ends = [_required_string(raw, end, path, problems) for end in ("source", "target")]
        own = _flow_settings({k: v for k, v in raw.items() if k not in ("source", "target")}, path, problems,
                             keys_checked=True)
        if all(isinstance(end, str) for end in ends):
            flows.append(FlowConfig.from_layers(ends[0], ends[1], defaults, own))
    return flows


def _required_string(raw: Mapping[str, Any], key: str, path: str, problems: Problems) -> Any:
    if key not in raw:
        problems.add(_join(path, key), "missing")
        return INVALID
    return _string(raw[key], _join(path, key), problems)


def _flow_settings(value: Any, path: str, problems: Problems, *,
                   keys_checked: bool = False) -> dict[str, Any]:
    raw = _mapping(value, path, problems)
    if raw is INVALID:
        return {}
    if not keys_checked:
        _unknown_keys(raw, FLOW_SETTING_KEYS, path, problems)
    settings: dict[str, Any] = {}
    for key, item in raw.items():
        reader = _FLOW_READERS.get(key)
        if reader is None:
            continue
        parsed = reader(item, _join(path, key), problems)
        if parsed is not INVALID:
            settings[key] = parsed
    return settings


def _nested(keys: tuple[str, ...], readers: Mapping[str, Callable[[Any, str, Problems], Any]]
            ) -> Callable[[Any, str, Problems], Any]:
    def read(value: Any, path: str, problems: Problems) -> Any:
        raw = _mapping(value, path, problems)
        if raw is INVALID:
            return INVALID
        _unknown_keys(raw, keys, path, problems)
        parsed = {k: readers[k](v, _join(path, k), problems) for k, v in raw.items() if k in readers}
        return {k: v for k, v in parsed.items() if v is not INVALID}
    return read


def _replication_factor(value: Any, path: str, problems: Problems) -> Any:
    if isinstance(value, int) and not isinstance(value, bool) and (value >= 1 or value == -1):
        return value
    problems.add(path, "expected a whole number of at least 1 (or -1 for the broker default), "
                       f"got {_describe(value)}")
    return INVALID


def _optional_replication_factor(value: Any, path: str, problems: Problems) -> Any:
    return None if value is None else _replication_factor(value, path, problems)


def _target_partitions(value: Any, path: str, problems: Problems) -> Any:
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= MAX_TARGET_PARTITIONS:
        return value
    problems.add(path, f"expected a partition count from 1 to {MAX_TARGET_PARTITIONS}, or null to keep the "
                       f"source's partitions, got {_describe(value)}")
    return INVALID


def _shards(value: Any, path: str, problems: Problems) -> Any:
    if isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= MAX_CHECKPOINT_SHARDS:
        return value
    problems.add(path, f"expected a whole number from 1 to {MAX_CHECKPOINT_SHARDS}, got {_describe(value)}")
    return INVALID


def _rate_limit(value: Any, path: str, problems: Problems) -> Any:
    if value is None:
        return None
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
        return float(value)
    problems.add(path, f"expected records per second above 0, or null for unlimited, got {_describe(value)}")
    return INVALID


def _policy(value: Any, path: str, problems: Problems) -> Any:
    name = _string(value, path, problems)
    problem = policy_problem(name) if isinstance(name, str) else None
    if problem:
        problems.add(path, problem)
        return INVALID
    return policy_name(name) if isinstance(name, str) else INVALID


_SELECTION = _nested(SELECTION_KEYS, {"include": _regex_list, "exclude": _regex_list})
_SCHEDULE = _nested(SCHEDULE_KEYS, {"enabled": _bool, "interval_seconds": _positive_number})
_FLOW_READERS: dict[str, Callable[[Any, str, Problems], Any]] = {
    "enabled": _bool,
    "replication_policy": _policy,
    "separator": _separator,
    "internal_topic_separator_enabled": _bool,
    "offset_syncs_topic_location": lambda v, p, pr: _one_of(v, OFFSET_SYNCS_LOCATIONS, p, pr),
    "replication_factor": _replication_factor,
    "heartbeats_topic_replication_factor": _optional_replication_factor,
    "checkpoints_topic_replication_factor": _optional_replication_factor,
    "offset_syncs_topic_replication_factor": _optional_replication_factor,
    "emit_offset_syncs": _bool,
    "target_partitions": _target_partitions,
    "rate_limit_records_per_second": _rate_limit,
    "checkpoint_shards": _shards,
    "start": lambda v, p, pr: None if v is None else _one_of(v, START_CHOICES, p, pr),
    "mm2_offsets_topic": lambda v, p, pr: None if v is None else _string(v, p, pr),
    "mm2_source_connector": lambda v, p, pr: None if v is None else _string(v, p, pr),
    "restarted_at": lambda v, p, pr: None if v is None else _string(v, p, pr),
    "heartbeats_replication_enabled": _bool,
    "exactly_once": _bool,
    "config_properties_exclude": _regex_list,
    "use_defaults_from": lambda v, p, pr: _one_of(v, USE_DEFAULTS_FROM_VALUES, p, pr),
    **{name: (_SELECTION if kind is Selection else _SCHEDULE) for name, kind in NESTED_FLOW_FIELDS.items()},
}
