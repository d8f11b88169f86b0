"""MirrorMaker 2's internal records, byte for byte: heartbeats, checkpoints, offset syncs and the
source offsets Kafka Connect keeps for it.

MM2 writes them with Kafka's classic protocol types: big-endian INT16/INT32/INT64 and STRING
(INT16 byte length, never negative, then UTF-8), fields back to back in schema order. Heartbeat
and checkpoint values start with an INT16 version (0); offset-sync values have none. Like Java,
readers ignore trailing bytes, and read the version-0 layout whatever the version says, so a newer
writer that appends fields stays readable. Matching MM2 exactly lets MM2's ``MirrorClient`` and
``RemoteClusterUtils`` read strait's topics and strait read MM2's.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from typing import Any

from strait.errors import StraitError

VERSION = 0
MAX_STRING_BYTES = 32767
INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1

_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")


class RecordFormatError(StraitError):
    """An MM2 internal record is malformed, or a value cannot be encoded in MM2's format."""


def _check_string(record: str, name: str, value: object) -> bytes:
    """The UTF-8 bytes of a string field, or RecordFormatError when it cannot be a STRING."""
    if not isinstance(value, str):
        raise RecordFormatError(f"{record} {name} must be a string, got {value!r}")
    try:
        encoded = value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise RecordFormatError(f"{record} {name} is not encodable as UTF-8: {exc.reason}") from None
    if len(encoded) > MAX_STRING_BYTES:
        raise RecordFormatError(
            f"{record} {name} is {len(encoded)} UTF-8 bytes long; MM2 strings hold at most {MAX_STRING_BYTES}"
        )
    return encoded


def _check_int(record: str, name: str, value: object, maximum: int) -> None:
    """Raise unless ``value`` is an int in ``0..maximum`` (offsets, partitions, timestamps)."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise RecordFormatError(f"{record} {name} must be an integer, got {value!r}")
    if not 0 <= value <= maximum:
        raise RecordFormatError(f"{record} {name} must be between 0 and {maximum}, got {value}")


def _string(value: str) -> bytes:
    encoded = value.encode("utf-8")
    return _INT16.pack(len(encoded)) + encoded


class _Reader:
    """Reads MM2 protocol fields in order from one key or value, naming the field on failure."""

    def __init__(self, data: bytes | bytearray | memoryview | None, what: str) -> None:
        if data is None:
            raise RecordFormatError(f"{what} is missing (null); a tombstone is not an MM2 record")
        self._data = bytes(data)
        self._pos = 0
        self._what = what

    def _take(self, size: int, name: str) -> bytes:
        end = self._pos + size
        if end > len(self._data):
            raise RecordFormatError(
                f"{self._what} is too short: {name} needs {size} bytes at byte {self._pos}, "
                f"only {len(self._data) - self._pos} left (record is {len(self._data)} bytes)"
            )
        chunk = self._data[self._pos:end]
        self._pos = end
        return chunk

    def int16(self, name: str) -> int:
        return int(_INT16.unpack(self._take(2, name))[0])

    def int32(self, name: str) -> int:
        return int(_INT32.unpack(self._take(4, name))[0])

    def int64(self, name: str) -> int:
        return int(_INT64.unpack(self._take(8, name))[0])

    def string(self, name: str) -> str:
        length = self.int16(f"the length of {name}")
        if length < 0:
            raise RecordFormatError(
                f"{self._what} has a negative length {length} for {name}; null is not allowed"
            )
        raw = self._take(length, name)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise RecordFormatError(f"{self._what} has invalid UTF-8 in {name}: {exc.reason}") from None


@dataclass(frozen=True)
class Heartbeat:
    """One heartbeat from ``source_alias`` to ``target_alias``, stamped in epoch milliseconds."""

    source_alias: str
    target_alias: str
    timestamp_ms: int

    def __post_init__(self) -> None:
        _check_string("heartbeat", "source_alias", self.source_alias)
        _check_string("heartbeat", "target_alias", self.target_alias)
        _check_int("heartbeat", "timestamp_ms", self.timestamp_ms, INT64_MAX)

    def key_bytes(self) -> bytes:
        """STRING source alias, STRING target alias."""
        return _string(self.source_alias) + _string(self.target_alias)

    def value_bytes(self) -> bytes:
        """INT16 version 0, INT64 timestamp."""
        return _INT16.pack(VERSION) + _INT64.pack(self.timestamp_ms)

    @classmethod
    def from_record(cls, key: bytes | None, value: bytes | None) -> Heartbeat:
        """Decode a heartbeat record's key and value; raises :class:`RecordFormatError`."""
        key_reader = _Reader(key, "heartbeat key")
        source = key_reader.string("source_alias")
        target = key_reader.string("target_alias")
        value_reader = _Reader(value, "heartbeat value")
        value_reader.int16("version")
        return cls(source, target, value_reader.int64("timestamp_ms"))


