"""Where a one-shot strait command (verify, offsets) reads the configuration from: a file or Redis."""

from __future__ import annotations

import argparse
from pathlib import Path

from strait.settings import settings_of
from strait.config import load_config
from strait.config.model import StraitConfig
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
    return load_stored_config(connect(settings_of(args).coordination_url()))[1]
