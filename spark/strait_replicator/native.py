"""The native copy loop (``strait_replicator._copyloop``, C on librdkafka), loaded beside confluent-kafka.

The extension calls the librdkafka that confluent-kafka itself loaded (one library and one version
for the Python clients and the copy): that library is made global before the extension is imported,
so the extension's librdkafka symbols resolve to it.
"""

from __future__ import annotations

import ctypes
import functools
import logging
import time
from typing import Any

from strait.errors import StraitError

log = logging.getLogger(__name__)


class NativeLoopError(StraitError):
    """The native copy loop is not built or cannot be loaded."""


def _loaded_librdkafka() -> str:
    """The file of the librdkafka this process loaded for confluent-kafka."""
    import confluent_kafka  # noqa: F401 - loads its librdkafka

    with open("/proc/self/maps", encoding="utf-8") as maps:
        for line in maps:
            path = line.split(maxsplit=5)[-1].strip()
            if "/librdkafka" in path and ".so" in path:
                return path
    raise NativeLoopError("confluent-kafka's librdkafka is not among this process's libraries: "
                          "strait's copy loop needs a confluent-kafka linked to a shared librdkafka")


@functools.cache
def native_copy_class() -> Any:
    """The ``NativeCopy`` type (its methods: ``strait_replicator/_copyloop.c``)."""
    ctypes.CDLL(_loaded_librdkafka(), mode=ctypes.RTLD_GLOBAL)
    try:
        from strait_replicator import _copyloop
    except ImportError as exc:
        raise NativeLoopError(
            f"strait's copy loop (strait_replicator._copyloop) is not built or does not load ({exc}): install "
            "a C compiler and librdkafka's headers (Debian: gcc librdkafka-dev), then install strait again "
            "(`make deps` in a checkout)") from exc
    return _copyloop.NativeCopy


# A trim slower than this is logged: it holds each arena's lock while it walks it.
SLOW_TRIM_SECONDS = 0.05


@functools.cache
def _malloc_trim() -> Any:
    """glibc's ``malloc_trim``, or None where the C library has none (musl)."""
    trim = getattr(ctypes.CDLL(None), "malloc_trim", None)
    if trim is not None:
        trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return trim


def return_freed_memory() -> bool:
    """Hand the pages a finished copy freed back to the system; False where that cannot be done.

    glibc keeps freed memory in its arenas for reuse, so the pages of a copy's librdkafka queues (a
    prefetch and a producer queue of records, up to hundreds of MB during a bulk copy) stayed resident
    for the rest of the process's life: the driver kept about 550 MB after its head start ended, 220 MB
    trimmed (2026-11-30, full-size bench). Never raises: the memory is only kept, as before.
    """
    try:
        trim = _malloc_trim()
        if trim is None:
            return False
        began = time.monotonic()
        trim(0)
    except Exception as exc:  # noqa: BLE001 - a C library that is not glibc's after all
        log.warning("freed memory not returned to the system (%s: %s)", type(exc).__name__, exc)
        return False
    took = time.monotonic() - began
    log.log(logging.INFO if took >= SLOW_TRIM_SECONDS else logging.DEBUG,
            "freed memory returned to the system seconds=%.3f", took)
    return True
