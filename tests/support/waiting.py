"""Waiting in tests: poll a condition until it holds or the time is up."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

from confluent_kafka import KafkaException

T = TypeVar("T")


def wait_for(condition: Callable[[], T | None], timeout: float, what: str, interval: float = 1.0) -> T:
    """Poll until ``condition()`` is truthy, every ``interval`` seconds; its value. Fails naming ``what``
    and the last value at the timeout.

    Transient Kafka errors (a partition's leader moving after growth, say) count as "not yet".
    """
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = condition()
        except KafkaException as exc:
            last = exc
        else:
            if last:
                return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:g}s waiting for {what} (last: {last!r})")
