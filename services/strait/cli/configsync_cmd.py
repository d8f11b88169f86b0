"""`strait run configsync`: one replica of the topic, partition, config and ACL sync service."""

from __future__ import annotations

import argparse
import os
from pathlib import Path


def add_configsync(components_subparsers: argparse._SubParsersAction) -> None:
    """Add the ``configsync`` component to `strait run`."""
    parser = components_subparsers.add_parser(
        "configsync", help="sync topics, partitions, configs, ACLs and internal topics of every enabled flow")
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--redis-url", help="read the configuration from this Redis, live (default $STRAIT_REDIS_URL)")
    source.add_argument("--config", type=Path,
                        help="run from a YAML or MM2 properties file instead (coordination at its redis_url)")
    parser.add_argument("--flow", action="append", default=[], help="sync only this flow (repeatable)")
    parser.add_argument("--metrics-port", type=int, default=0, help="port of /metrics (0: a free one)")
    parser.add_argument("--lease-ttl", type=float, default=15.0,
                        help="seconds a flow stays with a replica that stopped renewing (default 15)")
    parser.add_argument("--admin-timeout", type=float, default=15.0, help="seconds per Kafka admin request")
    parser.add_argument("--delete-acls", action="store_true",
                        default=os.environ.get("STRAIT_CONFIGSYNC_DELETE_ACLS", "") in ("1", "true", "yes"),
                        help="remove target ACLs strait copied once their source ACL is deleted "
                             "(default: only report them; $STRAIT_CONFIGSYNC_DELETE_ACLS=true)")
    parser.set_defaults(handler=_configsync)


def _configsync(args: argparse.Namespace) -> int:
    from strait_configsync.app import ConfigSyncOptions, main

    return main(ConfigSyncOptions(
        redis_url=args.redis_url or (None if args.config else os.environ.get("STRAIT_REDIS_URL")),
        config_file=args.config, flows=tuple(args.flow), metrics_port=args.metrics_port,
        lease_ttl=args.lease_ttl, delete_acls=args.delete_acls, admin_timeout=args.admin_timeout,
    ))
