"""What the target side knows of a flow's source, kept where a failover can read it when the source is gone.

A :class:`SourceWatch` runs beside the heartbeat emitter of a flow (one replica per flow, under
the flow's lease). About every second it lists the source's end offsets of every replicated
partition and follows the flow's offset syncs, and publishes a :class:`SourceView` to Redis:

* per partition the last end offset the source answered with, and when (``end_seen_at``);
* per partition where the copies end (``copied_to``: the next source offset after the last copied
  record, and ``copied_down``: the next target offset after its copy), from the offset syncs;
* when the source last answered, and since when it has not (``unreachable_since``). A watch
  starting while the source is down (a replica restarted or took the flow over) keeps the time the
  previous watch last saw it, from the view stored in Redis: the last answer is never forgotten.

From these, while the source lives and after it dies:

* the **RPO** a failover would have now: records the source held (as last seen) that are not
  copied, ``end - copied_to`` per partition;
* the **lag in seconds**: the age of the oldest source record not yet copied. The watch keeps the
  end offsets it saw with the time it saw them; the oldest uncopied record existed at the first
  sample whose end passed ``copied_to``. So the age is exact to within one watch interval, and it
  keeps growing when the source dies with records uncopied.

What the view cannot know: records written to the source after ``end_seen_at``. A failover reports
that time with its RPO.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import asdict, dataclass

from confluent_kafka import IsolationLevel, KafkaException, TopicPartition

from strait.config.model import FlowConfig, StraitConfig
from strait.errors import StraitError
from strait.kafka.admin import RenewableAdmin, list_offsets
from strait.translation import SyncsFollower, replicated_partitions

log = logging.getLogger(__name__)

WATCH_TIMEOUT = 3.0  # a dead source must not hold the watch longer than this per call
PARTITIONS_REFRESH = 30.0


def source_view_key(namespace: str, flow: str) -> str:
    """The Redis key of a flow's source view."""
    return f"{namespace}:source-view:{flow}"


@dataclass(frozen=True)
class PartitionView:
    """One source partition as last seen: ``end``/``earliest`` as listed at ``end_seen_at`` (unix
    seconds), ``copied_to``/``copied_down`` from the offset syncs (None: nothing copied yet), and
    ``behind_since``: when the oldest record not yet copied was first seen (None: caught up)."""

    topic: str
    partition: int
    earliest: int | None
    end: int | None
    end_seen_at: float | None
    copied_to: int | None
    copied_down: int | None
    behind_since: float | None

    @property
    def uncopied(self) -> int | None:
        """Records the source held when last seen that are not copied (None: end never seen)."""
        if self.end is None:
            return None
        start = self.copied_to if self.copied_to is not None else (self.earliest or 0)
        return max(0, self.end - start)

    def lag_seconds(self, now: float) -> float:
        """Age of the oldest record not yet copied, 0 when caught up."""
        return 0.0 if self.behind_since is None else max(0.0, now - self.behind_since)


@dataclass(frozen=True)
class SourceView:
    """A flow's source as the watch last knew it (times are unix seconds)."""

    flow: str
    source: str
    written_at: float
    reachable_at: float | None
    unreachable_since: float | None
    error: str
    syncs_ready: bool
    partitions: tuple[PartitionView, ...]

    @property
    def rpo_records(self) -> int | None:
        """Records on the source (as last seen) not copied; None when no end offset was ever seen."""
        known = [p.uncopied for p in self.partitions if p.uncopied is not None]
        return sum(known) if known else None

    def partition(self, topic: str, partition: int) -> PartitionView | None:
        """The view of one partition, if watched."""
        for view in self.partitions:
            if (view.topic, view.partition) == (topic, partition):
                return view
        return None

    def to_json(self) -> str:
        """The view as stored in Redis."""
        return json.dumps(asdict(self), separators=(",", ":"))

    @staticmethod
    def from_json(text: str | bytes) -> SourceView:
        """Parse a stored view; ValueError when it is not one."""
        try:
            value = json.loads(text)
            parts = tuple(PartitionView(**p) for p in value.pop("partitions"))
            return SourceView(**value, partitions=parts)
        except (TypeError, KeyError, AttributeError) as exc:
            raise ValueError(f"not a source view: {exc}") from None


def read_source_view(client: object, flow: str, namespace: str = "strait") -> SourceView | None:
    """The flow's stored source view, or None when none was published (or it cannot be read)."""
    raw = client.get(source_view_key(namespace, flow))  # type: ignore[attr-defined]
    if not raw:
        return None
    try:
        return SourceView.from_json(raw)
    except ValueError as exc:
        log.warning("flow=%s stored source view ignored: %s", flow, exc)
        return None


class _Samples:
    """One partition's end offsets seen after its copy point, oldest first, with when they were seen."""

    def __init__(self) -> None:
        self._seen: deque[tuple[float, int]] = deque()

    def add(self, when: float, end: int) -> None:
        if not self._seen or end > self._seen[-1][1]:
            self._seen.append((when, end))

    def behind_since(self, copied_to: int) -> float | None:
        """When the record at ``copied_to`` (the oldest uncopied) was first seen; None when none is."""
        while self._seen and self._seen[0][1] <= copied_to:
            self._seen.popleft()
        return self._seen[0][0] if self._seen else None


