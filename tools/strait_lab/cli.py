"""`strait lab up|down|status`: the embedded lab as local processes.

The lab (strait_lab) is a development tool with dev-only dependencies: it is imported when a lab
command runs, never by the rest of the command line, which containers run without them.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from typing import Any

from rich.live import Live

from strait.config.durable import DEFAULT_TOPIC

from strait_lab.errors import LabError
from strait_lab import lab_dir


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the `lab` command group."""
    lab = subparsers.add_parser("lab", help="run the embedded lab (clusters A and B, Redis, Prometheus)")
    commands = lab.add_subparsers(dest="lab_command", metavar="COMMAND", required=True)

    up = commands.add_parser("up", help="start the lab; runs until Ctrl-C unless --detach")
    up.add_argument("--detach", action="store_true", help="start in the background and return when ready")
    up.add_argument("--json", action="store_true", help="print the endpoints as JSON when ready")
    up.add_argument("--brokers", type=int, default=1, choices=(1, 3), help="brokers per cluster")
    up.add_argument("--timeout", type=float, default=180.0, help="seconds to wait for readiness (--detach)")
    up.add_argument("--no-view", action="store_true", help="no live health view in the terminal")
    up.set_defaults(handler=_up)

    down = commands.add_parser("down", help="stop the lab and every process it started")
    down.add_argument("--timeout", type=float, default=60.0, help="seconds before processes are killed")
    down.set_defaults(handler=_down)

    status = commands.add_parser("status", help="show whether the lab runs and where it listens")
    status.add_argument("--json", action="store_true", help="print as JSON")
    status.set_defaults(handler=_status)


def _up(args: argparse.Namespace) -> int:
    from strait_lab.health import HealthView
    from strait_lab.runtime import run_foreground
    from strait_lab.topology import default_lab_spec
    workdir = lab_dir()
    if args.detach:
        return _up_detached(args, workdir)
    spec = default_lab_spec(brokers=args.brokers)
    view: dict[str, Any] = {}

    def on_ready(description: dict[str, Any]) -> None:
        if args.json:
            print(json.dumps(description, indent=2), flush=True)
            return
        print(_summary(description), flush=True)
        print("lab is running; press Ctrl-C to stop it", flush=True)
        if sys.stdout.isatty() and not args.no_view:
            view["health"] = HealthView(description["metrics_endpoints"])
            view["live"] = Live(view["health"].table(), refresh_per_second=1, transient=True)
            view["live"].start()

    def on_tick() -> None:
        if "live" in view:
            view["live"].update(view["health"].table())

    try:
        run_foreground(spec, workdir, on_ready=on_ready, on_tick=on_tick)
    finally:
        if "live" in view:
            view["live"].stop()
    print("lab stopped", file=sys.stderr)
    return 0


def _up_detached(args: argparse.Namespace, workdir: Any) -> int:
    from strait_lab.runtime import STATE_FILE, LabState, running_lab
    if running_lab(workdir):
        raise LabError(f"a lab already runs from {workdir}: run `strait lab down` first")
    workdir.mkdir(parents=True, exist_ok=True)
    LabState(workdir / STATE_FILE).clear()
    argv = [sys.executable, "-m", "strait.cli", "lab", "up", "--brokers", str(args.brokers)]
    with open(workdir / "lab.log", "ab") as out:
        child = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                 start_new_session=True)
    deadline = time.monotonic() + args.timeout
    state = LabState(workdir / STATE_FILE)
    while time.monotonic() < deadline:
        current = state.read() or {}
        if current.get("status") == "ready":
            description = {k: v for k, v in current.items() if k not in ("status", "supervisor_pid", "pids")}
            print(json.dumps(description, indent=2) if args.json else _summary(description))
            return 0
        if current.get("status") == "failed" or child.poll() is not None:
            child.wait(timeout=60)
            current = state.read() or {}
            error = current.get("error") or f"the lab exited with code {child.returncode}; see {workdir / 'lab.log'}"
            raise LabError(error)
        time.sleep(0.5)
    os.killpg(child.pid, signal.SIGTERM)
    raise LabError(f"the lab was not ready within {args.timeout:.0f}s; see {workdir / 'lab.log'}")


def _down(args: argparse.Namespace) -> int:
    from strait_lab.runtime import STATE_FILE, LabState, pid_alive
    workdir = lab_dir()
    state = LabState(workdir / STATE_FILE).read()
    if not state:
        print("no lab is running")
        return 0
    pid = int(state.get("supervisor_pid", -1))
    if pid_alive(pid):
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + args.timeout
        while pid_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.2)
    leftovers = [p for p in [pid, *state.get("pids", [])] if pid_alive(p)]
    for leftover in leftovers:  # only after the timeout: the lab did not stop them itself
        os.kill(leftover, signal.SIGKILL)
    LabState(workdir / STATE_FILE).clear()
    print("lab stopped" + (f" (killed {len(leftovers)} processes that did not stop)" if leftovers else ""))
    return 0


def _status(args: argparse.Namespace) -> int:
    from strait_lab.runtime import running_lab
    state = running_lab(lab_dir())
    if not state:
        if args.json:
            print(json.dumps({"status": "stopped"}))
        else:
            print("no lab is running; start one with `make lab` or `strait lab up`")
        return 1
    if args.json:
        print(json.dumps(state, indent=2))
    else:
        print(f"lab {state.get('status')} (pid {state.get('supervisor_pid')})")
        if state.get("status") == "ready":
            print(_summary(state))
    return 0


def _summary(description: dict[str, Any]) -> str:
    lines = ["strait lab:"]
    for alias, cluster in description.get("clusters", {}).items():
        lines.append(f"  Kafka {alias:<10} {cluster['bootstrap_servers']}")
    lines.append(f"  Redis         {description.get('redis_url')}")
    lines.append(f"  Prometheus    {description.get('prometheus_url')}")
    for name, url in description.get("metrics_endpoints", {}).items():
        lines.append(f"  metrics {name:<6} {url}")
    lines.append(f"  flows         {', '.join(description.get('flows', []))}")
    if description.get("config"):
        lines.append(f"  config        {description['config']} (change it with `strait config apply FILE`)")
    if description.get("config_kafka"):
        lines.append(f"  durable copy  topic {DEFAULT_TOPIC} on {description['config_kafka']} "
                     f"(export STRAIT_CONFIG_KAFKA={description['config_kafka']} for `strait config apply`)")
    lines.append(f"  logs          {description.get('logs')}")
    if "startup_seconds" in description:
        lines.append(f"  ready in      {description['startup_seconds']} s")
    return "\n".join(lines)
