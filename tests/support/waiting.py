"""Waiting in tests: poll a condition until it holds or the time is up."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

from confluent_kafka import KafkaException

from strait_lab.process import slowness

T = TypeVar("T")


def wait_for(condition: Callable[[], T | None], timeout: float, what: str, interval: float = 1.0) -> T:
    """Poll until ``condition()`` is truthy, every ``interval`` seconds; its value. Fails naming ``what``
    and the last value at the timeout (times the machine's :func:`slowness`).

    Transient Kafka errors (a partition's leader moving after growth, say) count as "not yet".
    """
    timeout = slack(timeout)
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


def slack(seconds: float) -> float:
    """``seconds`` on this machine: a bound measured on a quick machine, times its :func:`slowness`
    (the run measures how much slower this machine is at its start; ``STRAIT_TEST_SLOWNESS``)."""
    return seconds * slowness()
