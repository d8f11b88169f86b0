"""`strait run COMPONENT`: one process of a strait component (what each compose service runs)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from strait.cli.configsync_cmd import add_configsync
from strait.cli.service_options import add_service_options
from strait.config import load_config


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the `run` command group."""
    run = subparsers.add_parser("run", help="run one process of a strait component")
    components = run.add_subparsers(dest="component", metavar="COMPONENT", required=True)
    replicator = components.add_parser("replicator", help="the PySpark data plane: one query per enabled flow")
    source = replicator.add_mutually_exclusive_group()
    source.add_argument("--redis-url", help="read the configuration from this Redis, live (default $STRAIT_REDIS_URL)")
    source.add_argument("--config", type=Path, help="run from a YAML or MM2 properties file instead (no live control)")
    replicator.add_argument("--flow", action="append", default=[], help="run only this flow (repeatable)")
    replicator.add_argument("--master", help="Spark master URL (default local[*] or $STRAIT_SPARK_MASTER)")
    replicator.add_argument("--state-dir", type=Path, help="Spark checkpoints (default .cache/replicator)")
    replicator.add_argument("--metrics-port", type=int, default=0, help="port of /metrics (0: a free one)")
    replicator.add_argument("--trigger-seconds", type=float, default=0.25,
                            help="shortest time between the starts of two epochs (micro-batches)")
    replicator.add_argument("--epoch-seconds", type=float, default=60.0,
                            help="how long each epoch's tasks copy live before Spark commits their progress")
    replicator.set_defaults(handler=_replicator)
    add_configsync(components)
    for name, help_text in SUPERVISED.items():
        parser = components.add_parser(name, help=help_text)
        add_service_options(parser)
        parser.set_defaults(handler=_supervised)


SUPERVISED = {
    "heartbeat": "emit MM2 heartbeats per flow; export heartbeat age, end-to-end latency, topology",
    "checkpoint": "emit exact MM2 checkpoints per flow; sync group offsets to the target",
}


def _supervised(args: argparse.Namespace) -> int:
    import importlib

    from strait.replicas import ProcessOptions

    app = importlib.import_module(f"strait_{args.component}.app")
    return int(app.main(ProcessOptions(
        redis_url=args.redis_url or (None if args.config else os.environ.get("STRAIT_REDIS_URL")),
        config_file=args.config, flows=tuple(args.flow), metrics_port=args.metrics_port, lease_ttl=args.lease_ttl,
    )))


def _replicator(args: argparse.Namespace) -> int:
    if args.config is not None:
        load_config(args.config)  # a bad file fails in a second, not after Spark took a minute to start
    from strait_replicator.app import ReplicatorOptions, main  # pyspark loads only for this command

    return main(ReplicatorOptions(
        redis_url=args.redis_url, config_file=args.config, state_dir=args.state_dir, master=args.master,
        metrics_port=args.metrics_port, trigger_seconds=args.trigger_seconds, epoch_seconds=args.epoch_seconds,
        flows=tuple(args.flow),
    ))
