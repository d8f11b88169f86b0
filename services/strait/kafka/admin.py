"""Admin calls on a cluster, idempotent and with errors that name cluster, topic and fix.

Topic creation treats "already exists" as success, partitions only grow, and internal topics get
MM2's settings (one partition, ``cleanup.policy=compact``).
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import FIRST_COMPLETED, Future, wait
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from confluent_kafka import IsolationLevel, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import (
    AdminClient, NewPartitions, NewTopic, OffsetSpec,
)

from strait.errors import StraitError
from strait.logs import log_first

T = TypeVar("T")
log = logging.getLogger(__name__)
librdkafka_log = logging.getLogger("strait.librdkafka")

DEFAULT_TIMEOUT = 30.0
# A service's requests within one pass (a service tries again at its next pass).
SERVICE_ADMIN_TIMEOUT = 15.0


class KafkaAdminError(StraitError):
    """An admin call on a cluster failed; the message names the cluster and what to do."""


class KafkaRetriableError(KafkaAdminError):
    """A passing state of the cluster (a leader moving, a fenced leader epoch, a broker restarting, a
    coordinator loading): retried promptly with fresh metadata (:mod:`strait.retry`)."""

    CODES = frozenset({
        KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE, KafkaError.FENCED_LEADER_EPOCH,
        KafkaError.UNKNOWN_LEADER_EPOCH, KafkaError.OFFSET_NOT_AVAILABLE, KafkaError.REPLICA_NOT_AVAILABLE,
        KafkaError.NOT_ENOUGH_REPLICAS, KafkaError.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
        KafkaError.REQUEST_TIMED_OUT, KafkaError.NETWORK_EXCEPTION, KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
        KafkaError.COORDINATOR_NOT_AVAILABLE,
        KafkaError.NOT_COORDINATOR, KafkaError.NOT_CONTROLLER, KafkaError.BROKER_NOT_AVAILABLE,
        KafkaError.KAFKA_STORAGE_ERROR, KafkaError.REBALANCE_IN_PROGRESS, KafkaError._TRANSPORT,
        KafkaError._TIMED_OUT, KafkaError._ALL_BROKERS_DOWN, KafkaError._WAIT_COORD, KafkaError._NODE_UPDATE,
        KafkaError.UNSTABLE_OFFSET_COMMIT,
    })

    @classmethod
    def is_transient(cls, error: KafkaError) -> bool:
        """Whether a librdkafka error is one of these passing states (or librdkafka calls it retriable)."""
        return bool(error.retriable()) or error.code() in cls.CODES


class ClusterUnreachableError(KafkaRetriableError):
    """No broker of the cluster answered."""


class KafkaPermissionError(KafkaAdminError):
    """The principal lacks an ACL for the call; the message names the operation to allow."""


@dataclass(frozen=True)
class TopicSpec:
    """A topic to create: name, partitions, replication factor (-1: broker default), configs."""

    name: str
    partitions: int
    replication_factor: int = -1
    config: Mapping[str, str] = field(default_factory=dict)


def admin_client(config: Mapping[str, str]) -> AdminClient:
    """An AdminClient whose librdkafka logs go through Python logging."""
    return AdminClient({**config, "logger": librdkafka_log})


RETIRED_ADMIN_CLIENTS = 4  # renewed clients kept alive (each retry renews once, seconds apart)


class RenewableAdmin:
    """An admin client that is replaced by a new one after a transient error.

    A new client starts from fresh metadata, so no call keeps going to a moved leader or with a
    fenced leader epoch: through a rolling restart librdkafka's admin ListOffsets answered "Leader
    epoch is older than broker epoch" for over a minute from a long-lived client's cached view.
    """

    def __init__(self, config: Mapping[str, str]) -> None:
        self._config = dict(config)
        self._client: AdminClient | None = None
        # Clients dropped by renew, kept alive a while: a call given up on may still be answered, and
        # destroying its client while librdkafka's thread sets the call's futures crashed the process
        # (a segfault in the planner at 10,000 partitions).
        self._retired: list[AdminClient] = []

    def get(self) -> AdminClient:
        """The current client (made on first use and after :meth:`renew`)."""
        if self._client is None:
            self._client = admin_client(self._config)
        return self._client

    def renew(self, _cause: BaseException | None = None) -> None:
        """Drop the client: the next :meth:`get` makes a new one with fresh metadata."""
        if self._client is not None:
            self._retired = [*self._retired, self._client][-RETIRED_ADMIN_CLIENTS:]
        self._client = None


def explain_error(exc: BaseException, alias: str, action: str) -> KafkaAdminError:
    """The strait error of a failed call: a permission, an unreachable cluster, a passing state or other."""
    error = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
    if error is not None and error.code() in (
        KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.CLUSTER_AUTHORIZATION_FAILED,
    ):
        return KafkaPermissionError(f"cluster {alias}: {action}: not authorized ({error.str()}); "
                                    f"grant the needed ACL to strait's principal on cluster {alias}")
    if error is not None and error.code() in (KafkaError._TRANSPORT, KafkaError._TIMED_OUT,
                                              KafkaError._ALL_BROKERS_DOWN):
        return ClusterUnreachableError(f"cluster {alias}: {action}: no broker answered ({error.str()}); "
                                       f"check bootstrap servers and that cluster {alias} runs")
    if isinstance(exc, TimeoutError):  # a future's result that did not come in time
        return ClusterUnreachableError(f"cluster {alias}: {action}: no answer in time; check that cluster "
                                       f"{alias} runs and its brokers are reachable")
    detail = error.str() if error is not None else str(exc)
    if error is not None and KafkaRetriableError.is_transient(error):
        return KafkaRetriableError(f"cluster {alias}: {action}: {detail} (retried)")
    return KafkaAdminError(f"cluster {alias}: {action}: {detail}")


class SameClusterError(KafkaAdminError):
    """A flow's source and target aliases reach one and the same Kafka cluster."""


