"""`strait run checkpoint`: one replica of the checkpoint service."""

from __future__ import annotations

import argparse
import os
from pathlib import Path


def add_checkpoint(components_subparsers: argparse._SubParsersAction) -> None:
    """Add the ``checkpoint`` component to `strait run`."""
    parser = components_subparsers.add_parser(
        "checkpoint", help="emit exact MM2 checkpoints per flow; sync group offsets to the target")
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--redis-url", help="read the configuration from this Redis, live (default $STRAIT_REDIS_URL)")
    source.add_argument("--config", type=Path,
                        help="run from a YAML or MM2 properties file instead (coordination at its redis_url)")
    parser.add_argument("--flow", action="append", default=[], help="only this flow (repeatable)")
    parser.add_argument("--metrics-port", type=int, default=0, help="port of /metrics (0: a free one)")
    parser.add_argument("--lease-ttl", type=float, default=15.0,
                        help="seconds a flow stays with a replica that stopped renewing (default 15)")
    parser.set_defaults(handler=_checkpoint)


def _checkpoint(args: argparse.Namespace) -> int:
    from strait_checkpoint.app import CheckpointOptions, main

    return main(CheckpointOptions(
        redis_url=args.redis_url or (None if args.config else os.environ.get("STRAIT_REDIS_URL")),
        config_file=args.config, flows=tuple(args.flow), metrics_port=args.metrics_port, lease_ttl=args.lease_ttl,
    ))
