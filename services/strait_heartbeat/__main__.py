"""``python -m strait_heartbeat [OPTIONS]``: the same process as `strait run heartbeat [OPTIONS]`."""

from __future__ import annotations

import argparse
import sys

from strait.cli.heartbeat_cmd import add_heartbeat
from strait.errors import StraitError
from strait.logs import setup_logging


def main(argv: list[str] | None = None) -> int:
    """Parse the `heartbeat` component's options and run it."""
    parser = argparse.ArgumentParser(prog="python -m strait_heartbeat")
    add_heartbeat(parser.add_subparsers(dest="component", required=True))
    args = parser.parse_args(["heartbeat", *(sys.argv[1:] if argv is None else argv)])
    setup_logging()
    try:
        return int(args.handler(args) or 0)
    except StraitError as exc:
        print(f"strait: error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
