"""Per-item log lines of one event are capped: at 2,000 topics a start logged 6,000 INFO lines."""

from __future__ import annotations

import logging

import pytest

from strait.logs import LOGGED_LINES, log_first

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("items", [0, 1, LOGGED_LINES, LOGGED_LINES + 1, 2_000])
def test_the_first_items_get_a_line_each_and_the_rest_one_count(caplog: pytest.LogCaptureFixture, items: int) -> None:
    logger = logging.getLogger("strait.test_logs")
    with caplog.at_level(logging.INFO, logger=logger.name):
        log_first(logger, [(f"t{i}", i) for i in range(items)], "topic=%s partition=%d",
                  "flow=%s %d more partitions", "A->B")
    lines = [record.getMessage() for record in caplog.records]
    shown = min(items, LOGGED_LINES)
    assert lines[:shown] == [f"topic=t{i} partition={i}" for i in range(shown)]
    assert lines[shown:] == ([f"flow=A->B {items - LOGGED_LINES} more partitions"] if items > LOGGED_LINES else [])
