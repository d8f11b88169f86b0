"""Pure parts of the bench's wide run: its shape, which topics are whose, completeness, the report."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from strait_bench import wide
from strait_bench.options import BenchOptions, parse_args, parse_shape


def test_wide_option_parses_topics_by_partitions() -> None:
    options = parse_args(["--wide", "2000x5", "--wide-records", "500", "--wide-trickle-seconds", "30"])
    assert options.wide == (2000, 5)
    assert (options.wide_records, options.wide_trickle_seconds) == (500, 30.0)
    assert parse_args([]).wide is None


@pytest.mark.parametrize("text", ["2000", "0x5", "5x0", "ax5", "2000x5x1", ""])
def test_a_bad_wide_shape_names_the_option(text: str) -> None:
    with pytest.raises(ValueError, match="--wide"):
        parse_shape(text)


def test_bad_wide_sizes_are_refused() -> None:
    with pytest.raises(ValueError, match="--wide-records"):
        parse_args(["--wide", "2x2", "--wide-records", "0"])
    with pytest.raises(ValueError, match="--wide-trickle-seconds"):
        parse_args(["--wide", "2x2", "--wide-trickle-seconds", "0"])


@given(st.integers(1, 40), st.integers(1, 6))
def test_the_shape_lists_every_partition_once(topics: int, partitions: int) -> None:
    shape = wide.WideShape(topics, partitions)
    listed = [(tp.topic, tp.partition) for tp in shape.partitions_of()]
    assert len(set(listed)) == len(listed) == shape.total_partitions
    assert {topic for topic, _ in listed} == set(shape.names())
    assert all(tp.topic.startswith("A.") for tp in shape.partitions_of("A."))


def test_the_shape_comes_from_the_options() -> None:
    assert wide.WideShape.of(BenchOptions(wide=(3, 2))).total_partitions == 6
    with pytest.raises(wide.BenchError, match="--wide"):
        wide.WideShape.of(BenchOptions())


@pytest.mark.parametrize(("name", "workload"), [
    ("wide-00001", True), ("A.wide-00001", True), ("mm2-offset-syncs.B.internal", False),
    ("strait-offsets.A.internal", False), ("A.heartbeats", False), ("__consumer_offsets", False),
])
def test_internal_topics_are_everything_but_the_wide_topics_and_their_copies(name: str, workload: bool) -> None:
    assert wide._is_workload(name) is workload


def test_a_copy_holds_every_partition_only_when_each_reached_its_end() -> None:
    wanted = {("A.wide-00000", 0): 3, ("A.wide-00000", 1): 0}
    assert wide._holds({("A.wide-00000", 0): 3, ("A.wide-00000", 1): 0}, wanted)
    assert not wide._holds({("A.wide-00000", 0): 2, ("A.wide-00000", 1): 0}, wanted)
    assert not wide._holds({("A.wide-00000", 0): 3}, wanted)  # a partition not readable yet


def test_the_report_has_a_column_per_replicator_and_the_internal_topics() -> None:
    options = {"wide": [2000, 5], "wide_records": 1_000_000, "wide_record_size": 100, "wide_trickle_rate": 1000,
               "wide_trickle_seconds": 150.0, "cores": 2, "epoch_seconds": 60.0}
    runs = [{"system": "strait", "startup_s": 4.2, "records_per_s": 123456.7, "planning_s_per_batch": 0.4,
             "internal_records_per_s": {"target:strait-offsets.A.internal": 1000.0}},
            {"system": "mm2", "startup_s": 10.1, "records_per_s": 54321.0, "internal_records_per_s": {}}]
    text = wide.markdown({"options": options, "machine": {"started": "now"}, "runs": runs})
    assert "| metric | strait | mm2 |" in text
    assert "2,000 topics x 5 partitions (10,000 partitions)" in text
    assert "| records/s (first record to last) | 123,457 | 54,321 |" in text
    assert "| planning per micro-batch under the trickle (s) | 0.4 | – |" in text
    assert "- strait: target:strait-offsets.A.internal 1,000.0" in text
    assert "- mm2: none" in text
