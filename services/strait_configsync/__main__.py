"""``python -m strait_configsync [OPTIONS]`` is `strait run configsync [OPTIONS]`."""

import sys

from strait.cli import main

sys.exit(main(["run", "configsync", *sys.argv[1:]]))
