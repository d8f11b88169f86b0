"""The heartbeat process: one fenced emitter per flow with heartbeats on, spread over the replicas.

The configuration comes from Redis (live) or from a file; coordination always goes through Redis
(the file's ``redis_url`` with ``--config``).
"""

from __future__ import annotations

from strait.config.model import StraitConfig
from strait.replicas import SupervisorOptions, run_supervised
from strait.settings import Settings
from strait_heartbeat import metrics
from strait_heartbeat.worker import HeartbeatWorker


def heartbeat_flows(config: StraitConfig) -> set[str]:
    """The flows that emit heartbeats: enabled, with heartbeats on."""
    return {flow.name for flow in config.enabled_flows if flow.emit_heartbeats.enabled}


def main(settings: Settings) -> int:
    """Run the heartbeat service until SIGINT or SIGTERM."""
    return run_supervised(settings, SupervisorOptions.of(metrics.SERVICE, settings), heartbeat_flows, HeartbeatWorker)
