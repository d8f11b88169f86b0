"""One flow's heartbeats: emit into the source, watch the replicated copy on the target, map the topology.

Every emit interval a :class:`~strait.records.Heartbeat` (source, target, now) goes to partition 0
of the source's ``heartbeats`` topic (created, 1 partition compacted, when missing). The copy the
replicator makes (``A.heartbeats`` on the target) is tailed: the newest heartbeat timestamp gives
the flow's heartbeat age, and each copy seen live gives one end-to-end latency sample. Every topic
refresh interval both clusters' heartbeat topic names are turned into the topology and published.

Beside it, in its own thread, a :class:`~strait.source_watch.SourceWatch` lists the source's end
offsets and follows the offset syncs every second, publishes the flow's source view to Redis (what
an unplanned failover reads when the source is gone) and exports lag in seconds and the RPO.

The heartbeat age counts from the moment this replica took the flow until the first copy arrives,
so a flow whose copies never arrive shows a growing age, never an empty series.
"""

from __future__ import annotations

import logging
import time

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from strait.config.model import StraitConfig
from strait.coord.leases import LeaseKeeper, LeaseLostError
from strait.kafka.admin import admin_client, create_topics, internal_topic, topic_partitions
from strait.metrics import ERRORS, set_flow_state
from strait.retry import FlowTrouble
from strait.records import Heartbeat, RecordFormatError
from strait.replicas import FlowSupervisor, FlowWorker
from strait.source_watch import SourceView, SourceWatch, SourceWatchThread, source_view_key
from strait_heartbeat import metrics
from strait_heartbeat.topology import cluster_topology, topology_key

log = logging.getLogger(__name__)
librdkafka_log = logging.getLogger("strait.librdkafka")

TICK = 0.1


