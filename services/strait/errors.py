"""The one exception root of strait and its general subclasses.

Every error strait raises on purpose derives from :class:`StraitError`. Messages name the culprit
(file, key, cluster, topic, port) and say what to do, because they are what an operator reads.
Modules with errors of their own subclass these where they live.
"""

from __future__ import annotations


class StraitError(Exception):
    """Root of every error strait raises on purpose."""


class ConfigError(StraitError):
    """A configuration file or value is invalid; the message names the file and key."""


class CoordinationError(StraitError):
    """A coordination operation on Redis failed (strait.coord)."""


class CoordinationUnavailableError(CoordinationError):
    """Redis could not be reached or did not answer in time; the message names it (no password)."""
