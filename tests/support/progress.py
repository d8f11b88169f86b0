"""What a test run says while it runs, for a reader who only sees its output (CI keeps no report of
a run it had to end): the machine it runs on, each failure and each slow test the moment it ends,
and a deadline past which the tests left fail at once, so pytest still prints its summary. And how
much slower than a quick machine this one is, which the tests' waits scale by.
"""

from __future__ import annotations

import os
import shutil
import time

import pytest

from strait_lab.process import SLOWNESS_VARIABLE, slowness

SLOW_TEST_SECONDS = 60.0
DEFAULT_DEADLINE_MINUTES = 78.0  # CI ends a run at 90 minutes, set-up included
QUICK_LOOP_SECONDS = 0.33  # a 10M-step Python loop on the quick machines the tests' bounds were set on
MOST_SLOWNESS = 3.0


def loop_seconds(tries: int = 3) -> float:
    """Seconds for a 10M-step pure-Python loop, the best of ``tries``: this machine's single-core speed
    in one number (the best, so a moment's load elsewhere does not count)."""
    best = float("inf")
    for _ in range(tries):
        began = time.perf_counter()
        total = 0
        for step in range(10_000_000):
            total += step
        best = min(best, time.perf_counter() - began)
    return best


def measure_slowness() -> float:
    """Set ``STRAIT_TEST_SLOWNESS`` for this run and its workers, unless the user set it: this machine's
    loop time against a quick machine's, between 1 and 3. The factor it returns is the one in force."""
    if SLOWNESS_VARIABLE not in os.environ:
        factor = min(MOST_SLOWNESS, max(1.0, loop_seconds() / QUICK_LOOP_SECONDS))
        os.environ[SLOWNESS_VARIABLE] = f"{factor:.2f}"
    return slowness()


def machine_facts(path: str) -> str:
    """Cores, memory, free disk under ``path``, load, a pure-Python loop's time and the waits' factor."""
    memory = _meminfo_gib()
    disk = shutil.disk_usage(path)
    return (f"machine: {os.cpu_count()} cores, {memory.get('MemTotal', 0):.1f} GiB memory "
            f"({memory.get('MemAvailable', 0):.1f} available), {disk.free / 2**30:.0f} GiB free disk, "
            f"load {os.getloadavg()[0]:.1f}, a 10M-step Python loop {loop_seconds(1):.2f} s "
            f"({QUICK_LOOP_SECONDS} s on a quick one); waits scaled by {SLOWNESS_VARIABLE}={slowness():.2f}")


def _meminfo_gib() -> dict[str, float]:
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            return {line.split(":")[0]: int(line.split()[1]) / 2**20 for line in meminfo}
    except OSError:
        return {}


def deadline_minutes() -> float:
    """Minutes after a run's start past which a test not yet begun fails (``STRAIT_SUITE_DEADLINE_MINUTES``)."""
    return float(os.environ.get("STRAIT_SUITE_DEADLINE_MINUTES", DEFAULT_DEADLINE_MINUTES))


def fail_past_deadline(began: float) -> None:
    """Fail the test about to start when the run is past its deadline (its fixtures are not set up)."""
    minutes = deadline_minutes()
    if time.time() - began > minutes * 60:
        pytest.fail(f"not run: the test run is past its {minutes:.0f}-minute deadline "
                    "(STRAIT_SUITE_DEADLINE_MINUTES); the tests before it took that long on this machine",
                    pytrace=False)


class LiveReport:
    """A plugin of the process that writes the run's output: failures and slow tests are written the
    moment they end, not only in the closing summary."""

    def __init__(self, config: pytest.Config, began: float) -> None:
        self._config = config
        self._began = began

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Write the report's line, if it has one (:func:`live_line`)."""
        line = live_line(report, self._began)
        reporter = self._config.pluginmanager.get_plugin("terminalreporter")
        if line and reporter is not None:
            reporter.write("\n")  # after the progress dots of the line in hand
            reporter.write_line(line)


def live_line(report: pytest.TestReport, began: float) -> str | None:
    """A line for a report worth seeing now: a failure (with its first line) or a slow test."""
    elapsed = time.strftime("%H:%M:%S", time.gmtime(time.time() - began))
    if report.failed:
        what = "ERROR" if report.when != "call" else "FAILED"
        return f"[{elapsed}] {what} {report.nodeid} ({report.when}, {report.duration:.0f}s): {_reason(report)}"
    if report.when == "call" and report.duration >= SLOW_TEST_SECONDS:
        return f"[{elapsed}] slow {report.nodeid}: {report.duration:.0f}s"
    return None


def _reason(report: pytest.TestReport) -> str:
    crash = getattr(report.longrepr, "reprcrash", None)
    text = crash.message if crash is not None else str(report.longrepr or "").strip()
    return " ".join(text.split())[:400]


def scale_timeouts(items: list[pytest.Item], default_seconds: float) -> None:
    """Give each test pytest-timeout's limit (its own mark's, else ``default_seconds``) times :func:`slowness`."""
    factor = slowness()
    if factor <= 1.0:
        return
    for item in items:
        mark = item.get_closest_marker("timeout")
        seconds = (mark.args[0] if mark.args else mark.kwargs.get("timeout", default_seconds)) if mark else default_seconds
        item.add_marker(pytest.mark.timeout(float(seconds) * factor), append=False)
