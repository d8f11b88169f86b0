"""Where the replicator keeps its state: the one module that knows the layout.

- **On the target, beside the copies** (the flow's progress topic, :mod:`strait.progress`): each
  partition's progress, one record per partition, with the running task's live totals
  (:mod:`strait_replicator.live`), and the stop requests of the running query. Every host that
  copies reaches the target, so tasks and driver exchange everything there.
- **Spark's streaming checkpoint**, one per flow: ``<state location>/<flow>/checkpoint``. Its offsets
  log holds each epoch's entry (:class:`EpochOffsets`: where each partition started, the source's
  end offsets when it was planned), its commits log the epochs that ended. The state location is a
  local folder of the driver or any Hadoop-compatible URI (``hdfs://``, ``s3a://``, ``file:``); only
  the driver reads it (:class:`CheckpointLog`: a local folder directly, any other through Hadoop's
  file system API in the driver's JVM). Workers never touch it.

Nothing else is kept: no file beside the checkpoint, nothing on a worker's disk.
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from strait.errors import StraitError

log = logging.getLogger(__name__)

TopicPartitionKey = tuple[str, int]
Offsets = dict[TopicPartitionKey, int]

_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
# Where a Hadoop configuration (a default file system) reaches Spark; spark-submit's own process sets
# PYSPARK_GATEWAY_PORT.
_HADOOP_CONFIGURATION = ("HADOOP_CONF_DIR", "YARN_CONF_DIR", "PYSPARK_GATEWAY_PORT")


class CheckpointFormatError(StraitError):
    """An entry of a checkpoint's offsets log is not an epoch entry (another strait version wrote it)."""


class CheckpointReadError(StraitError):
    """Spark's checkpoint could not be read (its file system does not answer)."""


@dataclass(frozen=True)
class EpochOffsets:
    """One epoch's entry in Spark's offsets log.

    ``start``: where each partition's copy starts (it also keeps partitions the plan no longer
    holds, so a topic added back resumes where it stopped); ``until``: the source's end offsets
    when the epoch was planned (a partition missing there is not copied in this epoch).
    """

    epoch: int
    start: Offsets
    until: Offsets = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """Spark's offset: a JSON object."""
        return {"epoch": self.epoch, "from": _as_json(self.start), "until": _as_json(self.until)}

    @staticmethod
    def from_json(value: Mapping[str, Any]) -> EpochOffsets:
        """The entry of a Spark offset written by :meth:`to_json`; CheckpointFormatError for any other."""
        if not isinstance(value, Mapping) or "epoch" not in value or "from" not in value:
            raise CheckpointFormatError(f"offsets-log entry {json.dumps(value)[:200]} is not a strait epoch entry")
        return EpochOffsets(int(value["epoch"]), _as_keys(value.get("from", {})), _as_keys(value.get("until", {})))


def state_location(given: str | Path | None, default: Path) -> str:
    """The replicator's state location: a URI as given, a local folder made absolute."""
    if given is None:
        return str(default.resolve())
    text = str(given)
    return text.rstrip("/") if _SCHEME.match(text) else str(Path(text).resolve())


def is_local(location: str) -> bool:
    """True for a state location on this host's file system (a folder, or a ``file:`` URI)."""
    return not _SCHEME.match(location) or location.lower().startswith("file:")


def flow_checkpoint(location: str, flow: str) -> str:
    """The Spark checkpoint of ``flow`` under the state location."""
    return f"{location.rstrip('/')}/{flow.replace('->', '_to_')}/checkpoint"


def epoch_of_log_text(text: str) -> EpochOffsets | None:
    """The epoch entry of one offsets-log file's text (Spark writes the source's offset JSON on the
    last line), or None for anything else."""
    lines = text.splitlines()
    try:
        parsed = json.loads(lines[-1]) if lines else None
        return EpochOffsets.from_json(parsed) if isinstance(parsed, dict) else None
    except (ValueError, KeyError, TypeError, CheckpointFormatError):
        return None


