"""Where strait keeps its downloads and runtime state.

Everything lives under one git-ignored cache folder: `<repo>/.cache` for a source checkout, or
`$STRAIT_CACHE_DIR` when set (containers, read-only installs).
"""

from __future__ import annotations

import os
from pathlib import Path


def repo_root() -> Path:
    """The source checkout this package was installed from (editable install)."""
    return Path(__file__).resolve().parents[2]


def cache_dir() -> Path:
    """The cache folder (jars, state, the lab's data); created on first use."""
    configured = os.environ.get("STRAIT_CACHE_DIR")
    path = Path(configured) if configured else repo_root() / ".cache"
    path.mkdir(parents=True, exist_ok=True)
    return path
