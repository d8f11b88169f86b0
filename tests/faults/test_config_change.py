"""A configuration change mid-stream: `strait config apply` of a new version (one more topic, a rate
limit) while the load runs. The replicator re-plans and restarts its query from its checkpoint:
nothing of the running topic is lost, and the added topic is copied from its first record."""

from __future__ import annotations

import time

import pytest

from tests.faults.drill import Drill, DrillResult, KeyedLoad, Mode, Rig, lost, record, verify, wait_copied

pytestmark = [pytest.mark.faults, pytest.mark.slow]

RATE_LIMIT = 50_000.0  # records per second: far above the load, so the limit changes the plan, not the data


def test_config_change_mid_stream(rig: Rig, mode: Mode) -> None:
    """Apply a config version adding a topic and a rate limit under load (each injection adds one more topic).

    Recovery: from the apply until the target holds, on every partition of the running topic and
    of the added topic, a record produced after the apply.
    """
    drill = Drill.begin(rig, "config-change", mode)
    added: list[KeyedLoad] = []
    try:
        for injection in range(mode.injections):
            topic = rig.topic(f"config-change-added-{injection}")
            rig.create_topic(topic)
            load = KeyedLoad(rig.source, topic, max(1, mode.rate // 4)).start()
            added.append(load)
            time.sleep(1)
            rig.topics.append(topic)
            config = rig.build_config(rig.topics, rate_limit=RATE_LIMIT + injection)
            mark = load.next_mark()
            drill.inject(lambda: rig.apply(config))
            copied_at = drill.wait_caught_up()
            drill.recovered(at=max(copied_at, wait_copied(rig, topic, mark)))
            time.sleep(mode.between_seconds)
        data = drill.finish(report=False)
        produced, missing, duplicates = data.produced, data.lost, data.duplicates
        for load in added:
            count = load.stop()
            produced += count
            wait_copied(rig, load.topic, load.mark())
            parity = verify(rig, load.topic)
            assert parity.total("source_records") == count, f"{load.topic}: not every record checked"
            missing += lost(parity)
            duplicates += parity.total("duplicates")
        result = DrillResult("config change (topic added, rate limit)", mode.name, len(drill.recoveries),
                             round(max(drill.recoveries), 1), produced, missing, duplicates,
                             # an added topic is copied from its start: a replay could repeat any of it
                             drill.bound + sum(ld.produced_between(0, time.monotonic()) for ld in added),
                             tuple(round(r, 1) for r in drill.recoveries),
                             "query restarted from its checkpoint")
        record(result)
        assert result.lost == 0, f"{result.lost} records lost across the config change"
        assert result.duplicates <= result.duplicate_bound
    finally:
        drill.abort()
        for load in added:
            load.abort()
