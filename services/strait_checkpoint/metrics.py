"""The checkpoint service's metrics (names per the design's metric contract)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge

SERVICE = "checkpoint"

CHECKPOINT_AGE = Gauge(
    "strait_checkpoint_age_seconds",
    "Seconds since the group's checkpoints last matched all its committed source offsets", ["flow", "group"])
TRANSLATION_LAG = Gauge(
    "strait_translation_lag_records",
    "Committed source records of the group not translatable yet (not replicated yet)", ["flow", "group"])
GROUPS_SYNCED = Gauge(
    "strait_groups_synced", "Target groups whose offsets are at (or past) their translated source offsets",
    ["flow"])
GROUPS_ACTIVE_ON_TARGET = Gauge(
    "strait_groups_skipped_active", "Groups not synced because they have active members on the target", ["flow"])
GROUPS_TRACKED = Gauge("strait_groups_checkpointed", "Source groups matching the flow's group filter", ["flow"])
CHECKPOINTS = Counter("strait_checkpoints_emitted_total", "Checkpoint records written to the target", ["flow"])
GROUP_OFFSETS_WRITTEN = Counter(
    "strait_group_offsets_written_total", "Partition offsets written to target groups", ["flow"])
SYNCS_READ = Counter("strait_offset_syncs_read_total", "Offset syncs read", ["flow"])
SYNCS_READY = Gauge("strait_offset_syncs_caught_up", "1 once the syncs topic was read to its end at start",
                    ["flow"])


def forget_group(flow: str, group: str) -> None:
    """Drop a group's series (it left the filter or no longer exists)."""
    for gauge in (CHECKPOINT_AGE, TRANSLATION_LAG):
        try:
            gauge.remove(flow, group)
        except KeyError:
            pass


def forget_flow(flow: str, groups: list[str]) -> None:
    """Drop a flow's series when this replica stops working on it."""
    for group in groups:
        forget_group(flow, group)
    for gauge in (GROUPS_SYNCED, GROUPS_ACTIVE_ON_TARGET, GROUPS_TRACKED, SYNCS_READY):
        try:
            gauge.remove(flow)
        except KeyError:
            pass
