"""The replicator process: one streaming query per enabled flow, live-controlled from Redis.

The configuration comes from Redis (the versioned document written by `strait config apply`), and
every new version takes effect without a restart: flows start, stop, re-plan and change their rate
limit. With ``--config FILE`` it runs from a file instead (no live control). If Redis goes away, the
flows keep running on the last configuration.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from strait.config.model import StraitConfig
from strait.coord.redis_client import connect
from strait.coord.restarts import MarkPublisher, replicator_part
from strait.paths import cache_dir
from strait.progress import resume_report_key
from strait.service import ConfigFeed, follow_config, run_service, stop_time_left
from strait.settings import Settings
from strait_replicator import metrics
from strait_replicator.flow import FlowRunner
from strait_replicator.session import SessionStarter, SparkStartError
from strait_replicator.state import flow_checkpoint, is_local, state_location

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ReplicatorOptions:
    """What only the replicator process takes (the rest is the process's :class:`Settings`)."""

    master: str | None = None
    trigger_seconds: float = 0.25
    epoch_seconds: float = 60.0
    start: str | None = None  # overrides every flow's start (strait.progress)
    head_start: bool = True  # copy from the driver while a query starts (strait_replicator.headstart)


class Replicator:
    """Keeps one FlowRunner per enabled flow in step with the current configuration."""

    def __init__(self, settings: Settings, options: ReplicatorOptions) -> None:
        self.settings, self.options = settings, options
        self.state = state_location(settings.state_dir, cache_dir() / "replicator")
        # The flows plan and their head starts copy while the JVM comes up.
        self.session = SessionStarter(options.master, local_checkpoints=is_local(self.state))
        self.runners: dict[str, FlowRunner] = {}
        self.feed = ConfigFeed()
        self.client: Any = None  # the coordination Redis (None: run from a file)
        self._served: StraitConfig | None = None  # the configuration the last step served
        self._marks: MarkPublisher | None = None  # with the coordination Redis
        self._planners_ended_for: frozenset[str | None] = frozenset()  # the queries running when they were ended

    def step(self, stop: threading.Event | None = None) -> None:
        """One control-loop pass: reconcile every flow, export progress; ``stop`` cuts planning short."""
        config = self.feed.current()
        if config is None:
            return
        force = self.feed.changed.is_set()
        self.feed.changed.clear()
        wanted = {f.name: f for f in config.flows
                  if f.enabled and (not self.settings.flows or f.name in self.settings.flows)}
        restarted = config.restarted_flows(self._served)
        self._served = config
        for name in list(self.runners):
            if name not in wanted:
                log.info("flow=%s disabled or removed: stopping its query", name)
                self._end(self.runners.pop(name), state="disabled")
            elif name in restarted:
                # As a disable and enable would: the new runner plans afresh and reads where to resume.
                log.info("flow=%s restart requested: stopping its query, starting it again", name)
                self._end(self.runners.pop(name), state=None)

        def given_up() -> bool:
            return (stop is not None and stop.is_set()) or self.feed.changed.is_set() or self.session.failed()

        for name, flow in wanted.items():
            runner = self.runners.get(name)
            if runner is None:
                runner = self.runners[name] = FlowRunner(self.session.get, name, flow_checkpoint(self.state, name),
                                                         self.options.trigger_seconds, self.options.epoch_seconds,
                                                         publish=self._publish_resume, start=self.options.start,
                                                         restart_mark=flow.restarted_at or "",
                                                         head_start=self.options.head_start,
                                                         session_ready=self.session.ready)
                if self._marks is not None:
                    self._marks.soon()  # say at once which restart it serves, once it runs
            # An epoch's tasks hold their task slots for the whole epoch: flows share the slots. A
            # change (a worker lost or added) changes the plan: the next refresh restarts the query.
            runner.tasks = max(1, self.session.slots() // len(wanted))
            # A new configuration (a flow disabled by a failover, say) is not kept waiting by a
            # discovery that waits on a cluster that does not answer.
            self._control(name, partial(runner.reconcile, config, flow, force=force, stop=given_up))
            if not runner.shares_remotes:
                self._control(name, runner.start_copying)
        # Flows sharing a remote topic copy only once every flow read where it resumes.
        for name in wanted:
            self._control(name, self.runners[name].start_copying)
            self._control(name, self.runners[name].observe)
        self._end_idle_planners()
        if self._marks is not None:
            self._marks.refresh(lambda: {replicator_part(name): runner.restart_mark
                                         for name, runner in self.runners.items() if runner.serving})

    def _end_idle_planners(self) -> None:
        """Once every flow's query runs an epoch (its first one was planned), Spark's Python planner
        daemons sit idle until a query starts again: end them (:meth:`SessionStarter.end_idle_planners`),
        once per set of running queries (again at the next step while one of them is busy)."""
        queries = frozenset(runner.running_query for runner in self.runners.values())
        if not queries or None in queries or queries == self._planners_ended_for:
            return
        if self.session.running_jobs() < len(queries - {""}):  # a query's first epoch is still being planned
            return
        if self.session.end_idle_planners():
            self._planners_ended_for = queries

    @staticmethod
    def _control(name: str, step: Callable[[], Any]) -> None:
        """One control step of one flow: the control loop outlives any one flow's trouble, not Spark's."""
        try:
            step()
        except SparkStartError:
            raise
        except Exception:
            log.exception("flow=%s control step failed", name)
            metrics.ERRORS.labels(service=metrics.SERVICE, flow=name, kind="control").inc()

    @staticmethod
    def _end(runner: FlowRunner, state: str | None) -> None:
        runner.stop(state=state)
        runner.close()

    def run(self, stop: threading.Event) -> None:
        """Run until ``stop`` is set, then stop every query and the session.

        Each query's running epoch is committed when it ends in the time the stop leaves
        (:func:`~strait.service.stop_time_left`); one that does not (a cluster not answering) is
        left uncommitted, and so is the session: the process exits under them.
        """
        client = None
        if self.settings.config_file is None:
            client = self.client = connect(self.settings.coordination_url())
            self._marks = MarkPublisher(client, self.settings.namespace)
        watcher = follow_config(self.feed, self.settings, client, metrics.SERVICE)
        threading.Thread(target=stop_head_starts_when_set, args=(stop, lambda: list(self.runners.values())),
                         name="head-start-stop", daemon=True).start()
        try:
            while not stop.is_set():
                if self.session.failed():
                    self.session.get()  # its error ends the process: nothing copies without Spark
                self.step(stop)
                for _ in range(10):  # a second, or less when a new configuration or the stop comes
                    if self.feed.changed.wait(0.1) or stop.is_set():
                        break
        finally:
            deadline = time.monotonic() + stop_time_left(stop)
            ended = [runner.stop(deadline=deadline) for runner in self.runners.values()]
            for runner in self.runners.values():
                runner.close()
            if watcher is not None:
                watcher.stop()
            if all(ended):
                self.session.stop()
            else:
                log.warning("stopping with an epoch still running: Spark is left to the process exit")


    def _publish_resume(self, flow: str, report: dict[str, Any]) -> None:
        """Store a flow's resume report for `strait status` (Redis gone: only the log and metrics have it)."""
        if self.client is None:
            return
        try:
            self.client.set(resume_report_key(self.settings.namespace, flow), json.dumps(report, separators=(",", ":")))
        except Exception as exc:  # noqa: BLE001 - Redis down must not stop a query from starting
            log.warning("flow=%s resume report not stored in Redis: %s", flow, exc)


def stop_head_starts_when_set(stop: threading.Event, runners: Callable[[], list[FlowRunner]]) -> None:
    """Once ``stop`` is set, ask every head start's copiers to stop at once, whatever the main thread is
    doing: a query's start is one call into Spark that took over 9 s on a loaded host, and a SIGTERM
    in it left the copiers running until the process exited, without their final progress (the next
    start copied 766 records again). Their stop, the final progress included, runs in their threads."""
    stop.wait()
    for runner in runners():
        runner.stop_head_start()


def main(settings: Settings, options: ReplicatorOptions = ReplicatorOptions()) -> int:
    """Run the replicator until SIGINT or SIGTERM."""
    return run_service(metrics.SERVICE, settings, lambda stop, _port: Replicator(settings, options).run(stop))