@dataclass(frozen=True)
class Checkpoint:
    """A consumer group's committed offset translated to the target cluster.

    ``topic`` is the target-side (remote) topic name; ``metadata`` is the upstream commit's
    metadata, empty (never null) when there is none.
    """

    group: str
    topic: str
    partition: int
    upstream_offset: int
    downstream_offset: int
    metadata: str = ""

    def __post_init__(self) -> None:
        _check_string("checkpoint", "group", self.group)
        _check_string("checkpoint", "topic", self.topic)
        _check_int("checkpoint", "partition", self.partition, INT32_MAX)
        _check_int("checkpoint", "upstream_offset", self.upstream_offset, INT64_MAX)
        _check_int("checkpoint", "downstream_offset", self.downstream_offset, INT64_MAX)
        _check_string("checkpoint", "metadata", self.metadata)

    def key_bytes(self) -> bytes:
        """STRING group, STRING topic, INT32 partition."""
        return _string(self.group) + _string(self.topic) + _INT32.pack(self.partition)

    def value_bytes(self) -> bytes:
        """INT16 version 0, INT64 upstream offset, INT64 downstream offset, STRING metadata."""
        return (
            _INT16.pack(VERSION)
            + _INT64.pack(self.upstream_offset)
            + _INT64.pack(self.downstream_offset)
            + _string(self.metadata)
        )

    @classmethod
    def from_record(cls, key: bytes | None, value: bytes | None) -> Checkpoint:
        """Decode a checkpoint record's key and value; raises :class:`RecordFormatError`."""
        key_reader = _Reader(key, "checkpoint key")
        group = key_reader.string("group")
        topic = key_reader.string("topic")
        partition = key_reader.int32("partition")
        value_reader = _Reader(value, "checkpoint value")
        value_reader.int16("version")
        upstream = value_reader.int64("upstream_offset")
        downstream = value_reader.int64("downstream_offset")
        metadata = value_reader.string("metadata")
        return cls(group, topic, partition, upstream, downstream, metadata)


# A header on the offset syncs strait writes: it syncs both sides of every break in the offsets, so
# translation between two of its syncs is exact (strait.offsets). MirrorMaker 2 ignores headers.
EXACT_SYNC_HEADER = "strait.exact"


