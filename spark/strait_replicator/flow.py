"""The driver side of one flow: plan its topics, run its streaming query, restart it on change.

The plan (which topics, under which names, at which rate, with which cluster settings) is computed
from the configuration and the source's topics; when it changes the query is stopped at the end of
its running epoch and restarted from its checkpoint, so nothing is lost or copied twice. A failed
query is restarted with exponential backoff while the flow reports the ``error`` state; a failed
epoch is copied again from its start (at-least-once).
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from types import SimpleNamespace
from typing import Any

from confluent_kafka import TopicPartition
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery

from strait.config.model import FlowConfig, StraitConfig
from strait.kafka.admin import (
    KafkaAdminError, admin_client, check_distinct_clusters, cluster_topics, create_topics, internal_topic,
    list_offsets,
)
from strait.flow_spec import FlowSpec, flow_spec
from strait.logs import log_first
from strait.metrics import set_flow_state
from strait.progress import (
    COPY_EVIDENCE, OffsetsTopic, Progress, Resume, ResumeError, decide_starts, gather_evidence, keys_of,
    mm2_group, mm2_task_transactional_ids, mm2_workers_gone, progress_topic_spec, resume_report, summarize,
)
from strait.retry import FlowTrouble, retry_transient
from strait.remote_topics import RemoteTopic, reconcile_remote_topics, replicated_topics
from strait_replicator import metrics
from strait_replicator.live import PartitionReport, ProgressLog, RunReport, run_report
from strait_replicator.copier import fence_mm2_tasks
from strait_replicator.headstart import END_SECONDS, HeadStart
from strait_replicator.session import SparkStartError
from strait_replicator.planner import SourcePlan
from strait_replicator.source import FORMAT, LIST_TIMEOUT, PLAN_OPTION, CopySource, cached_admin
from strait_replicator.state import CheckpointLog, CheckpointReadError, EpochOffsets, Offsets, TopicPartitionKey
from strait_replicator.writer import SUMMARY_FIELDS, ReplicationReadError

log = logging.getLogger(__name__)

# An epoch also ends after this many records, so a large backlog is balanced over the tasks again
# now and then. Every change of epochs stops the copy for Spark's commit, planning and task launch
# (about half a second), so epochs are long; a crash copies again only what the progress records had
# not yet covered (about a second), not the epoch.
MAX_RECORDS_PER_EPOCH = 20_000_000
# Interrupting a query inside its foreachBatch callback can wedge py4j's callback channel, so a stop
# first ends the running epoch (the stop record) and waits for Spark to commit it.
GRACEFUL_STOP_SECONDS = 120.0
LIVE_READ_SECONDS = 2.0  # the control loop waits at most this long for the live progress (a target down)
PLAN_POLL_SECONDS = 0.1  # how often a control loop waiting for a plan looks at the stop request
STOP_RECORD_SECONDS = 2.0
# The steps of Spark's progress report (durationMs) that plan a micro-batch: the planning metric's sum.
PLANNING_STEPS = ("latestOffset", "getBatch", "queryPlanning")
RESUME_SECONDS = 60.0  # how long passing cluster states may hold up reading where a query starts
# Fencing MirrorMaker 2's tasks on a take-over runs in the control loop: each step (reading its task
# count, fencing one task) gets this long...
MM2_FENCE_SECONDS = 10.0
# ...and a crashed MM2 worker stays a member of its group this long at most (Connect's session timeout
# is 10 s by default) before its tasks may be fenced
MM2_LEAVE_SECONDS = 12.0
_TASK_ERROR = re.compile(r"(?:ReplicationWriteError|ReplicationReadError|StraitError|KafkaException): (.+)")
_ANY_ERROR = re.compile(r"^\S*(?:Error|Exception): (.+)$", re.MULTILINE)


@dataclass(frozen=True)
class FlowPlan:
    """Everything that, when it changes, needs the flow's query restarted."""

    topics: tuple[RemoteTopic, ...]
    records_per_second: float  # 0: no limit
    tasks: int
    spec: FlowSpec

    @property
    def progress(self) -> ProgressLog | None:
        """The flow's progress topic on the target (a planned flow always has one: flow_spec)."""
        return ProgressLog.of(self.spec)


