"""`strait run COMPONENT`: one process of a strait component (what each compose service runs)."""

from __future__ import annotations

import argparse

from strait.launch import add_components


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the `run` command group: one sub-command per component (:data:`strait.launch.COMPONENTS`)."""
    add_components(subparsers.add_parser("run", help="run one process of a strait component"))
