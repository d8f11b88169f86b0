"""The driver side of one flow: plan its topics, run its streaming query, restart it on change.

The plan (which topics, under which names, at which rate, with which cluster settings) is computed
from the configuration and the source's topics; when it changes the query is restarted from its
checkpoint, so nothing is lost or copied twice beyond one batch. A failed query is restarted with
exponential backoff while the flow reports the ``error`` state.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from collections import namedtuple
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from confluent_kafka import TopicPartition
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery

from strait.config.model import FlowConfig, StraitConfig
from strait.kafka.admin import (
    KafkaAdminError, admin_client, create_topics, internal_topic, list_offsets, topic_partitions,
)
from strait.metrics import set_flow_state
from strait.remote_topics import RemoteTopic, reconcile_remote_topics, replicated_topics
from strait_replicator import metrics
from strait_replicator.source import (
    FORMAT, INITIAL_OFFSETS_FILE, PLAN_OPTION, CopySource, SourcePlan, batch_ids, offsets_of_log_file,
)
from strait_replicator.writer import SUMMARY_FIELDS, CopyRange, WriterSettings, copy_ranges

log = logging.getLogger(__name__)

MAX_BACKOFF = 60.0

# A rate limit is records per trigger; with triggers at least this far apart, batches (which take
# a few hundred milliseconds) finish before the next trigger and the limit holds as a rate.
RATE_LIMITED_TRIGGER_SECONDS = 1.0
# Without a rate limit a batch is still capped: after a long outage one huge batch would be what a
# crash replays, so the cap bounds duplicates per crash. Each batch costs Spark's planning and two
# checkpoint writes, so with a backlog a batch should be large enough to make those small.
MAX_RECORDS_PER_BATCH = 500_000
# Interrupting a query inside its foreachBatch callback can wedge py4j's callback channel, so a stop
# first lets the running batch finish (a stopping flag makes the next batch fail before any work).
GRACEFUL_STOP_SECONDS = 120.0


class StopRequested(Exception):
    """Raised by a batch that starts after its query was asked to stop: nothing is written or committed."""
_TASK_ERROR = re.compile(r"(?:ReplicationWriteError|ReplicationReadError|StraitError|KafkaException): (.+)")
_ANY_ERROR = re.compile(r"^\S*(?:Error|Exception): (.+)$", re.MULTILINE)


@dataclass(frozen=True)
class FlowPlan:
    """Everything that, when it changes, needs the flow's query restarted."""

    topics: tuple[RemoteTopic, ...]
    max_offsets_per_trigger: int
    trigger_seconds: float
    source_admin: tuple[tuple[str, str], ...]  # librdkafka settings, to plan batches and check for records lost
    writer: WriterSettings


