"""``python -m strait_checkpoint [OPTIONS]``: the same process as `strait run checkpoint [OPTIONS]`."""

from __future__ import annotations

import argparse
import sys

from strait.cli.checkpoint_cmd import add_checkpoint
from strait.errors import StraitError
from strait.logs import setup_logging


def main(argv: list[str] | None = None) -> int:
    """Parse the `checkpoint` component's options and run it."""
    parser = argparse.ArgumentParser(prog="python -m strait_checkpoint")
    add_checkpoint(parser.add_subparsers(dest="component", required=True))
    args = parser.parse_args(["checkpoint", *(sys.argv[1:] if argv is None else argv)])
    setup_logging()
    try:
        return int(args.handler(args) or 0)
    except StraitError as exc:
        print(f"strait: error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
