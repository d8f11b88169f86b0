"""Command-line options shared by strait commands: where the configuration comes from, and the
options of every replicated service (`strait run <service>`)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from strait.config import load_config
from strait.config.model import DEFAULT_REDIS_URL, StraitConfig
from strait.config.store import load_stored_config
from strait.coord.redis_client import connect


def add_config_source(parser: argparse.ArgumentParser) -> None:
    """``--config FILE | --redis-url URL`` for commands that read the configuration once."""
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--config", type=Path, help="a YAML or MM2 properties file instead of the stored config")
    source.add_argument("--redis-url", help="where the configuration is stored (default $STRAIT_REDIS_URL)")


def config_from_args(args: argparse.Namespace) -> StraitConfig:
    """The configuration named by ``--config``, else the latest one stored in Redis."""
    if args.config is not None:
        return load_config(args.config)
    client = connect(args.redis_url or os.environ.get("STRAIT_REDIS_URL", DEFAULT_REDIS_URL))
    return load_stored_config(client)[1]


def add_service_options(parser: argparse.ArgumentParser) -> None:
    """Options every replicated strait service takes: config source, flows, metrics port, lease TTL."""
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--redis-url", help="read the configuration from this Redis, live (default $STRAIT_REDIS_URL)")
    source.add_argument("--config", type=Path,
                        help="run from a YAML or MM2 properties file instead (coordination at its redis_url)")
    parser.add_argument("--flow", action="append", default=[], help="only this flow (repeatable)")
    parser.add_argument("--metrics-port", type=int, default=0, help="port of /metrics (0: a free one)")
    parser.add_argument("--lease-ttl", type=float, default=15.0,
                        help="seconds a flow stays with a replica that stopped renewing (default 15)")
