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
import time
from dataclasses import dataclass

import psutil

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TreeSample:
    """One sample of process trees: CPU seconds so far, summed RSS and PSS, and the RSS of each part."""

    cpu: float
    rss: int
    pss: int
    parts: dict[str, int]  # part_name(process) -> summed RSS bytes


def part_name(cmdline: list[str], parent_cmdline: list[str] | None) -> str:
    """A process's part of a tree, from its command line: ``java``, ``python -m pyspark.daemon`` or a
    script's name; a process forked with its parent's command line is one of its parent's ``forks``."""
    if not cmdline:
        return "?"
    program = cmdline[0].rsplit("/", 1)[-1]
    name = program
    if "-m" in cmdline[1:-1]:
        name = f"{program} -m {cmdline[cmdline.index('-m', 1) + 1]}"
    elif program.startswith("python") and len(cmdline) > 1:
        name = f"{program} {cmdline[1].rsplit('/', 1)[-1]}"
    return f"{name} (forks)" if parent_cmdline == cmdline else name


def tree_usage(*root_pids: int) -> TreeSample:
    """CPU seconds, RSS and PSS summed over processes and all their descendants alive now."""
    processes = []
    for pid in root_pids:
        try:
            root = psutil.Process(pid)
            processes += [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            continue
    cpu, rss, pss = 0.0, 0, 0
    seen: dict[int, tuple[list[str], int, int]] = {}  # pid -> (command line, parent pid, RSS) of each one read
    for process in processes:
        try:
            with process.oneshot():
                times = process.cpu_times()
                cpu += times.user + times.system + times.children_user + times.children_system
                memory = process.memory_full_info()  # reads /proc/PID/smaps_rollup for the PSS
                rss += memory.rss
                pss += memory.pss
                seen[process.pid] = (process.cmdline(), process.ppid(), memory.rss)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    parts: dict[str, int] = {}
    for cmdline, ppid, size in seen.values():
        parent = seen.get(ppid)  # a root's parent is outside the trees: never a fork of them
        name = part_name(cmdline, parent[0] if parent is not None else None)
        parts[name] = parts.get(name, 0) + size
    return TreeSample(cpu, rss, pss, parts)


class TreeMonitor:
    """Samples process trees in a background thread: CPU seconds so far, the peak RSS and the peak PSS,
    and at the peak RSS the RSS of each part of the trees (:func:`part_name`) and the seconds since start.

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
        self.peak_rss_parts: dict[str, int] = {}
        self.peak_rss_at = 0.0
        self._started = time.monotonic()
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
        sample = tree_usage(self.root_pid, *self.more)
        self.cpu_seconds = max(self.cpu_seconds, sample.cpu)
        if sample.rss > self.peak_rss:
            self.peak_rss, self.peak_rss_parts = sample.rss, sample.parts
            self.peak_rss_at = time.monotonic() - self._started
        self.peak_pss = max(self.peak_pss, sample.pss)
        return self.cpu_seconds

    def peak_report(self) -> dict[str, object]:
        """The peaks for a report: MB, and where the peak RSS was (parts in MB, seconds since start)."""
        return {"peak_rss_mb": round(self.peak_rss / 1e6, 1), "peak_pss_mb": round(self.peak_pss / 1e6, 1),
                "peak_rss_at_s": round(self.peak_rss_at, 1),
                "peak_rss_parts_mb": {name: round(size / 1e6, 1) for name, size in
                                      sorted(self.peak_rss_parts.items(), key=lambda item: -item[1])}}

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()
        log.debug("monitor stopped pid=%d cpu_seconds=%.1f peak_rss=%d peak_pss=%d", self.root_pid,
                  self.cpu_seconds, self.peak_rss, self.peak_pss)

