"""The fault-drill harness: a keyed load, the replication rig, recovery timing, verification, the report.

A drill runs a continuous keyed load into a source topic of the rig (3-broker clusters C and D, a
dedicated Redis, the replicator live-configured from Redis), injects a fault, measures the recovery
time, stops the load, waits until the target has caught up and runs `strait verify` (``verify_flow``)
on the drill's topic. Every drill appends one row to the fault report.

Definitions used by every drill:

* **recovery time**: from the moment the fault is injected until the target holds, on every
  partition, a copy of the first record produced after that moment (replication moved past the
  fault point; everything before it is then copied too, as copies are in order). Service drills
  define it as the moment the service's job is done again by a surviving replica (see each drill).
* **lost**: source records without a copy on the target (verify's missing + mismatched + unexpected
  + pending after the final catch-up); must be 0.
* **duplicates**: older copies left by at-least-once replays (verify's duplicates). A replay
  repeats what the epoch in flight copied after its last live report (about a second before the
  fault), and can only hold records produced before recovery; a generous
  :data:`BATCH_LEAD_SECONDS` stands for that second. The bound is the number of records produced
  from that long before each injection until its recovery.
"""

from __future__ import annotations

import bisect
import json
import logging
import os
import re
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import OffsetSpec

from strait.config import load_config
from strait.kafka.admin import KafkaRetriableError
from strait_lab.clients import create_topic
from strait_lab.kafka import KafkaCluster
from strait_lab.redis import RedisServer
from strait_lab.services import StraitProcess
from strait.paths import cache_dir
from strait.progress import ResumeError, ResumeNotAuthorizedError, read_offsets_topic
from strait.verify import FlowParity, verify_flow
from tests.support.cli import strait
from tests.support.config import flow_config, write_config
from tests.support.kafka import last_values
from tests.support.waiting import wait_for

log = logging.getLogger(__name__)

FLOW = "C->D"
PARTITIONS = 3
BATCH_LEAD_SECONDS = 20.0
# Every drill's topic exists before the replicator starts, so no drill waits for a topic refresh.
DRILL_TOPICS = ("warm-up", "replicator-sigkill", "services-sigkill", "redis-sigkill", "source-broker-sigkill",
                "target-broker-sigkill", "broker-sigstop", "config-change", "rolling-restart", "long-outage",
                "epoch-boundaries")
LEASE_TTL = 4.0
REPORT_PATH = cache_dir() / "fault-report.json"
librdkafka_log = logging.getLogger("strait.librdkafka")


@dataclass(frozen=True)
class Mode:
    """How long and how often: short (`make test`) or full (``STRAIT_FAULTS=full``)."""

    name: str
    rate: int  # records per second of the load
    warmup_seconds: float  # load before the first fault
    between_seconds: float  # load between two injections and after the last one
    injections: int  # faults injected per drill
    restart_down_seconds: float = 10.0  # a broker stays down this long in a rolling restart
    restart_gap_seconds: float = 20.0  # from a broker's return to the next broker's stop
    outage_seconds: float = 45.0  # a SIGKILLed broker stays down this long
    long_outage_seconds: float = 240.0  # the long single-broker outage
    # a rolling restart restarts every broker of both clusters, or (short) in each the one leading partition 0
    restart_every_broker: bool = True
    epoch_seconds: float = 10.0  # the replicator's epochs: every drill runs through their boundaries
    boundaries: int = 3  # epoch boundaries the boundaries drill runs through

    @classmethod
    def from_env(cls) -> Mode:
        """The mode named by $STRAIT_FAULTS (``full``), short otherwise."""
        if os.environ.get("STRAIT_FAULTS", "").lower() == "full":
            return cls("full", rate=2000, warmup_seconds=10, between_seconds=15, injections=3)
        return cls("short", rate=500, warmup_seconds=2, between_seconds=2, injections=1, restart_down_seconds=3,
                   restart_gap_seconds=1, outage_seconds=15, long_outage_seconds=30,
                   restart_every_broker=False, epoch_seconds=5.0)


@dataclass(frozen=True)
class DrillResult:
    """One row of the fault report."""

    fault: str
    mode: str
    injections: int
    recovery_s: float  # the slowest recovery of the drill's injections
    produced: int
    lost: int
    duplicates: int
    duplicate_bound: int
    recoveries_s: tuple[float, ...] = ()
    note: str = ""


