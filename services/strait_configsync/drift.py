"""A flow's drift report: how far the target is from the source, as the last sync pass left it.

The replica that holds a flow's lease publishes the report in Redis after every pass (a small JSON
document with a TTL, written under the lease's fence); ``strait status`` reads it from there
without touching Kafka. Lists are capped so a badly drifted flow still makes a small document.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import redis

from strait.coord.redis_client import redis_errors

REPORT_PREFIX = "configsync:report:"
LIST_CAP = 50


@dataclass(frozen=True)
class PartitionMismatch:
    """A remote topic whose partition count differs from its source's."""

    topic: str
    source: int
    target: int


@dataclass(frozen=True)
class ConfigDrift:
    """A remote topic whose synced configs differ from the source's."""

    topic: str
    keys: tuple[str, ...]


@dataclass(frozen=True)
class ErrorNote:
    """One failure of the pass, as the operator should read it."""

    kind: str
    message: str


@dataclass(frozen=True)
class FlowReport:
    """Drift of one flow after a sync pass (``*_count`` fields are exact, lists are capped)."""

    flow: str
    holder: str
    updated_at: float
    topics_replicated: int = 0
    topics_in_sync: int = 0
    missing: tuple[str, ...] = ()
    missing_count: int = 0
    partition_mismatch: tuple[PartitionMismatch, ...] = ()
    partition_mismatch_count: int = 0
    config_drift: tuple[ConfigDrift, ...] = ()
    config_drift_count: int = 0
    acls_wanted: int = 0
    acls_missing: tuple[str, ...] = ()
    acls_missing_count: int = 0
    acls_deleted_on_source: tuple[str, ...] = ()
    acls_deleted_on_source_count: int = 0
    acl_sync: str = "ok"  # ok | disabled | source has no authorizer | failed
    internal_topics: tuple[str, ...] = ()
    errors: tuple[ErrorNote, ...] = field(default=())

    @property
    def acl_drift(self) -> int:
        """ACLs the target lacks plus ACLs still there although deleted on the source."""
        return self.acls_missing_count + self.acls_deleted_on_source_count

    @property
    def state(self) -> str:
        """``error`` when the pass hit errors, ``drift`` when anything differs, else ``in sync``."""
        if self.errors:
            return "error"
        drifted = self.missing_count or self.partition_mismatch_count or self.config_drift_count or self.acl_drift
        return "drift" if drifted else "in sync"

    def to_dict(self) -> dict[str, Any]:
        """The report as JSON-ready data (with the derived ``acl_drift`` and ``state``)."""
        return {**asdict(self), "acl_drift": self.acl_drift, "state": self.state}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> FlowReport:
        """A report read back from :meth:`to_dict`'s data."""
        values = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        values["partition_mismatch"] = tuple(PartitionMismatch(**m) for m in data.get("partition_mismatch", ()))
        values["config_drift"] = tuple(ConfigDrift(d["topic"], tuple(d["keys"])) for d in data.get("config_drift", ()))
        values["errors"] = tuple(ErrorNote(**e) for e in data.get("errors", ()))
        for name in ("missing", "acls_missing", "acls_deleted_on_source", "internal_topics"):
            values[name] = tuple(data.get(name, ()))
        return cls(**values)


def capped(items: list[Any]) -> tuple[Any, ...]:
    """The first :data:`LIST_CAP` items."""
    return tuple(items[:LIST_CAP])


def report_key(namespace: str, flow: str) -> str:
    """Redis key of a flow's report."""
    return f"{namespace}:{REPORT_PREFIX}{flow}"


def encode_report(report: FlowReport) -> str:
    """The stored JSON of a report."""
    return json.dumps(report.to_dict(), sort_keys=True)


def read_reports(client: redis.Redis, namespace: str = "strait") -> dict[str, FlowReport]:
    """Every published, unexpired flow report, by flow name."""
    prefix = f"{namespace}:{REPORT_PREFIX}"
    with redis_errors(client, "read configsync drift reports"):
        keys = sorted(client.scan_iter(match=f"{prefix}*"))
        bodies = client.mget(keys) if keys else []
    reports: dict[str, FlowReport] = {}
    for body in bodies:
        if body:
            report = FlowReport.from_dict(json.loads(body))
            reports[report.flow] = report
    return reports


def age(report: FlowReport) -> float:
    """Seconds since the report was written."""
    return max(0.0, time.time() - report.updated_at)