class FlowRunner:
    """Runs one flow's streaming query.

    Args:
        spark: the session.
        state_dir: folder for this flow's Spark checkpoint.
        trigger_seconds: micro-batch trigger interval.
    """

    def __init__(self, spark: SparkSession, flow_name: str, state_dir: Path, trigger_seconds: float) -> None:
        self.spark = spark
        self.flow_name = flow_name
        self.state_dir = state_dir
        self.trigger_seconds = trigger_seconds
        self.plan: FlowPlan | None = None
        self.query: StreamingQuery | None = None
        self.last_error: str | None = None
        self._failures = 0
        self._retry_at = 0.0
        self._next_refresh = 0.0
        self._logged_batch: int | None = None
        self._stopping = threading.Event()
        set_flow_state(metrics.SERVICE, flow_name, "starting")

    # -- planning --------------------------------------------------------------------------------

    def make_plan(self, config: StraitConfig, flow: FlowConfig) -> FlowPlan:
        """Discover the source's topics, make sure their remote topics and the syncs topic exist."""
        source, target = config.cluster(flow.source), config.cluster(flow.target)
        source_admin, target_admin = admin_client(source.librdkafka_config("admin")), \
            admin_client(target.librdkafka_config("admin"))
        topics = replicated_topics(flow, topic_partitions(source_admin, flow.source))
        reconcile_remote_topics(flow, topics, topic_partitions(target_admin, flow.target), source_admin, target_admin)
        syncs_alias = flow.source if flow.offset_syncs_topic_location == "source" else flow.target
        policy = flow.policy()
        syncs_topic = policy.offset_syncs_topic(flow.target if syncs_alias == flow.source else flow.source)
        syncs_admin = source_admin if syncs_alias == flow.source else target_admin
        create_topics(syncs_admin, syncs_alias, [internal_topic(syncs_topic, flow.replication_factor)])
        rate = flow.rate_limit_records_per_second
        trigger = max(self.trigger_seconds, RATE_LIMITED_TRIGGER_SECONDS) if rate else self.trigger_seconds
        writer = WriterSettings(
            flow=flow.name, source_alias=flow.source, target_alias=flow.target, policy=policy,
            target_producer=target.librdkafka_config("producer"),
            syncs_producer=config.cluster(syncs_alias).librdkafka_config("producer"),
            syncs_topic=syncs_topic, syncs_alias=syncs_alias,
            remote_names={t.source: t.remote for t in topics},
            source_consumer=source.librdkafka_config("consumer"),
        )
        return FlowPlan(
            topics=tuple(topics),
            max_offsets_per_trigger=max(1, int(rate * trigger)) if rate else MAX_RECORDS_PER_BATCH,
            trigger_seconds=trigger,
            source_admin=tuple(sorted(source.librdkafka_config("admin").items())),
            writer=writer,
        )

    # -- lifecycle -------------------------------------------------------------------------------

    def reconcile(self, config: StraitConfig, flow: FlowConfig, force: bool = False) -> None:
        """Re-plan when due (refresh interval) or forced; (re)start the query when the plan changed."""
        now = time.monotonic()
        if not force and now < self._next_refresh and self._query_healthy():
            return
        if self.query is not None and not self.query.isActive:
            self._on_query_ended()
        if now < self._retry_at:
            return
        self._next_refresh = now + flow.refresh_topics.interval_seconds
        try:
            plan = self.make_plan(config, flow)
        except Exception as exc:  # an unreachable cluster must not stop the other flows
            self._fail("discovery", f"{type(exc).__name__}: {exc}")  # some timeouts carry no text
            return
        metrics.TOPICS_REPLICATED.labels(flow=self.flow_name).set(len(plan.topics))
        self._report_vanished(plan)
        if plan != self.plan or self.query is None or not self.query.isActive:
            self._restart(plan)

    def _report_vanished(self, plan: FlowPlan) -> None:
        """A source topic deleted while replicated: its remote copy stays; say so once, count it."""
        if self.plan is None:
            return
        gone = sorted({t.source for t in self.plan.topics} - {t.source for t in plan.topics})
        if gone:
            metrics.ERRORS.labels(service=metrics.SERVICE, flow=self.flow_name, kind="source_topic_deleted").inc(len(gone))
            log.warning("flow=%s topics no longer on %s: %s; their remote topics are kept, records not yet "
                        "copied are lost with the source topic", self.flow_name, plan.writer.source_alias,
                        ", ".join(gone))

    def _query_healthy(self) -> bool:
        return self.query is None or self.query.isActive

    def _restart(self, plan: FlowPlan) -> None:
        self.stop(state=None)
        self.plan = plan
        if not plan.topics:
            log.info("flow=%s has no topics to replicate yet", self.flow_name)
            set_flow_state(metrics.SERVICE, self.flow_name, "running")
            return
        self.query = self._start_query(plan)
        set_flow_state(metrics.SERVICE, self.flow_name, "running")
        log.info("flow=%s query started topics=%d max_records_per_batch=%s", self.flow_name, len(plan.topics),
                 plan.max_offsets_per_trigger)

    def _start_query(self, plan: FlowPlan) -> StreamingQuery:
        checkpoint = self.state_dir / "checkpoint"
        checkpoint.mkdir(parents=True, exist_ok=True)
        source = SourcePlan(
            partitions=tuple((t.source, t.partitions) for t in plan.topics), source_admin=plan.source_admin,
            max_records_per_batch=plan.max_offsets_per_trigger,
            tasks=self.spark.sparkContext.defaultParallelism, checkpoint=str(checkpoint), writer=plan.writer)
        self.spark.dataSource.register(CopySource)
        self._stopping = threading.Event()
        return (self.spark.readStream.format(FORMAT).option(PLAN_OPTION, source.encode()).load().writeStream
                .queryName(f"strait {self.flow_name}")
                .foreachBatch(partial(_write_batch, flow=self.flow_name, writer=plan.writer, stopping=self._stopping,
                                      losses=loss_check(self.flow_name, plan, checkpoint)))
                .option("checkpointLocation", str(checkpoint))
                .trigger(processingTime=f"{int(plan.trigger_seconds * 1000)} milliseconds")
                .start())

    def _on_query_ended(self) -> None:
        error = self.query.exception() if self.query is not None else None
        self.query = None
        if error is not None and not self._stopping.is_set():
            self._fail("query", _first_task_error(str(error)))

    def _fail(self, kind: str, message: str) -> None:
        self._failures += 1
        delay = min(MAX_BACKOFF, 2.0 ** (self._failures - 1))
        self._retry_at = time.monotonic() + delay
        self.last_error = message
        metrics.ERRORS.labels(service=metrics.SERVICE, flow=self.flow_name, kind=kind).inc()
        set_flow_state(metrics.SERVICE, self.flow_name, "error")
        log.error("flow=%s %s error (retry in %.0fs): %s", self.flow_name, kind, delay, message)

    def stop(self, state: str | None = "stopped") -> None:
        """Stop the query (the checkpoint keeps its progress)."""
        if self.query is not None:
            try:
                self._stopping.set()
                self._wait_for_batch_end()
                self.query.stop()
            except Exception as exc:  # e.g. the JVM already went down with the process group
                log.warning("flow=%s stopping its query failed: %s", self.flow_name, str(exc).splitlines()[0])
            finally:
                self.query = None
        self.plan = None if state else self.plan
        if state:
            set_flow_state(metrics.SERVICE, self.flow_name, state)

    def _wait_for_batch_end(self) -> None:
        deadline = time.monotonic() + GRACEFUL_STOP_SECONDS
        while self.query is not None and self.query.isActive and time.monotonic() < deadline:
            if not self.query.status.get("isTriggerActive", False):
                return
            time.sleep(0.1)

    def observe(self) -> None:
        """Export source lag from the last progress; notice a failed query."""
        if self.query is None:
            return
        if not self.query.isActive:
            self._on_query_ended()
            return
        self._failures = 0 if self.query.lastProgress and self._failures else self._failures
        progress = self.query.lastProgress
        if progress and log.isEnabledFor(logging.DEBUG) and progress.get("batchId") != self._logged_batch:
            self._logged_batch = progress.get("batchId")
            log.debug("flow=%s batch=%s rows=%s durations_ms=%s", self.flow_name, progress.get("batchId"),
                      progress.get("numInputRows"), json.dumps(progress.get("durationMs", {}), sort_keys=True))


