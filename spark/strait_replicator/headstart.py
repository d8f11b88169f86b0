"""The head start: a query's partitions copied from the driver while Spark starts the query.

Between a query's start and its first tasks copying lie the JVM's start (at a process's start),
the query's start, the first planning and the task launch: seconds in which nothing would be
copied, at every start of the process and at every restart of a flow's query (a topic added, a
configuration changed). A head start is one copier (:class:`~strait_replicator.copier.Copier`) in
the driver's process, started before the query, for every partition of it, from where the query's
first epoch starts them (:meth:`~strait_replicator.planner.EpochPlanner.head_start`). Its claim is
on the target before the query starts, so the first epoch's copiers claim after it and it hands
them their partitions as any copier does: it stops, writes its final progress and releases, and
they go on from there. No task renews it (it has no door), so the copy moves to the tasks and the
driver copies only until they run.
"""

from __future__ import annotations

import logging

from strait_replicator.copier import Copier
from strait_replicator.planner import CopyTask, EpochPlanner, SourcePlan
from strait_replicator.source import ClusterSources

log = logging.getLogger(__name__)

END_SECONDS = 10.0  # how long a stop waits for the head start to write its final progress and release


class HeadStart:
    """A query's head start (see the module's text): started by :meth:`begin`, ended by the query's
    first tasks, a stop record of the query, or :meth:`end`."""

    def __init__(self, copier: Copier) -> None:
        self.copier = copier

    @staticmethod
    def begin(plan: SourcePlan) -> HeadStart | None:
        """Start copying ``plan``'s partitions; return once the claim is on the target (None when the
        copier failed before it: the query's tasks then copy, as without a head start)."""
        task = EpochPlanner(plan, ClusterSources(plan)).head_start()
        if not task.ranges:
            return None
        copier = Copier(plan, task, door=False)
        copier.start()
        while not copier.claimed.wait(0.05):
            if copier.ended.is_set():
                break
        if not copier.claimed.is_set():
            log.warning("flow=%s head start not claimed: the query's tasks copy from their start (%s)",
                        plan.spec.flow, copier.error or "stopped")
            return None
        log.info("flow=%s head start copier=%s copies partitions=%d until the query's tasks take them",
                 plan.spec.flow, copier.id, len(copier.keys))
        for topic, starts in sorted(_starts_by_topic(task).items()):
            log.info("flow=%s head start copier=%s topic=%s from=%s", plan.spec.flow, copier.id, topic, starts)
        return HeadStart(copier)

    @property
    def running(self) -> bool:
        """Whether it still copies (or hands over)."""
        return not self.copier.ended.is_set()

    def end(self, timeout: float = END_SECONDS) -> None:
        """Stop it (as a stop of its query would) and wait up to ``timeout`` for its final progress."""
        self.copier.stop()
        if not self.copier.ended.wait(timeout):
            log.warning("flow=%s head start copier=%s still running after %.0fs: left to end by itself",
                        self.copier.settings.flow, self.copier.id, timeout)


def _starts_by_topic(task: CopyTask) -> dict[str, str]:
    """Where the head start copies each partition from, one ``partition:offset`` list per topic."""
    starts: dict[str, list[str]] = {}
    for copy in sorted(task.ranges, key=lambda r: (r.topic, r.partition)):
        starts.setdefault(copy.topic, []).append(f"{copy.partition}:{'earliest' if copy.start is None else copy.start}")
    return {topic: ",".join(listed) for topic, listed in starts.items()}
