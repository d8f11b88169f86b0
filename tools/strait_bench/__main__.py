"""Entry point of ``python -m strait_bench``."""

import sys

from strait_bench.cli import main

sys.exit(main())