class FlowRunner:
    """Runs one flow's streaming query.

    Args:
        session: gives the session, waiting for it while it starts (the head start copies meanwhile).
        session_ready: whether the session is up (or failed): a query is started only then, so the
            control loop goes on with the other flows while the JVM starts.
        checkpoint: this flow's Spark checkpoint (a folder or a Hadoop-compatible URI: strait_replicator.state).
        trigger_seconds: shortest time between the starts of two epochs.
        epoch_seconds: how long an epoch's tasks copy before Spark commits their progress.
    """

    def __init__(self, session: Callable[[], SparkSession], flow_name: str, checkpoint: str, trigger_seconds: float,
                 epoch_seconds: float, publish: Callable[[str, dict[str, Any]], None] | None = None,
                 start: str | None = None, restart_mark: str = "", head_start: bool = False,
                 session_ready: Callable[[], bool] = lambda: True) -> None:
        self.session = session
        self.session_ready = session_ready
        self.use_head_start = head_start
        self.restart_mark = restart_mark  # the flow's restarted_at this runner started under ("" for none)
        self.publish = publish  # where the resume report goes for `strait status` (Redis), if anywhere
        self.start = start  # the command line's start, over the flow's
        self.flow_name = flow_name
        self.checkpoint = checkpoint
        self.trigger_seconds = trigger_seconds
        self.epoch_seconds = epoch_seconds
        self.tasks = 1  # task slots this flow's epochs may hold (the replicator sets them)
        self.plan: FlowPlan | None = None
        self.query: StreamingQuery | None = None
        self.head_start: HeadStart | None = None
        self._pending: SourcePlan | None = None  # a restart planned, its copy not started (start_copying)
        self._head_start_tried = False
        self._check: EpochCheck | None = None  # the running query's checks after each epoch (and its head start)
        self.last_error: str | None = None
        self._trouble = FlowTrouble(metrics.SERVICE, flow_name, "replication", level=logging.ERROR)
        self._records_at_fail = 0
        self._retry_at = 0.0
        self._next_refresh = 0.0
        self._found_at_start: frozenset[str] | None = None  # without topic refresh: the topics it copies
        self._seen_batch: int | None = None
        self._stopping = threading.Event()
        self._query_id = ""
        self._resume_labels: list[tuple[str, str, str]] = []
        self.live = LiveMetrics(flow_name)
        set_flow_state(metrics.SERVICE, flow_name, "starting")

    # -- planning --------------------------------------------------------------------------------

    def make_plan(self, config: StraitConfig, flow: FlowConfig, kept: frozenset[str] | None = None) -> FlowPlan:
        """Discover the source's topics, make sure their remote topics and the syncs topic exist.

        With ``kept`` (a flow without topic refresh, planned again after its query failed) only those
        source topics are planned: the set found at start stays the set copied.
        """
        source, target = config.cluster(flow.source), config.cluster(flow.target)
        source_admin = admin_client(source.librdkafka_config("admin"))
        target_admin = admin_client(target.librdkafka_config("admin"))
        source_id, source_topics = cluster_topics(source_admin, flow.source)
        target_id, target_topics = cluster_topics(target_admin, flow.target)
        check_distinct_clusters(flow.name, (flow.source, source_id), (flow.target, target_id))
        topics = [t for t in replicated_topics(flow, source_topics) if kept is None or t.source in kept]
        reconcile_remote_topics(flow, topics, target_topics, source_admin, target_admin)
        names = flow.topic_names()
        syncs = names.offset_syncs
        if flow.writes_offset_syncs:
            create_topics(source_admin if syncs.alias == flow.source else target_admin, syncs.alias,
                          [internal_topic(syncs.topic, flow.internal_topic_replication_factor("offset_syncs"))])
        create_topics(target_admin, flow.target, [progress_topic_spec(
            names.progress.topic, flow.internal_topic_replication_factor("offset_syncs"))])
        return FlowPlan(
            topics=tuple(topics),
            records_per_second=float(flow.rate_limit_records_per_second or 0),
            tasks=self.tasks,
            spec=flow_spec(config, flow, ((t.source, t.remote) for t in topics), self.start),
        )

    # -- lifecycle -------------------------------------------------------------------------------

    def reconcile(self, config: StraitConfig, flow: FlowConfig, force: bool = False,
                  stop: Callable[[], bool] | None = None) -> None:
        """Re-plan when due (refresh interval) or forced; (re)start the query when the plan changed.

        With ``stop`` (the process's stop request, or a new configuration), planning is given up as
        soon as it returns True.
        """
        now = time.monotonic()
        if not force and now < self._next_refresh and self._query_healthy():
            return
        if self.query is not None and not self.query.isActive:
            self._on_query_ended()
        if now < self._retry_at:
            return
        # MM2's refresh.topics.enabled=false: the topics found at start (or at a config change) are
        # the ones copied; a failed query is planned again over the same topics.
        self._next_refresh = now + flow.refresh_topics.interval_seconds if flow.refresh_topics.enabled \
            else float("inf")
        if flow.refresh_topics.enabled or force:
            self._found_at_start = None
        try:
            plan = self._plan_unless_stopped(config, flow, stop, self._found_at_start)
        except Exception as exc:  # an unreachable cluster must not stop the other flows
            self._fail("discovery", f"{type(exc).__name__}: {exc}", exc)  # some timeouts carry no text
            return
        if plan is None:
            return
        if not flow.refresh_topics.enabled and self._found_at_start is None:
            self._found_at_start = frozenset(t.source for t in plan.topics)
        if self._trouble.kind == "discovery" and self._query_healthy():  # both clusters answer again
            self._recovered()
        metrics.TOPICS_REPLICATED.labels(flow=self.flow_name).set(len(plan.topics))
        self._report_vanished(plan)
        if plan != self.plan or (self._pending is None and (self.query is None or not self.query.isActive)):
            self._restart(plan)

    def _plan_unless_stopped(self, config: StraitConfig, flow: FlowConfig, stop: Callable[[], bool] | None,
                             kept: frozenset[str] | None = None) -> FlowPlan | None:
        """:meth:`make_plan`, in a thread of its own when ``stop`` is given; None once ``stop()`` is
        true (a stop request, or a new configuration to plan from instead).

        Discovery against a cluster that does not answer waits out admin timeouts of up to 30 s
        each; the control loop must still see a stop request at once. A plan given up on is left to
        end by itself (its requests only create what is missing).
        """
        if stop is None:
            return self.make_plan(config, flow, kept)
        done = threading.Event()
        outcome: list[FlowPlan | BaseException] = []

        def plan() -> None:
            try:
                outcome.append(self.make_plan(config, flow, kept))
            except BaseException as exc:  # noqa: BLE001 - handed to the control loop, which decides
                outcome.append(exc)
            finally:
                done.set()

        threading.Thread(target=plan, name=f"plan-{self.flow_name}", daemon=True).start()
        while not done.wait(PLAN_POLL_SECONDS):
            if stop():
                log.info("flow=%s stop or new configuration while planning: the plan is given up", self.flow_name)
                return None
        if isinstance(outcome[0], BaseException):
            raise outcome[0]
        return outcome[0]

    def _report_vanished(self, plan: FlowPlan) -> None:
        """A source topic deleted while replicated: its remote copy stays; say so once, count it."""
        if self.plan is None:
            return
        gone = sorted({t.source for t in self.plan.topics} - {t.source for t in plan.topics})
        if gone:
            metrics.ERRORS.labels(service=metrics.SERVICE, flow=self.flow_name, kind="source_topic_deleted").inc(len(gone))
            log.warning("flow=%s topics no longer on %s: %s; their remote topics are kept, records not yet "
                        "copied are lost with the source topic", self.flow_name, plan.spec.source_alias,
                        ", ".join(gone))

    @property
    def serving(self) -> bool:
        """Whether the flow's work runs: its query copies, or its plan found no topic to copy yet."""
        if self.query is not None:
            return bool(self.query.isActive)
        return self.plan is not None and not self.plan.topics

    def close(self) -> None:
        """Release what outlives a stop (the live metrics' reader of the progress topic)."""
        self.live.close()

    def _query_healthy(self) -> bool:
        return self.query is None or self.query.isActive

    def _restart(self, plan: FlowPlan) -> None:
        """Stop the running query and decide where the new one starts; :meth:`start_copying` starts it."""
        self.stop(state=None)
        self.plan = plan
        if not plan.topics:
            log.info("flow=%s has no topics to replicate yet", self.flow_name)
            set_flow_state(metrics.SERVICE, self.flow_name, "running")
            return
        try:
            resume = self._resume_points(plan)
        except (ResumeError, KafkaAdminError) as exc:
            self.plan = None  # planned again after the pause, evidence read again
            self._fail("resume", str(exc), exc)
            return
        if self._trouble.kind == "resume":
            self._recovered()
        checkpoint = CheckpointLog(self.checkpoint, self.session)
        if plan.progress is not None:
            self.live.follow(plan.progress)
        try:
            self._check = epoch_check(self.flow_name, plan, checkpoint)
            self._pending = self._source_plan(plan, resume, checkpoint)
        except CheckpointReadError as exc:
            self.plan = None
            self._fail("checkpoint", str(exc), exc)

    @property
    def running_query(self) -> str | None:
        """The id of the query this runner started and runs; "" when it has no topic to copy; None
        while its query is stopped or starting."""
        if self._pending is not None:
            return None
        if self.query is None:
            return "" if self.plan is not None and not self.plan.topics else None
        return self._query_id

    @property
    def shares_remotes(self) -> bool:
        """Whether another flow of the configuration writes into one of this flow's remote topics."""
        return self.plan is not None and bool(self.plan.spec.shared)

    def start_copying(self) -> None:
        """Copy what the last restart planned: its head start at once, its query once Spark's session
        is up (this returns at once while it starts).

        The replicator calls it right after :meth:`reconcile`, but for flows sharing a remote topic
        (:attr:`shares_remotes`) only once every flow of the step read its resume evidence: a flow then
        never meets another's head start copies in that topic before it decided where it resumes.
        """
        if self._pending is None or self._check is None:
            return
        if self.head_start is None and self.use_head_start and not self._head_start_tried:
            self._head_start_tried = True
            self.head_start = self._begin_head_start(self._pending)
            if self.head_start is not None:
                self._copying()
        if not self.session_ready():
            return
        source, self._pending, self._head_start_tried = self._pending, None, False
        try:
            self.query = self._start_query(source, self._check)
        except SparkStartError:
            self._end_head_start()
            raise
        except Exception as exc:  # noqa: BLE001 - the flow fails and is planned again after a pause
            self._end_head_start()
            self.plan = None
            self._fail("query", f"the query did not start: {type(exc).__name__}: {exc}", exc)
            return
        self._copying()
        log.info("flow=%s query started topics=%d epoch_seconds=%s records_per_second=%s", self.flow_name,
                 len(source.partitions), self.epoch_seconds, source.records_per_second or "unlimited")

    def _copying(self) -> None:
        """The flow copies (its head start, or its query): ``running``, unless it recovers from a
        failed query, which it does once the new query's tasks run (:meth:`observe`)."""
        if self._trouble.kind != "query":
            set_flow_state(metrics.SERVICE, self.flow_name, "running")

    def _resume_points(self, plan: FlowPlan) -> dict[TopicPartitionKey, Resume]:
        """Where each partition's copy starts, decided from the evidence in Kafka (:mod:`strait.progress`);
        the evidence and the bound on records copied again are logged and exported per topic."""
        keys = keys_of([(t.source, t.partitions) for t in plan.topics])
        decided = self._decide_starts(plan, keys)
        if any(resume.evidence == "mm2-offsets" for resume in decided.values()) and self._fenced_mm2(plan):
            decided = self._decide_starts(plan, keys)  # what MM2 committed before its fence, nothing after
        self._forget_resume()
        per_topic = summarize(decided)
        for topic, (evidence, duplicates) in per_topic.items():
            self._resume_labels.append((self.flow_name, topic, evidence))
            metrics.RESUMED_FROM.labels(flow=self.flow_name, topic=topic, evidence=evidence).set(1)
            metrics.RESUME_DUPLICATES.labels(flow=self.flow_name, topic=topic).set(duplicates)
        log_first(log, [(self.flow_name, topic, evidence, duplicates if duplicates >= 0 else "unknown")
                        for topic, (evidence, duplicates) in per_topic.items()],
                  "flow=%s topic=%s resumes evidence=%s duplicates_at_most=%s",
                  "flow=%s %d more topics resume (their evidence: metric strait_replicator_resume_evidence)",
                  self.flow_name)
        if self.publish is not None:
            self.publish(self.flow_name, resume_report(decided))
        return decided

    def _decide_starts(self, plan: FlowPlan, keys: list[TopicPartitionKey]) -> dict[TopicPartitionKey, Resume]:
        # A remote topic just created may not have its leaders yet: such passing states are retried
        deadline = time.monotonic() + RESUME_SECONDS
        evidence = retry_transient(lambda: gather_evidence(plan.spec, keys), f"flow={self.flow_name} reading "
                                   f"resume evidence", lambda: time.monotonic() > deadline)
        if evidence is None:
            raise ResumeError(f"flow {self.flow_name}: the resume evidence could not be read in {RESUME_SECONDS:.0f}s")
        return decide_starts(self.flow_name, evidence, plan.spec.start, dict(plan.spec.remote_names),
                             plan.spec.exactly_once)

    def _fenced_mm2(self, plan: FlowPlan) -> bool:
        """Taking over from MirrorMaker 2's exactly-once mode: its tasks' open transactions aborted and
        fenced (see :func:`fence_mm2_tasks`); whether any was. Never fails the take-over: without a
        fence an open transaction of MM2's only ends at its timeout."""
        try:
            transactional_ids = mm2_task_transactional_ids(plan.spec, MM2_FENCE_SECONDS)
            if not transactional_ids:
                return False
            if not mm2_workers_gone(plan.spec, MM2_LEAVE_SECONDS):  # still copying other topics, maybe
                log.warning("flow=%s MirrorMaker 2's workers (group %s on %s) may still be running: its "
                            "exactly-once tasks are not fenced, and an open transaction of theirs hides later "
                            "records from read_committed readers until it ends; stop MirrorMaker 2 for these "
                            "topics before strait takes them over", self.flow_name, mm2_group(plan.spec),
                            plan.spec.target_alias)
                return False
            fenced = fence_mm2_tasks(plan.spec, transactional_ids, MM2_FENCE_SECONDS)
        except Exception as exc:  # noqa: BLE001 - see the docstring
            log.warning("flow=%s MirrorMaker 2's exactly-once tasks not fenced: %s: %s", self.flow_name,
                        type(exc).__name__, exc)
            return False
        if fenced:
            log.info("flow=%s fenced MirrorMaker 2's exactly-once tasks transactional_ids=%s", self.flow_name,
                     ",".join(fenced))
        return bool(fenced)

    def _forget_resume(self) -> None:
        """Remove this flow's resume evidence series (its previous start only: other flows keep theirs)."""
        for labels in self._resume_labels:
            metrics.RESUMED_FROM.remove(*labels)
            metrics.RESUME_DUPLICATES.remove(*labels[:2])
        self._resume_labels = []

    def _request_stop(self) -> None:
        """Ask the running query's tasks, wherever they run, and its planner to end the epoch and start
        no other: a stop record in the progress topic, which every host reaches."""
        progress = self.plan.progress if self.plan is not None else None
        if progress is None:
            return
        if not progress.write_stop(dict(self.plan.spec.target_producer), self._query_id, STOP_RECORD_SECONDS):
            log.warning("flow=%s stop record not written to %s: tasks on other hosts end their epoch at its deadline",
                        self.flow_name, progress.topic)

    def _source_plan(self, plan: FlowPlan, resume: dict[TopicPartitionKey, Resume],
                     checkpoint: CheckpointLog) -> SourcePlan:
        """What the new query's source (and its head start) copies, under a new query id."""
        self._query_id = uuid.uuid4().hex[:12]
        return SourcePlan(
            partitions=tuple((t.source, t.partitions) for t in plan.topics),
            tasks=plan.tasks, checkpoint=self.checkpoint, spec=plan.spec,
            epoch_seconds=self.epoch_seconds, max_records_per_epoch=MAX_RECORDS_PER_EPOCH,
            records_per_second=plan.records_per_second,
            resume=tuple(sorted((key, at.offset) for key, at in resume.items())),
            on_target=tuple(sorted((key, at.offset) for key, at in resume.items()
                                   if at.evidence in COPY_EVIDENCE)),
            query=self._query_id, last_epoch=checkpoint.newest_epoch(), made_at=time.time())

    def _begin_head_start(self, source: SourcePlan) -> HeadStart | None:
        """Copy from the driver until the query's tasks run (:mod:`strait_replicator.headstart`)."""
        if not self.use_head_start:
            return None
        try:
            head_start = HeadStart.begin(source)
        except Exception as exc:  # noqa: BLE001 - the query's tasks copy all the same
            log.warning("flow=%s no head start, the query's tasks copy from their start: %s: %s", self.flow_name,
                        type(exc).__name__, exc)
            return None
        if head_start is not None:
            for copier in head_start.copiers:
                self.live.not_a_task(copier.id)
        return head_start

    def stop_head_start(self) -> None:
        """Ask the head start's copiers, if any, to stop (returns at once; safe from another thread)."""
        head_start = self.head_start
        if head_start is not None:
            head_start.stop()

    def _end_head_start(self, timeout: float = END_SECONDS) -> None:
        if self.head_start is not None:
            self.head_start.end(timeout)
            self._head_start_ended()

    def _head_start_ended(self) -> bool:
        """Report an ended head start and check its copies (losses on the source, re-created topics);
        True when one of its copiers handed its partitions to the query's tasks (they run)."""
        head, self.head_start = self.head_start, None
        assert head is not None
        starts: Offsets = {}
        rows: list[tuple[Any, ...]] = []
        for copier in head.copiers:
            log.log(logging.WARNING if copier.error or copier.reason == "lapsed" else logging.INFO,
                    "flow=%s head start copier=%s ended reason=%s%s",
                    self.flow_name, copier.id, copier.reason, f": {copier.error}" if copier.error else "")
            if copier.ended.is_set():
                starts.update({(r.topic, r.partition): r.start for r in copier.task.ranges if r.start is not None})
                rows += copier.rows_since({})
        if self._check is not None and starts:
            self._check.after_head_start(starts, rows)
        return any(copier.reason == "yield" for copier in head.copiers)

    def _start_query(self, source: SourcePlan, check: EpochCheck) -> StreamingQuery:
        spark = self.session()
        spark.dataSource.register(CopySource)
        self._stopping = threading.Event()
        return (spark.readStream.format(FORMAT).option(PLAN_OPTION, source.encode()).load().writeStream
                .queryName(f"strait {self.flow_name}")
                .foreachBatch(partial(_write_batch, flow=self.flow_name, check=check))
                .option("checkpointLocation", self.checkpoint)
                .trigger(processingTime=f"{int(self.trigger_seconds * 1000)} milliseconds")
                .start())

    def _on_query_ended(self) -> None:
        error = self.query.exception() if self.query is not None else None
        self.query = None
        self._end_head_start()  # copying goes on under the next query, from its own start
        if error is not None and not self._stopping.is_set():
            self._fail("query", _first_task_error(str(error)), error)

    def _fail(self, kind: str, message: str, error: BaseException) -> None:
        delay = self._trouble.failed(error, kind=kind, message=message)
        self._records_at_fail = self.live.task_records
        # the next try comes after the pause, not after the topic refresh interval
        self._retry_at = self._next_refresh = time.monotonic() + delay
        self.last_error = message

    def _recovered(self) -> None:
        """The cluster answers again (or the query made progress): back to ``running``, pauses reset."""
        self._trouble.succeeded()
        self.last_error = None
        log.info("flow=%s recovered", self.flow_name)

    def stop(self, state: str | None = "stopped", deadline: float | None = None) -> bool:
        """Stop the query at the end of its running epoch, committed (the checkpoint keeps its progress).

        Without ``deadline`` the epoch gets GRACEFUL_STOP_SECONDS to end, then the query is stopped
        anyway. With one (monotonic: the process is about to exit), an epoch still running then (its
        tasks wait on a cluster that does not answer) is left as it is, uncommitted: interrupting
        it could wedge py4j, and a restart copies it again from its progress records. Returns False
        when the epoch was left so, True otherwise.
        """
        ended = True
        if self.query is not None:
            try:
                self._stopping.set()
                self._request_stop()
                started = time.monotonic()
                ended = self._wait_for_batch_end(deadline or started + GRACEFUL_STOP_SECONDS)
                self.live.poll()  # the ended epoch's final reports
                log.info("flow=%s running epoch ended=%s seconds=%.1f", self.flow_name, ended,
                         time.monotonic() - started)
                error = None if self.query.isActive else self.query.exception()
                if error is not None:
                    log.warning("flow=%s query failed while stopping, its running epoch is copied again at the "
                                "next start: %s", self.flow_name, _first_task_error(str(error)))
                if ended or deadline is None:
                    self.query.stop()
                else:
                    log.warning("flow=%s running epoch not ended at the stop deadline: left uncommitted, the "
                                "next start copies it again from its progress records", self.flow_name)
            except Exception as exc:  # e.g. the JVM already went down with the process group
                log.warning("flow=%s stopping its query failed: %s", self.flow_name, str(exc).splitlines()[0])
            finally:
                self.query = None
        left = END_SECONDS if deadline is None else max(0.0, min(END_SECONDS, deadline - time.monotonic()))
        self._end_head_start(left)
        self._pending, self._head_start_tried = None, False  # a planned query not started yet never starts
        self.plan = None if state else self.plan
        self._forget_resume()  # a restarted or replacing runner reports its own start
        if state:
            set_flow_state(metrics.SERVICE, self.flow_name, state)
        return ended

    def _wait_for_batch_end(self, deadline: float) -> bool:
        """Wait until the query runs no epoch; False when one still runs at ``deadline``."""
        while self.query is not None and self.query.isActive:
            if not self.query.status.get("isTriggerActive", False):
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.1)
        return True

    def observe(self) -> None:
        """Export the running epoch's live progress as metrics; notice a failed query and a head
        start handed over."""
        self.live.poll()
        handed_over = self.head_start is not None and not self.head_start.running and self._head_start_ended()
        if self.query is None:
            return
        if not self.query.isActive:
            self._on_query_ended()
            return
        # The tasks' doing, not a head start's: it copies from the driver after every restart, whether
        # the tasks can run or not.
        if self._trouble.kind == "query" and (self.query.lastProgress or handed_over
                                              or self.live.task_records > self._records_at_fail):
            self._recovered()  # the restarted query's tasks run: they took over, copied or committed an epoch
        progress = self.query.lastProgress
        if progress and progress.get("batchId") != self._seen_batch:
            self._seen_batch = progress.get("batchId")
            durations = progress.get("durationMs") or {}
            metrics.PLANNING_DURATION.labels(flow=self.flow_name).observe(
                sum(float(durations.get(step, 0)) for step in PLANNING_STEPS) / 1000.0)
            log.debug("flow=%s batch=%s rows=%s durations_ms=%s", self.flow_name, progress.get("batchId"),
                      progress.get("numInputRows"), json.dumps(progress.get("durationMs", {}), sort_keys=True))


