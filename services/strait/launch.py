"""The one launcher of strait's components: `strait run COMPONENT` and ``python -m strait_<component>``.

Each component is one process: its flags (shared ones from :func:`add_process_options`, its own
beside them), the process's :class:`~strait.settings.Settings` read once from them, and its app
module's ``main(settings[, options])``. An app is imported only when its component runs, so pyspark
loads for the replicator alone.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from strait.config.model import START_CHOICES
from strait.errors import StraitError
from strait.kafka.admin import SERVICE_ADMIN_TIMEOUT
from strait.logs import setup_logging
from strait.settings import DEFAULT_LEASE_TTL, Settings, settings_of


@dataclass(frozen=True)
class Component:
    """One kind of strait process."""

    name: str
    help: str
    app: str  # module with ``main(settings[, options])``
    add_options: Callable[[argparse.ArgumentParser], None] = lambda _parser: None
    options: Callable[[argparse.Namespace], Any] | None = None  # the component's own options, if any
    coordinated: bool = True  # replicas coordinate through Redis (``--config`` names it); else no Redis with a file


def add_process_options(parser: argparse.ArgumentParser, component: Component) -> None:
    """Flags every component takes: config source, flows, metrics port (and the lease TTL of replicas)."""
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--redis-url", help="read the configuration from this Redis, live (default $STRAIT_REDIS_URL)")
    source.add_argument("--config", type=Path, help="run from a YAML or MM2 properties file instead ("
                        + ("coordination at its redis_url)" if component.coordinated else "no live control)"))
    parser.add_argument("--flow", action="append", default=[], help="only this flow (repeatable)")
    parser.add_argument("--metrics-port", type=int, default=0, help="port of /metrics (0: a free one)")
    if component.coordinated:
        parser.add_argument("--lease-ttl", type=float, default=DEFAULT_LEASE_TTL,
                            help="seconds a flow stays with a replica that stopped renewing (default 15)")


def _replicator_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--master", help="Spark master URL (default local[*] or $STRAIT_SPARK_MASTER)")
    parser.add_argument("--state-dir", help="where the Spark checkpoints live: a folder or a Hadoop-compatible URI "
                        "such as hdfs://... or s3a://... (default $STRAIT_STATE_DIR, else .cache/replicator)")
    parser.add_argument("--trigger-seconds", type=float, default=0.25,
                        help="shortest time between the starts of two epochs (micro-batches)")
    parser.add_argument("--epoch-seconds", type=float, default=60.0,
                        help="how long each epoch's tasks copy live before Spark commits their progress")
    parser.add_argument("--head-start", action=argparse.BooleanOptionalAction, default=True,
                        help="also copy from this process while a query starts, until its tasks take over "
                             "(README: the head start)")
    parser.add_argument("--start", choices=START_CHOICES,
                        help="for every flow, where a partition starts when its remote topic holds records no "
                             "evidence in Kafka explains (overrides the flows' start)")


def _replicator_options(args: argparse.Namespace) -> Any:
    if args.config is not None:
        from strait.config import load_config

        load_config(args.config)  # a bad file fails in a second, not after Spark took a minute to start
    from strait_replicator.app import ReplicatorOptions

    return ReplicatorOptions(master=args.master, trigger_seconds=args.trigger_seconds,
                             epoch_seconds=args.epoch_seconds, start=args.start, head_start=args.head_start)


def _configsync_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--admin-timeout", type=float, default=SERVICE_ADMIN_TIMEOUT,
                        help=f"seconds per Kafka admin request (default {SERVICE_ADMIN_TIMEOUT:.0f})")
    parser.add_argument("--delete-acls", action="store_true",
                        default=os.environ.get("STRAIT_CONFIGSYNC_DELETE_ACLS", "") in ("1", "true", "yes"),
                        help="remove target ACLs strait copied once their source ACL is deleted "
                             "(default: only report them; $STRAIT_CONFIGSYNC_DELETE_ACLS=true)")


def _configsync_options(args: argparse.Namespace) -> Any:
    from strait_configsync.app import ConfigSyncOptions

    return ConfigSyncOptions(delete_acls=args.delete_acls, admin_timeout=args.admin_timeout)


COMPONENTS = {component.name: component for component in (
    Component("replicator", "the PySpark data plane: one query per enabled flow", "strait_replicator.app",
              _replicator_arguments, _replicator_options, coordinated=False),
    Component("configsync", "sync topics, partitions, configs, ACLs and internal topics of every enabled flow",
              "strait_configsync.app", _configsync_arguments, _configsync_options),
    Component("heartbeat", "emit MM2 heartbeats per flow; export heartbeat age, end-to-end latency, topology",
              "strait_heartbeat.app"),
    Component("checkpoint", "emit exact MM2 checkpoints per flow; sync group offsets to the target",
              "strait_checkpoint.app"),
)}


def add_components(run: argparse.ArgumentParser) -> None:
    """Add every component as a sub-command of ``run``."""
    components = run.add_subparsers(dest="component", metavar="COMPONENT", required=True)
    for component in COMPONENTS.values():
        parser = components.add_parser(component.name, help=component.help)
        add_process_options(parser, component)
        component.add_options(parser)
        parser.set_defaults(handler=launch)


def launch(args: argparse.Namespace) -> int:
    """Run the component ``args.component`` with the process's settings until SIGINT or SIGTERM."""
    component = COMPONENTS[args.component]
    settings = settings_of(args)
    extra = () if component.options is None else (component.options(args),)
    return int(importlib.import_module(component.app).main(settings, *extra))


def add_log_level(parser: argparse.ArgumentParser) -> None:
    """``--log-level``, which every strait command takes."""
    parser.add_argument("--log-level", default=None, help="DEBUG, INFO (default), WARNING or ERROR")


def run_command(parser: argparse.ArgumentParser, argv: list[str] | None = None) -> int:
    """Parse ``argv``, read the process's settings once, set up logging and run the chosen handler;
    strait's own errors become one line on stderr and exit code 1."""
    args = parser.parse_args(argv)
    try:
        args.settings = Settings.read(args)
    except StraitError as exc:
        parser.error(str(exc))
    setup_logging(args.settings.log_level)
    try:
        return int(args.handler(args) or 0)
    except StraitError as exc:
        print(f"strait: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


def main(component: str, argv: list[str] | None = None) -> int:
    """``python -m strait_<component> [OPTIONS]``: the same process as `strait run COMPONENT [OPTIONS]`."""
    parser = argparse.ArgumentParser(prog=f"strait run {component}", description=COMPONENTS[component].help)
    add_log_level(parser)
    add_process_options(parser, COMPONENTS[component])
    COMPONENTS[component].add_options(parser)
    parser.set_defaults(handler=launch, component=component)
    return run_command(parser, argv)
