"""Deterministic, balanced, sticky assignment of work items (flows, topics, groups) to live members.

:func:`assign` is a pure function of the item and member *sets* and of who currently holds each
item, so every replica computes the same answer from the same view of Redis without talking to
the others. It works in three steps:

1. **Home**: each item's home is its rendezvous-hashing winner, the member with the highest
   ``blake2b(item, member)`` score. Homes only change for items whose winner joins or leaves.
2. **Quota**: with ``n = q * m + r`` items and ``m`` members, ``r`` members may hold ``q + 1``,
   the others ``q``: first those holding the most items now, then those homed the most.
3. **Keep, then fill**: a live member keeps the items it holds now (highest score first) up to
   its quota, then takes unheld items homed on it; what is left over *spills*, best score first,
   to members with room.

Guarantees:

* the result does not depend on input order or duplicates; every item goes to exactly one member;
* balance: every member holds ``q`` or ``q + 1`` items (max - min <= 1);
* stickiness: an item held by a live member stays with it unless that member is over its quota,
  which only a join (or fewer items) can cause. So when a member leaves or dies only its own items
  move, and when one joins only the items it needs for its quota move to it;
* without holders (a cold start), the movement bound of pure rendezvous-with-quota holds: when
  one member joins or leaves, an item changes owner only if its home changed or it was spilled
  before or after, ``moved <= homed(x) + spilled(before) + spilled(after)``.

Pure rendezvous hashing with quotas is not sticky: balancing can move an item between two
surviving members (measured: 3 flows over 3 members, one killed, moved a survivor's flow in
about 30 % of cases). Holders come from the work items' leases, so the answer converges to the
current ownership and stays there.

:class:`ShareTracker` is the runtime side: it recomputes the caller's share whenever the group's
membership, the item set or the holders change. Replicas read Redis at slightly different moments,
so during a re-balance two members may briefly both think they own an item; work that must not
overlap is additionally protected by a lease.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, replace

from strait.coord.membership import Membership
from strait.coord.redis_client import CoordinationError

log = logging.getLogger(__name__)


def score(item: str, member: str) -> int:
    """The rendezvous score of ``member`` for ``item`` (stable across processes and versions)."""
    data = f"{len(item)}:{item}{member}".encode()
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "big")


def home(item: str, members: Collection[str]) -> str:
    """The member that wins ``item`` under rendezvous hashing (its home)."""
    if not members:
        raise ValueError(f"no members to home item {item!r} on")
    return max(members, key=lambda member: (score(item, member), member))


def assign(
    items: Iterable[str], members: Iterable[str], holders: Mapping[str, str] | None = None
) -> dict[str, frozenset[str]]:
    """Assign every item to one member, balanced, deterministically; see the module docstring.

    Args:
        holders: who works on each item now (item -> member); entries for items or members not
            in the sets are ignored.

    Returns:
        Each member's items (a member may get none when there are fewer items than members);
        an empty dict when there are no members.
    """
    member_set = sorted(set(members))
    if not member_set:
        return {}
    item_set = set(items)
    held = {item: member for item, member in (holders or {}).items()
            if item in item_set and member in member_set}
    # candidates[member]: (held first, then score, item), best first
    candidates: dict[str, list[tuple[bool, int, str]]] = {member: [] for member in member_set}
    for item in item_set:
        owner = held.get(item) or home(item, member_set)
        candidates[owner].append((item in held, score(item, owner), item))
    quotas = _quotas(candidates)
    owned: dict[str, set[str]] = {}
    spilled: list[str] = []
    for member, ranked in candidates.items():
        ranked.sort(reverse=True)
        owned[member] = {item for _, _, item in ranked[: quotas[member]]}
        spilled.extend(item for _, _, item in ranked[quotas[member] :])
    _place(spilled, owned, quotas)
    return {member: frozenset(owned_items) for member, owned_items in owned.items()}


def _quotas(candidates: dict[str, list[tuple[bool, int, str]]]) -> dict[str, int]:
    total = sum(len(ranked) for ranked in candidates.values())
    base, extra = divmod(total, len(candidates))

    def demand(member: str) -> tuple[int, int, int, str]:
        holding = sum(1 for is_held, _, _ in candidates[member] if is_held)
        return (-holding, -len(candidates[member]), score("", member), member)

    by_demand = sorted(candidates, key=demand)
    return {member: base + (1 if rank < extra else 0) for rank, member in enumerate(by_demand)}


def _place(spilled: list[str], owned: dict[str, set[str]], quotas: dict[str, int]) -> None:
    open_members = [member for member in owned if len(owned[member]) < quotas[member]]
    offers = sorted(
        ((score(item, member), item, member) for item in spilled for member in open_members), reverse=True
    )
    placed: set[str] = set()
    for _, item, member in offers:
        if item not in placed and len(owned[member]) < quotas[member]:
            owned[member].add(item)
            placed.add(item)


SHARD_MARK = "#"


def shard_of(key: str, shards: int) -> int:
    """The shard (``0 .. shards - 1``) that ``key`` (e.g. a consumer group) falls in; the same everywhere."""
    if shards < 1:
        raise ValueError(f"shards must be at least 1, got {shards}")
    digest = hashlib.blake2b(key.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") % shards


@dataclass(frozen=True)
class ShardItem:
    """One shard of a flow's work as an assignable item, named ``"<flow>#<index>/<count>"``.

    The count is part of the name, so when a flow's shard count changes every shard is a new item
    (with its own lease) and no two shards of different counts can be taken for the same keys.
    """

    flow: str
    index: int
    count: int

    @property
    def name(self) -> str:
        """The item's name (also its lease's suffix)."""
        return f"{self.flow}{SHARD_MARK}{self.index}/{self.count}"

    def owns(self, key: str) -> bool:
        """Whether ``key`` falls in this shard."""
        return shard_of(key, self.count) == self.index

    @classmethod
    def parse(cls, name: str) -> ShardItem:
        """The shard named ``name``; ValueError when it is not a shard item's name."""
        flow, mark, rest = name.rpartition(SHARD_MARK)
        index, _, count = rest.partition("/")
        if not mark or not flow or not index.isdigit() or not count.isdigit() or int(index) >= int(count):
            raise ValueError(f"not a shard item name: {name!r} (expected '<flow>#<index>/<count>')")
        return cls(flow, int(index), int(count))

    @classmethod
    def all_of(cls, flow: str, count: int) -> tuple[ShardItem, ...]:
        """Every shard of ``flow`` split ``count`` ways."""
        return tuple(cls(flow, index, count) for index in range(count))


