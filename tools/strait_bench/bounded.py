"""A bounded copy of offset ranges in one process, with the replicator's own copy loop (the paths
benchmark and its profile): no copier, no hand-off, no progress topic; it ends at the limits."""

from __future__ import annotations

import logging
from typing import Any

from confluent_kafka import Producer

from strait.flow_spec import FlowSpec
from strait_replicator.writer import (CopyLoop, CopyRange, EpochLimits, ProgressWriter, SourceCopy, SyncWriter,
                                      finish_copy, install_lazy_zip_invalidation, producer_settings,
                                      syncs_producer_settings)

_librdkafka = logging.getLogger("strait.librdkafka")


def copy_ranges(ranges: list[CopyRange], settings: FlowSpec, limits: EpochLimits) -> list[tuple[Any, ...]]:
    """Copy each range to its remote topic with its offset syncs until ``limits`` end the copy; one
    summary row per range (``writer.SUMMARY_FIELDS``)."""
    install_lazy_zip_invalidation()  # in a Spark task: the Python worker's imports stay cheap
    producer = Producer({**producer_settings(settings.target_producer), "logger": _librdkafka})
    syncs = SyncWriter(settings, Producer({**syncs_producer_settings(settings.syncs_producer), "logger": _librdkafka}))
    source = SourceCopy(ranges, settings)
    try:
        source.start()
        CopyLoop(source, producer, syncs, limits).copy()
        finish_copy(source, producer, syncs, ProgressWriter(settings, producer, None), settings.flush_timeout)
    finally:
        source.close(0.0)
    return [part.summary() for part in source.copied.values()]