def _first_task_error(text: str) -> str:
    """The one line that explains a failed query, dug out of Spark's nested stack traces."""
    match = _TASK_ERROR.search(text) or _ANY_ERROR.search(text)
    return match.group(1).strip()[:500] if match else text.strip().splitlines()[0][:500]


@dataclass
class EpochCheck:
    """What the driver does after each epoch: account for losses, notice stalls.

    Losses: the source may delete records before they are copied (retention, ``delete_records``)
    and a topic may be deleted and re-created with lower offsets; the consumer then moves to the
    log's start, and this turns both into a counted, logged event. Stalls: a partition that holds
    records past its start but makes no progress for the read timeout fails the query (its flow
    then reports the ``error`` state), as a broker that stays down should.
    """

    flow: str
    source_alias: str
    admin: tuple[tuple[str, str], ...]  # librdkafka admin settings of the source
    checkpoint: CheckpointLog  # the query's checkpoint: its offsets log holds each batch's epoch entry
    read_timeout: float
    replayed_batch: int | None = None  # planned but not committed before the query started: run again
    stalled_since: dict[TopicPartitionKey, float] = field(default_factory=dict)

    def after_epoch(self, batch_id: int, rows: list[Any]) -> int | None:
        """Check the epoch's rows against its plan (records lost on the source, stalls); the epoch."""
        try:
            epoch = self.checkpoint.epoch(batch_id)
        except CheckpointReadError as exc:
            log.warning("flow=%s epoch of batch %d not checked for losses and stalls: %s", self.flow, batch_id, exc)
            return None
        if epoch is None:
            log.warning("flow=%s epoch of batch %d not found in the checkpoint: its progress is not recorded "
                        "(the next epoch copies it again)", self.flow, batch_id)
            return None
        self._check_losses(batch_id, epoch, _begun_offsets(rows, epoch.start), _reached_offsets(rows))
        ends = {(row.topic, row.partition): row.next_offset for row in rows if row.next_offset >= 0}
        self._check_stalls(epoch, ends)
        return epoch.epoch

    def after_head_start(self, start: Offsets, rows: list[tuple[Any, ...]]) -> None:
        """Check what a head start copied (its copier's summary rows, ``writer.SUMMARY_FIELDS``) for
        records lost on the source and re-created topics, as an epoch's rows are: no epoch's rows
        hold those copies."""
        summaries = [SimpleNamespace(**dict(zip(SUMMARY_FIELDS, row))) for row in rows]
        self._check_losses(None, EpochOffsets(-1, start), _begun_offsets(summaries, start), _reached_offsets(summaries))

    def _check_losses(self, batch_id: int | None, epoch: EpochOffsets, begun: Offsets, reached: Offsets) -> None:
        """A partition that went on past where its task began lost the records below the source's
        log start (gaps above it are compaction or transaction markers); one that went back was
        re-created. A task begins at the epoch's start, or past it where an earlier run of the
        epoch had copied (its progress on the target)."""
        gaps: Offsets = {}
        resets: list[TopicPartitionKey] = []
        for key, seen in reached.items():
            start = epoch.start.get(key)
            if start is None:
                continue
            until = epoch.until.get(key, start)
            if seen < start or 0 <= until < start:  # a negative end: no leader answered when it was planned
                resets.append(key)
            elif seen > begun[key]:
                gaps[key] = seen
        lows = self._listed(list(gaps), "earliest") if gaps else {}
        why = "the source deleted these records (retention or delete-records) before they were copied"
        if batch_id is not None and batch_id == self.replayed_batch:
            why += "; this epoch runs again after a restart, so some may have been copied before it"
        for key, seen in gaps.items():
            lost_to = min(seen, lows.get(key, begun[key]))
            if lost_to > begun[key]:
                self._report_lost(batch_id, key, begun[key], lost_to, why)
        ends = self._listed(resets, "latest") if resets else {}
        for key in resets:
            went_to = ends.get(key, reached[key])
            metrics.ERRORS.labels(service=metrics.SERVICE, flow=self.flow, kind="source_offsets_reset").inc()
            log.warning("flow=%s topic=%s partition=%d offsets went back from %d to %d (topic deleted and "
                        "re-created); records not copied from the old topic are lost, the new topic is copied from "
                        "offset %d", self.flow, key[0], key[1], epoch.start[key], went_to, reached[key])

    def _listed(self, partitions: list[TopicPartitionKey], which: str) -> Offsets:
        """The source's earliest (log start) or latest offset of each partition (none when unknown)."""
        admin = cached_admin(self.admin)
        try:
            # a short timeout: the next epoch waits for this check
            return list_offsets(admin.get(), self.source_alias,
                                [TopicPartition(topic, partition) for topic, partition in partitions], which,
                                timeout=LIST_TIMEOUT, skip_unknown=True)
        except KafkaAdminError as exc:
            admin.renew()  # the next call starts from fresh metadata
            log.warning("flow=%s %s offsets unknown on %s: %s", self.flow, which, self.source_alias, exc)
            return {}

    def _report_lost(self, batch_id: int | None, key: TopicPartitionKey, start: int, end: int, why: str) -> None:
        topic, partition = key
        metrics.DATA_LOSS.labels(flow=self.flow, topic=topic, partition=str(partition)).inc(end - start)
        log.warning("flow=%s DATA LOSS topic=%s partition=%d offsets=[%d, %d) records=%d %s: %s", self.flow,
                    topic, partition, start, end, end - start,
                    "head start" if batch_id is None else f"batch={batch_id}", why)

    def _check_stalls(self, epoch: EpochOffsets, ends: Offsets) -> None:
        now = time.monotonic()
        for key, until in epoch.until.items():
            start = epoch.start.get(key)
            if start is None or until <= start or ends.get(key, start) > start:
                self.stalled_since.pop(key, None)
                continue
            since = self.stalled_since.setdefault(key, now)
            if now - since > self.read_timeout:
                raise ReplicationReadError(
                    f"flow {self.flow}: copying topic {key[0]} partition {key[1]} from cluster {self.source_alias} "
                    f"made no progress for {now - since:.0f}s at offset {start} (the source has records up to "
                    f"{until}); check that the source's brokers are up and the partition has a leader, and "
                    f"that the target takes writes to its remote partition")


