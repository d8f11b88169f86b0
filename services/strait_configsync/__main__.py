"""``python -m strait_configsync [OPTIONS]`` is `strait run configsync [OPTIONS]`."""

import sys

from strait.launch import main

sys.exit(main("configsync"))