class HeartbeatWorker(FlowWorker):
    """Emits and watches one flow's heartbeats while this replica holds the flow's lease."""

    def __init__(self, supervisor: FlowSupervisor, keeper: LeaseKeeper, config: StraitConfig, flow_name: str) -> None:
        super().__init__(metrics.SERVICE, keeper, config, flow_name)
        self._supervisor = supervisor
        self._producer: Producer | None = None
        self._watcher: Consumer | None = None
        self._watch_from = 0  # copies at or past this target offset are seen live
        self._newest_ms: int | None = None
        self._started_at = time.time()
        self._trouble = FlowTrouble(metrics.SERVICE, flow_name, "heartbeat step")
        self._source_watch: SourceWatchThread | None = None

    # -- loop ------------------------------------------------------------------------------------

    def work(self) -> None:
        self._started_at = time.time()
        metrics.AGE.labels(self.name).set_function(self._age)
        self._source_watch = SourceWatchThread(SourceWatch(self.config, self.name), self._publish_view).start()
        next_emit = next_topology = next_setup = 0.0
        while self.running:
            if self.take_update() is not None:
                self._source_watch.update(self.config)
            flow = self.config.flow(self.name)
            now = time.monotonic()
            try:
                if self._producer is None and now >= next_setup:
                    self._setup()
                if self._producer is not None and now >= next_emit:
                    self._emit()
                    next_emit = now + flow.emit_heartbeats.interval_seconds
                answered = now >= next_topology
                if answered:
                    self._publish_topology()
                    next_topology = now + flow.refresh_topics.interval_seconds
                self._watch()
                self._trouble.succeeded("running" if answered else None)  # both clusters answered again
            except LeaseLostError:
                raise
            except Exception as exc:  # a broken cluster must cost retries, never the worker
                next_setup = next_topology = now + self._trouble.failed(exc)
                next_emit = max(next_emit, next_setup)
            self.wake.wait(TICK)
            self.wake.clear()

    def close(self) -> None:
        if self._source_watch is not None:
            self._source_watch.stop(timeout=1.0)
        if self._producer is not None:
            self._producer.flush(1)  # heartbeats a dead source cannot take are worth nothing later
        if self._watcher is not None:
            self._watcher.close()
        metrics.forget(self.name)
        set_flow_state(metrics.SERVICE, self.name, "stopped")

    # -- emitting --------------------------------------------------------------------------------

    def _setup(self) -> None:
        flow = self.config.flow(self.name)
        source = self.config.cluster(flow.source)
        topic = flow.topic_names().heartbeats
        create_topics(admin_client(source.librdkafka_config("admin")), flow.source,
                      [internal_topic(topic, flow.internal_topic_replication_factor("heartbeats"))])
        self._producer = Producer({**source.librdkafka_config("producer"), "linger.ms": "0",
                                   "logger": librdkafka_log})
        set_flow_state(metrics.SERVICE, self.name, "running")

    def _emit(self) -> None:
        assert self._producer is not None
        flow = self.config.flow(self.name)
        self.keeper.ensure_valid()  # only the lease holder emits
        now_ms = int(time.time() * 1000)
        heartbeat = Heartbeat(flow.source, flow.target, now_ms)
        self._producer.produce(flow.topic_names().heartbeats, key=heartbeat.key_bytes(),
                               value=heartbeat.value_bytes(), partition=0, timestamp=now_ms,
                               on_delivery=self._delivered)
        self._producer.poll(0)

    def _delivered(self, err: KafkaError | None, _msg: object) -> None:
        if err is None:
            metrics.EMITTED.labels(self.name).inc()
        else:
            ERRORS.labels(service=metrics.SERVICE, flow=self.name, kind="kafka").inc()
            log.warning("flow=%s heartbeat not written: %s", self.name, err)

    # -- watching --------------------------------------------------------------------------------

    def _remote_topic(self) -> str:
        return self.config.flow(self.name).topic_names().remote_heartbeats

    def _watch(self) -> None:
        if self._watcher is None:
            return
        for message in self._watcher.consume(num_messages=500, timeout=0):
            if message.error() is not None:
                continue
            try:
                heartbeat = Heartbeat.from_record(message.key(), message.value())
            except RecordFormatError as exc:
                ERRORS.labels(service=metrics.SERVICE, flow=self.name, kind="corrupt_record").inc()
                log.warning("flow=%s corrupt heartbeat skipped offset=%d: %s", self.name, message.offset(), exc)
                continue
            if self._newest_ms is None or heartbeat.timestamp_ms > self._newest_ms:
                self._newest_ms = heartbeat.timestamp_ms
            if message.offset() >= self._watch_from:
                metrics.END_TO_END.labels(self.name).observe(max(0.0, time.time() - heartbeat.timestamp_ms / 1000))

    def _start_watching(self, target_topics: dict[str, int]) -> None:
        """Tail the remote heartbeats topic once it exists, from its last record."""
        topic = self._remote_topic()
        if self._watcher is not None or topic not in target_topics:
            return
        flow = self.config.flow(self.name)
        consumer = Consumer({**self.config.cluster(flow.target).librdkafka_config("consumer"),
                             "group.id": "strait-heartbeat-watch", "enable.auto.commit": False,
                             "logger": librdkafka_log})
        _low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        self._watch_from = high
        consumer.assign([TopicPartition(topic, 0, max(0, high - 1))])
        self._watcher = consumer
        log.info("flow=%s watching topic=%s from offset=%d", self.name, topic, max(0, high - 1))

    def _age(self) -> float:
        newest = self._started_at if self._newest_ms is None else self._newest_ms / 1000
        return max(0.0, time.time() - newest)

    # -- source watch ----------------------------------------------------------------------------

    def _publish_view(self, view: SourceView) -> None:
        """Export the view's lag and RPO, and store it in Redis under the flow's lease."""
        now = time.time()
        for part in view.partitions:
            metrics.LAG_SECONDS.labels(self.name, part.topic, str(part.partition)).set(part.lag_seconds(now))
        metrics.forget_partitions(self.name, {(p.topic, str(p.partition)) for p in view.partitions})
        rpo = view.rpo_records
        if rpo is not None:
            metrics.RPO_RECORDS.labels(self.name).set(rpo)
        if view.reachable_at is not None:
            metrics.SOURCE_LAST_SEEN.labels(self.name).set(view.reachable_at)
        self._supervisor.leases.fenced_set(self.keeper.ensure_valid(),
                                           source_view_key(self._supervisor.options.namespace, self.name),
                                           view.to_json())

    # -- topology --------------------------------------------------------------------------------

    def _publish_topology(self) -> None:
        flow = self.config.flow(self.name)
        policy = flow.policy()
        ttl = max(60.0, 3 * flow.refresh_topics.interval_seconds)
        for alias in (flow.source, flow.target):
            topics = topic_partitions(admin_client(self.config.cluster(alias).librdkafka_config("admin")), alias)
            if alias == flow.target:
                self._start_watching(topics)
            topology = cluster_topology(policy, alias, topics)
            metrics.TOPOLOGY_CLUSTERS.labels(alias).set(len(topology.upstream_clusters))
            self._supervisor.leases.fenced_set(self.keeper.ensure_valid(),
                                               topology_key(self._supervisor.options.namespace, alias),
                                               topology.to_json(), ttl=ttl)