def _first_task_error(text: str) -> str:
    """The one line that explains a failed query, dug out of Spark's nested stack traces."""
    match = _TASK_ERROR.search(text) or _ANY_ERROR.search(text)
    return match.group(1).strip()[:500] if match else text.strip().splitlines()[0][:500]


@dataclass(frozen=True)
class LossCheck:
    """What a batch needs to notice source records it cannot copy: Spark's offsets log and the source.

    With ``failOnDataLoss=false`` Spark silently moves past records the source deleted before they
    were copied (retention, ``delete_records``) and past the first records of a topic deleted and
    re-created with lower offsets; this turns both into a counted, logged event.
    """

    flow: str
    source_alias: str
    admin: dict[str, str]  # librdkafka admin settings of the source
    checkpoint: Path  # the query's checkpoint: offsets/N holds batch N's end offsets
    replayed_batch: int | None = None  # planned but not committed before the query started: run again


def loss_check(flow: str, plan: FlowPlan, checkpoint: Path) -> LossCheck:
    """The loss check of a query starting from ``checkpoint``."""
    planned = batch_ids(checkpoint / "offsets")
    committed = batch_ids(checkpoint / "commits")
    replayed = max(planned) if planned and max(planned) not in committed else None
    return LossCheck(flow, plan.writer.source_alias, dict(plan.source_admin), checkpoint, replayed)


TopicPartitionKey = tuple[str, int]


def _batch_start_offsets(checkpoint: Path, batch_id: int) -> dict[TopicPartitionKey, int] | None:
    """Where ``batch_id`` starts: the previous batch's end, or the stream's initial offsets for batch 0."""
    if batch_id == 0:
        return offsets_of_log_file(checkpoint / INITIAL_OFFSETS_FILE)
    return offsets_of_log_file(checkpoint / "offsets" / str(batch_id - 1))


def _log_start_offsets(check: LossCheck, partitions: list[TopicPartitionKey]) -> dict[TopicPartitionKey, int]:
    """The source's log start offset of each partition (none when they cannot be listed)."""
    try:
        return list_offsets(admin_client(check.admin), check.source_alias,
                            [TopicPartition(topic, partition) for topic, partition in partitions], "earliest",
                            skip_unknown=True)
    except KafkaAdminError as exc:
        log.warning("flow=%s log start offsets unknown on %s: %s", check.flow, check.source_alias, exc)
        return {}


def _first_offsets(rows: list[Any]) -> dict[TopicPartitionKey, int]:
    first: dict[TopicPartitionKey, int] = {}
    for row in rows:
        if row.records:
            key = (row.topic, row.partition)
            first[key] = min(first.get(key, row.first_offset), row.first_offset)
    return first


