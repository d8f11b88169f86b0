"""The native copy loop (``strait_replicator._copyloop``, C on librdkafka), loaded beside confluent-kafka.

The extension calls the librdkafka that confluent-kafka itself loaded (one library and one version
for the Python clients and the copy): that library is made global before the extension is imported,
so the extension's librdkafka symbols resolve to it.
"""

from __future__ import annotations

import ctypes
import functools
from typing import Any

from strait.errors import StraitError


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
