"""``python -m strait.cli`` runs the command line (used to spawn detached labs)."""

import sys

from strait.cli import main

sys.exit(main())
