"""Exact offset translation: where the replicator emits offset syncs, and how they translate.

The replicator sees the source offset of every record it copies and the target offset the target
acknowledged for it. It emits a sync (upstream, downstream) for the first and last record of each
partition in each batch and on both sides of every break, where either offset does not follow the
previous one by exactly 1 (compaction holes, transaction markers, retention, duplicates written by a
replay). Between two consecutive syncs that keep the same distance the mapping is linear; any other
pair of neighbours spans a break. So a committed source offset translates exactly:

- the consumer has processed every record below ``committed``;
- take the greatest sync ``r`` with ``r.upstream < committed`` and the next one ``n``;
- if ``r``-``n`` is linear, the target position is ``r.downstream + (committed - r.upstream)``;
- otherwise a break lies between them. When strait wrote both syncs (the ``strait.exact`` header of
  :data:`~strait.records.EXACT_SYNC_HEADER`), the records between do not exist upstream: both sides
  of every break are synced, and a replay starts right after a synced record. So the position is
  ``n.downstream``, in the newest copy. Any other writer's syncs (MirrorMaker 2's, strait's before
  the header) are read MM2's way: MM2 syncs only the record *after* a break, every
  ``offset.lag.max`` records, so the break may lie anywhere between its two syncs; the position is
  ``r.downstream + 1`` (records may be read again, none is skipped), or ``n.downstream`` when that
  is lower (the target was truncated or re-created between them);
- when ``committed`` is beyond the last copied record + 1, the records in between are not on the
  target yet: there is no exact answer until replication catches up.

Later syncs for the same upstream offset (a replayed batch) replace earlier ones, so a consumer
resumes in the newest copy and never reads a record twice.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass

from strait.errors import StraitError


class OffsetTranslationError(StraitError):
    """The inputs of a translation are inconsistent (e.g. offsets out of order)."""


@dataclass(frozen=True, order=True)
class SyncPoint:
    """One source offset and the target offset of its copy."""

    upstream: int
    downstream: int


def sync_points(source_offsets: Sequence[int], target_offsets: Sequence[int]) -> list[SyncPoint]:
    """The syncs to emit for one partition's records copied in one batch, in copy order.

    Args:
        source_offsets: offsets of the copied records on the source, strictly increasing.
        target_offsets: the target offset acknowledged for each of them, strictly increasing.
    """
    if len(source_offsets) != len(target_offsets):
        raise OffsetTranslationError(
            f"{len(source_offsets)} source offsets but {len(target_offsets)} target offsets"
        )
    points: list[SyncPoint] = []
    last = len(source_offsets) - 1
    for i, (up, down) in enumerate(zip(source_offsets, target_offsets)):
        if i > 0 and (up <= source_offsets[i - 1] or down <= target_offsets[i - 1]):
            raise OffsetTranslationError(f"offsets out of order at record {i}: {up}->{down}")
        breaks_before = i == 0 or up != source_offsets[i - 1] + 1 or down != target_offsets[i - 1] + 1
        breaks_after = i == last or up + 1 != source_offsets[i + 1] or down + 1 != target_offsets[i + 1]
        if breaks_before or breaks_after:
            points.append(SyncPoint(up, down))
    return points


class PartitionTranslator:
    """The sync history of one source partition, answering exact translations.

    The newer copy of a record wins, and the newer copy is the one further along the target
    partition (a replay appends after what it repeats). So a strait sync that arrives after a newer
    copy's (a copier handing over whose offset syncs were delayed by the cluster holding them) is
    recognised by its downstream offset and ignored: their arrival order does not matter. Another
    writer's (MM2's) syncs keep the arrival order: a target topic re-created under MM2 goes back.
    """

    def __init__(self) -> None:
        self._upstreams: list[int] = []
        self._downstreams: list[int] = []
        self._exact: list[bool] = []  # written by strait: both sides of every break synced

    def __len__(self) -> int:
        return len(self._upstreams)

    def add(self, point: SyncPoint, exact: bool = True) -> None:
        """Record one sync; ``exact`` when strait wrote it (both sides of every break synced), False
        for another writer's (MirrorMaker 2's)."""
        i = bisect.bisect_left(self._upstreams, point.upstream)
        if exact and i > 0 and self._exact[i - 1] and self._downstreams[i - 1] >= point.downstream:
            return  # an earlier record's copy lies further on: this sync is an older copy's
        if i < len(self._upstreams) and self._upstreams[i] == point.upstream:
            if exact and self._exact[i] and self._downstreams[i] > point.downstream:
                return  # the record's newer copy is known
            self._downstreams[i] = point.downstream
            self._exact[i] = exact
            self._drop_stale_after(i)
            return
        self._upstreams.insert(i, point.upstream)
        self._downstreams.insert(i, point.downstream)
        self._exact.insert(i, exact)
        self._drop_stale_after(i)

    def _drop_stale_after(self, i: int) -> None:
        """A newer copy makes syncs of older copies beyond it meaningless: the newer copy lies after
        them on the target, so their downstream offsets are smaller than this one's."""
        down = self._downstreams[i]
        j = i + 1
        while j < len(self._upstreams) and self._downstreams[j] <= down:
            j += 1
        if j > i + 1:
            del self._upstreams[i + 1:j]
            del self._downstreams[i + 1:j]
            del self._exact[i + 1:j]

    def last_copied(self) -> SyncPoint | None:
        """The newest copied record known, or None before any sync."""
        if not self._upstreams:
            return None
        return SyncPoint(self._upstreams[-1], self._downstreams[-1])

    def last_below(self, upstream: int) -> SyncPoint | None:
        """The sync of the greatest upstream offset below ``upstream``, or None."""
        i = bisect.bisect_left(self._upstreams, upstream) - 1
        return SyncPoint(self._upstreams[i], self._downstreams[i]) if i >= 0 else None

    def translate(self, committed: int) -> int | None:
        """The target offset to resume from for a source group that committed ``committed``.

        Returns None when that position is not replicated yet (or no sync is known).
        """
        if not self._upstreams:
            return None
        if committed <= self._upstreams[0]:
            return self._downstreams[0]  # nothing older was copied: start at the first copy
        r = bisect.bisect_left(self._upstreams, committed) - 1  # greatest upstream < committed
        up_r, down_r = self._upstreams[r], self._downstreams[r]
        if r == len(self._upstreams) - 1:
            return down_r + 1 if committed == up_r + 1 else None
        up_n, down_n = self._upstreams[r + 1], self._downstreams[r + 1]
        if up_n - up_r == down_n - down_r:
            return down_r + (committed - up_r)
        if committed == up_n or (self._exact[r] and self._exact[r + 1]):
            return down_n
        return min(down_r + 1, down_n)  # another writer's syncs: see the module's docstring
