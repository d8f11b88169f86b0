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
from strait.cli import config, dashboards, failover, flow, handover, offsets, run, status, verify
from strait.launch import add_log_level, run_command

COMMAND_GROUPS = (config, flow, run, status, handover, offsets, failover, verify, dashboards)
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
    add_log_level(parser)
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for group in (*plugin_groups(), *COMMAND_GROUPS):
        group.register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `strait` console script: the process's settings are read once, here."""
    return run_command(build_parser(), argv)


if __name__ == "__main__":
    sys.exit(main())
