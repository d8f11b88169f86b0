"""The bench monitor's names for the parts of a replicator's process tree."""

from __future__ import annotations

import os

import pytest

from strait_bench.monitor import TreeMonitor, part_name


def test_parts_are_named_by_program_module_or_script_and_forks_by_their_parent() -> None:
    java = ["/usr/lib/jvm/bin/java", "-cp", "x.jar", "org.apache.spark.deploy.SparkSubmit"]
    daemon = ["/venv/bin/python3", "-m", "pyspark.daemon"]
    assert part_name(java, None) == "java"
    assert part_name(daemon, java) == "python3 -m pyspark.daemon"
    assert part_name(daemon, daemon) == "python3 -m pyspark.daemon (forks)"
    assert part_name(["/venv/bin/python", "/venv/bin/strait", "run", "replicator"], None) == "python strait"
    assert part_name([], None) == "?"


def test_the_peak_holds_this_process_and_its_parts_add_up_to_it() -> None:
    with TreeMonitor(os.getpid(), interval=0.05) as monitor:
        pass
    report = monitor.peak_report()
    assert report["peak_rss_mb"] > 0 and report["peak_pss_mb"] > 0
    assert sum(report["peak_rss_parts_mb"].values()) == pytest.approx(report["peak_rss_mb"], abs=0.2)
