"""The head start: a query's partitions copied from the driver while Spark starts the query.

Between a query's start and its first tasks copying lie the JVM's start (at a process's start),
the query's start, the first planning and the task launch: seconds in which nothing would be
copied, at every start of the process and at every restart of a flow's query (a topic added, a
configuration changed). A head start is a few copiers (:class:`~strait_replicator.copier.Copier`)
in the driver's process, as many as the query's first epoch has tasks and at most one per core of
the driver's host, started before the query with its partitions shared among them, each from where
the query's first epoch starts it (:meth:`~strait_replicator.planner.EpochPlanner.head_start`). Their claims are on the target before
the query starts, so the first epoch's copiers claim after them and they hand over their partitions
as any copier does: each stops, writes its final progress and releases, and the tasks go on from
there. No task renews them (they have no door), so the copy moves to the tasks and the driver
copies only until they run.
"""

from __future__ import annotations

import logging
import time

from strait.logs import log_first
from strait_replicator.copier import Copier
from strait_replicator.planner import CopyTask, EpochPlanner, SourcePlan
from strait_replicator.session import available_cores
from strait_replicator.source import ClusterSources

log = logging.getLogger(__name__)

END_SECONDS = 10.0  # how long a stop waits for the head start to write its final progress and release


class HeadStart:
    """A query's head start (see the module's text): started by :meth:`begin`, ended by the query's
    first tasks, a stop record of the query, or :meth:`end`."""

    def __init__(self, copiers: tuple[Copier, ...]) -> None:
        self.copiers = copiers

    @staticmethod
    def begin(plan: SourcePlan, copiers: int | None = None) -> HeadStart | None:
        """Start copying ``plan``'s partitions with as many copiers as its first epoch would have tasks,
        at most ``copiers`` (this host's cores when None); return once their claims are on the target
        (None when every copier failed before it: the query's tasks then copy, as without a head start)."""
        tasks = EpochPlanner(plan, ClusterSources(plan)).head_start(copiers or available_cores())
        made = [Copier(plan, task, door=False) for task in tasks if task.ranges]
        started: list[Copier] = []
        try:
            for copier in made:
                copier.start()
                started.append(copier)
        except BaseException:
            for copier in started:  # no half-started head start is left copying unseen
                copier.stop()
            raise
        for copier in started:
            while not copier.claimed.wait(0.05) and not copier.ended.is_set():
                pass
        claimed = tuple(copier for copier in started if copier.claimed.is_set())
        for copier in started:
            if not copier.claimed.is_set():
                log.warning("flow=%s head start copier=%s not claimed: the query's tasks copy its partitions from "
                            "their start (%s)", plan.spec.flow, copier.id, copier.error or "stopped")
        for copier in claimed:
            log.info("flow=%s head start copier=%s copies partitions=%d until the query's tasks take them",
                     plan.spec.flow, copier.id, len(copier.keys))
            log_first(log, [(plan.spec.flow, copier.id, topic, starts)
                            for topic, starts in sorted(_starts_by_topic(copier.task).items())],
                      "flow=%s head start copier=%s topic=%s from=%s", "flow=%s head start copier=%s: %d more topics",
                      plan.spec.flow, copier.id)
        return HeadStart(claimed) if claimed else None

    @property
    def running(self) -> bool:
        """Whether one of its copiers still copies (or hands over)."""
        return any(not copier.ended.is_set() for copier in self.copiers)

    def stop(self) -> None:
        """Ask each copier to stop (as a stop of its query would): it writes its final progress in its own
        thread. Returns at once; safe from any thread."""
        for copier in self.copiers:
            copier.stop()

    def end(self, timeout: float = END_SECONDS) -> None:
        """Stop it (as a stop of its query would) and wait up to ``timeout`` for its final progress."""
        self.stop()
        deadline = time.monotonic() + timeout
        for copier in self.copiers:
            if not copier.ended.wait(max(0.0, deadline - time.monotonic())):
                log.warning("flow=%s head start copier=%s still running after %.0fs: left to end by itself",
                            copier.settings.flow, copier.id, timeout)


def _starts_by_topic(task: CopyTask) -> dict[str, str]:
    """Where the head start copies each partition from, one ``partition:offset`` list per topic."""
    starts: dict[str, list[str]] = {}
    for copy in sorted(task.ranges, key=lambda r: (r.topic, r.partition)):
        starts.setdefault(copy.topic, []).append(f"{copy.partition}:{'earliest' if copy.start is None else copy.start}")
    return {topic: ",".join(listed) for topic, listed in starts.items()}
