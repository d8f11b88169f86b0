"""A lab process: started in its own process group, logged to a file, never leaked.

Children get SIGKILL from the kernel when the process that started them dies (Linux
``PR_SET_PDEATHSIG``), so even a SIGKILLed test run or lab leaves no broker behind.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import re
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from strait_lab.errors import ProcessStartError, SetupError

log = logging.getLogger(__name__)
SLOWNESS_VARIABLE = "STRAIT_TEST_SLOWNESS"
_ERROR_LINE = re.compile(r"\b(ERROR|FATAL|Exception|Error:)")

_CONSOLE_LOG4J2 = """\
status = warn
appender.console.type = Console
appender.console.name = STDOUT
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = {level}
rootLogger.appenderRef.stdout.ref = STDOUT
"""


def slowness() -> float:
    """How many times a quick machine's time this one needs for the same work: ``STRAIT_TEST_SLOWNESS``
    (the test run measures it at its start; 1 when unset, never below 1). Waits for a process to be
    ready scale by it, so a slow machine fails no wait a quick one passes."""
    text = os.environ.get(SLOWNESS_VARIABLE, "1")
    try:
        return max(1.0, float(text))
    except ValueError:
        raise SetupError(f"{SLOWNESS_VARIABLE}={text!r} is not a number: set a factor such as 1.5, or unset it") from None


def console_log4j2(level: str = "INFO") -> str:
    """log4j2 properties for a lab JVM: every line to the console (the process's log file) at ``level``."""
    return _CONSOLE_LOG4J2.format(level=level)


_CONSOLE_LOG4J = """\
log4j.rootLogger={level}, stdout
log4j.appender.stdout=org.apache.log4j.ConsoleAppender
log4j.appender.stdout.layout=org.apache.log4j.PatternLayout
log4j.appender.stdout.layout.ConversionPattern=[%d] %p %m (%c)%n
"""


def console_log4j(level: str = "INFO") -> str:
    """log4j 1 (reload4j) properties for a lab JVM of the ZooKeeper era: every line to the console
    (the process's log file) at ``level``; the counterpart of :func:`console_log4j2`."""
    return _CONSOLE_LOG4J.format(level=level)


_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """Runs in the child between fork and exec: ask the kernel to kill it when its parent dies."""
    os.setsid()
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except OSError:
        pass  # not Linux: stop() and the lab's state file still clean up


def tail(path: Path, lines: int = 20) -> str:
    """The last lines of a log file, for error messages, after its first error lines if the tail has
    none (a server that failed to start logs the cause, then many lines of its shutdown)."""
    try:
        content = path.read_text(errors="replace").splitlines()
    except FileNotFoundError:
        return "(no log written)"
    last = content[-lines:]
    if any(_ERROR_LINE.search(line) for line in last):
        return "\n".join(last)
    errors = [line for line in content[:-lines] if _ERROR_LINE.search(line)][:5]
    first = ["first errors:", *errors, "last lines:"] if errors else []
    return "\n".join([*first, *last])


class ManagedProcess:
    """One child process of the lab with its log file.

    Args:
        name: what the operator calls it (``kafka A broker 1``), used in messages.
        argv: the command line.
        log_path: where stdout and stderr go.
        env: extra environment variables.
        cwd: working directory.
    """

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        log_path: Path,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
    ) -> None:
        self.name = name
        self.argv = list(argv)
        self.log_path = log_path
        self.env = dict(env or {})
        self.cwd = cwd
        self._popen: subprocess.Popen[bytes] | None = None
        self._terminated = False  # SIGTERM sent: a second one could hit the child as it exits

    @property
    def pid(self) -> int | None:
        """The child's pid while it was started, else None."""
        return self._popen.pid if self._popen else None

    def start(self) -> None:
        """Start the process; its output is appended to the log file."""
        self._terminated = False
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as out:
            try:
                self._popen = subprocess.Popen(
                    self.argv,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    env={**os.environ, **self.env},
                    cwd=self.cwd,
                    preexec_fn=_die_with_parent,
                )
            except FileNotFoundError as exc:
                raise ProcessStartError(f"{self.name}: cannot run {self.argv[0]!r}: {exc}") from exc
        log.info("started process=%r pid=%s log=%s", self.name, self._popen.pid, self.log_path)

    def alive(self) -> bool:
        """True while the child runs."""
        return self._popen is not None and self._popen.poll() is None

    def returncode(self) -> int | None:
        """The exit code once the child has ended."""
        return self._popen.poll() if self._popen else None

    def check_alive(self) -> None:
        """Raise with the log's tail when the child has already exited."""
        if self._popen is not None and self._popen.poll() is not None:
            raise ProcessStartError(
                f"{self.name} exited with code {self._popen.returncode}; log {self.log_path}:\n"
                f"{tail(self.log_path)}"
            )

    def wait_until(self, ready: Callable[[], bool], timeout: float, what: str) -> None:
        """Poll ``ready`` until it is true; fail early if the child dies, or at the timeout (times
        :func:`slowness`)."""
        timeout *= slowness()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.check_alive()
            try:
                if ready():
                    return
            except Exception as exc:  # readiness probes fail until the server is up
                log.debug("not ready yet process=%r probe=%s error=%s", self.name, what, exc)
            time.sleep(0.2)
        raise ProcessStartError(
            f"{self.name} was not ready ({what}) within {timeout:.0f}s; log {self.log_path}:\n"
            f"{tail(self.log_path)}"
        )

    def signal(self, sig: int) -> None:
        """Send a signal to the child's whole process group (SIGSTOP/SIGCONT/SIGKILL in drills)."""
        if self.alive():
            self._terminated = self._terminated or sig == signal.SIGTERM
            os.killpg(self._popen.pid, sig)  # type: ignore[union-attr]

    def terminate(self, group: bool = True) -> None:
        """Send SIGTERM without waiting: to the process group, or with ``group=False`` to the child only.

        Stopping several processes at once (SIGTERM to each first, then :meth:`stop` each) takes as
        long as the slowest, not their sum.
        """
        if self._popen is None or not self.alive():
            return
        self._terminated = True
        pid = self._popen.pid
        try:
            os.killpg(pid, signal.SIGCONT)  # a stopped child cannot handle TERM
            if group:
                os.killpg(pid, signal.SIGTERM)
            else:
                os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass

    def stop(self, timeout: float = 15.0, group: bool = True) -> None:
        """SIGTERM the process group (the child only with ``group=False``) unless it was sent already,
        then SIGKILL what is left of the group once the child ended, or after ``timeout`` seconds."""
        if self._popen is None:
            return
        if self._popen.poll() is None:
            started = time.monotonic()
            if not self._terminated:
                self.terminate(group)
            else:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self._popen.pid, signal.SIGCONT)  # in case it was stopped since
            try:
                self._popen.wait(timeout)
            except subprocess.TimeoutExpired:
                log.warning("killing process=%r after %.0fs without exit", self.name, timeout)
                self.kill()
            log.info("stopped process=%r seconds=%.1f code=%s", self.name, time.monotonic() - started,
                     self._popen.returncode)
        self._reap_group()

    def kill(self) -> None:
        """SIGKILL the process group at once and wait for the child."""
        if self._popen is None:
            return
        try:
            os.killpg(self._popen.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self._popen.wait()

    def _reap_group(self) -> None:
        """Kill anything the child left in its group (e.g. a forked helper)."""
        try:
            os.killpg(self._popen.pid, signal.SIGKILL)  # type: ignore[union-attr]
        except ProcessLookupError:
            pass
