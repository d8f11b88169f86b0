"""Parallel test workers (pytest-xdist) share the machine; a test whose verdict rests on timing runs alone.

Every test holds a shared lock on the machine from its set-up to its teardown. A test, module or
fixture that measures time (a fault drill's stall, a stop within 10 s, a lease taken over within one
TTL) holds it exclusively through :func:`alone`: the other workers finish the test they are in and
wait. A turnstile lock keeps new shared holders out while an exclusive holder waits, so a drill is
never starved. Without xdist every call is a no-op: a single worker is always alone.

A module whose lab runs between its tests (the compose lab's containers) holds the machine shared
for its whole span through :func:`shared_span`: other workers' tests run beside it, but no exclusive
region starts until the span ends, so no timed drill runs beside the lab's containers.

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


def note_in_timeline(what: str, started: float, ended: float) -> None:
    """One line in ``$STRAIT_TEST_TIMELINE`` (if set): this worker, ``what``, and when (epoch seconds)."""
    path = os.environ.get("STRAIT_TEST_TIMELINE")
    if path:
        line = json.dumps({"worker": os.environ.get("PYTEST_XDIST_WORKER", "main"), "what": what,
                           "start": round(started, 2), "end": round(ended, 2)})
        with open(path, "a", encoding="utf-8") as timeline:
            timeline.write(line + "\n")


class MachineShare:
    """This worker's hold on the machine lock of one test run (lock files in ``folder``)."""

    def __init__(self, folder: Path | None) -> None:
        self._main: int | None = None
        self._turnstile: int | None = None
        if folder is not None:
            folder.mkdir(parents=True, exist_ok=True)
            self._main = os.open(folder / "machine.lock", os.O_RDWR | os.O_CREAT, 0o644)
            self._turnstile = os.open(folder / "turnstile.lock", os.O_RDWR | os.O_CREAT, 0o644)
        self._folder = folder
        self._span: int | None = None  # a second hold on the machine lock, through a span of tests
        self._in_test = False
        self._alone_depth = 0

    def _through_turnstile(self, mode: int, lock: int | None = None) -> None:
        assert self._main is not None and self._turnstile is not None
        fcntl.flock(self._turnstile, fcntl.LOCK_EX)
        try:
            fcntl.flock(self._main if lock is None else lock, mode)
        finally:
            fcntl.flock(self._turnstile, fcntl.LOCK_UN)

    def begin_test(self) -> None:
        """Take the shared hold for one test (kept as is inside an exclusive region)."""
        self._in_test = True
        if self._main is None or self._alone_depth > 0:
            return
        if self._span is not None:
            # Held shared already: an exclusive waiter in the turnstile waits for this span to end,
            # so going through the turnstile would wait for ourselves.
            fcntl.flock(self._main, fcntl.LOCK_SH)
        else:
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
        # Drop our own shared holds first: two workers each waiting to be alone must not wait on each
        # other, and a span's hold would conflict with our own exclusive one.
        fcntl.flock(self._main, fcntl.LOCK_UN)
        if self._span is not None:
            fcntl.flock(self._span, fcntl.LOCK_UN)
        asked = time.time()
        self._through_turnstile(fcntl.LOCK_EX)
        began = time.time()
        note_in_timeline("waiting to be alone", asked, began)
        self._alone_depth = 1
        try:
            yield
        finally:
            self._alone_depth = 0
            fcntl.flock(self._main, fcntl.LOCK_SH if self._in_test or self._span is not None else fcntl.LOCK_UN)
            if self._span is not None:
                fcntl.flock(self._span, fcntl.LOCK_SH)  # our main hold, shared now, keeps exclusive waiters out
                if not self._in_test:
                    fcntl.flock(self._main, fcntl.LOCK_UN)
            note_in_timeline("alone", began, time.time())

    @contextmanager
    def shared_span(self, what: str) -> Iterator[None]:
        """Hold the machine shared from here to the block's end, across tests (see the module's text)."""
        if self._main is None or self._span is not None or self._alone_depth > 0:
            yield
            return
        assert self._folder is not None
        span = os.open(self._folder / "machine.lock", os.O_RDWR)
        began = time.time()
        if self._in_test:  # held shared already (an exclusive waiter in the turnstile waits for us)
            fcntl.flock(span, fcntl.LOCK_SH)
        else:
            self._through_turnstile(fcntl.LOCK_SH, span)
        self._span = span
        try:
            yield
        finally:
            self._span = None
            fcntl.flock(span, fcntl.LOCK_UN)
            os.close(span)
            note_in_timeline(f"shared span: {what}", began, time.time())
