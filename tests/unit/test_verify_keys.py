"""Per-key verification of repartitioned topics: Kafka's murmur2 placement, order per key and source
partition, records from other sources in between, missing, pending and misplaced records."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from strait.remote_topics import RemoteTopic
from strait.verify import KafkaRecord
from strait.verify_keys import compare_keys, key_partition, murmur2

pytestmark = pytest.mark.unit

TOPIC = RemoteTopic("orders", "orders", 2, 3)


@pytest.mark.parametrize(("text", "expected"), [  # Kafka's own UtilsTest.testMurmur2 vectors
    ("21", -973932308), ("foobar", -790332482), ("a-little-bit-long-string", -985981536),
    ("a-little-bit-longer-string", -1486304829), ("lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
    ("abc", 479470107),
])
def test_murmur2_is_kafkas(text: str, expected: int) -> None:
    assert murmur2(text.encode()) == expected


def _record(offset: int, key: bytes | None, value: bytes) -> KafkaRecord:
    return KafkaRecord(offset, key, value, (), 1000 + offset)


def _source(records: list[tuple[int, bytes | None, bytes]]) -> list[tuple[int, KafkaRecord]]:
    """Source records; their values are made unique (equal records cannot be told apart)."""
    offsets = {0: 0, 1: 0}
    out = []
    for partition, key, value in records:
        out.append((partition, _record(offsets[partition], key, value + b"@%d/%d" % (partition, offsets[partition]))))
        offsets[partition] += 1
    return out


def _placed(source: list[tuple[int, KafkaRecord]], extra: list[KafkaRecord] = ()) -> list[tuple[int, KafkaRecord]]:
    """The target as the replicator writes it: by key hash, in source order, offsets per target partition."""
    next_offset = [0, 0, 0]
    out = []
    for record in [r for _, r in source] + list(extra):
        p = key_partition(record.key, 3) if record.key is not None else record.offset % 3
        out.append((p, KafkaRecord(next_offset[p], record.key, record.value, record.headers, record.timestamp)))
        next_offset[p] += 1
    return out


SOURCE = _source([(0, b"k1", b"a"), (1, b"k2", b"b"), (0, b"k1", b"c"), (1, None, b"d"), (0, b"k3", b"e"),
                  (1, b"k2", b"f")])


def test_a_faithful_copy_with_another_sources_records_in_between_is_parity() -> None:
    other = [_record(0, b"k1", b"from-elsewhere"), _record(1, b"k2", b"from-elsewhere")]
    result = compare_keys(TOPIC, 3, SOURCE, _placed(SOURCE, other))
    assert result.ok and (result.source_records, result.matched, result.keys, result.other_records) == (6, 6, 3, 2)


def test_a_gap_in_a_keys_order_is_missing_and_an_uncopied_tail_is_pending() -> None:
    target = [(p, r) for p, r in _placed(SOURCE) if r.value[:1] not in (b"a", b"f")]
    result = compare_keys(TOPIC, 3, SOURCE, target)
    assert (result.missing, result.pending, result.ok) == (1, 1, False)
    assert "key b'k1'" in (result.first_problem or "")


def test_records_out_of_key_order_are_caught() -> None:
    target = _placed(SOURCE)
    swapped = [(p, r) for p, r in target if r.value[:1] != b"a"] + [(p, r) for p, r in target if r.value[:1] == b"a"]
    result = compare_keys(TOPIC, 3, SOURCE, swapped)
    assert result.pending == 1 and not result.ok  # "a" came after "c": its key's order is broken


def test_a_record_in_the_wrong_partition_is_misplaced() -> None:
    target = [((p + 1) % 3 if r.value[:1] == b"e" else p, r) for p, r in _placed(SOURCE)]
    result = compare_keys(TOPIC, 3, SOURCE, target)
    assert result.misplaced == 1 and not result.ok and "belongs in partition" in (result.first_problem or "")


@given(st.lists(st.tuples(st.integers(0, 1), st.sampled_from([b"x", b"y", b"z", None]), st.binary(max_size=3)),
                max_size=30),
       st.integers(0, 30))
def test_a_copy_cut_short_is_never_parity_and_a_full_one_always_is(records: list[tuple[int, bytes | None, bytes]],
                                                                    cut: int) -> None:
    source = _source(records)
    full = _placed(source)
    assert compare_keys(TOPIC, 3, source, full).ok
    shorter = _placed(source[:cut])
    result = compare_keys(TOPIC, 3, source, shorter)
    assert result.ok is (cut >= len(source))
