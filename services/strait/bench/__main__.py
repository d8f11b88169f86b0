"""Entry point of ``python -m strait.bench``."""

import sys

from strait.bench.cli import main

sys.exit(main())
