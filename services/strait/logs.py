"""Logging set-up shared by every strait process.

Modules log through ``logging.getLogger(__name__)`` and put context in the message as key=value
pairs (``topic=orders partition=3``); this module only configures the root handler once.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from strait.settings import Settings

_FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"
# Lines of one kind one event logs (one per topic or partition): at 2,000 topics they drowned the log.
LOGGED_LINES = 100


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


def log_first(logger: logging.Logger, items: Sequence[tuple[Any, ...]], line: str, more: str,
              *more_args: Any) -> None:
    """Log ``line`` (INFO) with each of the first LOGGED_LINES ``items`` as its arguments, then, when
    there are more, ``more`` once with ``more_args`` and the count of the rest."""
    for item in items[:LOGGED_LINES]:
        logger.info(line, *item)
    if len(items) > LOGGED_LINES:
        logger.info(more, *more_args, len(items) - LOGGED_LINES)
