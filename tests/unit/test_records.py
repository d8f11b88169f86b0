"""MM2 internal record codecs: the byte layouts of reference/mm2.md §1, errors, round trips."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from strait.errors import StraitError
from strait.records import (
    INT32_MAX,
    INT64_MAX,
    MAX_STRING_BYTES,
    Checkpoint,
    Heartbeat,
    OffsetSync,
    RecordFormatError,
)

# Any text Python can encode as UTF-8 (no lone surrogates) and that fits an MM2 STRING.
texts = st.text(st.characters(blacklist_categories=("Cs",)), max_size=200)
offsets = st.integers(0, INT64_MAX)
partitions = st.integers(0, INT32_MAX)


# --- byte layouts (examples from reference/mm2.md §1) ---------------------------------------------


def test_heartbeat_bytes() -> None:
    heartbeat = Heartbeat("A", "B", 1_700_000_000_000)
    assert heartbeat.key_bytes() == bytes.fromhex("0001 41 0001 42")
    assert heartbeat.value_bytes() == bytes.fromhex("0000 0000018bcfe56800")
    assert Heartbeat.from_record(heartbeat.key_bytes(), heartbeat.value_bytes()) == heartbeat


def test_checkpoint_bytes() -> None:
    checkpoint = Checkpoint("g1", "A.t", 3, 100, 90)
    assert checkpoint.key_bytes() == bytes.fromhex("0002 6731 0003 412e74 00000003")
    assert checkpoint.value_bytes() == bytes.fromhex("0000 0000000000000064 000000000000005a 0000")
    assert checkpoint.metadata == ""
    assert Checkpoint.from_record(checkpoint.key_bytes(), checkpoint.value_bytes()) == checkpoint


def test_offset_sync_bytes_have_no_version() -> None:
    sync = OffsetSync("t", 0, 5, 7)
    assert sync.key_bytes() == bytes.fromhex("0001 74 00000000")
    assert sync.value_bytes() == bytes.fromhex("0000000000000005 0000000000000007")
    assert OffsetSync.from_record(sync.key_bytes(), sync.value_bytes()) == sync


def test_string_lengths_count_utf8_bytes_not_characters() -> None:
    checkpoint = Checkpoint("gé", "A.ü", 0, 0, 0, "😀")
    assert checkpoint.key_bytes()[:5] == b"\x00\x03g\xc3\xa9"
    assert checkpoint.value_bytes()[-6:] == b"\x00\x04\xf0\x9f\x98\x80"


def test_big_offsets_are_signed_64_bit_big_endian() -> None:
    sync = OffsetSync("t", INT32_MAX, INT64_MAX, 2**32)
    assert sync.key_bytes()[-4:] == b"\x7f\xff\xff\xff"
    assert sync.value_bytes() == b"\x7f" + b"\xff" * 7 + b"\x00\x00\x00\x01\x00\x00\x00\x00"


# --- decoding like Java ---------------------------------------------------------------------------


def test_trailing_bytes_are_ignored() -> None:
    checkpoint = Checkpoint("g", "t", 1, 2, 3, "m")
    assert (
        Checkpoint.from_record(checkpoint.key_bytes() + b"\x01\x02", checkpoint.value_bytes() + b"xyz")
        == checkpoint
    )
    heartbeat = Heartbeat("A", "B", 5)
    assert (
        Heartbeat.from_record(heartbeat.key_bytes() + b"\x00", heartbeat.value_bytes() + b"\x00" * 8)
        == heartbeat
    )
    sync = OffsetSync("t", 0, 1, 2)
    assert OffsetSync.from_record(sync.key_bytes() + b"!", sync.value_bytes() + b"!") == sync


def test_a_newer_version_is_read_with_the_version_0_layout() -> None:
    value = b"\x00\x01" + Checkpoint("g", "t", 0, 10, 20, "m").value_bytes()[2:] + b"new-field"
    assert Checkpoint.from_record(Checkpoint("g", "t", 0, 0, 0).key_bytes(), value).downstream_offset == 20
    assert (
        Heartbeat.from_record(
            Heartbeat("A", "B", 0).key_bytes(), b"\x00\x07" + b"\x00" * 7 + b"\x09"
        ).timestamp_ms
        == 9
    )


def test_records_accept_bytearray_and_memoryview() -> None:
    sync = OffsetSync("t", 2, 3, 4)
    assert OffsetSync.from_record(bytearray(sync.key_bytes()), memoryview(sync.value_bytes())) == sync


@pytest.mark.parametrize(
    ("decode", "key", "value", "message"),
    [
        (Checkpoint.from_record, b"", bytes(26), "checkpoint key is too short: the length of group"),
        (
            Checkpoint.from_record,
            b"\x00\x05ab",
            bytes(26),
            "checkpoint key is too short: group needs 5 bytes",
        ),
        (Checkpoint.from_record, b"\x00\x01g\x00\x01t\x00\x00", bytes(26), "partition needs 4 bytes"),
        (
            Checkpoint.from_record,
            Checkpoint("g", "t", 0, 0, 0).key_bytes(),
            bytes(17),
            "downstream_offset needs 8 bytes at byte 10, only 7 left",
        ),
        (
            Checkpoint.from_record,
            Checkpoint("g", "t", 0, 0, 0).key_bytes(),
            bytes(18),
            "the length of metadata",
        ),
        (
            Checkpoint.from_record,
            Checkpoint("g", "t", 0, 0, 0).key_bytes(),
            bytes(18) + b"\xff\xff",
            "negative length -1",
        ),
        (Checkpoint.from_record, b"\xff\xfe", bytes(20), "negative length -2 for group"),
        (
            Checkpoint.from_record,
            b"\x00\x02\xc3\x28\x00\x00\x00\x00\x00\x00",
            bytes(20),
            "invalid UTF-8 in group",
        ),
        (Checkpoint.from_record, None, bytes(20), "checkpoint key is missing"),
        (
            Checkpoint.from_record,
            Checkpoint("g", "t", 0, 0, 0).key_bytes(),
            None,
            "checkpoint value is missing",
        ),
        (Heartbeat.from_record, b"\x00\x01A", b"\x00\x00" + bytes(8), "target_alias"),
        (Heartbeat.from_record, b"\x00\x01A\x00\x01B", b"\x00\x00\x00", "timestamp_ms needs 8 bytes"),
        (Heartbeat.from_record, b"\x00\x01A\x00\x01B", b"\x00", "version needs 2 bytes"),
        (OffsetSync.from_record, b"\x00\x01t\x00\x00\x00", bytes(16), "offset sync key is too short"),
        (OffsetSync.from_record, b"\x00\x01t\x00\x00\x00\x00", bytes(15), "downstream_offset needs 8 bytes"),
    ],
)
def test_corrupt_input_raises_record_format_error(
    decode: object, key: bytes, value: bytes, message: str
) -> None:
    with pytest.raises(RecordFormatError, match=message):
        decode(key, value)  # type: ignore[operator]


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        (b"\x00\x01t\xff\xff\xff\xff", bytes(16), "partition must be between 0"),
        (b"\x00\x01t\x00\x00\x00\x00", b"\xff" * 8 + bytes(8), "upstream_offset must be between 0"),
    ],
)
def test_decoded_values_are_validated(key: bytes, value: bytes, message: str) -> None:
    with pytest.raises(RecordFormatError, match=message):
        OffsetSync.from_record(key, value)


def test_record_format_error_is_a_strait_error() -> None:
    assert issubclass(RecordFormatError, StraitError)


# --- validation on construction -------------------------------------------------------------------


def test_strings_up_to_32767_utf8_bytes_are_allowed() -> None:
    longest = "x" * MAX_STRING_BYTES
    checkpoint = Checkpoint(longest, "t", 0, 0, 0, longest)
    assert Checkpoint.from_record(checkpoint.key_bytes(), checkpoint.value_bytes()) == checkpoint


@pytest.mark.parametrize(
    "make",
    [
        lambda: Checkpoint("x" * (MAX_STRING_BYTES + 1), "t", 0, 0, 0),
        lambda: Checkpoint("g", "t", 0, 0, 0, "é" * 16384),
        lambda: Heartbeat("A", "😀" * 8192, 0),
        lambda: OffsetSync("x" * 40000, 0, 0, 0),
    ],
)
def test_strings_longer_than_32767_utf8_bytes_are_rejected(make: object) -> None:
    with pytest.raises(RecordFormatError, match="at most 32767"):
        make()  # type: ignore[operator]


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: Checkpoint("g", "t", -1, 0, 0), "partition must be between 0 and 2147483647, got -1"),
        (lambda: Checkpoint("g", "t", 2**31, 0, 0), "partition"),
        (lambda: Checkpoint("g", "t", 0, -1, 0), "upstream_offset"),
        (lambda: Checkpoint("g", "t", 0, 0, 2**63), "downstream_offset"),
        (lambda: Checkpoint("g", "t", 0, 0, 0, None), "metadata must be a string"),
        (lambda: Checkpoint("g", None, 0, 0, 0), "topic must be a string"),
        (lambda: Checkpoint("g", "t", True, 0, 0), "partition must be an integer"),
        (lambda: Checkpoint("g", "t", 0, 1.5, 0), "upstream_offset must be an integer"),
        (lambda: Heartbeat("A", "B", -1), "timestamp_ms"),
        (lambda: Heartbeat(b"A", "B", 0), "source_alias must be a string"),
        (lambda: OffsetSync("t", 0, 0, -5), "downstream_offset"),
        (lambda: OffsetSync("\ud800", 0, 0, 0), "not encodable as UTF-8"),
    ],
)
def test_invalid_fields_are_rejected_on_construction(make: object, message: str) -> None:
    with pytest.raises(RecordFormatError, match=message):
        make()  # type: ignore[operator]


def test_records_are_frozen_and_hashable() -> None:
    checkpoint = Checkpoint("g", "t", 0, 1, 2)
    with pytest.raises(AttributeError):
        checkpoint.partition = 3  # type: ignore[misc]
    assert {checkpoint, Checkpoint("g", "t", 0, 1, 2)} == {checkpoint}


# --- properties -----------------------------------------------------------------------------------


@given(source=texts, target=texts, timestamp=offsets)
def test_heartbeat_round_trip(source: str, target: str, timestamp: int) -> None:
    heartbeat = Heartbeat(source, target, timestamp)
    assert Heartbeat.from_record(heartbeat.key_bytes(), heartbeat.value_bytes()) == heartbeat
    assert len(heartbeat.value_bytes()) == 10


@given(group=texts, topic=texts, partition=partitions, upstream=offsets, downstream=offsets, metadata=texts)
def test_checkpoint_round_trip(
    group: str, topic: str, partition: int, upstream: int, downstream: int, metadata: str
) -> None:
    checkpoint = Checkpoint(group, topic, partition, upstream, downstream, metadata)
    key, value = checkpoint.key_bytes(), checkpoint.value_bytes()
    assert Checkpoint.from_record(key, value) == checkpoint
    assert len(key) == 2 + len(group.encode()) + 2 + len(topic.encode()) + 4
    assert len(value) == 2 + 8 + 8 + 2 + len(metadata.encode())


@given(topic=texts, partition=partitions, upstream=offsets, downstream=offsets)
def test_offset_sync_round_trip(topic: str, partition: int, upstream: int, downstream: int) -> None:
    sync = OffsetSync(topic, partition, upstream, downstream)
    assert OffsetSync.from_record(sync.key_bytes(), sync.value_bytes()) == sync
    assert len(sync.value_bytes()) == 16


@given(checkpoint=st.builds(Checkpoint, texts, texts, partitions, offsets, offsets, texts), cut=st.data())
def test_every_truncation_raises_record_format_error(checkpoint: Checkpoint, cut: st.DataObject) -> None:
    key, value = checkpoint.key_bytes(), checkpoint.value_bytes()
    short_key = key[: cut.draw(st.integers(0, len(key) - 1))]
    short_value = value[: cut.draw(st.integers(0, len(value) - 1))]
    with pytest.raises(RecordFormatError):
        Checkpoint.from_record(short_key, value)
    with pytest.raises(RecordFormatError):
        Checkpoint.from_record(key, short_value)


@given(key=st.binary(max_size=40), value=st.binary(max_size=40))
def test_arbitrary_bytes_decode_or_raise_record_format_error(key: bytes, value: bytes) -> None:
    for record_type in (Heartbeat, Checkpoint, OffsetSync):
        try:
            record = record_type.from_record(key, value)
        except RecordFormatError:
            continue
        # Whatever decodes re-encodes to a prefix of the input (the rest is ignored trailing data).
        assert key.startswith(record.key_bytes())
        # The version field is read but not kept, so compare from after it.
        skip = 0 if record_type is OffsetSync else 2
        assert value[skip:].startswith(record.value_bytes()[skip:])
