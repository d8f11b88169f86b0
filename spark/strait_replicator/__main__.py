"""``spark-submit spark/strait_replicator/__main__.py [options]`` or ``python -m strait_replicator``."""

import sys

from strait.launch import main

sys.exit(main("replicator"))
