"""The test workers' machine lock (tests/support/machine.py): exclusive regions and shared spans.

Two MachineShare objects in one process stand for two xdist workers: flock locks taken through
different open files conflict as between processes.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

from tests.support.machine import MachineShare

SETTLE = 0.3  # long enough for a thread that could enter to have entered


def _alone_in_thread(share: MachineShare, entered: threading.Event, leave: threading.Event) -> threading.Thread:
    def run() -> None:
        with share.alone():
            entered.set()
            leave.wait(10)
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_no_exclusive_region_starts_inside_another_workers_span_and_its_tests_go_on(tmp_path: Path) -> None:
    lab, drill = MachineShare(tmp_path), MachineShare(tmp_path)
    entered, leave = threading.Event(), threading.Event()
    lab.begin_test()
    with lab.shared_span("lab"):
        lab.end_test()
        waiting = _alone_in_thread(drill, entered, leave)
        time.sleep(SETTLE)
        assert not entered.is_set(), "an exclusive region started inside another worker's span"
        for _ in range(3):  # the span's next tests pass the waiting exclusive region
            lab.begin_test()
            lab.end_test()
        assert not entered.is_set()
    assert entered.wait(5), "the exclusive region did not start when the span ended"
    leave.set()
    waiting.join(5)


def test_an_exclusive_region_inside_a_span_keeps_the_span_afterwards(tmp_path: Path) -> None:
    lab, drill = MachineShare(tmp_path), MachineShare(tmp_path)
    entered, leave = threading.Event(), threading.Event()
    with lab.shared_span("lab"):
        lab.begin_test()
        with lab.alone():
            pass
        lab.end_test()
        waiting = _alone_in_thread(drill, entered, leave)
        time.sleep(SETTLE)
        assert not entered.is_set(), "the span's hold was lost after its own exclusive region"
    assert entered.wait(5)
    leave.set()
    waiting.join(5)


def test_another_workers_test_runs_beside_a_span(tmp_path: Path) -> None:
    lab, other = MachineShare(tmp_path), MachineShare(tmp_path)
    with lab.shared_span("lab"):
        began = threading.Event()
        thread = threading.Thread(target=lambda: (other.begin_test(), began.set(), other.end_test()), daemon=True)
        thread.start()
        assert began.wait(5), "a shared test waited for another worker's span"
        thread.join(5)


def test_the_spans_own_exclusive_region_goes_before_another_workers_waiting_one(tmp_path: Path) -> None:
    lab, drill = MachineShare(tmp_path), MachineShare(tmp_path)
    entered, leave = threading.Event(), threading.Event()
    with lab.shared_span("lab"):
        waiting = _alone_in_thread(drill, entered, leave)
        time.sleep(SETTLE)
        lab.begin_test()
        began = time.monotonic()
        with lab.alone():
            assert time.monotonic() - began < 2, "the span's own exclusive region waited"
            assert not entered.is_set(), "another worker's exclusive region ran inside the span"
        lab.end_test()
        time.sleep(SETTLE)
        assert not entered.is_set()
    assert entered.wait(5)
    leave.set()
    waiting.join(5)


def test_a_span_begun_while_another_worker_waits_to_be_alone_lets_it_go_first(tmp_path: Path) -> None:
    lab, drill = MachineShare(tmp_path), MachineShare(tmp_path)
    entered, leave = threading.Event(), threading.Event()
    lab.begin_test()  # the drill now waits for this test's hold
    waiting = _alone_in_thread(drill, entered, leave)
    time.sleep(SETTLE)
    spanned = threading.Event()

    def span() -> None:
        with lab.shared_span("lab"):
            spanned.set()
    spanning = threading.Thread(target=span, daemon=True)
    spanning.start()
    assert entered.wait(5), "the span and the waiting exclusive region waited on each other"
    assert not spanned.is_set(), "the span began inside another worker's exclusive region"
    leave.set()
    assert spanned.wait(5), "the span did not begin after the exclusive region"
    spanning.join(5)
    waiting.join(5)
    lab.end_test()

