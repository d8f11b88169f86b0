"""MirrorMaker 2 as a Kafka Connect cluster runs it: its connectors' JSON configs as strait configuration.

Guides that deploy MM2 on Connect post three connectors (``MirrorSourceConnector``,
``MirrorCheckpointConnector``, ``MirrorHeartbeatConnector``), each a JSON document as the Connect
REST API takes it: ``{"name": ..., "config": {...}}`` (POST /connectors) or the bare config map with
its ``name`` (PUT /connectors/<name>/config). They are turned into the MM2 properties dedicated mode
would run with and read by :mod:`strait.config.mm2_properties`, so every key means what it means to MM2:

* ``source.cluster.alias`` / ``target.cluster.alias`` name the flow's clusters;
  ``source.cluster.<key>`` and ``target.cluster.<key>`` are their client settings;
  ``source.consumer.``, ``source.admin.``, ``target.producer.``, ``target.admin.`` (and the other
  role prefixes) are one kind of client's settings;
* the source connector's ``producer.override.<key>`` is the target producer's (Connect's producer
  writes the copies); Connect's own keys (``connector.class``, ``tasks.max``, converters, ``errors.*``,
  ``transforms*``, other overrides) are listed as not used;
* every other key is the flow's; a flow without a checkpoint connector emits no checkpoints,
  without a heartbeat connector no heartbeats. Where two connectors of a flow set one key to
  different values, the source connector's value is used (then the checkpoint connector's) and the
  other is listed as not used.

MM2's progress on Connect lives in the worker's ``offset.storage.topic`` (or the source
connector's own ``offsets.storage.topic``, KIP-618) under the source connector's name; both go into the flow (``mm2_offsets_topic``, ``mm2_source_connector``) so
that strait taking over reads it there (:mod:`strait.progress`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from strait.config.mm2_properties import Mm2File, not_used, parse_mm2_properties
from strait.config.properties import escaped_line, scalar_text
from strait.errors import ConfigError

_PACKAGE = "org.apache.kafka.connect.mirror."
SOURCE, CHECKPOINT, HEARTBEAT = "MirrorSourceConnector", "MirrorCheckpointConnector", "MirrorHeartbeatConnector"
_SWITCHES = {CHECKPOINT: "emit.checkpoints.enabled", HEARTBEAT: "emit.heartbeats.enabled"}
_CONNECT_KEYS = ("name", "connector.class", "tasks.max", "key.converter", "value.converter", "header.converter",
                 "config.action.reload", "offsets.storage.topic", "exactly.once.support", "transaction.boundary",
                 "transaction.boundary.interval.ms")
_CONNECT_PREFIXES = ("errors.", "transforms", "predicates", "producer.override.", "consumer.override.",
                     "admin.override.", "key.converter.", "value.converter.", "header.converter.")
_ROLE_PREFIXES = ("consumer.", "producer.", "admin.")


@dataclass(frozen=True)
class Connector:
    """One posted connector: its name, MM2 class (short name), config, and the file it came from."""

    name: str
    kind: str
    config: Mapping[str, str]
    origin: str


def load_connect(paths: Sequence[str | Path], offsets_topic: str) -> Mm2File:
    """The flows of MM2 connector JSON files, MM2's progress read from ``offsets_topic`` (the Connect
    worker's ``offset.storage.topic``, on the target) unless the source connector names its own
    (``offsets.storage.topic``); ConfigError names the file and key."""
    flows = _flows([c for path in paths for c in _read(Path(path))])
    clusters: dict[str, dict[str, str]] = {}
    set_by: dict[tuple[str, str], Connector] = {}  # (alias, key) -> the connector whose value is used
    lines, ignored, progress = [], [], {}
    for (source, target), by_kind in flows.items():
        name = f"{source}->{target}"
        lines.append(f"{name}.enabled = true")
        lines += [f"{name}.{switch} = false" for kind, switch in _SWITCHES.items() if kind not in by_kind]
        settings: dict[tuple[str, str], tuple[str, Connector]] = {}  # (flow or alias, key) -> (value, whose)
        for kind in (SOURCE, CHECKPOINT, HEARTBEAT):  # the source connector's values win
            if kind in by_kind:
                ignored += _merge(by_kind[kind], source, target, settings)
        for (scope, key), (value, whose) in settings.items():
            if scope == name:
                lines.append(f"{name}.{key} = {value}")
            else:
                _set_cluster(clusters, set_by, scope, key, value, whose)
        source_connector = by_kind[SOURCE]
        progress[name] = (source_connector.config.get("offsets.storage.topic") or offsets_topic, source_connector.name)
    text = "".join(escaped_line(line) + "\n" for line in [
        f"clusters = {', '.join(clusters)}",
        *(f"{alias}.{key} = {value}" for alias, settings in clusters.items() for key, value in settings.items()),
        *lines])
    loaded = parse_mm2_properties(text, f"{', '.join(str(p) for p in paths)} (as MM2 properties)")
    config = replace(loaded.config, flows=tuple(
        replace(flow, mm2_offsets_topic=progress[flow.name][0], mm2_source_connector=progress[flow.name][1])
        for flow in loaded.config.flows))
    return Mm2File(config, tuple(sorted({*loaded.ignored_keys, *ignored})))


def _flows(connectors: list[Connector]) -> dict[tuple[str, str], dict[str, Connector]]:
    """The connectors by flow (source and target alias) and kind; every flow has a source connector."""
    flows: dict[tuple[str, str], dict[str, Connector]] = {}
    for connector in connectors:
        key = (_alias(connector, "source"), _alias(connector, "target"))
        if connector.kind in flows.setdefault(key, {}):
            other = flows[key][connector.kind]
            raise ConfigError(f"{connector.origin}: connector {connector.name}: flow {key[0]}->{key[1]} already "
                              f"has a {connector.kind} ({other.name} in {other.origin})")
        flows[key][connector.kind] = connector
    for (source, target), by_kind in flows.items():
        if SOURCE not in by_kind:
            named = next(iter(by_kind.values()))
            raise ConfigError(f"{named.origin}: flow {source}->{target} has no {SOURCE}: a strait flow copies records; "
                              f"give the source connector's JSON too")
    return flows


def _merge(connector: Connector, source: str, target: str,
           settings: dict[tuple[str, str], tuple[str, Connector]]) -> list[str]:
    """Add one connector's flow and cluster settings unless an earlier connector set them; returns what
    is not used (Connect's own keys, values that differ from the earlier connector's)."""
    flow_settings, cluster_settings, unused = _settings(connector, source, target)
    entries = [((f"{source}->{target}", key), value) for key, value in flow_settings]
    entries += [((alias, key), value) for alias, (key, value) in cluster_settings]
    notes = [f"{connector.name}: {key}" for key in unused]
    for scoped, value in entries:
        earlier = settings.get(scoped)
        if earlier is None:
            settings[scoped] = (value, connector)
        elif earlier[0] != value:
            notes.append(f"{connector.name}: {scoped[1]} (differs from {earlier[1].name}'s, which is used)")
    return notes


def _set_cluster(clusters: dict[str, dict[str, str]], set_by: dict[tuple[str, str], Connector], alias: str,
                 key: str, value: str, whose: Connector) -> None:
    """One cluster setting; another flow's connector giving the same alias another value is refused."""
    known = clusters.setdefault(alias, {})
    if key in known and known[key] != value:
        other = set_by[(alias, key)]
        raise ConfigError(f"{whose.origin}: connector {whose.name}: cluster {alias}'s {key} differs from the value "
                          f"connector {other.name} ({other.origin}) gives it; strait keeps one set of settings per "
                          f"cluster alias: make the values equal, or give the clusters different aliases")
    known[key] = value
    set_by.setdefault((alias, key), whose)


