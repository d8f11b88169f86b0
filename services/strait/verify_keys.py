"""Per-key parity of a repartitioning flow: `strait verify` for topics whose copies are placed by key.

A flow with ``target_partitions`` sends each record to the target partition Kafka's default
partitioner picks for its key (murmur2), so a source partition's records spread over several target
partitions and offsets no longer map 1:1. What must hold instead, per source topic:

* every keyed record is on the target, in the partition its key hashes to (*misplaced* otherwise);
* the records of one key from one source partition appear in the same order on the target: each
  such sequence must be an ordered subsequence of the key's target records. Other records may sit in
  between: records of the same key from another source cluster (aggregation) and at-least-once
  duplicates. A record absent while a later record of its sequence was copied is *missing*; absent
  records after the last copied one are *pending* (not replicated yet);
* keyless records have no order to keep; each must be somewhere on the target (else *pending*).

Records are compared by key, value, headers and timestamp; one target record may stand for two
source records that are equal in all four (as in `strait verify`, equal records cannot be told
apart). Target records that match no source record of the flow are counted as ``other_records``: copies from other flows into the same topic,
duplicates, or records someone else wrote; they are reported, never a failure.
"""

from __future__ import annotations

import hashlib
import logging
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from strait.config.model import FlowConfig, StraitConfig
from strait.kafka.admin import admin_client, topic_partitions
from strait.remote_topics import RemoteTopic
from strait.verify import DEFAULT_TIMEOUT, KafkaRecord, PartitionReader, record_bytes, selected_topics

log = logging.getLogger(__name__)

_SEED = 0x9747B28C
_M = 0x5BD1E995
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2`` (a signed 32-bit hash), as its default partitioner computes it."""
    length = len(data)
    h = (_SEED ^ length) & _MASK
    whole = length - length % 4
    for i in range(0, whole, 4):
        k = int.from_bytes(data[i:i + 4], "little")
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = ((h * _M) & _MASK) ^ k
    rest = length % 4
    if rest == 3:
        h ^= data[whole + 2] << 16
    if rest >= 2:
        h ^= data[whole + 1] << 8
    if rest >= 1:
        h ^= data[whole]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def key_partition(key: bytes, partitions: int) -> int:
    """The partition Kafka's default partitioner gives a keyed record: ``toPositive(murmur2(key)) % n``."""
    return (murmur2(key) & 0x7FFFFFFF) % partitions


@dataclass(frozen=True)
class KeyParity:
    """One source topic of a repartitioning flow, checked key by key."""

    topic: str
    remote_topic: str
    target_partitions: int
    source_records: int
    keys: int
    matched: int
    missing: int
    pending: int
    misplaced: int
    other_records: int
    first_problem: str | None = None

    @property
    def ok(self) -> bool:
        """True when every source record is on the target, in its key's partition and order."""
        return not (self.missing or self.pending or self.misplaced)


def _digest(record: KafkaRecord) -> bytes:
    return hashlib.sha256(record_bytes(record)).digest()


class _Tally:
    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self.first: str | None = None

    def add(self, kind: str, n: int, detail: str) -> None:
        if n:
            self.counts[kind] += n
            self.first = self.first or detail


def compare_keys(topic: RemoteTopic, target_partitions: int, source: Iterable[tuple[int, KafkaRecord]],
                 target: Iterable[tuple[int, KafkaRecord]]) -> KeyParity:
    """Compare a source topic's records (partition, record) with its remote topic's, key by key."""
    sequences: dict[tuple[bytes, int], list[tuple[int, bytes]]] = defaultdict(list)
    keyless: dict[int, list[tuple[int, bytes]]] = defaultdict(list)
    total = 0
    for partition, record in source:
        total += 1
        entry = (record.offset, _digest(record))
        (keyless[partition] if record.key is None else sequences[(record.key, partition)]).append(entry)
    on_target: dict[bytes, list[bytes]] = defaultdict(list)
    keyless_on_target: Counter[bytes] = Counter()
    tally = _Tally()
    target_total = 0
    for partition, record in target:
        target_total += 1
        if record.key is None:
            keyless_on_target[_digest(record)] += 1
            continue
        expected = key_partition(record.key, target_partitions)
        if partition != expected:
            tally.add("misplaced", 1, f"{topic.remote}[{partition}] offset {record.offset}: key {record.key!r} "
                                      f"belongs in partition {expected}")
        on_target[record.key].append(_digest(record))
    matched = 0
    for (key, partition), wanted in sequences.items():
        matched += _match_in_order(topic, key, partition, wanted, on_target.get(key, []), tally)
    for partition, wanted in keyless.items():
        matched += _match_keyless(topic, partition, wanted, keyless_on_target, tally)
    other = target_total - matched
    return KeyParity(topic.source, topic.remote, target_partitions, total, len({k for k, _ in sequences}), matched,
                     tally.counts["missing"], tally.counts["pending"], tally.counts["misplaced"], max(0, other),
                     tally.first)


