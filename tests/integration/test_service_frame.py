"""The run-until-signal frame of every service process always ends the process.

A thread that never ends (py4j's, when Spark's JVM died under it) must not keep a failed or
stopped service alive: no supervisor would restart a process that printed its traceback and hangs.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

SCRIPT = textwrap.dedent("""
    import sys, threading, time
    from strait.service import run_service
    from strait.settings import Settings

    def body(stop, port):
        if sys.argv[1] not in ("clean", "holding"):
            threading.Thread(target=lambda: time.sleep(3600), name="stuck").start()  # not a daemon
        if sys.argv[1] == "holding":
            # The lock Event.wait() holds for a moment on entry (CPython keeps it in _cond): a stop
            # signal landing then had its handler deadlock on it in the main thread.
            with stop._cond:
                print("ready", flush=True)
                time.sleep(2)
        else:
            print("ready", flush=True)
        if sys.argv[1] == "fail":
            raise RuntimeError("the body failed")
        if sys.argv[1] == "stuck":
            time.sleep(3600)  # ignores the stop event
        stop.wait()

    sys.exit(run_service("frame-test", Settings.read(), body))
""")


def _start(mode: str, grace: str = "2") -> subprocess.Popen[str]:
    env = {**os.environ, "STRAIT_STOP_GRACE_SECONDS": grace}
    process = subprocess.Popen([sys.executable, "-c", SCRIPT, mode], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, env=env)
    assert process.stdout is not None
    for line in process.stdout:
        if line.strip() == "ready":
            return process
    raise AssertionError(f"the frame never ran its body: {process.communicate()[1]}")


def _ended_within(process: subprocess.Popen[str], seconds: float) -> tuple[int, str]:
    try:
        _, err = process.communicate(timeout=seconds)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()
        raise AssertionError(f"the process was still running {seconds}s later") from None
    return process.returncode, err


def test_a_failed_body_ends_the_process_despite_a_thread_that_never_ends() -> None:
    process = _start("fail")
    code, err = _ended_within(process, 30)
    assert code == 1
    assert "RuntimeError: the body failed" in err
    assert "still running 5s after a fatal error: exiting now" in err


def test_sigterm_ends_a_process_whose_body_does_not_stop_within_the_grace() -> None:
    process = _start("stuck", grace="2")
    started = time.monotonic()
    process.send_signal(signal.SIGTERM)
    code, err = _ended_within(process, 30)
    assert code == 0
    assert time.monotonic() - started >= 2
    assert "still running 2s after signal SIGTERM: exiting now" in err


def test_a_body_that_stops_on_sigterm_ends_at_once_with_code_0() -> None:
    process = _start("clean", grace="60")
    started = time.monotonic()
    process.send_signal(signal.SIGTERM)
    code, err = _ended_within(process, 30)
    assert code == 0 and "exiting now" not in err
    assert time.monotonic() - started < 60


def test_a_thread_left_running_after_a_clean_stop_does_not_keep_the_process() -> None:
    process = _start("lingering", grace="60")
    process.send_signal(signal.SIGTERM)
    # 5 s expected; the bound only tells "ends by itself" from "hangs for the hour" on a loaded machine
    code, err = _ended_within(process, 55)
    assert code == 0
    assert "still running 5s after its work ended: exiting now" in err


def test_a_stop_signal_landing_while_the_main_thread_holds_the_stop_events_lock_ends_the_process() -> None:
    process = _start("holding", grace="60")
    process.send_signal(signal.SIGTERM)
    code, err = _ended_within(process, 30)
    assert code == 0
    assert "exiting now" not in err, err
