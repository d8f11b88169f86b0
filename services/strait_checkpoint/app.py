"""The checkpoint process: one fenced checkpointer per flow with checkpoints on, spread over the replicas.

The configuration comes from Redis (live) or from a file; coordination always goes through Redis
(the file's ``redis_url`` with ``--config``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from strait.config.model import StraitConfig
from strait_checkpoint import metrics
from strait.replicas import SupervisorOptions, run_supervised
from strait_checkpoint.worker import CheckpointWorker


@dataclass(frozen=True)
class CheckpointOptions:
    """How the checkpoint process runs."""

    redis_url: str | None = None
    config_file: Path | None = None
    flows: tuple[str, ...] = ()
    metrics_port: int = 0
    lease_ttl: float = 15.0
    namespace: str = "strait"


def checkpoint_flows(config: StraitConfig) -> set[str]:
    """The flows that get checkpoints: enabled, with checkpoints or group offset sync on."""
    return {flow.name for flow in config.enabled_flows
            if flow.emit_checkpoints.enabled or flow.sync_group_offsets.enabled}


def main(options: CheckpointOptions) -> int:
    """Run the checkpoint service until SIGINT or SIGTERM."""
    supervisor = SupervisorOptions(metrics.SERVICE, options.flows, options.lease_ttl, namespace=options.namespace)
    return run_supervised(supervisor, options.redis_url, options.config_file, options.metrics_port,
                          checkpoint_flows, CheckpointWorker)
