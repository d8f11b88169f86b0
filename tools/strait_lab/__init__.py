"""The embedded lab: real Kafka clusters, Redis and Prometheus as local processes on loopback.

Used by `make lab`, `strait lab up|down|status` and the pytest fixtures. Nothing here is mocked:
brokers run from Maven Central jars in KRaft mode, Redis and Prometheus from the OS packages.
"""

from __future__ import annotations

import os
from pathlib import Path

from strait.paths import cache_dir


def lab_dir() -> Path:
    """Working folder of the embedded lab started by `strait lab up` (logs, data, state file)."""
    configured = os.environ.get("STRAIT_LAB_DIR")
    return Path(configured) if configured else cache_dir() / "lab"