def topic_partitions(admin: AdminClient, alias: str, timeout: float = DEFAULT_TIMEOUT) -> dict[str, int]:
    """Every topic of the cluster with its partition count (topics in error are left out and logged)."""
    return cluster_topics(admin, alias, timeout)[1]


def cluster_topics(admin: AdminClient, alias: str,
                   timeout: float = DEFAULT_TIMEOUT) -> tuple[str | None, dict[str, int]]:
    """The cluster's id and every topic with its partition count (topics in error are left out and logged)."""
    try:
        metadata = admin.list_topics(timeout=timeout)
    except KafkaException as exc:
        raise explain_error(exc, alias, "listing topics") from None
    return metadata.cluster_id, _partition_counts(metadata, alias)


def check_distinct_clusters(flow: str, source: tuple[str, str | None], target: tuple[str, str | None]) -> None:
    """Refuse a flow whose two aliases, ``(alias, cluster id)``, reach the same cluster: it would copy
    its own copies forever."""
    (source_alias, source_id), (target_alias, target_id) = source, target
    if source_id is not None and source_id == target_id:
        raise SameClusterError(
            f"flow {flow}: clusters {source_alias!r} and {target_alias!r} are the same Kafka cluster "
            f"(id {source_id}); replicating it into itself would copy its own copies forever: point one of the "
            f"aliases at another cluster")


def _partition_counts(metadata: Any, alias: str) -> dict[str, int]:
    counts: dict[str, int] = {}
    for name, topic in metadata.topics.items():
        if topic.error is not None:
            log.warning("cluster=%s topic=%s metadata error: %s", alias, name, topic.error)
            continue
        counts[name] = len(topic.partitions)
    return counts


# KRaft's controller refuses a request that would write more than 10,000 metadata records ("Unable to
# perform excessively large batch operation"): a topic is about one record per partition, plus one and
# its configs. Requests stay well under it, so a flow of thousands of topics is created in several.
MAX_RECORDS_PER_REQUEST = 4_000


def _batched(items: Iterable[T], weight: Callable[[T], int], limit: int | None = None) -> Iterator[list[T]]:
    """``items`` in order, cut into lists whose summed ``weight`` stays within ``limit`` (default
    MAX_RECORDS_PER_REQUEST; an item heavier than it goes alone)."""
    limit = MAX_RECORDS_PER_REQUEST if limit is None else limit
    batch: list[T] = []
    total = 0
    for item in items:
        if batch and total + weight(item) > limit:
            yield batch
            batch, total = [], 0
        batch.append(item)
        total += weight(item)
    if batch:
        yield batch


def create_topics(admin: AdminClient, alias: str, specs: Iterable[TopicSpec],
                  timeout: float = DEFAULT_TIMEOUT) -> list[str]:
    """Create the topics that do not exist yet; returns the names actually created."""
    new = [NewTopic(s.name, s.partitions, s.replication_factor, config=dict(s.config)) for s in specs]
    created: list[str] = []
    try:
        for batch in _batched(new, lambda t: t.num_partitions + 1 + len(t.config or {})):
            for name, future in admin.create_topics(batch, operation_timeout=timeout,
                                                    request_timeout=timeout).items():
                try:
                    future.result(timeout=timeout)
                    created.append(name)
                except KafkaException as exc:
                    if exc.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS:
                        continue
                    raise explain_error(exc, alias, f"creating topic {name}") from None
    finally:
        log_first(log, [(alias, name) for name in created], "created cluster=%s topic=%s",
                  "created cluster=%s %d more topics", alias)
    return created


