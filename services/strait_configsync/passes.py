"""What the steps of a configsync pass share: the pass's state, its options, the fence, digests.

Each step works topic by topic (or binding by binding): a failure is recorded with a message naming
topic and cluster, retried later with its own backoff, and never stops the rest of the pass. Only
a cluster that cannot even be listed fails the pass as a whole (:class:`PassFailed`).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Protocol

from confluent_kafka.admin import AdminClient

from strait.config.model import FlowConfig
from strait.errors import StraitError
from strait.kafka.admin import SERVICE_ADMIN_TIMEOUT
from strait.kafka.configs import ConfigChange
from strait.remote_topics import RemoteTopic
from strait.retry import KeyedBackoff
from strait_configsync.drift import ErrorNote
from strait_configsync.ownership import Ownership

STEPS = ("topics", "configs", "acls")


class Fence(Protocol):
    """The flow's lease as the pass sees it: check it before acting, write Redis under it."""

    def check(self) -> None:
        """Raise LeaseLostError when the lease is gone."""

    def load_ownership(self) -> Ownership:
        """The flow's ownership record."""

    def save_ownership(self, ownership: Ownership) -> None:
        """Store the flow's ownership record (fenced)."""


class PassFailed(StraitError):
    """The pass could not run at all (a cluster could not be listed)."""


def signature(*parts: object) -> str:
    """A short stable digest of what is being attempted."""
    return hashlib.blake2b(repr(parts).encode(), digest_size=8).hexdigest()


def change_signature(change: ConfigChange) -> str:
    """The digest of a topic config change (a new change is tried at once, whatever the backoff)."""
    return signature(sorted(change.set.items()), sorted(change.delete))


@dataclass
class PassState:
    """What one pass collects on its way."""

    topics: list[RemoteTopic]
    source_partitions: dict[str, int]
    target_partitions: dict[str, int]
    errors: list[ErrorNote] = field(default_factory=list)


@dataclass(frozen=True)
class SyncOptions:
    """How passes behave."""

    admin_timeout: float = SERVICE_ADMIN_TIMEOUT
    delete_acls: bool = False


class PassContext(Protocol):
    """What a step uses of its flow's sync: the flow, clients, backoffs, fence, and how to report."""

    flow: FlowConfig
    backoff: KeyedBackoff
    fence: Fence
    options: SyncOptions

    def clients(self) -> tuple[AdminClient, AdminClient]:
        """The source's and the target's admin clients."""

    def fail(self, state: PassState, key: str, sig: str, exc: StraitError) -> None:
        """Record a failed item: its backoff, the error metric and note."""

    def action(self, action: str, count: int = 1) -> None:
        """Count changes made."""
