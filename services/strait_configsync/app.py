"""The configsync process: keeps every enabled flow's target in step with its source.

Work items are flows. Replicas register in the ``configsync`` membership group; every replica
computes the same balanced assignment of flows over the live members, and before acting on a flow
it takes the flow's fenced lease (``configsync:<flow>``), so no flow is ever synced by two replicas
at once. A killed replica stops renewing: its membership and its leases expire within one lease
TTL and the flows move to the survivors. A replica hands a flow over by finishing its pass and
releasing the lease.

The configuration comes from Redis (live: a new version takes effect at once) or from a file;
coordination always goes through Redis (the file's ``redis_url`` with ``--config``).
"""

from __future__ import annotations

from dataclasses import dataclass

from strait.config.model import StraitConfig
from strait.coord.leases import LeaseKeeper
from strait.kafka.admin import SERVICE_ADMIN_TIMEOUT
from strait.replicas import FlowSupervisor, SupervisorOptions, run_supervised
from strait.settings import Settings
from strait_configsync import metrics
from strait_configsync.sync import SyncOptions
from strait_configsync.worker import SyncWorker, WorkerContext


@dataclass(frozen=True)
class ConfigSyncOptions:
    """What only the configsync process takes (the rest is the process's :class:`Settings`)."""

    delete_acls: bool = False
    admin_timeout: float = SERVICE_ADMIN_TIMEOUT


def sync_flows(config: StraitConfig) -> set[str]:
    """The flows configsync keeps in shape: every enabled one."""
    return {flow.name for flow in config.enabled_flows}


def main(settings: Settings, options: ConfigSyncOptions = ConfigSyncOptions()) -> int:
    """Run configsync until SIGINT or SIGTERM: flows spread over the replicas by the shared frame."""
    sync = SyncOptions(options.admin_timeout, options.delete_acls)

    def make_worker(supervisor: FlowSupervisor, keeper: LeaseKeeper, config: StraitConfig, name: str) -> SyncWorker:
        context = WorkerContext(supervisor.client, supervisor.leases, supervisor.member_id, settings.namespace, sync)
        return SyncWorker(context, keeper, config, name)

    return run_supervised(settings, SupervisorOptions.of(metrics.SERVICE, settings), sync_flows, make_worker)