def _read(path: Path) -> list[Connector]:
    try:
        parsed = json.loads(path.read_text())
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise ConfigError(f"{path}: not JSON: {exc}") from None
    documents = parsed if isinstance(parsed, list) else [parsed]
    return [_connector(document, f"{path}" + (f"[{i}]" if isinstance(parsed, list) else ""))
            for i, document in enumerate(documents)]


def _connector(document: Any, origin: str) -> Connector:
    if not isinstance(document, Mapping):
        raise ConfigError(f"{origin}: expected a connector: {{\"name\": ..., \"config\": {{...}}}}")
    config = document.get("config", document)
    if not isinstance(config, Mapping):
        raise ConfigError(f"{origin}: config: expected a mapping of connector settings")
    name = document.get("name", config.get("name"))
    if not isinstance(name, str) or not name:
        raise ConfigError(f"{origin}: name: missing (the connector's name, as posted to Connect)")
    kind = str(config.get("connector.class", "")).removeprefix(_PACKAGE)
    if kind not in (SOURCE, CHECKPOINT, HEARTBEAT):
        raise ConfigError(f"{origin}: connector {name}: connector.class {config.get('connector.class')!r} is not one "
                          f"of MM2's {SOURCE}, {CHECKPOINT}, {HEARTBEAT}")
    settings = {}
    for key, value in config.items():
        if isinstance(value, (dict, list)):
            raise ConfigError(f"{origin}: connector {name}: {key}: expected a string, number or boolean")
        settings[str(key)] = scalar_text(value)
    return Connector(name, kind, settings, origin)


def _alias(connector: Connector, side: str) -> str:
    return connector.config.get(f"{side}.cluster.alias") or side  # MM2's defaults: "source" and "target"


def _settings(connector: Connector, source: str,
              target: str) -> tuple[list[tuple[str, str]], list[tuple[str, tuple[str, str]]], list[str]]:
    """(flow settings, (alias, cluster setting) pairs, Connect keys not used) of one connector."""
    flow, clusters, unused = [], [], []
    for key, value in connector.config.items():
        if key in ("source.cluster.alias", "target.cluster.alias"):
            continue
        side, _, rest = key.partition(".")
        alias = {"source": source, "target": target}.get(side)
        if alias is not None and rest.startswith("cluster."):
            clusters.append((alias, (rest.removeprefix("cluster."), value)))
        elif alias is not None and rest.startswith(_ROLE_PREFIXES):
            clusters.append((alias, (rest, value)))
        elif connector.kind == SOURCE and key.startswith("producer.override."):
            clusters.append((target, ("producer." + key.removeprefix("producer.override."), value)))
        elif key in _CONNECT_KEYS or key.startswith(_CONNECT_PREFIXES):
            rule = not_used(key)
            if rule is not None and not rule.takes(value):
                raise ConfigError(f"{connector.origin}: connector {connector.name}: {key}: {rule.instead}; remove "
                                  f"the key or set Connect's default")
            if key not in ("name", "connector.class", "offsets.storage.topic"):
                unused.append(key)
        else:
            flow.append((key, value))
    return flow, clusters, unused

