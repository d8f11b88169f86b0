"""Coordination of strait's replicas through Redis.

* :mod:`~strait.coord.redis_client` — connecting, and errors when Redis is down;
* :mod:`~strait.coord.leases` — leases with fencing tokens, and a background keeper;
* :mod:`~strait.coord.membership` — group membership with TTL and an epoch;
* :mod:`~strait.coord.assignment` — deterministic balanced assignment and the caller's share;
* :mod:`~strait.coord.documents` — versioned documents with change notification.

If Redis is down, calls raise :class:`CoordinationUnavailableError`; background keepers and
watchers log and retry, and holders keep working until their local lease deadline.
"""

from strait.coord.assignment import Share, ShareTracker, assign
from strait.coord.documents import Document, VersionedDocuments, Watcher
from strait.coord.leases import Lease, LeaseKeeper, LeaseLostError, LeaseOwner, Leases
from strait.coord.membership import GroupView, Heartbeat, Member, MemberKeeper, Membership
from strait.coord.redis_client import CoordinationError, CoordinationUnavailableError, connect

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
