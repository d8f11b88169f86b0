"""The heartbeat process: one fenced emitter per flow with heartbeats on, spread over the replicas.

The configuration comes from Redis (live) or from a file; coordination always goes through Redis
(the file's ``redis_url`` with ``--config``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from strait.config.model import StraitConfig
from strait.replicas import SupervisorOptions, run_supervised
from strait_heartbeat import metrics
from strait_heartbeat.worker import HeartbeatWorker


@dataclass(frozen=True)
class HeartbeatOptions:
    """How the heartbeat process runs."""

    redis_url: str | None = None
    config_file: Path | None = None
    flows: tuple[str, ...] = ()
    metrics_port: int = 0
    lease_ttl: float = 15.0
    namespace: str = "strait"


def heartbeat_flows(config: StraitConfig) -> set[str]:
    """The flows that emit heartbeats: enabled, with heartbeats on."""
    return {flow.name for flow in config.enabled_flows if flow.emit_heartbeats.enabled}


def main(options: HeartbeatOptions) -> int:
    """Run the heartbeat service until SIGINT or SIGTERM."""
    supervisor = SupervisorOptions(metrics.SERVICE, options.flows, options.lease_ttl, namespace=options.namespace)
    return run_supervised(supervisor, options.redis_url, options.config_file, options.metrics_port,
                          heartbeat_flows, HeartbeatWorker)
