"""strait configurations for the test clusters, as dicts and as YAML files."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from strait_lab.kafka import KafkaCluster


def cluster_entry(cluster: KafkaCluster, user: str | None = None) -> dict[str, Any]:
    """A cluster in strait's YAML: PLAINTEXT (super user) or SCRAM as ``user``."""
    if user is None:
        return {"bootstrap_servers": cluster.bootstrap_servers}
    settings = cluster.client_config(user)
    return {"bootstrap_servers": settings.pop("bootstrap.servers"), "client": settings}


def strait_config(clusters: Mapping[str, dict[str, Any]], flows: list[dict[str, Any]],
                  redis_url: str | None = None) -> dict[str, Any]:
    """A whole strait YAML config as a dict (live from ``redis_url`` when given)."""
    config: dict[str, Any] = {} if redis_url is None else {"redis_url": redis_url}
    return {**config, "clusters": dict(clusters), "flows": flows}


def flow_config(source: KafkaCluster, target: KafkaCluster, include: list[str], *,
                redis_url: str | None = None, **flow: Any) -> dict[str, Any]:
    """A strait YAML config (as a dict) with one flow source->target over topics matching ``include``:
    replication factor 1, topics refreshed every 3 s; ``flow`` adds or overrides the flow's keys."""
    return strait_config(
        {source.alias: cluster_entry(source), target.alias: cluster_entry(target)},
        [{
            "source": source.alias, "target": target.alias,
            "topics": {"include": include},
            "replication_factor": 1,
            "refresh_topics": {"enabled": True, "interval_seconds": 3},
            **flow,
        }],
        redis_url,
    )


def write_config(path: Path, config: Mapping[str, Any]) -> Path:
    """Write a config dict as YAML."""
    path.write_text(yaml.safe_dump(dict(config), sort_keys=False))
    return path