@dataclass(frozen=True)
class OffsetSync:
    """One point of the offset mapping: ``upstream_offset`` on the source is ``downstream_offset`` downstream.

    ``topic`` is the source (upstream) topic name, not the renamed one.
    """

    topic: str
    partition: int
    upstream_offset: int
    downstream_offset: int

    def __post_init__(self) -> None:
        _check_string("offset sync", "topic", self.topic)
        _check_int("offset sync", "partition", self.partition, INT32_MAX)
        _check_int("offset sync", "upstream_offset", self.upstream_offset, INT64_MAX)
        _check_int("offset sync", "downstream_offset", self.downstream_offset, INT64_MAX)

    def key_bytes(self) -> bytes:
        """STRING topic, INT32 partition."""
        return _string(self.topic) + _INT32.pack(self.partition)

    def value_bytes(self) -> bytes:
        """INT64 upstream offset, INT64 downstream offset (no version field)."""
        return _INT64.pack(self.upstream_offset) + _INT64.pack(self.downstream_offset)

    @classmethod
    def from_record(cls, key: bytes | None, value: bytes | None) -> OffsetSync:
        """Decode an offset-sync record's key and value; raises :class:`RecordFormatError`."""
        key_reader = _Reader(key, "offset sync key")
        topic = key_reader.string("topic")
        partition = key_reader.int32("partition")
        value_reader = _Reader(value, "offset sync value")
        upstream = value_reader.int64("upstream_offset")
        return cls(topic, partition, upstream, value_reader.int64("downstream_offset"))


MIRROR_SOURCE_CONNECTOR = "MirrorSourceConnector"


@dataclass(frozen=True)
class SourceOffset:
    """One source partition's copy progress as Kafka Connect keeps it for MM2's MirrorSourceConnector.

    ``offset`` is the last source offset copied (the copy goes on at ``offset + 1``). Key and value
    are Connect's JSON without spaces, the key's map in the field order Java's HashMap gives
    (``cluster``, ``partition``, ``topic``): compaction and the partition a record lands in depend on
    those bytes, so MM2 reads strait's records as its own and the other way round.
    """

    connector: str
    cluster: str
    topic: str
    partition: int
    offset: int

    def __post_init__(self) -> None:
        _check_string("source offset", "connector", self.connector)
        _check_string("source offset", "cluster", self.cluster)
        _check_string("source offset", "topic", self.topic)
        _check_int("source offset", "partition", self.partition, INT32_MAX)
        _check_int("source offset", "offset", self.offset, INT64_MAX)

    @property
    def next_offset(self) -> int:
        """Where the copy goes on."""
        return self.offset + 1

    def key_bytes(self) -> bytes:
        """``["<connector>",{"cluster":"<alias>","partition":N,"topic":"<topic>"}]``."""
        return source_offset_key(self.connector, self.cluster, self.topic, self.partition)

    def value_bytes(self) -> bytes:
        """``{"offset":N}``."""
        return b'{"offset":%d}' % self.offset

    @classmethod
    def from_record(cls, key: bytes | None, value: bytes | None) -> SourceOffset | None:
        """Decode a Connect offsets record; None for a tombstone (the partition's progress was removed).

        Raises :class:`RecordFormatError` for a record that is not a source offset (another
        connector's record of another shape is one).
        """
        try:
            return cls.from_parsed(json.loads(key or b"null"), None if value is None else json.loads(value))
        except ValueError as exc:
            raise RecordFormatError(f"not a MirrorSourceConnector offset record ({exc}): key {key[:120]!r}"
                                    if key else "an offsets record without a key") from None

    @classmethod
    def from_parsed(cls, key: Any, value: Any) -> SourceOffset | None:
        """:meth:`from_record` of a key and value already parsed from JSON (value None: a tombstone)."""
        try:
            connector, where = key
            offset = None if value is None else value["offset"]
            parsed = (str(connector), str(where["cluster"]), str(where["topic"]), int(where["partition"]))
        except (ValueError, TypeError, KeyError) as exc:
            raise RecordFormatError(f"not a MirrorSourceConnector offset record ({exc}): key {str(key)[:120]}") \
                from None
        return None if offset is None else cls(*parsed, int(offset))


def source_offset_key(connector: str, cluster: str, topic: str, partition: int) -> bytes:
    """The key of a partition's record in a Connect offsets topic (see :class:`SourceOffset`)."""
    where = {"cluster": cluster, "partition": partition, "topic": topic}
    return json.dumps([connector, where], separators=(",", ":"), ensure_ascii=False).encode("utf-8")
