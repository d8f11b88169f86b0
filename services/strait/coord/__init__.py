"""Coordination of strait's replicas through Redis.

* :mod:`~strait.coord.redis_client` — connecting, and errors when Redis is down;
* :mod:`~strait.coord.leases` — leases with fencing tokens, and a background keeper;
* :mod:`~strait.coord.membership` — group membership with TTL and an epoch;
* :mod:`~strait.coord.assignment` — deterministic balanced assignment and the caller's share;
* :mod:`~strait.coord.documents` — versioned documents with change notification.

If Redis is down, calls raise :class:`CoordinationUnavailableError`; background keepers and
watchers log and retry, and holders keep working until their local lease deadline.
"""

import importlib
from typing import Any

# Exported names and their modules, imported on first use: code that only catches a coordination
# error (the replicator's Spark workers) does not import Redis's asyncio client and the rest.
_EXPORTS = {
    "Share": "assignment", "ShareTracker": "assignment", "assign": "assignment",
    "Document": "documents", "VersionedDocuments": "documents", "Watcher": "documents",
    "Lease": "leases", "LeaseKeeper": "leases", "LeaseLostError": "leases", "LeaseOwner": "leases", "Leases": "leases",
    "GroupView": "membership", "Heartbeat": "membership", "Member": "membership", "MemberKeeper": "membership",
    "Membership": "membership",
    "CoordinationError": "redis_client", "CoordinationUnavailableError": "redis_client", "connect": "redis_client",
}


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    globals()[name] = value
    return value


__all__ = [
    "CoordinationError",
    "CoordinationUnavailableError",
    "Document",
    "GroupView",
    "Heartbeat",
    "Lease",
    "LeaseKeeper",
    "LeaseLostError",
    "LeaseOwner",
    "Leases",
    "Member",
    "MemberKeeper",
    "Membership",
    "Share",
    "ShareTracker",
    "VersionedDocuments",
    "Watcher",
    "assign",
    "connect",
]
