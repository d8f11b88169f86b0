"""``python -m strait_checkpoint [OPTIONS]`` is `strait run checkpoint [OPTIONS]`."""

import sys

from strait.cli import main

sys.exit(main(["run", "checkpoint", *sys.argv[1:]]))
