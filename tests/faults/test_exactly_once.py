"""Exactly-once mode through the life of its target cluster.

The rig's replicator takes a second flow, D->C in exactly-once mode, for the length of the drill:
under keyed load the broker of C leading the copy's partition 0 is SIGKILLed and started again,
then every broker of C is restarted in turn (the short form of `make test`: 500 records/s, a 15 s
outage, and only the broker leading partition 0 restarted, as the rolling restart's short form
does). A read_committed consumer of the remote topic on C then reads every record once, in order:
the copiers' transactions that a broker's death or a leader's move cut short are aborted, never
seen, and copied again from the committed progress. The drill only counts, so its short form runs
beside other tests.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping

import pytest

from tests.faults.drill import PARTITIONS, KeyedLoad, Mode, Rig, leader_index
from tests.support.config import flow_config
from tests.support.kafka import last_values, numbered_copies
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.faults, pytest.mark.slow]


def test_exactly_once_through_a_target_broker_sigkill_and_a_rolling_restart_of_the_target(
        rig: Rig, mode: Mode) -> None:
    topic = rig.topic("exactly-once")
    remote = f"{rig.target.alias}.{topic}"
    rig.create_topic(topic, rig.target)
    base = rig.config
    eos_flow = flow_config(rig.target, rig.source, [re.escape(topic)], exactly_once=True,
                           replication_factor=3)["flows"][0]
    rig.apply({**base, "flows": [*base["flows"], eos_flow]})
    load = KeyedLoad(rig.target, topic, mode.rate).start()
    try:
        wait_for(lambda: min(load.mark().values()) >= 0, 120, f"the load on {topic} acknowledged")
        _wait_copied(rig, remote, load.mark())
        victim = leader_index(rig.source, remote)
        rig.source.nodes[victim].kill()
        time.sleep(mode.outage_seconds)
        rig.source.restart_node(victim, timeout=180)
        _wait_copied(rig, remote, load.mark())
        restarted = range(len(rig.source.nodes)) if mode.restart_every_broker else [leader_index(rig.source, remote)]
        for node in restarted:
            rig.source.stop_node(node)
            time.sleep(mode.restart_down_seconds)
            rig.source.restart_node(node, timeout=180)
            time.sleep(mode.restart_gap_seconds)
        produced = load.stop()
        _wait_copied(rig, remote, load.mark())
    finally:
        load.abort()
        rig.apply(base)
    copies = numbered_copies(rig.source, remote)  # read_committed
    for partition in range(PARTITIONS):
        sequence = copies.get(partition, [])
        assert sequence == list(range(len(sequence))) and sequence, \
            f"{remote}[{partition}]: not each record once in order ({len(sequence) - len(set(sequence))} twice)"
    assert sum(len(s) for s in copies.values()) == produced, \
        f"{sum(len(s) for s in copies.values())} records copied of {produced}"
    print(f"exactly once through a broker SIGKILL and a restart of {len(restarted)} broker(s) of "
          f"{rig.source.alias}: {produced} records, each once")


def _wait_copied(rig: Rig, remote: str, mark: Mapping[int, int]) -> None:
    """Wait until every partition's last record a read_committed consumer reads on ``remote`` (on C)
    is the load's ``mark`` or later."""
    def copied() -> bool:
        tails = last_values(rig.source, remote)
        return all(int(tails[p].split(b":")[1]) >= s for p, s in mark.items() if s >= 0 and p in tails) \
            and all(p in tails for p, s in mark.items() if s >= 0)
    wait_for(copied, 300, f"{remote} copied up to {dict(mark)}")
