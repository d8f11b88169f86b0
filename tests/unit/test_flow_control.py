"""A flow's control loop: a new configuration or a stop is not kept waiting by planning."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace
from typing import Any

import pytest

from strait.config.model import FlowConfig, StraitConfig
from strait_replicator.app import stop_head_starts_when_set
from strait_replicator.flow import FlowRunner
from strait_replicator.headstart import HeadStart

pytestmark = pytest.mark.unit


def test_a_new_configuration_gives_up_a_plan_waiting_on_a_cluster_that_does_not_answer(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Discovery against a dead source waits out admin timeouts; a failover's new configuration (the
    flow disabled) must reach the control loop at once, not after them."""
    runner = FlowRunner(lambda: None, "A->B", "unused", trigger_seconds=1.0, epoch_seconds=5.0)  # type: ignore[arg-type]
    answered = threading.Event()

    def plan_against_a_dead_cluster(config: StraitConfig, flow: FlowConfig, kept: Any = None) -> Any:
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


def test_without_topic_refresh_a_failed_query_is_planned_again_over_the_topics_found_at_start(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """MM2's refresh.topics.enabled=false: a topic created after the start is not copied when the query
    fails and is planned again (a Python worker slow to connect back on a loaded host), only after a
    new configuration."""
    runner = FlowRunner(lambda: None, "A->B", "unused", trigger_seconds=1.0, epoch_seconds=5.0)  # type: ignore[arg-type]
    on_source = ["orders"]
    asked: list[frozenset[str] | None] = []

    def plan(config: StraitConfig, flow: FlowConfig, kept: frozenset[str] | None = None) -> Any:
        asked.append(kept)
        return SimpleNamespace(topics=tuple(SimpleNamespace(source=t) for t in on_source if kept is None or t in kept))
    monkeypatch.setattr(runner, "make_plan", plan)
    monkeypatch.setattr(runner, "_report_vanished", lambda plan: None)
    restarted: list[tuple[str, ...]] = []
    monkeypatch.setattr(runner, "_restart", lambda plan: restarted.append(tuple(t.source for t in plan.topics)))
    flow = SimpleNamespace(refresh_topics=SimpleNamespace(enabled=False, interval_seconds=30.0))

    runner.reconcile(None, flow, force=True)  # type: ignore[arg-type]
    on_source.append("late")
    runner.query = SimpleNamespace(isActive=False)  # type: ignore[assignment]  # the query failed
    monkeypatch.setattr(runner, "_on_query_ended", lambda: setattr(runner, "query", None))
    runner.reconcile(None, flow)  # type: ignore[arg-type]
    runner.reconcile(None, flow, force=True)  # type: ignore[arg-type]  # a new configuration finds it

    assert asked == [None, frozenset({"orders"}), None]
    assert restarted == [("orders",), ("orders",), ("orders", "late")]


def test_a_stop_reaches_the_head_start_while_the_control_loop_is_inside_a_query_start() -> None:
    """A SIGTERM while the control loop waits in Spark (a query's start took over 9 s on a loaded host):
    the head start's copiers are asked to stop at once, so they write their final progress before the
    process exits, not never."""
    class Copier:
        def __init__(self) -> None:
            self.stopped = threading.Event()

        def stop(self) -> None:
            self.stopped.set()

    copiers = (Copier(), Copier())
    runner = FlowRunner(lambda: None, "A->B", "unused", trigger_seconds=1.0, epoch_seconds=5.0)  # type: ignore[arg-type]
    runner.head_start = HeadStart(copiers)  # type: ignore[arg-type]
    stop = threading.Event()
    watcher = threading.Thread(target=stop_head_starts_when_set, args=(stop, lambda: [runner]), daemon=True)
    watcher.start()
    assert not any(copier.stopped.is_set() for copier in copiers)
    stop.set()
    # no call from the control loop, which is blocked elsewhere: the watcher alone asks them
    assert all(copier.stopped.wait(2.0) for copier in copiers), "the head start was not asked to stop"
    watcher.join(2.0)
    assert not watcher.is_alive()
    runner.head_start = None
    runner.stop_head_start()  # nothing to stop: no error