def grow_partitions(admin: AdminClient, alias: str, counts: Mapping[str, int],
                    timeout: float = DEFAULT_TIMEOUT) -> None:
    """Raise each topic's partition count to the given one (never shrinks)."""
    requests = [NewPartitions(topic, count) for topic, count in counts.items()]
    for batch in _batched(requests, lambda r: r.new_total_count):
        for topic, future in admin.create_partitions(batch, operation_timeout=timeout,
                                                     request_timeout=timeout).items():
            try:
                future.result(timeout=timeout)
                log.info("grew cluster=%s topic=%s partitions=%s", alias, topic, counts[topic])
            except KafkaException as exc:
                if exc.args[0].code() == KafkaError.INVALID_PARTITIONS and "already has" in exc.args[0].str():
                    continue  # another replica grew it first
                raise explain_error(exc, alias, f"growing topic {topic} to {counts[topic]} partitions") from None


def internal_topic(name: str, replication_factor: int = -1) -> TopicSpec:
    """An MM2 internal topic (heartbeats, checkpoints, offset syncs): 1 partition, compacted."""
    return TopicSpec(name, 1, replication_factor, {"cleanup.policy": "compact"})


PartitionKey = tuple[str, int]


# ListOffsets calls that returned before librdkafka's thread set all their futures (given up on, or
# failed at one partition), with when they are set at the latest: confluent-kafka 2.16 crashed the
# process (segfault, heap corruption) in a new list_offsets call made while its thread was setting
# another call's futures, one after another. A new call first waits for the calls being set; one not
# answered yet (its leader silent) does not hold it up.
_given_up: list[tuple[list[Future], float]] = []
_given_up_lock = threading.Lock()
SETTING_MARGIN_SECONDS = 30.0


def _give_up(calls: Iterable[Iterable[Future]], request_timeout: float) -> None:
    """Remember the calls whose futures are not all set yet (see _given_up)."""
    settled_by = time.monotonic() + request_timeout + SETTING_MARGIN_SECONDS
    unset = [(futures, settled_by) for futures in (list(call) for call in calls)
             if not all(future.done() for future in futures)]
    if unset:
        with _given_up_lock:
            _given_up.extend(unset)


def _after_calls_given_up() -> None:
    """Wait until librdkafka's thread set every future of the given-up calls it began setting."""
    with _given_up_lock:
        now = time.monotonic()
        _given_up[:] = [(futures, by) for futures, by in _given_up
                        if by > now and not all(future.done() for future in futures)]
        being_set = [(futures, by) for futures, by in _given_up if any(future.done() for future in futures)]
    for futures, by in being_set:
        wait(futures, timeout=max(0.0, by - time.monotonic()))


def list_offsets(admin: AdminClient, alias: str, partitions: Sequence[TopicPartition], which: str,
                 isolation: IsolationLevel = IsolationLevel.READ_COMMITTED,
                 timeout: float = DEFAULT_TIMEOUT, skip_unknown: bool = False) -> dict[PartitionKey, int]:
    """The ``earliest`` or ``latest`` offset of each partition in one request; with read_committed
    the latest is the last stable offset (records of open transactions are not readable yet).

    With ``skip_unknown`` a partition that does not exist (its topic was deleted) is left out
    instead of failing the call.
    """
    if not partitions:
        return {}
    spec = OffsetSpec.earliest() if which == "earliest" else OffsetSpec.latest()
    _after_calls_given_up()
    futures = admin.list_offsets({TopicPartition(tp.topic, tp.partition): spec for tp in partitions},
                                 isolation_level=isolation, request_timeout=timeout)
    try:
        return _results(futures, alias, which, timeout, skip_unknown)
    finally:
        _give_up([futures.values()], timeout)


def list_offsets_per_leader(admin: AdminClient, alias: str, partitions: Sequence[TopicPartition], which: str,
                            isolation: IsolationLevel = IsolationLevel.READ_COMMITTED,
                            timeout: float = DEFAULT_TIMEOUT, grace: float = 1.0) -> dict[PartitionKey, int]:
    """Like :func:`list_offsets` (deleted topics left out), but one request per partition leader, so a
    dead leader holds back only its own partitions: they are listed -1 (unknown) when their leader
    fails or has not answered ``grace`` seconds after another leader did, or has none right now.

    librdkafka answers a ListOffsets call for all its partitions at once, when the slowest broker
    answers: after a broker's SIGKILL that was 10 s (until the controller fenced it) for every
    partition. Raises when no leader answered (the cluster is unreachable or everything moves).
    """
    if not partitions:
        return {}
    by_leader = _partitions_by_leader(admin, alias, partitions, timeout)
    offsets: dict[PartitionKey, int] = {(tp.topic, tp.partition): -1 for tp in by_leader.get(-1, [])}
    spec = OffsetSpec.earliest() if which == "earliest" else OffsetSpec.latest()
    _after_calls_given_up()
    # librdkafka gets a request timeout no shorter than DEFAULT_TIMEOUT, whatever this call waits: a
    # ListOffsets of 10,000 partitions that timed out while its answer came (0.5 s quick tries, 1-3 s
    # answers) completed twice and crashed the process (double free, segfault).
    request_timeout = max(timeout, DEFAULT_TIMEOUT)
    calls = {leader: admin.list_offsets({tp: spec for tp in group}, isolation_level=isolation,
                                        request_timeout=request_timeout)
             for leader, group in by_leader.items() if leader >= 0}
    try:
        return _offsets_answered(calls, offsets, alias, which, timeout, grace)
    finally:
        _give_up([futures.values() for futures in calls.values()], request_timeout)


