"""CPU-seconds, peak RSS and peak PSS of a whole process tree, sampled with psutil.

Children that exit and are reaped show up in their parent's ``children_*`` CPU times, so summing
user + system + children times over the live tree counts every process once. RSS is summed over
the tree (pages shared between forked workers are counted once per process: an upper bound). PSS
(proportional set size) splits each shared page between the processes that map it, so its sum
counts the tree's memory once: fairer for forked trees such as Spark's Python workers, which share
their daemon's pages, against a single JVM.
"""

from __future__ import annotations

import logging
import threading

import psutil

log = logging.getLogger(__name__)


def tree_usage(*root_pids: int) -> tuple[float, int, int]:
    """(CPU seconds, RSS bytes, PSS bytes) summed over processes and all their descendants alive now."""
    processes = []
    for pid in root_pids:
        try:
            root = psutil.Process(pid)
            processes += [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            continue
    cpu, rss, pss = 0.0, 0, 0
    for process in processes:
        try:
            with process.oneshot():
                times = process.cpu_times()
                cpu += times.user + times.system + times.children_user + times.children_system
                memory = process.memory_full_info()  # reads /proc/PID/smaps_rollup for the PSS
                rss += memory.rss
                pss += memory.pss
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return cpu, rss, pss


class TreeMonitor:
    """Samples process trees in a background thread: CPU seconds so far, the peak RSS and the peak PSS.

    Args:
        root_pid: the process whose tree is measured.
        interval: seconds between samples.
        more: further trees measured with it (a Spark cluster's master and workers).
    """

    def __init__(self, root_pid: int, interval: float = 0.25, more: tuple[int, ...] = ()) -> None:
        self.root_pid = root_pid
        self.more = more
        self.interval = interval
        self.cpu_seconds = 0.0
        self.peak_rss = 0
        self.peak_pss = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"monitor-{root_pid}", daemon=True)

    def __enter__(self) -> TreeMonitor:
        self.sample()
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def sample(self) -> float:
        """Take one sample now; return the CPU seconds of the tree so far (never decreasing)."""
        cpu, rss, pss = tree_usage(self.root_pid, *self.more)
        self.cpu_seconds = max(self.cpu_seconds, cpu)
        self.peak_rss = max(self.peak_rss, rss)
        self.peak_pss = max(self.peak_pss, pss)
        return self.cpu_seconds

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()
        log.debug("monitor stopped pid=%d cpu_seconds=%.1f peak_rss=%d peak_pss=%d", self.root_pid,
                  self.cpu_seconds, self.peak_rss, self.peak_pss)

