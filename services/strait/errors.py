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


class SetupError(StraitError):
    """Something strait needs on this machine is missing or unusable (Java, jars, a binary)."""


class LabError(StraitError):
    """The embedded lab could not start, stop or report on one of its processes."""


class PortInUseError(LabError):
    """A port the lab wants to listen on is already taken by another process."""


class ProcessStartError(LabError):
    """A lab process exited or never became ready; the message quotes its log."""
