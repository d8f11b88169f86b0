"""The test run's pace on a slow machine: a slowness factor that scales waits, bounds and time limits,
and a deadline that ends a run too slow for CI while pytest can still print its summary."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

import pytest

from strait_lab.errors import SetupError
from strait_lab.process import SLOWNESS_VARIABLE, slowness
from tests.support.progress import MOST_SLOWNESS, fail_past_deadline, measure_slowness, scale_timeouts
from tests.support.waiting import slack, wait_for


@pytest.mark.parametrize(("text", "factor"), [("1", 1.0), ("1.5", 1.5), ("0.4", 1.0)])
def test_the_factor_is_the_variables_and_never_below_one(monkeypatch: pytest.MonkeyPatch, text: str,
                                                          factor: float) -> None:
    monkeypatch.setenv(SLOWNESS_VARIABLE, text)
    assert slowness() == factor
    assert slack(10) == 10 * factor


def test_a_factor_that_is_no_number_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SLOWNESS_VARIABLE, "fast")
    with pytest.raises(SetupError, match=SLOWNESS_VARIABLE):
        slowness()


def test_the_run_measures_the_factor_unless_the_user_set_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SLOWNESS_VARIABLE, "2.5")
    assert measure_slowness() == 2.5
    monkeypatch.delenv(SLOWNESS_VARIABLE)
    assert 1.0 <= measure_slowness() <= MOST_SLOWNESS
    assert SLOWNESS_VARIABLE in os.environ  # the workers the run starts inherit it


def test_a_wait_on_a_slow_machine_waits_longer(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SLOWNESS_VARIABLE, "3")
    began = time.monotonic()
    with pytest.raises(AssertionError, match=r"timed out after 0\.3s waiting for nothing"):
        wait_for(lambda: None, 0.1, "nothing", interval=0.02)
    assert time.monotonic() - began >= 0.3


@dataclass
class _Item:
    """What scale_timeouts reads and writes of a pytest item: its marks, the closest first."""

    marks: list[pytest.Mark] = field(default_factory=list)

    def get_closest_marker(self, name: str) -> pytest.Mark | None:
        return next((mark for mark in self.marks if mark.name == name), None)

    def add_marker(self, marker: pytest.MarkDecorator, append: bool = True) -> None:
        self.marks.insert(len(self.marks) if append else 0, marker.mark)


def test_time_limits_scale_with_the_factor(monkeypatch: pytest.MonkeyPatch) -> None:
    plain, marked = _Item(), _Item([pytest.mark.timeout(1200).mark])
    monkeypatch.setenv(SLOWNESS_VARIABLE, "1")
    scale_timeouts([plain, marked], 600)  # type: ignore[list-item]
    assert plain.get_closest_marker("timeout") is None
    monkeypatch.setenv(SLOWNESS_VARIABLE, "1.5")
    scale_timeouts([plain, marked], 600)  # type: ignore[list-item]
    assert plain.get_closest_marker("timeout").args == (900.0,)  # type: ignore[union-attr]
    assert marked.get_closest_marker("timeout").args == (1800.0,)  # type: ignore[union-attr]


def test_a_test_past_the_deadline_fails_without_running(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STRAIT_SUITE_DEADLINE_MINUTES", "1")
    fail_past_deadline(time.time() - 30)  # within the deadline: nothing happens
    with pytest.raises(pytest.fail.Exception, match="past its 1-minute deadline"):
        fail_past_deadline(time.time() - 61)
