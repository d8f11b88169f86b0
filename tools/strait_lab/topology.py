"""The lab's topology: one definition that `make lab`, `strait lab up` and tests start from."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from strait.errors import ConfigError
from strait_lab.kafka import KafkaClusterSpec

DEFAULT_BASE_PORT = 19000
# The strait components the standard lab runs, in start order (each as `strait run <name>`).
LAB_SERVICES = ("configsync", "replicator", "heartbeat", "checkpoint")


@dataclass(frozen=True)
class LabSpec:
    """What the embedded lab runs.

    Args:
        clusters: the Kafka clusters, by alias.
        flows: replication flows between them, as "A->B".
        base_port: fixed ports from here (cluster i's node n at base+100(i+1)+10n, Redis at base+79,
            Prometheus at base+90, the lab's own metrics at base+91, strait service i's metrics at
            base+92+i); None picks free ports.
        redis: run Redis.
        prometheus: run Prometheus.
    """

    clusters: tuple[KafkaClusterSpec, ...] = field(
        default_factory=lambda: (KafkaClusterSpec("A"), KafkaClusterSpec("B"))
    )
    flows: tuple[str, ...] = ("A->B",)
    base_port: int | None = None
    redis: bool = True
    prometheus: bool = True
    services: tuple[str, ...] = ()  # strait components run for the flows (`strait run <name>`)

    def port(self, offset: int) -> int | None:
        """A fixed port at base+offset, or None when ports are picked freely."""
        return None if self.base_port is None else self.base_port + offset


def default_lab_spec(base_port: int | None = None, brokers: int = 1) -> LabSpec:
    """The standard lab: clusters A and B, flow A->B, Redis and Prometheus.

    ``base_port`` defaults to ``$STRAIT_LAB_BASE_PORT`` or 19000, so addresses stay the same
    between runs of `make lab`.
    """
    if base_port is None:
        raw = os.environ.get("STRAIT_LAB_BASE_PORT", str(DEFAULT_BASE_PORT))
        try:
            base_port = int(raw)
        except ValueError:
            raise ConfigError(f"STRAIT_LAB_BASE_PORT={raw!r} is not a port number") from None
    if not 1024 <= base_port <= 65000:
        raise ConfigError(f"lab base port {base_port} must be between 1024 and 65000")
    clusters = tuple(
        KafkaClusterSpec(alias, brokers=brokers, base_port=base_port + 100 * (i + 1))
        for i, alias in enumerate(("A", "B"))
    )
    return LabSpec(clusters=clusters, base_port=base_port, services=LAB_SERVICES)


def lab_config(spec: LabSpec, bootstrap: dict[str, str], redis_url: str) -> dict[str, object]:
    """The strait configuration the lab applies: its clusters and flows, sized for 1-broker clusters."""
    replication_factor = min(c.brokers for c in spec.clusters)
    return {
        "redis_url": redis_url,
        "clusters": {alias: {"bootstrap_servers": servers} for alias, servers in bootstrap.items()},
        "flows": [
            {"source": flow.split("->")[0], "target": flow.split("->")[1], "replication_factor": replication_factor}
            for flow in spec.flows
        ],
    }