def _match_in_order(topic: RemoteTopic, key: bytes, partition: int, wanted: list[tuple[int, bytes]],
                    found: list[bytes], tally: _Tally) -> int:
    """Greedy ordered-subsequence match of one key's records of one source partition; how many matched."""
    position = 0
    unmatched: list[int] = []
    last_matched = -1
    for offset, digest in wanted:
        try:
            position = found.index(digest, position) + 1
        except ValueError:
            unmatched.append(offset)
            continue
        last_matched = offset
    missing = [o for o in unmatched if o < last_matched]
    where = f"{topic.source}[{partition}] key {key!r}"
    tally.add("missing", len(missing), f"{where}: source offset {missing[0] if missing else -1} has no copy in "
                                       "order on the target although later records of its key do")
    tally.add("pending", len(unmatched) - len(missing), f"{where}: records from source offset "
                                                        f"{unmatched[-1] if unmatched else -1} not replicated yet")
    return len(wanted) - len(unmatched)


def _match_keyless(topic: RemoteTopic, partition: int, wanted: list[tuple[int, bytes]],
                   available: Counter[bytes], tally: _Tally) -> int:
    matched = 0
    absent: list[int] = []
    for offset, digest in wanted:
        if available[digest] > 0:
            available[digest] -= 1
            matched += 1
        else:
            absent.append(offset)
    tally.add("pending", len(absent), f"{topic.source}[{partition}]: keyless record at source offset "
                                      f"{absent[0] if absent else -1} is not on the target")
    return matched


def verify_keys(config: StraitConfig, flow: FlowConfig, topics: Sequence[str] = (),
                timeout: float = DEFAULT_TIMEOUT) -> tuple[KeyParity, ...]:
    """Check every replicated topic of a repartitioning flow (or ``topics``) key by key."""
    source_cluster, target_cluster = config.cluster(flow.source), config.cluster(flow.target)
    counts = topic_partitions(admin_client(source_cluster.librdkafka_config("admin")), flow.source, timeout)
    source = PartitionReader(source_cluster.librdkafka_config("consumer"), flow.source, timeout)
    target = PartitionReader(target_cluster.librdkafka_config("consumer"), flow.target, timeout,
                             committed_only=flow.exactly_once)
    target_counts = topic_partitions(admin_client(target_cluster.librdkafka_config("admin")), flow.target, timeout)
    try:
        results = []
        for topic in selected_topics(flow, counts, topics):
            partitions = target_counts.get(topic.remote, topic.remote_partitions)
            source_ranges = [(p, source.watermarks(topic.source, p)) for p in range(topic.partitions)]
            target_ranges = [(p, target.watermarks(topic.remote, p)) for p in range(partitions)]  # after the source
            result = compare_keys(
                topic, partitions,
                ((p, r) for p, w in source_ranges for r in source.read(topic.source, p, w.low, w.high)),
                ((p, r) for p, w in target_ranges for r in target.read(topic.remote, p, w.low, w.high)))
            log.info("flow=%s topic=%s ok=%s records=%d keys=%d missing=%d pending=%d misplaced=%d other=%d",
                     flow.name, topic.source, result.ok, result.source_records, result.keys, result.missing,
                     result.pending, result.misplaced, result.other_records)
            results.append(result)
        return tuple(results)
    finally:
        source.close()
        target.close()
