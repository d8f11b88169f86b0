"""Parallel test workers (pytest-xdist) share the machine; a test whose verdict rests on timing runs alone.

Every test holds a shared lock on the machine from its set-up to its teardown. A test, module or
fixture that measures time (a fault drill's stall, a stop within 10 s, a lease taken over within one
TTL) holds it exclusively through :func:`alone`: the other workers finish the test they are in and
wait. A turnstile lock keeps new shared holders out while an exclusive holder waits, so a drill is
never starved. Without xdist every call is a no-op: a single worker is always alone.

A module whose lab runs between its tests (the compose lab's containers) keeps other workers'
exclusive regions out for its whole span through :func:`shared_span` (a gate lock every exclusive
region of another worker takes shared before the turnstile): their tests run beside it, no timed
drill does, and the span's own exclusive regions get through at once.

With ``STRAIT_TEST_TIMELINE=<file>`` every test and every exclusive region is written to that file as
JSON lines (worker, what, start, end): where a run's workers waited (``tools/test_timeline.py``).
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def machine_busy_seconds() -> float:
    """CPU seconds the whole machine has been busy since boot (every core, every process), for the
    timeline (0 without one): a test's processes outlive their parents or are reparented, so only the
    machine's count sees them all."""
    if not os.environ.get("STRAIT_TEST_TIMELINE"):
        return 0.0
    try:
        with open("/proc/stat", encoding="ascii") as stat:
            fields = stat.readline().split()[1:]
    except OSError:  # not Linux
        return 0.0
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(f) for f in fields[:8])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def note_in_timeline(what: str, started: float, ended: float, busy: tuple[float, float] | None = None) -> None:
    """One line in ``$STRAIT_TEST_TIMELINE`` (if set): this worker, ``what``, when (epoch seconds) and,
    for a test, the machine's busy seconds at its start and end (:func:`machine_busy_seconds`; the
    timeline tool shares each stretch's CPU among the tests running in it)."""
    path = os.environ.get("STRAIT_TEST_TIMELINE")
    if path:
        row: dict[str, object] = {"worker": os.environ.get("PYTEST_XDIST_WORKER", "main"), "what": what,
                                  "start": round(started, 2), "end": round(ended, 2)}
        if busy is not None:
            row["busy"] = [round(busy[0], 2), round(busy[1], 2)]
        line = json.dumps(row)
        with open(path, "a", encoding="utf-8") as timeline:
            timeline.write(line + "\n")


class MachineShare:
    """This worker's hold on the machine lock of one test run (lock files in ``folder``)."""

    def __init__(self, folder: Path | None) -> None:
        self._main: int | None = None
        self._turnstile: int | None = None
        self._gate: int | None = None  # shared by exclusive regions, exclusive through a span
        if folder is not None:
            folder.mkdir(parents=True, exist_ok=True)
            self._main = os.open(folder / "machine.lock", os.O_RDWR | os.O_CREAT, 0o644)
            self._turnstile = os.open(folder / "turnstile.lock", os.O_RDWR | os.O_CREAT, 0o644)
            self._gate = os.open(folder / "span.lock", os.O_RDWR | os.O_CREAT, 0o644)
        self._in_span = False
        self._in_test = False
        self._alone_depth = 0

    def _through_turnstile(self, mode: int) -> None:
        assert self._main is not None and self._turnstile is not None
        fcntl.flock(self._turnstile, fcntl.LOCK_EX)
        try:
            fcntl.flock(self._main, mode)
        finally:
            fcntl.flock(self._turnstile, fcntl.LOCK_UN)

    def begin_test(self) -> None:
        """Take the shared hold for one test (kept as is inside an exclusive region)."""
        self._in_test = True
        if self._main is not None and self._alone_depth == 0:
            self._through_turnstile(fcntl.LOCK_SH)

    def end_test(self) -> None:
        """Drop the test's shared hold."""
        self._in_test = False
        if self._main is not None and self._alone_depth == 0:
            fcntl.flock(self._main, fcntl.LOCK_UN)

    @contextmanager
    def alone(self) -> Iterator[None]:
        """No other worker runs a test while the block runs (nests; spans tests when a fixture holds it)."""
        if self._main is None or self._alone_depth > 0:
            self._alone_depth += 1
            try:
                yield
            finally:
                self._alone_depth -= 1
            return
        assert self._gate is not None
        # Drop our own shared hold first: two workers each waiting to be alone must not wait on each other.
        fcntl.flock(self._main, fcntl.LOCK_UN)
        asked = time.time()
        if not self._in_span:  # another worker's span keeps us out of the turnstile until it ends
            fcntl.flock(self._gate, fcntl.LOCK_SH)
        self._through_turnstile(fcntl.LOCK_EX)
        began = time.time()
        note_in_timeline("waiting to be alone", asked, began)
        self._alone_depth = 1
        try:
            yield
        finally:
            self._alone_depth = 0
            fcntl.flock(self._main, fcntl.LOCK_SH if self._in_test else fcntl.LOCK_UN)
            if not self._in_span:
                fcntl.flock(self._gate, fcntl.LOCK_UN)
            note_in_timeline("alone", began, time.time())

    @contextmanager
    def shared_span(self, what: str) -> Iterator[None]:
        """Keep other workers' exclusive regions out from here to the block's end, across tests (see
        the module's text); exclusive regions inside it, our own, still run alone."""
        if self._main is None or self._in_span or self._alone_depth > 0:
            yield
            return
        assert self._gate is not None
        began = time.time()
        try:
            fcntl.flock(self._gate, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            # Another worker waits for (or runs) an exclusive region, perhaps for our test's hold:
            # let it have its turn first.
            if self._in_test:
                fcntl.flock(self._main, fcntl.LOCK_UN)
            fcntl.flock(self._gate, fcntl.LOCK_EX)
            if self._in_test:
                self._through_turnstile(fcntl.LOCK_SH)
        self._in_span = True
        try:
            yield
        finally:
            self._in_span = False
            fcntl.flock(self._gate, fcntl.LOCK_UN)
            note_in_timeline(f"shared span: {what}", began, time.time())
