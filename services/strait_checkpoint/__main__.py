"""``python -m strait_checkpoint [OPTIONS]`` is `strait run checkpoint [OPTIONS]`."""

import sys

from strait.launch import main

sys.exit(main("checkpoint"))
