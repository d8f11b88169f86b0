"""The checkpoint process: each flow's consumer groups in shards, the shards spread over the replicas.

The configuration comes from Redis (live) or from a file; coordination always goes through Redis
(the file's ``redis_url`` with ``--config``).
"""

from __future__ import annotations

from strait.config.model import StraitConfig
from strait.coord.assignment import ShardItem
from strait.coord.leases import LeaseKeeper
from strait.replicas import WORKER_STOP_SECONDS, FlowSupervisor, SupervisorOptions, run_supervised
from strait.settings import Settings
from strait_checkpoint import metrics
from strait_checkpoint.worker import Checkpointers, ShardWorker


def checkpoint_items(config: StraitConfig) -> set[str]:
    """The shards of every flow that gets checkpoints: enabled, writing offset syncs, and with
    checkpoints or group offset sync on."""
    return {shard.name for flow in config.enabled_flows
            if flow.writes_offset_syncs and (flow.emit_checkpoints.enabled or flow.sync_group_offsets.enabled)
            for shard in ShardItem.all_of(flow.name, flow.checkpoint_shards)}


def main(settings: Settings) -> int:
    """Run the checkpoint service until SIGINT or SIGTERM."""
    checkpointers = Checkpointers()

    def make_worker(_supervisor: FlowSupervisor, keeper: LeaseKeeper, config: StraitConfig, item: str) -> ShardWorker:
        return ShardWorker(checkpointers, keeper, config, item)

    try:
        return run_supervised(settings, SupervisorOptions.of(metrics.SERVICE, settings), checkpoint_items,
                              make_worker)
    finally:
        checkpointers.close(WORKER_STOP_SECONDS)
