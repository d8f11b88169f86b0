"""`strait flow {enable|disable|restart|status} A->B`: operate one flow without re-applying the whole file.

``enable`` and ``disable`` store a new configuration version that differs from the latest only in
that flow's ``enabled``; every running service adopts it as it adopts any `config apply`.
``restart`` stores one that differs only in the flow's ``restarted_at``: every service ends its work
on the flow and starts it again (the replicator re-plans and reads again where each partition
resumes); with ``--wait`` the command reports which parts started again. ``status`` prints the
flow's settings, which replica of each service holds it (from the leases in Redis) and configsync's
last drift report.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from dataclasses import replace
from datetime import datetime, timezone
from typing import Any

from strait.config.model import FlowConfig
from strait.config.store import StoredConfig, apply_config, read_stored_config
from strait.coord.assignment import ShardItem
from strait.coord.leases import Leases
from strait.coord.redis_client import connect
from strait.coord.restarts import read_marks, replicator_part
from strait.replicas import lease_name
from strait.settings import Settings, settings_of
from strait_configsync.drift import read_reports

SERVICES = ("configsync", "heartbeat")


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the `flow` command group."""
    flow = subparsers.add_parser("flow", help="enable, disable or inspect one stored flow")
    commands = flow.add_subparsers(dest="flow_command", metavar="COMMAND", required=True)
    handlers = {"enable": _switch, "disable": _switch, "restart": _restart, "status": _status}
    for name, text in (("enable", "start replicating this flow (a new configuration version)"),
                       ("disable", "stop replicating this flow (a new configuration version)"),
                       ("restart", "every service ends its work on the flow and starts it again"),
                       ("status", "the flow's settings, the replicas holding it, its drift")):
        command = commands.add_parser(name, help=text)
        command.add_argument("flow", metavar="A->B", help='the flow, e.g. "A->B"')
        command.add_argument("--redis-url", help="the coordination Redis (default $STRAIT_REDIS_URL)")
        if name == "status":
            command.add_argument("--json", action="store_true", help="print as JSON")
        if name == "restart":
            command.add_argument("--wait", type=_seconds, default=0.0, metavar="SECONDS",
                                 help="wait up to this long for every running part to start again; exit 1 if one "
                                      "did not (default: do not wait)")
        command.set_defaults(handler=handlers[name], enable=name == "enable")


def _client(args: argparse.Namespace) -> Any:
    return connect(settings_of(args).coordination_url())


def _switch(args: argparse.Namespace) -> int:
    client, settings = _client(args), settings_of(args)
    stored = read_stored_config(client, namespace=settings.namespace)
    flow = stored.config.flow(args.flow)  # a ConfigError naming the known flows when there is none
    word = "enabled" if args.enable else "disabled"
    if flow.enabled == args.enable:
        print(f"flow {flow.name} is already {word} (configuration version {stored.version})")
        return 0
    version = _store_flow(client, settings, stored, replace(flow, enabled=args.enable),
                          f"strait flow {'enable' if args.enable else 'disable'} {flow.name}")
    print(f"flow {flow.name} {word}: configuration version {version} (was {stored.version})")
    return 0


def _store_flow(client: Any, settings: Settings, stored: StoredConfig, changed: FlowConfig, reason: str) -> int:
    """Store the version ``stored`` with one flow changed, unless another version was stored meanwhile."""
    flows = tuple(changed if f.name == changed.name else f for f in stored.config.flows)
    return apply_config(client, replace(stored.config, flows=flows), reason, namespace=settings.namespace,
                        durable=settings.durable_config, changed_from=stored.version)


RESTART_POLL_SECONDS = 0.5


def _seconds(text: str) -> float:
    value = float(text)
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"expected a number of seconds of 0 or more, got {text!r}")
    return value


def _restart(args: argparse.Namespace) -> int:
    client, settings = _client(args), settings_of(args)
    stored = read_stored_config(client, namespace=settings.namespace)
    flow = stored.config.flow(args.flow)
    if not flow.enabled:
        print(f"flow {flow.name} is disabled: nothing runs to restart; `strait flow enable {flow.name}` starts it",
              file=sys.stderr)
        return 1
    parts = _parts(flow)
    running = set(read_marks(client, settings.namespace, parts))
    at = datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    version = _store_flow(client, settings, stored, replace(flow, restarted_at=at), f"strait flow restart {flow.name}")
    print(f"flow {flow.name} restart requested at {at}: configuration version {version} (was {stored.version})")
    if not args.wait:
        return 0
    if not running:
        print(f"flow {flow.name}: no part of it runs now; each starts it when it runs")
        return 0
    return _wait_for_restart(client, settings.namespace, flow.name, parts, running, at,
                             time.monotonic() + args.wait)


def _wait_for_restart(client: Any, namespace: str, flow: str, parts: list[str], running: set[str], at: str,
                      deadline: float) -> int:
    """Report each part as it serves the restart ``at``; exit 1 naming those that ran and did not in time."""
    waiting = set(running)
    while True:
        marks = read_marks(client, namespace, parts)
        for part in sorted(p for p, mark in marks.items() if mark == at and p in waiting):
            print(f"  {part}: started again")
            waiting.discard(part)
        if not waiting or time.monotonic() >= deadline:
            break
        time.sleep(RESTART_POLL_SECONDS)
    if waiting:
        print(f"flow {flow}: not started again in time: {', '.join(sorted(waiting))} (is that service still "
              "running and following Redis? a configuration applied since without restarted_at cancels a restart "
              "not yet begun; see the service's log)", file=sys.stderr)
        return 1
    print(f"flow {flow}: every running part started again ({len(running)})")
    return 0


def _parts(flow: FlowConfig) -> list[str]:
    """Every part that can run the flow: the replicator's query and the supervised services' items."""
    return [replicator_part(flow.name), *_lease_names(flow)]


def _lease_names(flow: FlowConfig) -> list[str]:
    names = [lease_name(service, flow.name) for service in SERVICES]
    return names + [lease_name("checkpoint", shard.name) for shard in ShardItem.all_of(flow.name, flow.checkpoint_shards)]


def _status(args: argparse.Namespace) -> int:
    client = _client(args)
    namespace = settings_of(args).namespace
    stored = read_stored_config(client, namespace=namespace)
    flow = stored.config.flow(args.flow)
    names = _lease_names(flow)
    holders = Leases(client, namespace).holders(names)
    report = read_reports(client, namespace).get(flow.name)
    status = {
        "flow": flow.name, "enabled": flow.enabled, "version": stored.version,
        "policy": flow.replication_policy, "topics": list(flow.topics.include),
        "target_partitions": flow.target_partitions, "offset_syncs": flow.writes_offset_syncs,
        "held_by": {name: holders.get(name) for name in names}, "restarted_at": flow.restarted_at,
        "topics_replicated": None if report is None else report.topics_replicated,
        "topics_in_sync": None if report is None else report.topics_in_sync,
    }
    if args.json:
        print(json.dumps(status, indent=2, sort_keys=True))
        return 0
    print(f"flow {flow.name}: {'enabled' if flow.enabled else 'disabled'} (configuration version {stored.version}), "
          f"policy {flow.replication_policy}, topics {', '.join(flow.topics.include)}")
    if flow.restarted_at:
        print(f"  last restart requested at {flow.restarted_at}")
    for name, holder in status["held_by"].items():
        print(f"  {name}: {holder or 'not held'}")
    if report is None:
        print("  drift: no report (is `strait run configsync` running?)")
    else:
        print(f"  drift: {report.topics_in_sync} of {report.topics_replicated} topics in sync")
    return 0
