"""Logging set-up shared by every strait process.

Modules log through ``logging.getLogger(__name__)`` and put context in the message as key=value
pairs (``topic=orders partition=3``); this module only configures the root handler once.
"""

from __future__ import annotations

import logging

from strait.settings import Settings

_FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"


def setup_logging(level: str | None = None) -> None:
    """Configure the root logger unless the host application already did.

    A process gives its settings' level; a Spark Python worker, started by Spark, none: it reads
    the same settings from its environment.
    """
    root = logging.getLogger()
    if root.handlers:
        return
    if level is None:
        level = Settings.read().log_level
    logging.basicConfig(level=level.upper(), format=_FORMAT)
