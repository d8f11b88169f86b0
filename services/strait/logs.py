"""Logging set-up shared by every strait process.

Modules log through ``logging.getLogger(__name__)`` and put context in the message as key=value
pairs (``topic=orders partition=3``); this module only configures the root handler once.
"""

from __future__ import annotations

import logging
import os

_FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"


def setup_logging(level: str | None = None) -> None:
    """Configure the root logger unless the host application already did."""
    root = logging.getLogger()
    if root.handlers:
        return
    chosen = (level or os.environ.get("STRAIT_LOG_LEVEL") or "INFO").upper()
    logging.basicConfig(level=chosen, format=_FORMAT)
