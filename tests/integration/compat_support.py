"""What the compatibility tests share: whether this run is the full matrix (`make test-compat`)."""

from __future__ import annotations

import os

# `make test` runs the short form (one pair of old clusters); STRAIT_COMPAT=full every pair and the
# lab's own checks of each old release line.
FULL = os.environ.get("STRAIT_COMPAT") == "full"
