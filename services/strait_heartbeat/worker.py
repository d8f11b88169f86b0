"""One flow's heartbeats: emit into both clusters, watch the replicated copy on the target, map the topology.

Every emit interval a :class:`~strait.records.Heartbeat` (source, target, now) goes to partition 0
of the ``heartbeats`` topic (created, 1 partition compacted, when missing) of the source, whose copy
on the target measures the flow, and of the target, as MirrorMaker 2's heartbeat connector writes
it there: tools watching ``heartbeats`` beside the target, and the next hop of a chain (C gets
``B.heartbeats``), see the flow. Each cluster is written on its own, so a dead source does not stop
the target's heartbeats. The copy the replicator makes (``A.heartbeats`` on the target) is tailed:
the newest heartbeat timestamp gives the flow's heartbeat age, and each copy seen live gives one
end-to-end latency sample. Every topic refresh interval both clusters' heartbeat topic names are
turned into the topology and published.

Beside it, in its own thread, a :class:`~strait.source_watch.SourceWatch` lists the source's end
offsets and follows the offset syncs every second, publishes the flow's source view to Redis (what
an unplanned failover reads when the source is gone) and exports lag in seconds and the RPO.

The heartbeat age counts from the moment this replica took the flow until the first copy arrives,
so a flow whose copies never arrive shows a growing age, never an empty series.
"""

from __future__ import annotations

import logging
import time

import redis
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from strait.config.model import StraitConfig
from strait.coord.leases import LeaseKeeper, LeaseLostError
from strait.kafka.admin import admin_client, create_topics, internal_topic, topic_partitions
from strait.metrics import ERRORS, set_flow_state
from strait.retry import FlowTrouble
from strait.records import Heartbeat, RecordFormatError
from strait.replicas import FlowSupervisor, FlowWorker
from strait.source_watch import SourceView, SourceWatch, SourceWatchThread, read_source_view, source_view_key
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
        self._emitters = [ClusterHeartbeats(flow_name, alias)
                          for alias in (config.flow(flow_name).source, config.flow(flow_name).target)]
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
        watch = SourceWatch(self.config, self.name, last_seen=self._source_last_seen())
        self._source_watch = SourceWatchThread(watch, self._publish_view).start()
        next_emit = next_topology = next_setup = 0.0
        while self.running:
            if self.take_update() is not None:
                self._source_watch.update(self.config)
            flow = self.config.flow(self.name)
            now = time.monotonic()
            try:
                if now >= next_emit:
                    self._emit()
                    next_emit = now + flow.emit_heartbeats.interval_seconds
                if now >= next_setup:
                    self._setup()
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
            self.wake.wait(TICK)
            self.wake.clear()

    def close(self) -> None:
        if self._source_watch is not None:
            self._source_watch.stop(timeout=1.0)
        for emitter in self._emitters:
            emitter.close()
        if self._watcher is not None:
            self._watcher.close()
        metrics.forget(self.name)
        set_flow_state(metrics.SERVICE, self.name, "stopped")

    # -- emitting --------------------------------------------------------------------------------

    def _setup(self) -> None:
        """Create the heartbeats topic and producer on each cluster not set up yet; a cluster that
        fails does not hold up the other (the first failure is raised after both were tried)."""
        pending = [emitter for emitter in self._emitters if not emitter.ready]
        if not pending:
            return
        failure: Exception | None = None
        for emitter in pending:
            try:
                emitter.setup(self.config)
            except Exception as exc:  # noqa: BLE001 - raised below, once the other cluster was tried
                failure = failure or exc
        if failure is not None:
            raise failure
        set_flow_state(metrics.SERVICE, self.name, "running")

    def _emit(self) -> None:
        flow = self.config.flow(self.name)
        ready = [emitter for emitter in self._emitters if emitter.ready]
        if not ready:
            return
        self.keeper.ensure_valid()  # only the lease holder emits
        heartbeat = Heartbeat(flow.source, flow.target, int(time.time() * 1000))
        for emitter in ready:
            emitter.emit(flow.topic_names().heartbeats, heartbeat)

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

    def _source_last_seen(self) -> float | None:
        """When the flow's source last answered, by the view an earlier watch stored (None without one)."""
        try:
            stored = read_source_view(self._supervisor.client, self.name, self._supervisor.options.namespace)
        except redis.RedisError as exc:
            log.warning("flow=%s stored source view not read, the source counts as never seen: %s", self.name, exc)
            return None
        return stored.reachable_at if stored is not None and stored.source == self.config.flow(self.name).source \
            else None

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


class ClusterHeartbeats:
    """A flow's heartbeats written into one cluster's ``heartbeats`` topic (created when missing).

    Delivery is counted in ``strait_heartbeats_emitted_total{flow,cluster}``; a heartbeat the
    cluster does not take counts as a Kafka error and is not retried (a later one replaces it).
    """

    def __init__(self, flow_name: str, alias: str) -> None:
        self.flow_name, self.alias = flow_name, alias
        self._producer: Producer | None = None

    @property
    def ready(self) -> bool:
        """Whether the topic was made sure of and the producer exists."""
        return self._producer is not None

    def setup(self, config: StraitConfig) -> None:
        """Create the topic when missing, then the producer."""
        flow = config.flow(self.flow_name)
        cluster = config.cluster(self.alias)
        create_topics(admin_client(cluster.librdkafka_config("admin")), self.alias,
                      [internal_topic(flow.topic_names().heartbeats,
                                      flow.internal_topic_replication_factor("heartbeats"))])
        self._producer = Producer({**cluster.librdkafka_config("producer"), "linger.ms": "0",
                                   "logger": librdkafka_log})

    def emit(self, topic: str, heartbeat: Heartbeat) -> None:
        """Send one heartbeat to partition 0 of ``topic``, stamped with its own time."""
        assert self._producer is not None
        self._producer.produce(topic, key=heartbeat.key_bytes(), value=heartbeat.value_bytes(), partition=0,
                               timestamp=heartbeat.timestamp_ms, on_delivery=self._delivered)
        self._producer.poll(0)

    def _delivered(self, err: KafkaError | None, _msg: object) -> None:
        if err is None:
            metrics.EMITTED.labels(self.flow_name, self.alias).inc()
        else:
            ERRORS.labels(service=metrics.SERVICE, flow=self.flow_name, kind="kafka").inc()
            log.warning("flow=%s cluster=%s heartbeat not written: %s", self.flow_name, self.alias, err)

    def close(self) -> None:
        """Flush for a second: heartbeats a dead cluster cannot take are worth nothing later."""
        if self._producer is not None:
            self._producer.flush(1)
