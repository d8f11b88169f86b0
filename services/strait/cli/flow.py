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
import time
from dataclasses import replace
from datetime import datetime, timezone
from typing import Any

from strait.config.model import FlowConfig
from strait.settings import settings_of
from strait.config.store import apply_config, read_stored_config
from strait.coord.assignment import ShardItem
from strait.coord.leases import Leases
from strait.coord.redis_client import connect
from strait.progress import read_resume_report
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
            command.add_argument("--wait", type=float, default=0.0, metavar="SECONDS",
                                 help="wait up to this long for every running part to start again; exit 1 if one "
                                      "did not (default: do not wait)")
        command.set_defaults(handler=handlers[name], enable=name == "enable")


def _client(args: argparse.Namespace) -> Any:
    return connect(settings_of(args).coordination_url())


def _switch(args: argparse.Namespace) -> int:
    client = _client(args)
    settings = settings_of(args)
    stored = read_stored_config(client, namespace=settings.namespace)
    flow = stored.config.flow(args.flow)  # a ConfigError naming the known flows when there is none
    word = "enabled" if args.enable else "disabled"
    if flow.enabled == args.enable:
        print(f"flow {flow.name} is already {word} (configuration version {stored.version})")
        return 0
    flows = tuple(replace(f, enabled=args.enable) if f.name == flow.name else f for f in stored.config.flows)
    config = replace(stored.config, flows=flows)
    version = apply_config(client, config, f"strait flow {'enable' if args.enable else 'disable'} {flow.name}",
                           namespace=settings.namespace, durable=settings.durable_config)
    print(f"flow {flow.name} {word}: configuration version {version} (was {stored.version})")
    return 0


RESTART_POLL_SECONDS = 0.5


def _restart(args: argparse.Namespace) -> int:
    client = _client(args)
    settings = settings_of(args)
    stored = read_stored_config(client, namespace=settings.namespace)
    flow = stored.config.flow(args.flow)
    if not flow.enabled:
        print(f"flow {flow.name} is disabled: nothing runs to restart; `strait flow enable {flow.name}` starts it")
        return 1
    before = _running_parts(client, flow, settings.namespace)
    at = datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    flows = tuple(replace(f, restarted_at=at) if f.name == flow.name else f for f in stored.config.flows)
    version = apply_config(client, replace(stored.config, flows=flows), f"strait flow restart {flow.name}",
                           namespace=settings.namespace, durable=settings.durable_config)
    print(f"flow {flow.name} restart requested at {at}: configuration version {version} (was {stored.version})")
    if args.wait <= 0:
        return 0
    return _wait_for_restart(client, flow, settings.namespace, before, time.monotonic() + args.wait)


def _running_parts(client: Any, flow: FlowConfig, namespace: str) -> dict[str, object]:
    """What identifies each running part's current start: a lease's fencing token, the replicator's last
    resume report time. A part that restarted has another one (a retaken lease gets a higher token)."""
    leases = Leases(client, namespace)
    parts: dict[str, object] = {}
    for name in _lease_names(flow):
        owner = leases.owner(name)
        if owner is not None:
            parts[name] = owner.token
    report = read_resume_report(client, flow.name, namespace)
    if report is not None:
        parts["replicator"] = report.get("at")
    return parts


def _wait_for_restart(client: Any, flow: FlowConfig, namespace: str, before: dict[str, object],
                      deadline: float) -> int:
    waiting = dict(before)
    while waiting and time.monotonic() < deadline:
        time.sleep(RESTART_POLL_SECONDS)
        now = _running_parts(client, flow, namespace)
        for part in [p for p in waiting if p in now and now[p] != waiting[p]]:
            print(f"  {part}: started again")
            del waiting[part]
    if waiting:
        print(f"flow {flow.name}: not started again in time: {', '.join(sorted(waiting))} "
              "(is that service running and following Redis? see its log)")
        return 1
    print(f"flow {flow.name}: every running part started again ({len(before)})" if before else
          f"flow {flow.name}: no part was running (no lease held, no replicator report); each starts it when it runs")
    return 0


def _lease_names(flow: FlowConfig) -> list[str]:
    names = [f"{service}:{flow.name}" for service in SERVICES]
    return names + [f"checkpoint:{shard.name}" for shard in ShardItem.all_of(flow.name, flow.checkpoint_shards)]


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
