"""Running the `strait` command line as its own process, as a user runs it."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Mapping

from tests.support.waiting import slack


def strait(*args: str, env: Mapping[str, str] | None = None, timeout: float = 120.0, check: bool = False,
           show: bool = False) -> subprocess.CompletedProcess[str]:
    """`strait ARGS` in a new interpreter (``python -m strait.cli``), its output captured as text.

    ``env`` is laid over this process's environment; ``timeout`` is a quick machine's (:func:`slack`).
    ``check`` fails unless the command exits 0;
    ``show`` prints its first words, exit code and seconds, then its stdout and the end of its stderr.
    """
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "strait.cli", *args], capture_output=True, text=True,
                          timeout=slack(timeout), env=None if env is None else {**os.environ, **env})
    if show:
        print(f"strait {' '.join(args[:3])}: exit {done.returncode} in {time.monotonic() - started:.1f}s\n"
              f"{done.stdout}{done.stderr[-2000:]}")
    if check and done.returncode != 0:
        raise AssertionError(f"strait {' '.join(args)} exited {done.returncode}:\n{done.stderr}")
    return done
