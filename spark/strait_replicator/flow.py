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
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery

from strait.config.model import FlowConfig, StraitConfig
from strait.kafka.admin import admin_client, create_topics, internal_topic, topic_partitions
from strait.metrics import set_flow_state
from strait.remote_topics import RemoteTopic, reconcile_remote_topics, replicated_topics
from strait_replicator import metrics
from strait_replicator.writer import SUMMARY_SCHEMA, WriterSettings, copy_partition

log = logging.getLogger(__name__)

MAX_BACKOFF = 60.0
# A rate limit is records per trigger; with triggers at least this far apart, batches (which take
# a few hundred milliseconds) finish before the next trigger and the limit holds as a rate.
RATE_LIMITED_TRIGGER_SECONDS = 1.0
# Without a rate limit a batch is still capped: after a long outage one huge batch would be what a
# crash replays, so the cap bounds duplicates per crash without costing throughput.
MAX_RECORDS_PER_BATCH = 100_000
# Interrupting a query inside its foreachBatch callback can wedge py4j's callback channel, so a stop
# first lets the running batch finish (a stopping flag makes the next batch fail before any work).
GRACEFUL_STOP_SECONDS = 120.0


class StopRequested(Exception):
    """Raised by a batch that starts after its query was asked to stop: nothing is written or committed."""
_TASK_ERROR = re.compile(r"(?:ReplicationWriteError|StraitError|KafkaException): (.+)")
_ANY_ERROR = re.compile(r"^\S*(?:Error|Exception): (.+)$", re.MULTILINE)


@dataclass(frozen=True)
class FlowPlan:
    """Everything that, when it changes, needs the flow's query restarted."""

    topics: tuple[RemoteTopic, ...]
    max_offsets_per_trigger: int
    trigger_seconds: float
    source_settings: tuple[tuple[str, str], ...]
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
        )
        return FlowPlan(
            topics=tuple(topics),
            max_offsets_per_trigger=max(1, int(rate * trigger)) if rate else MAX_RECORDS_PER_BATCH,
            trigger_seconds=trigger,
            source_settings=tuple(sorted(_with_read_committed(source.settings("consumer")).items())),
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
            self._fail("discovery", str(exc))
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
        reader = self.spark.readStream.format("kafka")
        for key, value in plan.source_settings:
            reader = reader.option(f"kafka.{key}", value)
        reader = (reader.option("subscribe", ",".join(t.source for t in plan.topics))
                  .option("startingOffsets", "earliest")
                  .option("failOnDataLoss", "false")
                  .option("includeHeaders", "true"))
        reader = reader.option("maxOffsetsPerTrigger", str(plan.max_offsets_per_trigger))
        checkpoint = self.state_dir / "checkpoint"
        checkpoint.mkdir(parents=True, exist_ok=True)
        self._stopping = threading.Event()
        return (reader.load().writeStream
                .queryName(f"strait {self.flow_name}")
                .foreachBatch(partial(_write_batch, flow=self.flow_name, writer=plan.writer, stopping=self._stopping))
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
        if progress:
            for source in progress.get("sources", []):
                _export_lag(self.flow_name, source)


def _with_read_committed(settings: dict[str, str]) -> dict[str, str]:
    """Consumer settings for the source; records of aborted transactions are never copied unless the
    user asks for read_uncommitted explicitly (target consumers would otherwise see them)."""
    return {"isolation.level": "read_committed", **settings}


def _export_lag(flow: str, source: dict[str, Any]) -> None:
    latest, end = _offsets(source.get("latestOffset")), _offsets(source.get("endOffset"))
    for topic, partitions in latest.items():
        for partition, offset in partitions.items():
            copied = end.get(topic, {}).get(partition, 0)
            metrics.SOURCE_LAG.labels(flow=flow, topic=topic, partition=partition).set(max(0, offset - copied))


def _offsets(raw: Any) -> dict[str, dict[str, int]]:
    """Offsets from a progress field: JSON text, a dict, or nothing (e.g. before the first batch)."""
    if isinstance(raw, dict):
        return raw
    try:
        parsed = json.loads(raw) if isinstance(raw, str) and raw.strip() else None
    except ValueError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


def _first_task_error(text: str) -> str:
    """The one line that explains a failed query, dug out of Spark's nested stack traces."""
    match = _TASK_ERROR.search(text) or _ANY_ERROR.search(text)
    return match.group(1).strip()[:500] if match else text.strip().splitlines()[0][:500]


def _write_batch(batch: DataFrame, batch_id: int, flow: str, writer: WriterSettings,
                 stopping: threading.Event) -> None:
    """foreachBatch: copy the batch through the executors, then account for it on the driver."""
    if stopping.is_set():
        raise StopRequested(f"flow {flow}: batch {batch_id} not started, the query is stopping")
    started = time.monotonic()
    rows = batch.mapInArrow(partial(copy_partition, settings=writer), SUMMARY_SCHEMA).collect()
    for row in rows:
        metrics.RECORDS.labels(flow=flow, topic=row.topic).inc(row.records)
        metrics.BYTES.labels(flow=flow, topic=row.topic).inc(row.bytes)
        metrics.OFFSET_SYNCS.labels(flow=flow).inc(row.syncs)
        metrics.LATENCY.add((flow, row.topic), row.latency_counts, row.latency_sum)
    metrics.BATCH_DURATION.labels(flow=flow).observe(time.monotonic() - started)
    log.debug("flow=%s batch=%d partitions=%d records=%d", flow, batch_id, len(rows),
              sum(r.records for r in rows))
