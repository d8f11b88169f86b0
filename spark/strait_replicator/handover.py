"""Copying on between epochs: a task's partitions stay with its worker until the next epoch claims them.

Between two epochs Spark commits the one that ended, plans the next and launches its tasks: half a
second or more in which no task runs. So when an epoch task ends at its deadline, its Python worker
goes on copying the same partitions in a background thread (a *carry-over*) as a run of the next
epoch, with progress records of that epoch. The next epoch's task for a partition claims it: it stops
the carry-over (its own worker's directly, another worker's through a ``.want`` file), and resumes
where the carry-over's final progress record says the target holds every record and its syncs.

Two copiers of one partition would break its order on the target, so whoever copies a partition
holds an exclusive ``flock`` on the partition's lock file in the checkpoint's ``strait-locks`` folder. The
kernel drops the lock of a process that dies. ``flock`` is only sound on one machine, so carry-overs
run in Spark's local mode only.
"""

from __future__ import annotations

import fcntl
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from strait.errors import StraitError

log = logging.getLogger(__name__)

LOCKS_DIR = "strait-locks"  # in the checkpoint folder
CLAIM_TIMEOUT_SECONDS = 60.0
CLAIM_POLL_SECONDS = 0.005
# A carry-over the next epoch never claims (the query stopped, the partition moved) ends by itself.
CARRY_OVER_SECONDS = 10.0

Key = tuple[str, int]


class PartitionClaimError(StraitError):
    """A partition's lock stayed held by another copier; the task fails and Spark runs it again."""


class PartitionLocks:
    """The exclusive locks of the partitions one copier holds (released once, by whoever ends last)."""

    def __init__(self, folder: Path, handles: dict[Key, int]) -> None:
        self.folder = folder
        self._handles = handles

    @property
    def keys(self) -> list[Key]:
        """The partitions held."""
        return list(self._handles)

    def wanted(self) -> bool:
        """True once another copier asked for one of these partitions."""
        return any(os.path.exists(_want_path(self.folder, key)) for key in self._handles)

    def release(self) -> None:
        """Unlock every partition."""
        handles, self._handles = self._handles, {}
        for handle in handles.values():
            os.close(handle)  # closing the only descriptor drops its flock


def claim(folder: str | Path, keys: Iterable[Key], timeout: float = CLAIM_TIMEOUT_SECONDS) -> PartitionLocks:
    """Lock ``keys`` for this copier, first stopping this process's carry-over and asking others to stop."""
    stop_carry_over()
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    handles: dict[Key, int] = {}
    try:
        for key in sorted(keys):
            handles[key] = _lock(folder, key, timeout)
    except BaseException:
        PartitionLocks(folder, handles).release()
        raise
    return PartitionLocks(folder, handles)


def _lock(folder: Path, key: Key, timeout: float) -> int:
    handle = os.open(_lock_path(folder, key), os.O_RDWR | os.O_CREAT, 0o644)
    want = _want_path(folder, key)
    deadline = time.monotonic() + timeout
    try:
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return handle
            except BlockingIOError:
                if not want.exists():
                    want.touch()
                if time.monotonic() > deadline:
                    raise PartitionClaimError(
                        f"topic {key[0]} partition {key[1]} is still copied by another worker after "
                        f"{timeout:.0f}s (lock {_lock_path(folder, key)}); the task runs again") from None
                time.sleep(CLAIM_POLL_SECONDS)
    except BaseException:
        os.close(handle)
        raise
    finally:
        want.unlink(missing_ok=True)


def _lock_path(folder: Path, key: Key) -> Path:
    return folder / f"{key[0]}-{key[1]}.lock"


def _want_path(folder: Path, key: Key) -> Path:
    return folder / f"{key[0]}-{key[1]}.want"


class CarryOver:
    """One background copy of a worker's partitions between two epochs."""

    def __init__(self, run: Callable[[Callable[[], bool]], None], locks: PartitionLocks) -> None:
        self.locks = locks
        self._stop = threading.Event()
        self._run = run
        self._thread = threading.Thread(target=self._main, name="strait-carry-over", daemon=True)

    def start(self) -> None:
        """Copy in the background until stopped, claimed, or CARRY_OVER_SECONDS have passed."""
        self._thread.start()

    def stop(self) -> None:
        """End the copy and wait until its records are on the target and its locks released."""
        self._stop.set()
        self._thread.join()

    def _main(self) -> None:
        try:
            self._run(lambda: self._stop.is_set() or self.locks.wanted())
        except Exception as exc:  # noqa: BLE001 - the next epoch copies whatever this did not finish
            log.warning("carry-over of %s ended early: %s", self.locks.keys, exc)
        finally:
            self.locks.release()


_current: list[CarryOver] = []  # at most one per Python worker


def start_carry_over(carry_over: CarryOver) -> None:
    """Run ``carry_over`` as this worker's one carry-over."""
    stop_carry_over()
    _current.append(carry_over)
    carry_over.start()


def stop_carry_over() -> None:
    """Stop this worker's carry-over, if one runs (before its consumer serves another task)."""
    while _current:
        _current.pop().stop()