def epoch_check(flow: str, plan: FlowPlan, checkpoint: CheckpointLog) -> EpochCheck:
    """The check after each epoch of a query starting from ``checkpoint``."""
    return EpochCheck(flow, plan.spec.source_alias, plan.spec.source_admin, checkpoint, plan.spec.read_timeout,
                      checkpoint.uncommitted_batch())


def _reached_offsets(rows: list[Any]) -> Offsets:
    """How far each partition's copy got first: its first record copied, else the end of partition seen."""
    reached: Offsets = {}
    for row in rows:
        seen = row.first_offset if row.records else row.next_offset
        if seen is not None and seen >= 0:
            key = (row.topic, row.partition)
            reached[key] = min(reached.get(key, seen), seen)
    return reached


def _begun_offsets(rows: list[Any], starts: Offsets) -> Offsets:
    """Where each partition's copy began in this run of the epoch: its start, or past it on a resume."""
    begun = dict(starts)
    for row in rows:
        key = (row.topic, row.partition)
        if key in begun and row.start_offset is not None and row.start_offset > begun[key]:
            begun[key] = row.start_offset
    return begun


class LiveMetrics:
    """Turns the running tasks' live progress into the flow's metrics (records, bytes, syncs, latency, lag).

    It tails the flow's progress topic on the target (:mod:`strait_replicator.live`) from where it
    stood when the query started: each record holds running totals of one task run, and what grew
    since the run's last record is counted. What was written before was counted by the process
    before this one.
    """

    def __init__(self, flow: str) -> None:
        self.flow = flow
        self._lock = threading.Lock()
        self._reader: OffsetsTopic | None = None
        self._counted: dict[tuple[str, TopicPartitionKey], RunReport] = {}
        self._epoch = -1  # the newest epoch a run reported
        self._lag_at: dict[TopicPartitionKey, float] = {}
        self.task_records = 0  # records the queries' tasks copied since the process started (not a head start's)
        self._not_tasks: set[str] = set()

    def follow(self, progress: ProgressLog) -> None:
        """Tail this progress topic from now on (a new query; the same topic goes on being read)."""
        with self._lock:
            if self._reader is not None and self._reader.location == progress.location:
                return
            if self._reader is not None:
                self._reader.close()
            self._reader = progress.reader(start_at="end", on_record=self._note)
            self._read()  # where the topic ends now: what the new query's tasks write from here on is counted

    def poll(self) -> None:
        """Count what every task reported since the last poll."""
        with self._lock:
            if self._reader is not None:
                self._read()

    def not_a_task(self, copier: str) -> None:
        """Count this copier's records (a head start's) apart from the tasks' (``task_records``)."""
        with self._lock:
            self._not_tasks.add(copier)

    def close(self) -> None:
        """Close the reader."""
        with self._lock:
            if self._reader is not None:
                self._reader.close()
                self._reader = None

    def _read(self) -> None:
        try:
            self._reader.read(LIVE_READ_SECONDS)  # type: ignore[union-attr]
        except ResumeError as exc:
            log.warning("flow=%s live progress not read (metrics wait): %s", self.flow, exc)

    def _note(self, key: TopicPartitionKey, progress: Progress) -> None:
        run = run_report(key, progress)
        if run is None:
            return
        if run.epoch > self._epoch or run.epoch < self._epoch - 1:  # a newer epoch, or a checkpoint started afresh
            self._forget_all_but(run.epoch)
        before = self._counted.get((run.task, key))
        self._counted[(run.task, key)] = run
        self._count(run.task, run.partition, before.partition if before else None)
        part = run.partition
        if part.lag >= 0 and run.written_at >= self._lag_at.get(key, 0.0):
            self._lag_at[key] = run.written_at
            metrics.SOURCE_LAG.labels(flow=self.flow, topic=part.topic, partition=part.partition).set(part.lag)

    def _forget_all_but(self, epoch: int) -> None:
        """Keep the runs of ``epoch`` and the one before. An epoch is planned once the one before it
        is committed, so the runs of earlier ones report no more."""
        self._epoch = epoch
        self._counted = {key: run for key, run in self._counted.items() if epoch - 1 <= run.epoch <= epoch}

    def _count(self, task: str, part: PartitionReport, before: PartitionReport | None) -> None:
        flow, topic = self.flow, part.topic
        if before == part:
            return
        copied = max(0, part.records - (before.records if before else 0))
        if task not in self._not_tasks:
            self.task_records += copied
        metrics.RECORDS.labels(flow=flow, topic=topic).inc(copied)
        metrics.BYTES.labels(flow=flow, topic=topic).inc(max(0, part.bytes - (before.bytes if before else 0)))
        metrics.OFFSET_SYNCS.labels(flow=flow).inc(max(0, part.syncs - (before.syncs if before else 0)))
        counts = [now - (before.latency_counts[i] if before else 0) for i, now in enumerate(part.latency_counts)]
        metrics.LATENCY.add((flow, topic), counts, part.latency_sum - (before.latency_sum if before else 0.0))


def _write_batch(batch: DataFrame, batch_id: int, flow: str, check: EpochCheck | None = None) -> None:
    """foreachBatch: run the epoch's copy tasks, then account for it on the driver."""
    started = time.monotonic()
    rows = batch.collect()  # the source's tasks copy their partitions; each row sums one partition up
    copied = time.monotonic()
    # The tasks' final live reports are counted by the control loop (LiveMetrics.poll), not here: no
    # record is copied until the next epoch starts.
    if check is not None:
        check.after_epoch(batch_id, rows)
    ended = time.monotonic()
    metrics.BATCH_DURATION.labels(flow=flow).observe(ended - started)
    log.debug("flow=%s batch=%d partitions=%d records=%d copy_s=%.3f after_copy_s=%.3f", flow, batch_id, len(rows),
              sum(r.records for r in rows), copied - started, ended - copied)
