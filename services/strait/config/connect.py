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
  without a heartbeat connector no heartbeats.

MM2's progress on Connect lives in the worker's ``offset.storage.topic`` under the source
connector's own name; both go into the flow (``mm2_offsets_topic``, ``mm2_source_connector``) so
that strait taking over reads it there (:mod:`strait.progress`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from strait.config.mm2_properties import Mm2File, parse_mm2_properties
from strait.config.properties import escaped_line, scalar_text
from strait.errors import ConfigError

_PACKAGE = "org.apache.kafka.connect.mirror."
SOURCE, CHECKPOINT, HEARTBEAT = "MirrorSourceConnector", "MirrorCheckpointConnector", "MirrorHeartbeatConnector"
_SWITCHES = {CHECKPOINT: "emit.checkpoints.enabled", HEARTBEAT: "emit.heartbeats.enabled"}
_CONNECT_KEYS = ("name", "connector.class", "tasks.max", "key.converter", "value.converter", "header.converter",
                 "config.action.reload")
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
    worker's ``offset.storage.topic``, on the target); ConfigError names the file and key."""
    connectors = [c for path in paths for c in _read(Path(path))]
    flows: dict[tuple[str, str], dict[str, Connector]] = {}
    for connector in connectors:
        key = (_alias(connector, "source"), _alias(connector, "target"))
        if connector.kind in flows.setdefault(key, {}):
            other = flows[key][connector.kind]
            raise ConfigError(f"{connector.origin}: connector {connector.name}: flow {key[0]}->{key[1]} already "
                              f"has a {connector.kind} ({other.name} in {other.origin})")
        flows[key][connector.kind] = connector
    lines, ignored, clusters = [], [], {}
    for (source, target), by_kind in flows.items():
        if SOURCE not in by_kind:
            named = next(iter(by_kind.values()))
            raise ConfigError(f"{named.origin}: flow {source}->{target} has no {SOURCE}: a strait flow copies records; "
                              f"give the source connector's JSON too")
        lines.append(f"{source}->{target}.enabled = true")
        lines += [f"{source}->{target}.{switch} = false" for kind, switch in _SWITCHES.items() if kind not in by_kind]
        for connector in by_kind.values():
            flow_lines, cluster_lines, unused = _lines(connector, source, target)
            lines += flow_lines
            ignored += [f"{connector.name}: {key}" for key in unused]
            for alias, setting in cluster_lines:
                clusters.setdefault(alias, {}).update([setting])
    lines = [f"clusters = {', '.join(clusters)}",
             *(f"{alias}.{key} = {value}" for alias, settings in clusters.items() for key, value in settings.items()),
             *lines]
    text = "".join(escaped_line(line) + "\n" for line in lines)
    origin = ", ".join(str(p) for p in paths)
    loaded = parse_mm2_properties(text, f"{origin} (as MM2 properties)")
    names = {f"{s}->{t}": by_kind[SOURCE].name for (s, t), by_kind in flows.items()}
    config = replace(loaded.config, flows=tuple(
        replace(flow, mm2_offsets_topic=offsets_topic, mm2_source_connector=names[flow.name])
        for flow in loaded.config.flows))
    return Mm2File(config, tuple(sorted({*loaded.ignored_keys, *ignored})))


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


def _lines(connector: Connector, source: str, target: str) -> tuple[list[str], list[tuple[str, tuple[str, str]]], list[str]]:
    """(flow lines, (alias, cluster setting) pairs, Connect keys not used) of one connector."""
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
            if key not in ("name", "connector.class"):
                unused.append(key)
        else:
            flow.append(f"{source}->{target}.{key} = {value}")
    return flow, clusters, unused