def item_flow(item: str) -> str:
    """The flow a work item belongs to: the item itself, or the flow of a shard item."""
    return item.rpartition(SHARD_MARK)[0] or item


@dataclass(frozen=True)
class Share:
    """One member's part of the work at a membership epoch.

    Attributes:
        stale: Redis could not be asked; this is the last known share, kept so work goes on.
    """

    member_id: str
    epoch: int
    members: tuple[str, ...]
    items: frozenset[str]
    stale: bool = False


class ShareTracker:
    """Recomputes the caller's share of the items when membership, the items or their holders change.

    Call :meth:`refresh` from the service loop (cheap: one or two Redis round trips); it reassigns
    when the group's epoch, member list, the item set or who holds the items differs from last time.

    Args:
        membership: where the group's live members are read.
        group: the service group (the caller registers in it with a ``MemberKeeper``).
        member_id: the caller's member id.
        on_change: called with the new and previous share whenever the caller's items change.
        holders: reads who works on each of the given items now (item -> member), from the items'
            leases; it makes the assignment sticky. Without it the assignment is pure rendezvous.
    """

    def __init__(
        self,
        membership: Membership,
        group: str,
        member_id: str,
        on_change: Callable[[Share, Share | None], None] | None = None,
        holders: Callable[[frozenset[str]], Mapping[str, str]] | None = None,
    ) -> None:
        self._membership = membership
        self._group = group
        self._member_id = member_id
        self._on_change = on_change
        self._holders = holders
        self._share: Share | None = None
        self._basis: tuple[frozenset[str], frozenset[tuple[str, str]]] = (frozenset(), frozenset())

    @property
    def share(self) -> Share | None:
        """The last computed share."""
        return self._share

    def refresh(self, items: Iterable[str]) -> Share:
        """The caller's current share of ``items``; the last one, marked stale, if Redis is down."""
        wanted = frozenset(items)
        try:
            view = self._membership.view(self._group)
            held = dict(self._holders(wanted)) if self._holders is not None and wanted else {}
        except CoordinationError as exc:
            log.warning("membership unavailable, keeping last share group=%s member=%s error=%s",
                        self._group, self._member_id, exc)
            last = self._share or Share(self._member_id, 0, (), frozenset())
            return replace(last, stale=True)
        last = self._share
        basis = (wanted, frozenset(held.items()))
        if last and not last.stale and (last.epoch, last.members) == (view.epoch, view.member_ids) \
                and self._basis == basis:
            return last
        mine = assign(wanted, view.member_ids, held).get(self._member_id, frozenset())
        share = Share(self._member_id, view.epoch, view.member_ids, mine)
        self._share, self._basis = share, basis
        if last is None or last.items != share.items:
            self._report(share, last)
        return share

    def _report(self, share: Share, last: Share | None) -> None:
        before = last.items if last else frozenset()
        log.info("share changed group=%s member=%s epoch=%s members=%d items=%d added=%d removed=%d",
                 self._group, self._member_id, share.epoch, len(share.members), len(share.items),
                 len(share.items - before), len(before - share.items))
        if self._on_change is not None:
            try:
                self._on_change(share, last)
            except Exception:
                log.exception("share on_change callback failed group=%s member=%s",
                              self._group, self._member_id)
