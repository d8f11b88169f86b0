"""The memory a finished copy freed goes back to the system instead of staying in glibc's arenas."""

from __future__ import annotations

import os
import threading

import pytest

from strait_replicator.native import return_freed_memory

pytestmark = pytest.mark.unit

MB = 1 << 20


def _resident_bytes() -> int:
    with open("/proc/self/statm", encoding="ascii") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _freed_with_a_few_kept(kept: list[bytearray]) -> None:
    """Allocate about 128 MB in 1 KiB blocks, as a copy's queues do, and free all but one block in 64:
    the survivors pin the arena, so glibc cannot shrink it by itself."""
    blocks = [bytearray(1024) for _ in range(128 * 1024)]
    kept.extend(blocks[::64])
    del blocks


def test_pages_freed_between_live_blocks_are_returned() -> None:
    kept: list[bytearray] = []
    worker = threading.Thread(target=_freed_with_a_few_kept, args=(kept,))  # its own arena, as librdkafka's
    worker.start()
    worker.join()
    before = _resident_bytes()
    if not return_freed_memory():
        pytest.skip("this C library has no malloc_trim (not glibc): memory is kept, as before")
    returned = before - _resident_bytes()
    assert returned > 64 * MB, f"only {returned / MB:.0f} MB of about 126 MB freed went back to the system"
    assert len(kept) == 2048