def _account_rows(flow: str, rows: list[Any]) -> None:
    for row in rows:
        metrics.RECORDS.labels(flow=flow, topic=row.topic).inc(row.records)
        metrics.BYTES.labels(flow=flow, topic=row.topic).inc(row.bytes)
        metrics.OFFSET_SYNCS.labels(flow=flow).inc(row.syncs)
        metrics.LATENCY.add((flow, row.topic), row.latency_counts, row.latency_sum)
        if row.lag >= 0:
            metrics.SOURCE_LAG.labels(flow=flow, topic=row.topic, partition=row.partition).set(row.lag)


def _report_lost(check: LossCheck, batch_id: int, key: TopicPartitionKey, start: int, end: int, why: str) -> None:
    topic, partition = key
    metrics.DATA_LOSS.labels(flow=check.flow, topic=topic, partition=str(partition)).inc(end - start)
    log.warning("flow=%s DATA LOSS topic=%s partition=%d offsets=[%d, %d) records=%d batch=%d: %s", check.flow,
                topic, partition, start, end, end - start, batch_id, why)


def _check_losses(check: LossCheck, batch_id: int, rows: list[Any]) -> list[tuple[TopicPartitionKey, int, int]]:
    """Count and log what this batch skipped; return the ranges of re-created topics to copy now.

    A partition whose first copied offset lies past the batch's planned start lost the records
    below the source's log start offset (gaps above it are compaction or transaction markers).
    A partition whose planned end lies before its start was deleted and re-created: Spark skips
    the new records below the end, so they are returned to be copied by the batch itself.
    """
    starts = _batch_start_offsets(check.checkpoint, batch_id)
    ends = offsets_of_log_file(check.checkpoint / "offsets" / str(batch_id))
    if not starts or not ends:
        return []
    first = _first_offsets(rows)
    gaps: dict[TopicPartitionKey, tuple[int, int]] = {}
    reset: list[TopicPartitionKey] = []
    for key, end in ends.items():
        start = starts.get(key)
        if start is None:  # a partition new to the query: read from its beginning
            continue
        if end < start:
            reset.append(key)
        elif first.get(key, end) > start:
            gaps[key] = (start, min(first.get(key, end), end))
    if not gaps and not reset:
        return []
    lows = _log_start_offsets(check, [*gaps, *reset])
    why = "the source deleted these records (retention or delete-records) before they were copied"
    if batch_id == check.replayed_batch:
        why += "; this batch runs again after a restart, so some may have been copied before it"
    for key, (start, seen) in gaps.items():
        lost_to = min(seen, lows.get(key, start))
        if lost_to > start:
            _report_lost(check, batch_id, key, start, lost_to, why)
    copies = []
    for key in reset:
        low = lows.get(key, 0)
        metrics.ERRORS.labels(service=metrics.SERVICE, flow=check.flow, kind="source_offsets_reset").inc()
        log.warning("flow=%s topic=%s partition=%d offsets went back from %d to %d (topic deleted and re-created); "
                    "records not copied from the old topic are lost, the new topic is copied from offset %d",
                    check.flow, key[0], key[1], starts[key], ends[key], low)
        if ends[key] > low:
            copies.append((key, low, ends[key]))
    return copies


Summary = namedtuple("Summary", SUMMARY_FIELDS)  # type: ignore[misc]


def _copy_ranges(writer: WriterSettings, ranges: list[tuple[TopicPartitionKey, int, int]]) -> list[Any]:
    """Copy, from the driver, source offset ranges the stream's plan went past (a re-created topic)."""
    copies = [CopyRange(topic, partition, start, end) for (topic, partition), start, end in ranges]
    return [Summary(*row) for row in copy_ranges(copies, writer)]


def _write_batch(batch: DataFrame, batch_id: int, flow: str, writer: WriterSettings,
                 stopping: threading.Event, losses: LossCheck | None = None) -> None:
    """foreachBatch: copy the batch through the executors, then account for it on the driver."""
    if stopping.is_set():
        raise StopRequested(f"flow {flow}: batch {batch_id} not started, the query is stopping")
    started = time.monotonic()
    rows = batch.collect()  # the source's tasks copy their ranges; each row sums one range up
    copied = time.monotonic()
    _account_rows(flow, rows)
    if losses is not None:
        skipped = _check_losses(losses, batch_id, rows)
        if skipped:
            _account_rows(flow, _copy_ranges(writer, skipped))
    ended = time.monotonic()
    metrics.BATCH_DURATION.labels(flow=flow).observe(ended - started)
    log.debug("flow=%s batch=%d partitions=%d records=%d copy_s=%.3f after_copy_s=%.3f", flow, batch_id, len(rows),
              sum(r.records for r in rows), copied - started, ended - copied)
