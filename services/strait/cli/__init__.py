"""The `strait` command line.

Each command group lives in its own module with a ``register(subparsers)`` function; this module
wires them together and turns strait's errors into one clear line and exit code 1.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from importlib.metadata import entry_points
from types import ModuleType

from strait import __version__
from strait.cli import config, dashboards, failover, flow, offsets, run, status, verify
from strait.errors import StraitError
from strait.launch import report_errors
from strait.logs import setup_logging
from strait.settings import Settings

COMMAND_GROUPS = (config, flow, run, status, offsets, failover, verify, dashboards)
PLUGIN_GROUP = "strait.commands"  # installed tools add command groups here (tools/: `strait lab`)


def plugin_groups() -> list[ModuleType]:
    """Command groups other installed distributions add (the lab, in a source checkout)."""
    return [importlib.import_module(point.value) for point in entry_points(group=PLUGIN_GROUP)]


def build_parser() -> argparse.ArgumentParser:
    """The full argument parser with every command group registered."""
    parser = argparse.ArgumentParser(
        prog="strait",
        description="Cross-cluster Apache Kafka replication (MirrorMaker 2's job, exact offsets).",
    )
    parser.add_argument("--version", action="version", version=f"strait {__version__}")
    parser.add_argument("--log-level", default=None, help="DEBUG, INFO (default), WARNING or ERROR")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for group in (*plugin_groups(), *COMMAND_GROUPS):
        group.register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `strait` console script: the process's settings are read once, here."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        args.settings = Settings.read(args)
    except StraitError as exc:
        parser.error(str(exc))
    setup_logging(args.settings.log_level)
    return report_errors(lambda: int(args.handler(args) or 0))


if __name__ == "__main__":
    sys.exit(main())
