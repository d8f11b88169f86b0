"""`strait run configsync`: one replica of the topic, partition, config and ACL sync service."""

from __future__ import annotations

import argparse
import os

from strait.cli.service_options import add_service_options


def add_configsync(components_subparsers: argparse._SubParsersAction) -> None:
    """Add the ``configsync`` component to `strait run`."""
    parser = components_subparsers.add_parser(
        "configsync", help="sync topics, partitions, configs, ACLs and internal topics of every enabled flow")
    add_service_options(parser)
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
