"""``python -m strait_heartbeat [OPTIONS]`` is `strait run heartbeat [OPTIONS]`."""

import sys

from strait.cli import main

sys.exit(main(["run", "heartbeat", *sys.argv[1:]]))