class CheckpointLog:
    """Reads a query's Spark checkpoint where it lives: a local one from this host's disk, any other
    through Hadoop's file system in the driver's JVM (``session`` gives the session, waiting for it).

    A folder without a scheme is this host's only while no Hadoop configuration may make Spark resolve
    it elsewhere (a default file system such as ``hdfs://``): under spark-submit or with
    ``HADOOP_CONF_DIR``/``YARN_CONF_DIR`` set, it is read through the JVM, as Spark writes it.
    Call it on the driver (the control loop or a foreachBatch callback).
    """

    def __init__(self, location: str, session: Callable[[], Any]) -> None:
        self.location = location
        self._session = session
        self._local = _local_path(location)

    def newest_epoch(self) -> EpochOffsets | None:
        """The newest epoch in the offsets log (the one a resumed query goes on from), or None."""
        for batch in sorted(self.batch_ids("offsets"), reverse=True):
            epoch = self.epoch(batch)
            if epoch is not None:
                return epoch
        return None

    def epoch(self, batch_id: int) -> EpochOffsets | None:
        """The epoch entry of one batch of the offsets log, or None (not written, not strait's)."""
        text = self._read(f"offsets/{batch_id}")
        return epoch_of_log_text(text) if text is not None else None

    def uncommitted_batch(self) -> int | None:
        """The newest planned batch that was never committed (a query resumed runs it again), or None."""
        planned = self.batch_ids("offsets")
        return max(planned) if planned and max(planned) not in self.batch_ids("commits") else None

    def batch_ids(self, log_name: str) -> set[int]:
        """The batch ids of one of the checkpoint's logs (``offsets`` or ``commits``)."""
        jvm = self._jvm()
        try:
            names = self._local_names(log_name) if jvm is None else self._jvm_names(jvm, log_name)
        except Exception as exc:  # noqa: BLE001 - py4j wraps the JVM's IOException
            raise CheckpointReadError(f"checkpoint {self.location}: listing {log_name} failed: {_cause(exc)}") from exc
        return {int(name) for name in names if name.isdigit()}

    def _read(self, relative: str) -> str | None:
        jvm = self._jvm()
        try:
            return self._local_text(relative) if jvm is None else self._jvm_text(jvm, relative)
        except Exception as exc:  # noqa: BLE001 - py4j wraps the JVM's IOException
            raise CheckpointReadError(f"checkpoint {self.location}: reading {relative} failed: {_cause(exc)}") from exc

    def _jvm(self) -> Any:
        """The session's context when the checkpoint is read through the JVM (None: from the disk). A
        session that cannot start raises its own error, not a checkpoint's."""
        return None if self._local is not None else self._session().sparkContext

    def _local_names(self, folder: str) -> list[str]:
        assert self._local is not None
        path = self._local / folder
        return [child.name for child in path.iterdir()] if path.is_dir() else []

    def _local_text(self, relative: str) -> str | None:
        assert self._local is not None
        path = self._local / relative
        return path.read_text(encoding="utf-8") if path.is_file() else None

    def _jvm_names(self, context: Any, folder: str) -> list[str]:
        fs, path = self._file_system(context, folder)
        return [str(s.getPath().getName()) for s in fs.listStatus(path)] if fs.exists(path) else []

    def _jvm_text(self, context: Any, relative: str) -> str | None:
        fs, path = self._file_system(context, relative)
        if not fs.exists(path):
            return None
        stream = fs.open(path)
        try:
            return str(context._jvm.org.apache.commons.io.IOUtils.toString(stream, "UTF-8"))
        finally:
            stream.close()

    def _file_system(self, context: Any, relative: str) -> tuple[Any, Any]:
        path = context._jvm.org.apache.hadoop.fs.Path(f"{self.location}/{relative}")
        return path.getFileSystem(context._jsc.hadoopConfiguration()), path


def _local_path(location: str) -> Path | None:
    """The folder of a state location certainly on this host (see :class:`CheckpointLog`), else None."""
    if not is_local(location):
        return None
    if location.lower().startswith("file:"):
        return Path(urlparse(location).path)
    return None if any(name in os.environ for name in _HADOOP_CONFIGURATION) else Path(location)


def _cause(exc: Exception) -> str:
    """The JVM's own exception text (py4j's first line only names the call), else Python's."""
    java = getattr(exc, "java_exception", None)
    if java is not None:
        return str(java.toString())
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _as_json(offsets: Offsets) -> dict[str, dict[str, int]]:
    result: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        result.setdefault(topic, {})[str(partition)] = offset
    return result


def _as_keys(offsets: Mapping[str, Any]) -> Offsets:
    return {(topic, int(p)): int(o) for topic, partitions in offsets.items() if isinstance(partitions, dict)
            for p, o in partitions.items()}