def _offsets_answered(calls: Mapping[int, Mapping[TopicPartition, Future]], offsets: dict[PartitionKey, int],
                      alias: str, which: str, timeout: float, grace: float) -> dict[PartitionKey, int]:
    """``offsets`` with those of each leader's call (see :func:`list_offsets_per_leader`)."""
    # a call's futures are set together, one after another: its first set means the call was answered
    first = {next(iter(futures.values())): leader for leader, futures in calls.items() if futures}
    done, pending = wait(first, timeout=timeout, return_when=FIRST_COMPLETED)
    if pending:
        more, pending = wait(pending, timeout=grace)
        done |= more
    failures: list[KafkaAdminError] = []
    for leader in (first[future] for future in done):
        try:  # answered: its futures are being set one after another (10,000 of them take a while)
            offsets.update(_results(calls[leader], alias, which, timeout=timeout, skip_unknown=True))
        except KafkaAdminError as exc:
            failures.append(exc)
            offsets.update({(tp.topic, tp.partition): -1 for tp in calls[leader]})
    for leader in (first[future] for future in pending):
        offsets.update({(tp.topic, tp.partition): -1 for tp in calls[leader]})
    if offsets and all(offset < 0 for offset in offsets.values()):
        raise failures[0] if failures else ClusterUnreachableError(
            f"cluster {alias}: listing {which} offsets: no partition leader answered in {timeout:.0f}s; check that "
            f"cluster {alias} runs and its brokers are reachable")
    return offsets


def _partitions_by_leader(admin: AdminClient, alias: str, partitions: Sequence[TopicPartition],
                          timeout: float) -> dict[int, list[TopicPartition]]:
    """Each wanted partition under its leader's broker id (-1: none now); partitions of deleted topics left out."""
    try:
        metadata = admin.list_topics(timeout=timeout)
    except KafkaException as exc:
        raise explain_error(exc, alias, "listing topics") from None
    groups: dict[int, list[TopicPartition]] = {}
    for tp in partitions:
        topic = metadata.topics.get(tp.topic)
        if topic is None or topic.error is not None and topic.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
            continue
        partition = topic.partitions.get(tp.partition)
        if partition is None and topic.error is None:
            continue  # a partition this topic does not have (it was re-created smaller)
        leader = partition.leader if partition is not None and partition.error is None else -1
        groups.setdefault(leader, []).append(TopicPartition(tp.topic, tp.partition))
    return groups


def _results(futures: Mapping[TopicPartition, Any], alias: str, which: str, timeout: float,
             skip_unknown: bool) -> dict[PartitionKey, int]:
    """Each listed partition's offset from a ListOffsets call's futures (see :func:`list_offsets`)."""
    offsets: dict[PartitionKey, int] = {}
    for tp, future in futures.items():
        try:
            offsets[(tp.topic, tp.partition)] = future.result(timeout=timeout).offset
        except (KafkaException, TimeoutError) as exc:
            if skip_unknown and _is_unknown_partition(exc):
                continue
            raise explain_error(exc, alias, f"listing {which} offsets of {tp.topic}[{tp.partition}]") from None
    return offsets


def _is_unknown_partition(exc: KafkaException) -> bool:
    error = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
    return error is not None and error.code() in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC,
                                                  KafkaError._UNKNOWN_PARTITION)


def end_offsets(admin: AdminClient, alias: str, partitions: Sequence[TopicPartition],
                isolation: IsolationLevel = IsolationLevel.READ_COMMITTED) -> dict[PartitionKey, tuple[int, int]]:
    """``(earliest, end)`` per partition; the end is the last stable offset with read_committed."""
    earliest = list_offsets(admin, alias, partitions, "earliest", isolation)
    latest = list_offsets(admin, alias, partitions, "latest", isolation)
    return {key: (low, latest[key]) for key, low in earliest.items()}
