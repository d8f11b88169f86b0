"""The lab's errors: subclasses of strait's one exception root, so `strait lab` reports them as one line."""

from __future__ import annotations

from strait.errors import StraitError


class SetupError(StraitError):
    """Something the lab needs on this machine is missing or unusable (Java, jars, a binary)."""


class LabError(StraitError):
    """The embedded lab could not start, stop or report on one of its processes."""


class PortInUseError(LabError):
    """A port the lab wants to listen on is already taken by another process."""


class ProcessStartError(LabError):
    """A lab process exited or never became ready; the message quotes its log."""