class KeyedLoad:
    """A thread producing keyed records ``<partition>:<sequence>`` at a steady rate, idempotently.

    The sequence of partition p runs 0, 1, 2, ... and equals the source offset (one idempotent
    producer, no transactions), so the target's last value says how far each partition is copied.
    """

    def __init__(self, cluster: KafkaCluster, topic: str, rate: int) -> None:
        self.topic = topic
        self.rate = rate
        self._producer = Producer({**cluster.client_config(), "linger.ms": 5, "enable.idempotence": True,
                                   "logger": librdkafka_log})
        self._sent_at: list[float] = []  # monotonic time of each produce call, in order
        self._acked = [-1] * PARTITIONS
        self._acked_at: list[dict[int, float]] = [{} for _ in range(PARTITIONS)]  # sequence -> when acknowledged
        self._ack_times: list[float] = []  # every acknowledgement, in the order they came
        self._acked_count = 0
        self._next = 0  # index of the next record to produce
        self._errors: list[str] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"load-{topic}", daemon=True)

    def start(self) -> KeyedLoad:
        """Start producing; returns self."""
        self._thread.start()
        return self

    def mark(self) -> dict[int, int]:
        """The last acknowledged sequence of each partition (-1: none yet)."""
        with self._lock:
            return dict(enumerate(self._acked))

    def next_mark(self) -> dict[int, int]:
        """The sequence the next record produced will have on each partition (the first one after now)."""
        n = self._next
        return {p: (n + (p - n) % PARTITIONS) // PARTITIONS for p in range(PARTITIONS)}

    def acked_at(self, partition: int, sequence: int) -> float | None:
        """When the record of ``sequence`` on ``partition`` was acknowledged (monotonic), or None."""
        with self._lock:
            return self._acked_at[partition].get(sequence)

    def longest_ack_gap(self, start: float, end: float) -> float:
        """The longest time without an acknowledgement between two monotonic times (the load producing)."""
        with self._lock:
            times = list(self._ack_times)
        return longest_gap(times, start, end)

    def longest_partition_stall(self, start: float, end: float) -> float:
        """The longest time one partition went without an acknowledgement between two monotonic times:
        how long the cluster held back writes to its worst partition (a dead leader, a shrinking ISR)."""
        with self._lock:
            per_partition = [sorted(acked.values()) for acked in self._acked_at]
        return max((longest_gap(times, start, end) for times in per_partition), default=0.0)

    def produced_between(self, start: float, end: float) -> int:
        """Records produced between two monotonic times."""
        sent = list(self._sent_at)
        return bisect.bisect_right(sent, end) - bisect.bisect_left(sent, start)

    def stop(self) -> int:
        """Stop, wait for every delivery and return the number of acknowledged records."""
        self._stop.set()
        self._thread.join(120)
        remaining = self._producer.flush(120)
        assert remaining == 0 and not self._errors, \
            f"load on {self.topic}: {remaining} undelivered, {self._errors[:3]}"
        return self._acked_count

    def abort(self) -> None:
        """Stop producing without waiting or checking (a drill that failed)."""
        self._stop.set()

    def _on_delivery(self, err: Any, message: Any) -> None:
        if err is not None:
            self._errors.append(str(err))
            return
        sequence = int(message.value().split(b":")[1])
        now = time.monotonic()
        with self._lock:
            self._acked[message.partition()] = max(self._acked[message.partition()], sequence)
            self._acked_at[message.partition()][sequence] = now
            self._ack_times.append(now)
            self._acked_count += 1

    def _run(self) -> None:
        per_tick = max(1, self.rate // 10)
        while not self._stop.is_set():
            started = time.monotonic()
            for _ in range(per_tick):
                self._produce(self._next)
                self._next += 1
            self._producer.poll(0)
            self._stop.wait(max(0.0, 0.1 - (time.monotonic() - started)))

    def _produce(self, i: int) -> None:
        partition, sequence = i % PARTITIONS, i // PARTITIONS
        while True:
            try:
                self._producer.produce(self.topic, key=f"k{i % 997}".encode(),
                                       value=f"{partition}:{sequence}".encode(), partition=partition,
                                       headers=[("seq", str(i).encode())], on_delivery=self._on_delivery)
                self._sent_at.append(time.monotonic())
                return
            except BufferError:
                self._producer.poll(0.05)


def _clock(epoch_seconds: float) -> str:
    """A wall-clock time as the processes' logs print it."""
    return time.strftime("%H:%M:%S", time.localtime(epoch_seconds)) + f".{int(epoch_seconds % 1 * 1000):03d}"


def longest_stretch(times: list[float], start: float, end: float) -> tuple[float, float | None]:
    """The longest time between ``start`` and ``end`` (monotonic) with none of ``times`` in it, and
    when it ended (the first of ``times`` after it; None when it lasted until ``end``)."""
    inside = [start, *sorted(t for t in times if start < t < end), end]
    gap, ended_at = max((b - a, b) for a, b in zip(inside, inside[1:], strict=False))
    return gap, None if ended_at == end else ended_at


def longest_gap(times: list[float], start: float, end: float) -> float:
    """The longest time between ``start`` and ``end`` (monotonic) with none of ``times`` in it."""
    return longest_stretch(times, start, end)[0]


def longest_answer(causes: list[float], answers: list[float], start: float, end: float) -> float:
    """The longest wait from one of ``causes`` between ``start`` and ``end`` (monotonic) to the first of
    ``answers`` after it; a cause no answer followed yet waits until now."""
    answered, now = sorted(answers), time.monotonic()
    waits = [(answered[i] if (i := bisect.bisect_right(answered, t)) < len(answered) else now) - t
             for t in causes if start <= t <= end]
    return max(waits, default=0.0)


class TopicTail:
    """A consumer in a thread of its own, tailing topic partitions on a cluster until stopped;
    subclasses take each batch of records (:meth:`take`)."""

    def __init__(self, cluster: KafkaCluster, partitions: list[TopicPartition]) -> None:
        self._consumer = Consumer({**cluster.client_config(), "group.id": "strait-drill-tail",
                                   "enable.auto.commit": False, "fetch.wait.max.ms": 50,
                                   "logger": librdkafka_log})
        self._partitions = partitions
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"tail-{partitions[0].topic}", daemon=True)

    def start(self) -> Any:
        """Start tailing; returns self."""
        self._consumer.assign(self._partitions)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop tailing."""
        self._stop.set()
        self._thread.join(10)
        self._consumer.close()

    def take(self, messages: list[Any], now: float) -> None:
        """Handle the records of one poll (``now``: when they arrived, monotonic)."""
        raise NotImplementedError

    def _run(self) -> None:
        while not self._stop.is_set():
            messages = [m for m in self._consumer.consume(10_000, 0.05) if m.error() is None]
            if messages:
                self.take(messages, time.monotonic())


Since = Callable[[int, int], "float | None"]  # (partition, sequence) -> when that record was there (monotonic)


class CopyWatch(TopicTail):
    """Tails a load's topic (its copy on the target, or the topic itself): when each partition grew, how far.

    A stall is a time the copy did not grow while the source held records not yet copied (since
    their acknowledgement: :meth:`KeyedLoad.acked_at`); being behind at a moment is the age of the
    oldest record not yet copied, counted from when a plain consumer of the source could read it
    (:meth:`reached_at` of a watch on the source topic: a record acknowledged just before its
    leader died is readable by nobody until a new leader is elected). Both include this consumer's
    own fetch delay (50 ms at most): never less than the truth.
    """

    def __init__(self, cluster: KafkaCluster, topic: str) -> None:
        admin = cluster.admin()
        futures = admin.list_offsets({TopicPartition(topic, p): OffsetSpec.latest() for p in range(PARTITIONS)})
        ends = {tp.partition: future.result(timeout=30).offset for tp, future in futures.items()}
        # from each partition's last record: it gives the starting state
        super().__init__(cluster, [TopicPartition(topic, p, max(0, ends[p] - 1)) for p in range(PARTITIONS)])
        self._copied = [-1] * PARTITIONS
        self._states: list[tuple[float, tuple[int, ...]]] = []  # (when, each partition's copied sequence)
        self._grown: list[tuple[list[int], list[float]]] = [([], []) for _ in range(PARTITIONS)]  # (sequences, when)

    def take(self, messages: list[Any], now: float) -> None:
        grew = False
        for message in messages:
            if message.value():
                partition, sequence = message.value().split(b":")
                p, seq = int(partition), int(sequence)
                if seq > self._copied[p]:
                    self._copied[p], grew = seq, True
        if grew:
            with self._lock:
                self._states.append((now, tuple(self._copied)))
                for p, seq in enumerate(self._copied):
                    sequences, times = self._grown[p]
                    if not sequences or seq > sequences[-1]:
                        sequences.append(seq)
                        times.append(now)

    def reached_at(self, partition: int, sequence: int) -> float | None:
        """When this consumer first saw ``sequence`` (or a later one) on ``partition``, or None."""
        with self._lock:
            sequences, times = self._grown[partition]
            i = bisect.bisect_left(sequences, sequence)
            return times[i] if i < len(times) else None

    def _intervals(self, start: float, end: float) -> list[tuple[float, float, tuple[int, ...]]]:
        """``(from, to, copied)``: the copy stayed at ``copied`` from ``from`` until ``to`` (within the window)."""
        with self._lock:
            states = list(self._states)
        before = [state for state in states if state[0] <= start]
        current = before[-1][1] if before else tuple([-1] * PARTITIONS)
        intervals, since = [], start
        for when, copied in (s for s in states if start < s[0] < end):
            intervals.append((since, when, current))
            since, current = when, copied
        intervals.append((since, end, current))
        return intervals

    @staticmethod
    def _oldest_uncopied(since: Since, copied: tuple[int, ...], until: float) -> float | None:
        """When the oldest record there before ``until`` and not in ``copied`` got there."""
        times = [since(p, seq + 1) for p, seq in enumerate(copied)]
        pending = [t for t in times if t is not None and t < until]
        return min(pending, default=None)

    def longest_stall(self, load: KeyedLoad, start: float, end: float) -> float:
        """The longest time in the window the copy did not grow while the source had records to copy."""
        longest, worst = 0.0, (start, start)
        for since, until, copied in self._intervals(start, end):
            waiting = self._oldest_uncopied(load.acked_at, copied, until)
            if waiting is not None and until - max(since, waiting) > longest:
                longest, worst = until - max(since, waiting), (max(since, waiting), until)
        wall = time.time() - time.monotonic()  # when it was, for reading beside the processes' logs
        log.info("longest stall %.1fs from %s to %s", longest, _clock(worst[0] + wall), _clock(worst[1] + wall))
        return longest

    def most_behind(self, source: CopyWatch, start: float, end: float) -> float:
        """The most the copy was behind the source (a watch of the source topic) in the window, in seconds."""
        worst, when = 0.0, start
        for _since, until, copied in self._intervals(start, end):
            waiting = self._oldest_uncopied(source.reached_at, copied, until)
            if waiting is not None and until - waiting > worst:
                worst, when = until - waiting, until
        wall = time.time() - time.monotonic()
        log.info("most behind %.1fs at %s", worst, _clock(when + wall))
        return worst


@dataclass
class Rig:
    """The replication rig shared by the drills; see the module docstring."""

    source: KafkaCluster
    target: KafkaCluster
    redis: RedisServer
    workdir: Path
    prefix: str
    topics: list[str] = field(default_factory=list)  # the flow's topics in the current configuration
    config: dict[str, Any] = field(default_factory=dict)
    replicator: StraitProcess | None = None
    restarts: int = 0
    epoch_seconds: float = 10.0

    @property
    def config_path(self) -> Path:
        """The YAML of the current configuration (what was applied last)."""
        return self.workdir / "strait.yaml"

    def topic(self, drill: str) -> str:
        """The source topic of a drill."""
        return f"{self.prefix}-{drill}"

    def remote(self, topic: str) -> str:
        """The topic's copy on the target."""
        return f"{self.source.alias}.{topic}"

    def group(self, drill: str) -> str:
        """The consumer group of a drill (matched by the flow's groups)."""
        return f"{self.prefix}-{drill}-g"

    def epochs(self) -> float:
        """How many epochs (micro-batches) of the flow's queries have ended so far."""
        assert self.replicator is not None, "the rig's replicator is not running"
        return self.replicator.sample("strait_replicator_batch_duration_seconds_count", flow=FLOW) or 0.0

    def wait_epochs(self, count: int, timeout: float) -> None:
        """Wait until ``count`` more epochs ended: the flow's (restarted) query runs."""
        first = self.epochs()
        wait_for(lambda: self.epochs() >= first + count, timeout, f"{count} epochs of flow {FLOW} ending")

    def build_config(self, topics: list[str], rate_limit: float | None = None) -> dict[str, Any]:
        """The configuration: one flow C->D over ``topics`` with fast schedules for the drills."""
        limit = {} if rate_limit is None else {"rate_limit_records_per_second": rate_limit}
        return flow_config(
            self.source, self.target,
            # and any topic a drill creates later as <prefix>-late-<name>
            [re.escape(t) for t in topics] + [rf"{re.escape(self.prefix)}-late-.*"],
            redis_url=self.redis.url,
            groups={"include": [rf"{re.escape(self.prefix)}-.*"]},
            replication_factor=3,
            refresh_groups={"enabled": True, "interval_seconds": 2},
            sync_topic_configs={"enabled": True, "interval_seconds": 1},
            emit_heartbeats={"enabled": True, "interval_seconds": 1},
            emit_checkpoints={"enabled": True, "interval_seconds": 1},
            **limit,
        )

    def apply(self, config: dict[str, Any]) -> None:
        """`strait config apply` a new configuration version into the rig's Redis."""
        self.config = config
        write_config(self.config_path, config)
        result = strait("config", "apply", str(self.config_path), "--redis-url", self.redis.url,
                        env=self.durable_env)
        assert result.returncode == 0, f"strait config apply failed: {result.stdout}{result.stderr}"

    def create_topic(self, topic: str, cluster: KafkaCluster | None = None) -> None:
        """A topic (on the source unless told) of 3 partitions, replication factor 3, min.insync.replicas 2."""
        create_topic((cluster or self.source).admin(), topic, partitions=PARTITIONS, replication_factor=3,
                     config={"min.insync.replicas": "2", "retention.ms": "-1"})

    def start_replicator(self) -> StraitProcess:
        """Start (or start again) the replicator, live from Redis, on the rig's state folder."""
        process = StraitProcess("replicator", ["--redis-url", self.redis.url, "--state-dir",
                                               str(self.workdir / "state"), "--epoch-seconds",
                                               str(self.epoch_seconds)],
                                self.workdir, env=self.durable_env, name=f"replicator-{self.restarts}")
        self.restarts += 1
        self.replicator = process
        process.start(timeout=240)
        return process

    @property
    def durable_env(self) -> dict[str, str]:
        """The environment naming the configuration's durable topic (on the target) for every strait process."""
        return {"STRAIT_CONFIG_KAFKA": self.target.bootstrap_servers, "STRAIT_CONFIG_TOPIC": f"{self.prefix}-config"}

    def live_service(self, component: str, index: int) -> StraitProcess:
        """A replica of configsync, heartbeat or checkpoint live from Redis (as in production), with the durable topic."""
        return StraitProcess(component, ["--redis-url", self.redis.url, "--lease-ttl", str(LEASE_TTL)],
                             self.workdir, env=self.durable_env, name=f"{component}-{index}-{time.monotonic_ns()}")

    def service(self, component: str, index: int) -> StraitProcess:
        """A replica of configsync, heartbeat or checkpoint, from the config file, coordinated in Redis."""
        return StraitProcess(component, ["--config", str(self.config_path), "--lease-ttl", str(LEASE_TTL)],
                             self.workdir, name=f"{component}-{index}-{time.monotonic_ns()}")

    def restore_nodes(self) -> None:
        """Start again any broker a drill left down (it failed before its own restart): the next drills
        share the clusters and would each wait out their timeouts on a missing broker."""
        for cluster in (self.source, self.target):
            for n, node in enumerate(cluster.nodes):
                if not node.alive():
                    log.warning("restarting a broker a drill left down cluster=%s node=%d",
                                cluster.alias, n + 1)
                    cluster.restart_node(n, timeout=180)

    def stop(self) -> None:
        """Stop the replicator (SIGKILL: the rig's state is thrown away, a graceful stop only costs time)."""
        if self.replicator is not None:
            self.replicator.kill()


def start_all(processes: list[StraitProcess], timeout: float = 180.0) -> None:
    """Start processes side by side, then wait until each serves /metrics."""
    for process in processes:
        process.process.start()
    for process in processes:
        process.process.wait_until(lambda p=process: bool(p.scrape_text()), timeout, "/metrics")


def copied_up_to(rig: Rig, topic: str, mark: Mapping[int, int]) -> bool:
    """Whether every partition's copy holds (at its end) the sequence ``mark`` has for it, or later."""
    wanted = {p: s for p, s in mark.items() if s >= 0}
    if not wanted:
        return True
    tails = last_values(rig.target, rig.remote(topic))
    return all(_sequence(tails.get(p)) >= s for p, s in wanted.items())


def _sequence(value: bytes | None) -> int:
    """The sequence in a load record's value (-1 for none)."""
    return int(value.split(b":")[1]) if value else -1


def progress_covers(rig: Rig, topic: str, partitions: set[int]) -> bool:
    """Whether strait's progress records on the target cover these partitions of the drill's topic."""
    config = load_config(rig.config_path)
    flow = config.flow(FLOW)
    try:
        found = read_offsets_topic(config.cluster(flow.target).librdkafka_config("consumer"),
                                   flow.topic_names().progress, flow.source, timeout=15)
    except ResumeError as exc:
        if isinstance(exc, ResumeNotAuthorizedError):
            raise
        log.info("progress of %s not read yet (%s): asking again", topic, exc)  # a leader moved: drills restart brokers
        return False
    return partitions <= {partition for (name, partition) in found if name == topic}


# Once a killed broker is back, the target holds a record produced after its return within this long.
RETURN_CATCH_UP_SECONDS = 10.0


def wait_copied(rig: Rig, topic: str, mark: Mapping[int, int], timeout: float = 300.0) -> float:
    """Wait until :func:`copied_up_to`; returns the moment (monotonic) it was seen."""
    wait_for(lambda: copied_up_to(rig, topic, mark), timeout,
             f"{rig.remote(topic)} copied up to {dict(mark)}", interval=0.5)
    return time.monotonic()


def verify(rig: Rig, topic: str, timeout: float = 180.0) -> FlowParity:
    """`strait verify` of the drill's topic once the offset syncs caught up (nothing pending)."""
    config = load_config(rig.config_path)
    flow = config.flow(FLOW)

    def settled() -> FlowParity | None:
        try:
            parity = verify_flow(config, flow, [topic], timeout=15)
        except KafkaRetriableError as exc:  # a leader moving after the drill's fault: read again
            log.info("verify of %s read again: %s", topic, exc)
            return None
        return parity if parity.partitions and not parity.total("pending") else None

    return wait_for(settled, timeout, f"offset syncs of {topic} to catch up", interval=2.0)


def lost(parity: FlowParity) -> int:
    """Source records without an equal newest copy on the target."""
    return sum(parity.total(name) for name in ("missing", "mismatched", "unexpected", "pending"))


@dataclass
class Drill:
    """One drill's load and measurements: ``inject()`` the fault, ``recovered()``, then ``finish()``."""

    rig: Rig
    name: str
    mode: Mode
    topic: str
    load: KeyedLoad
    recoveries: list[float] = field(default_factory=list)
    bound: int = 0
    _injected_at: float = 0.0
    _mark: dict[int, int] = field(default_factory=dict)

    @classmethod
    def begin(cls, rig: Rig, name: str, mode: Mode, topic: str | None = None) -> Drill:
        """Start the load on the drill's topic and wait until replication is flowing."""
        topic = topic or rig.topic(name)
        load = KeyedLoad(rig.source, topic, mode.rate).start()
        drill = cls(rig, name, mode, topic, load)
        time.sleep(mode.warmup_seconds)
        wait_for(lambda: min(load.mark().values()) >= 0, 120, f"the load on {topic} acknowledged")
        wait_copied(rig, topic, load.mark(), timeout=300)
        # Copied is not yet resumable: a fault before strait's progress covers the topic (its offset
        # syncs not yet acknowledged, say by a source broker just restarted) leaves remote records that
        # no evidence explains, and the flow then waits for the operator's choice of start.
        wait_for(lambda: progress_covers(rig, topic, set(load.mark())), 60, f"strait's progress of {topic}")
        log.info("drill=%s load flowing topic=%s", name, topic)
        return drill

    def inject(self, action: Callable[[], None]) -> None:
        """Note the fault point (the first record produced after it, per partition) and run ``action``."""
        self._mark = self.load.next_mark()
        self._injected_at = time.monotonic()
        log.info("drill=%s injecting fault mark=%s", self.name, self._mark)
        action()

    def source_recovery(self) -> float | None:
        """Seconds from the fault until the source acknowledged the fault point's record on every
        partition (the load's own recovery); None while one is not acknowledged yet."""
        times = [self.load.acked_at(p, s) for p, s in self._mark.items() if s >= 0]
        if any(t is None for t in times):
            return None
        return max([t for t in times if t is not None], default=self._injected_at) - self._injected_at

    def wait_caught_up(self) -> float:
        """Wait until the target caught up with the fault point; returns when (monotonic)."""
        return wait_copied(self.rig, self.topic, self._mark)

    def recovered(self, at: float | None = None, replays_end_at_fault: bool = False) -> float:
        """Wait until the target caught up with the fault point (or take ``at``); returns the recovery time.

        ``replays_end_at_fault``: the fault ended the process that wrote (a replicator kill), so a
        replay can only repeat records produced before the fault; otherwise a batch retried during
        the fault (a broker failing a write) may hold anything produced until the recovery.
        """
        at = at if at is not None else self.wait_caught_up()
        recovery = at - self._injected_at
        self.recoveries.append(recovery)
        window_end = self._injected_at if replays_end_at_fault else at
        self.bound += self.load.produced_between(self._injected_at - BATCH_LEAD_SECONDS, window_end)
        log.info("drill=%s recovered after %.1fs", self.name, recovery)
        return recovery

    def finish(self, note: str = "", report: bool = True) -> DrillResult:
        """Stop the load, wait for the final catch-up, verify and (``report``) record the drill's row."""
        time.sleep(self.mode.between_seconds)
        produced = self.load.stop()
        wait_copied(self.rig, self.topic, self.load.mark())
        parity = verify(self.rig, self.topic)
        result = DrillResult(self.name, self.mode.name, len(self.recoveries),
                             round(max(self.recoveries, default=0), 1), produced, lost(parity),
                             parity.total("duplicates"), self.bound,
                             tuple(round(r, 1) for r in self.recoveries), note)
        if report:
            record(result)
        checked = parity.total("source_records")
        assert checked == produced, f"verify checked {checked} of {produced} produced records"
        assert result.lost == 0, f"{self.name}: {result.lost} records lost: {parity}"
        assert result.duplicates <= result.duplicate_bound, \
            f"{self.name}: {result.duplicates} duplicates exceed the at-least-once bound " \
            f"{result.duplicate_bound}"
        return result

    def abort(self) -> None:
        """Stop the load without checks (a drill that failed early)."""
        self.load.abort()


def leader_index(cluster: KafkaCluster, topic: str, partition: int = 0) -> int:
    """The node index (0-based) of the broker leading a partition."""
    metadata = cluster.admin().list_topics(topic, timeout=30).topics[topic]
    return metadata.partitions[partition].leader - 1


def record(result: DrillResult) -> None:
    """Append a row to the fault report (``.cache/fault-report.json``)."""
    rows = read_report()
    rows.append(asdict(result))
    REPORT_PATH.parent.mkdir(parents=True, exist_ok=True)
    REPORT_PATH.write_text(json.dumps(rows, indent=2))
    log.info("fault report row %s", result)


def read_report() -> list[dict[str, Any]]:
    """The rows of the fault report so far."""
    try:
        return list(json.loads(REPORT_PATH.read_text()))
    except (FileNotFoundError, ValueError):
        return []


def format_report(rows: list[dict[str, Any]]) -> str:
    """The report as a fixed-width table."""
    header = f"{'fault':<34} {'mode':<5} {'inj':>3} {'recovery_s':>10} {'produced':>9} {'lost':>5} " \
             f"{'duplicates':>10} {'dup_bound':>9}"
    lines = [header, "-" * len(header)]
    for row in rows:
        lines.append(f"{row['fault']:<34} {row['mode']:<5} {row['injections']:>3} {row['recovery_s']:>10.1f} "
                     f"{row['produced']:>9} {row['lost']:>5} {row['duplicates']:>10} "
                     f"{row['duplicate_bound']:>9}")
    return "\n".join(lines)
