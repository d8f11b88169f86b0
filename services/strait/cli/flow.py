"""`strait flow {enable|disable|status} A->B`: operate one flow without re-applying the whole file.

``enable`` and ``disable`` store a new configuration version that differs from the latest only in
that flow's ``enabled``; every running service adopts it as it adopts any `config apply`. ``status``
prints the flow's settings, which replica of each service holds it (from the leases in Redis) and
configsync's last drift report.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from typing import Any

from strait.settings import settings_of
from strait.config.store import apply_config, read_stored_config
from strait.coord.assignment import ShardItem
from strait.coord.leases import Leases
from strait.coord.redis_client import connect
from strait_configsync.drift import read_reports

SERVICES = ("configsync", "heartbeat")


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the `flow` command group."""
    flow = subparsers.add_parser("flow", help="enable, disable or inspect one stored flow")
    commands = flow.add_subparsers(dest="flow_command", metavar="COMMAND", required=True)
    for name, text in (("enable", "start replicating this flow (a new configuration version)"),
                       ("disable", "stop replicating this flow (a new configuration version)"),
                       ("status", "the flow's settings, the replicas holding it, its drift")):
        command = commands.add_parser(name, help=text)
        command.add_argument("flow", metavar="A->B", help='the flow, e.g. "A->B"')
        command.add_argument("--redis-url", help="the coordination Redis (default $STRAIT_REDIS_URL)")
        if name == "status":
            command.add_argument("--json", action="store_true", help="print as JSON")
        command.set_defaults(handler=_status if name == "status" else _switch, enable=name == "enable")


def _client(args: argparse.Namespace) -> Any:
    return connect(settings_of(args).coordination_url())


def _switch(args: argparse.Namespace) -> int:
    client = _client(args)
    stored = read_stored_config(client)
    flow = stored.config.flow(args.flow)  # a ConfigError naming the known flows when there is none
    word = "enabled" if args.enable else "disabled"
    if flow.enabled == args.enable:
        print(f"flow {flow.name} is already {word} (configuration version {stored.version})")
        return 0
    flows = tuple(replace(f, enabled=args.enable) if f.name == flow.name else f for f in stored.config.flows)
    config = replace(stored.config, flows=flows)
    version = apply_config(client, config, f"strait flow {'enable' if args.enable else 'disable'} {flow.name}",
                           durable=settings_of(args).durable_config)
    print(f"flow {flow.name} {word}: configuration version {version} (was {stored.version})")
    return 0


def _status(args: argparse.Namespace) -> int:
    client = _client(args)
    stored = read_stored_config(client)
    flow = stored.config.flow(args.flow)
    leases = Leases(client)
    names = [f"{service}:{flow.name}" for service in SERVICES]
    names += [f"checkpoint:{shard.name}" for shard in ShardItem.all_of(flow.name, flow.checkpoint_shards)]
    holders = leases.holders(names)
    report = read_reports(client).get(flow.name)
    status = {
        "flow": flow.name, "enabled": flow.enabled, "version": stored.version,
        "policy": flow.replication_policy, "topics": list(flow.topics.include),
        "target_partitions": flow.target_partitions, "offset_syncs": flow.writes_offset_syncs,
        "held_by": {name: holders.get(name) for name in names},
        "topics_replicated": None if report is None else report.topics_replicated,
        "topics_in_sync": None if report is None else report.topics_in_sync,
    }
    if args.json:
        print(json.dumps(status, indent=2, sort_keys=True))
        return 0
    print(f"flow {flow.name}: {'enabled' if flow.enabled else 'disabled'} (configuration version {stored.version}), "
          f"policy {flow.replication_policy}, topics {', '.join(flow.topics.include)}")
    for name, holder in status["held_by"].items():
        print(f"  {name}: {holder or 'not held'}")
    if report is None:
        print("  drift: no report (is `strait run configsync` running?)")
    else:
        print(f"  drift: {report.topics_in_sync} of {report.topics_replicated} topics in sync")
    return 0
