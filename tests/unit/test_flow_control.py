"""A flow's control loop: a new configuration or a stop is not kept waiting by planning."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace
from typing import Any

import pytest

from strait.config.model import FlowConfig, StraitConfig
from strait_replicator.flow import FlowRunner

pytestmark = pytest.mark.unit


def test_a_new_configuration_gives_up_a_plan_waiting_on_a_cluster_that_does_not_answer(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Discovery against a dead source waits out admin timeouts; a failover's new configuration (the
    flow disabled) must reach the control loop at once, not after them."""
    runner = FlowRunner(lambda: None, "A->B", "unused", trigger_seconds=1.0, epoch_seconds=5.0)  # type: ignore[arg-type]
    answered = threading.Event()

    def plan_against_a_dead_cluster(config: StraitConfig, flow: FlowConfig) -> Any:
        answered.wait(30)  # an admin request's timeout
        raise AssertionError("the plan was waited for")
    monkeypatch.setattr(runner, "make_plan", plan_against_a_dead_cluster)
    changed = threading.Event()
    threading.Timer(0.3, changed.set).start()
    flow = SimpleNamespace(refresh_topics=SimpleNamespace(enabled=True, interval_seconds=30.0))
    began = time.monotonic()
    try:
        runner.reconcile(None, flow, force=True, stop=changed.is_set)  # type: ignore[arg-type]
    finally:
        answered.set()
    assert time.monotonic() - began < 2.0, "the control loop waited for the plan after the new configuration"
    assert runner.plan is None and runner.query is None and runner.last_error is None
