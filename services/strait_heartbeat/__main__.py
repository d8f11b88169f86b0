"""``python -m strait_heartbeat [OPTIONS]`` is `strait run heartbeat [OPTIONS]`."""

import sys

from strait.launch import main

sys.exit(main("heartbeat"))
