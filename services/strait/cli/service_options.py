"""Command-line options shared by every replicated strait service (`strait run <service>`)."""

from __future__ import annotations

import argparse
from pathlib import Path


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