class SourceWatch:
    """Watches one flow's source end offsets and copy progress; :meth:`step` returns the new view.

    Not thread-safe: one thread calls :meth:`step` (see :class:`SourceWatchThread`).
    """

    def __init__(self, config: StraitConfig, flow_name: str, last_seen: float | None = None) -> None:
        """``last_seen``: when the source last answered an earlier watch of the flow (unix seconds)."""
        self.config = config
        self.flow_name = flow_name
        self._admin = RenewableAdmin(config.cluster(config.flow(flow_name).source).librdkafka_config("admin"))
        self._follower: SyncsFollower | None = None
        self._partitions: list[TopicPartition] = []
        self._partitions_at = float("-inf")
        self._earliest: dict[tuple[str, int], int] = {}
        self._ends: dict[tuple[str, int], tuple[int, float]] = {}
        self._samples: dict[tuple[str, int], _Samples] = {}
        self._reachable_at = last_seen
        self._unreachable_since: float | None = None
        self._error = ""

    @property
    def flow(self) -> FlowConfig:
        """The flow's current configuration."""
        return self.config.flow(self.flow_name)

    def update(self, config: StraitConfig) -> None:
        """Follow a new configuration (topic filters may have changed)."""
        self.config = config
        self._partitions_at = float("-inf")

    def step(self) -> SourceView:
        """List the source, read new syncs, and return the view."""
        self._follow_syncs()
        self._list_source()
        return self.view()

    def _list_source(self) -> None:
        monotonic, now = time.monotonic(), time.time()
        try:
            admin = self._admin.get()
            if monotonic - self._partitions_at >= PARTITIONS_REFRESH:
                self._partitions = replicated_partitions(admin, self.flow, WATCH_TIMEOUT)
                self._earliest = list_offsets(admin, self.flow.source, self._partitions, "earliest",
                                              timeout=WATCH_TIMEOUT, skip_unknown=True)
                self._partitions_at = monotonic
            ends = list_offsets(admin, self.flow.source, self._partitions, "latest",
                                IsolationLevel.READ_COMMITTED, timeout=WATCH_TIMEOUT, skip_unknown=True)
        except (StraitError, KafkaException, TimeoutError) as exc:
            self._admin.renew()  # the next try starts from fresh metadata (a leader moved, a broker restarted)
            if self._unreachable_since is None:
                self._unreachable_since = now
                log.warning("flow=%s source=%s unreachable: %s", self.flow_name, self.flow.source, exc)
            self._error = str(exc)
            return
        if self._unreachable_since is not None:
            log.info("flow=%s source=%s answers again after %.0fs", self.flow_name, self.flow.source,
                     now - self._unreachable_since)
        self._reachable_at, self._unreachable_since, self._error = now, None, ""
        for key, end in ends.items():
            if end < 0:
                continue  # no answer for this partition (a leader gone): keep the last real end offset
            self._ends[key] = (end, now)
            self._samples.setdefault(key, _Samples()).add(now, end)

    def _follow_syncs(self) -> None:
        try:
            if self._follower is None:
                location = self.flow.topic_names().offset_syncs
                self._follower = SyncsFollower(self.config.cluster(location.alias).librdkafka_config("consumer"),
                                               location, WATCH_TIMEOUT)
            self._follower.poll(0.05 if self._follower.ready else 1.0, max_records=100_000)
        except (StraitError, KafkaException) as exc:
            log.debug("flow=%s offset syncs not readable: %s", self.flow_name, exc)

    def _copied(self, topic: str, partition: int) -> tuple[int | None, int | None]:
        if self._follower is None or not self._follower.ready:
            return None, None
        history = self._follower.index.history(topic, partition)
        last = history.translator.last_copied() if history is not None else None
        return (None, None) if last is None else (last.upstream + 1, last.downstream + 1)

    def view(self) -> SourceView:
        """The view as of now."""
        parts = []
        for key in sorted(set(self._ends) | {(tp.topic, tp.partition) for tp in self._partitions}):
            end, seen_at = self._ends.get(key, (None, None))
            copied_to, copied_down = self._copied(*key)
            samples = self._samples.get(key)
            start = copied_to if copied_to is not None else self._earliest.get(key, 0)
            behind = samples.behind_since(start) if samples is not None else None
            parts.append(PartitionView(key[0], key[1], self._earliest.get(key), end, seen_at, copied_to,
                                       copied_down, behind))
        return SourceView(self.flow_name, self.flow.source, time.time(), self._reachable_at, self._unreachable_since,
                          self._error, self._follower is not None and self._follower.ready, tuple(parts))

    def close(self) -> None:
        """Close the syncs reader."""
        if self._follower is not None:
            self._follower.close()
            self._follower = None


class SourceWatchThread:
    """Runs a :class:`SourceWatch` every ``interval`` seconds in its own thread (a dead source must
    not slow the heartbeat loop) and hands each view to ``publish``."""

    def __init__(self, watch: SourceWatch, publish: Callable[[SourceView], None], interval: float = 1.0) -> None:
        self.watch = watch
        self._publish = publish
        self._interval = interval
        self._pending: StraitConfig | None = None
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"source-watch-{watch.flow_name}", daemon=True)

    def start(self) -> SourceWatchThread:
        """Start the thread; returns self."""
        self._thread.start()
        return self

    def update(self, config: StraitConfig) -> None:
        """Hand a new configuration to the thread."""
        with self._lock:
            self._pending = config

    def stop(self, timeout: float = 5.0) -> None:
        """End the thread (waits up to ``timeout``)."""
        self._stopping.set()
        self._thread.join(timeout)

    def _run(self) -> None:
        try:
            while not self._stopping.is_set():
                started = time.monotonic()
                with self._lock:
                    config, self._pending = self._pending, None
                if config is not None:
                    self.watch.update(config)
                try:
                    self._publish(self.watch.step())
                except Exception:  # a failed publish (Redis down, lease lost) must not end the watch
                    log.warning("flow=%s source view not published", self.watch.flow_name, exc_info=True)
                self._stopping.wait(max(0.0, self._interval - (time.monotonic() - started)))
        finally:
            self.watch.close()
