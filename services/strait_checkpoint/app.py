"""The checkpoint process: one fenced checkpointer per flow with checkpoints on, spread over the replicas.

The configuration comes from Redis (live) or from a file; coordination always goes through Redis
(the file's ``redis_url`` with ``--config``).
"""

from __future__ import annotations

from strait.config.model import StraitConfig
from strait_checkpoint import metrics
from strait.replicas import ProcessOptions, run_supervised
from strait_checkpoint.worker import CheckpointWorker


def checkpoint_flows(config: StraitConfig) -> set[str]:
    """The flows that get checkpoints: enabled, with checkpoints or group offset sync on."""
    return {flow.name for flow in config.enabled_flows
            if flow.emit_checkpoints.enabled or flow.sync_group_offsets.enabled}


def main(options: ProcessOptions) -> int:
    """Run the checkpoint service until SIGINT or SIGTERM."""
    return run_supervised(options.supervisor(metrics.SERVICE), options.redis_url, options.config_file, options.metrics_port,
                          checkpoint_flows, CheckpointWorker)
