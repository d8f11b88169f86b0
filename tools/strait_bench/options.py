"""What one benchmark run measures, at which sizes (every size has a command-line option)."""

from __future__ import annotations

import argparse
import os
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from strait.paths import cache_dir

SYSTEMS = ("strait", "mm2", "limit", "strait-eos", "mm2-eos")
EXACTLY_ONCE_SUFFIX = "-eos"  # strait with the flow's exactly_once, MM2 with exactly.once.source.support


def exactly_once(system: str) -> bool:
    """Whether ``system`` copies in its exactly-once mode (its target is read read_committed)."""
    return system.endswith(EXACTLY_ONCE_SUFFIX)


def replicator(system: str) -> str:
    """The replicator a system runs: ``strait`` or ``mm2`` (also for their exactly-once modes)."""
    return system.removesuffix(EXACTLY_ONCE_SUFFIX)


@dataclass(frozen=True)
class ProducerTuning:
    """Producer settings every system gets (strait's writer, MM2's worker producer, ProducerPerformance)."""

    acks: str = "all"
    compression: str = "none"
    batch_size: int = 1_048_576
    linger_ms: int = 5

    def java(self) -> dict[str, str]:
        """The settings in Java client spelling (librdkafka understands the same four keys)."""
        return {"acks": self.acks, "compression.type": self.compression,
                "batch.size": str(self.batch_size), "linger.ms": str(self.linger_ms)}


@dataclass(frozen=True)
class BenchOptions:
    """Sizes and switches of one benchmark run."""

    partitions: int = 12
    records: int = 2_000_000
    record_size: int = 1024
    repeats: int = 3
    rates: tuple[int, ...] = (5_000, 20_000)
    latency_seconds: float = 75.0  # longer than strait's 60 s epochs: each window holds a change
    # the probe produces at the window's rate this long before the clock starts (:class:`LatencyProbe`)
    latency_warmup_seconds: float = 10.0
    epoch_seconds: float = 60.0  # strait's epochs (micro-batches), the replicator's default
    cores: int = field(default_factory=lambda: os.cpu_count() or 2)
    systems: tuple[str, ...] = SYSTEMS
    scaling: bool = True
    scaling_partitions: int = 48
    out: Path | None = None
    broker_heap: str = "1g"
    jvm_heap: str = "2g"
    tuning: ProducerTuning = ProducerTuning()
    timeout_seconds: float = 1800.0
    head_start: bool = True  # strait copies from its driver while its query starts (--no-head-start: not)
    eos_latency: bool = True  # the exactly-once systems' fixed-rate latency runs (--no-eos-latency: none)
    mm2_properties: tuple[tuple[str, str], ...] = ()  # added to or replacing MM2's generated ones
    # the wide run (strait_bench.wide) instead of the main one: (topics, partitions per topic)
    wide: tuple[int, int] | None = None
    wide_records: int = 1_000_000
    wide_record_size: int = 100
    wide_trickle_rate: int = 1_000  # records/s over every partition after the bulk copy
    wide_trickle_seconds: float = 150.0  # longer than two of strait's 60 s epochs

    @property
    def megabytes(self) -> float:
        """Payload size of the loaded topic (values only) in MB (10^6 bytes)."""
        return self.records * self.record_size / 1e6

    def out_dir(self) -> Path:
        """Where the report goes."""
        return self.out or cache_dir() / "bench" / time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())


QUICK = dict(partitions=6, records=100_000, repeats=1, latency_seconds=5.0, latency_warmup_seconds=1.0,
             scaling=False, scaling_partitions=24)


def parse_args(argv: Sequence[str] | None = None) -> BenchOptions:
    """Options from the command line; ``--quick`` sets small defaults that explicit options override."""
    parser = argparse.ArgumentParser(prog="python -m strait_bench", description=__doc__)
    parser.add_argument("--quick", action="store_true",
                        help="a small run that finishes in about 5 minutes: " +
                        ", ".join(f"{k}={v}" for k, v in QUICK.items()))
    parser.add_argument("--partitions", type=int, help="partitions of the loaded topic (12)")
    parser.add_argument("--records", type=int, help="records loaded and replicated (2,000,000)")
    parser.add_argument("--record-size", type=int, help="value bytes per record (1024)")
    parser.add_argument("--repeats", type=int, help="measurements per system, medians reported (3)")
    parser.add_argument("--rates", help="comma-separated records/s of the latency runs (5000,20000)")
    parser.add_argument("--latency-seconds", type=float, help="seconds of each fixed-rate latency run (75)")
    parser.add_argument("--latency-warmup-seconds", type=float,
                        help="seconds the probe produces at each rate before its window's clock starts (10)")
    parser.add_argument("--epoch-seconds", type=float, help="strait's epochs (60, its default)")
    parser.add_argument("--cores", type=int, help="Spark cores and MM2 tasks.max (all cores)")
    parser.add_argument("--systems", help=f"comma-separated subset of {','.join(SYSTEMS)}")
    scaling = parser.add_mutually_exclusive_group()
    scaling.add_argument("--skip-scaling", action="store_true",
                         help="no 12-vs-48-partition, 1-vs-2-core and 1-vs-2-worker runs")
    scaling.add_argument("--scaling", action="store_true", help="the scaling runs even with --quick")
    parser.add_argument("--scaling-partitions", type=int, help="partitions of the scaling run (48)")
    parser.add_argument("--compression", help="producer compression.type for every system (none)")
    parser.add_argument("--batch-size", type=int, help="producer batch.size for every system (1048576)")
    parser.add_argument("--linger-ms", type=int, help="producer linger.ms for every system (5)")
    parser.add_argument("--broker-heap", help="heap of each Kafka broker (1g)")
    parser.add_argument("--jvm-heap", help="heap of MM2's JVM and of Spark's driver (2g)")
    parser.add_argument("--out", type=Path, help="report folder (.cache/bench/<timestamp>/)")
    parser.add_argument("--head-start", action=argparse.BooleanOptionalAction, default=True,
                        help="strait also copies from its driver while its query starts (the replicator's default)")
    parser.add_argument("--mm2-property", action="append", default=[], metavar="KEY=VALUE",
                        help="an MM2 property added to (or replacing one of) the generated ones, for mm2 and "
                        "mm2-eos; repeatable")
    parser.add_argument("--eos-latency", action=argparse.BooleanOptionalAction, default=True,
                        help="fixed-rate latency runs for strait-eos and mm2-eos too (--no-eos-latency: "
                        "throughput and duplicates only)")
    parser.add_argument("--wide", metavar="TOPICSxPARTITIONS",
                        help="instead of the main run, the wide run: this many small topics (e.g. 2000x5), "
                        "strait and MM2 of --systems once each")
    parser.add_argument("--wide-records", type=int, help="records loaded into the wide topics (1,000,000)")
    parser.add_argument("--wide-record-size", type=int, help="value bytes per record of the wide run (100)")
    parser.add_argument("--wide-trickle-rate", type=int,
                        help="records/s over every wide partition once the bulk is copied (1,000)")
    parser.add_argument("--wide-trickle-seconds", type=float, help="seconds of that trickle (150)")
    args = parser.parse_args(argv)
    return options_from(args)


def options_from(args: argparse.Namespace) -> BenchOptions:
    """BenchOptions from parsed arguments (unset ones keep the preset's value)."""
    options = replace(BenchOptions(), **QUICK) if args.quick else BenchOptions()
    given = {name: getattr(args, name) for name in (
        "partitions", "records", "record_size", "repeats", "latency_seconds", "latency_warmup_seconds",
        "epoch_seconds", "cores",
        "scaling_partitions",
        "broker_heap", "jvm_heap", "out", "wide_records", "wide_record_size", "wide_trickle_rate",
        "wide_trickle_seconds") if getattr(args, name) is not None}
    options = replace(options, **given, head_start=args.head_start, eos_latency=args.eos_latency,
                      mm2_properties=tuple(_key_value(item) for item in args.mm2_property))
    if args.rates:
        options = replace(options, rates=tuple(int(r) for r in args.rates.split(",") if r.strip()))
    if args.wide:
        options = replace(options, wide=parse_shape(args.wide))
    if args.systems:
        options = replace(options, systems=tuple(s.strip() for s in args.systems.split(",") if s.strip()))
    if args.skip_scaling or args.scaling:
        options = replace(options, scaling=bool(args.scaling))
    tuning = {k: v for k, v in (("compression", args.compression), ("batch_size", args.batch_size),
                                ("linger_ms", args.linger_ms)) if v is not None}
    if tuning:
        options = replace(options, tuning=replace(options.tuning, **tuning))
    validate(options)
    return options


def _key_value(item: str) -> tuple[str, str]:
    key, equals, value = item.partition("=")
    if not equals or not key.strip():
        raise ValueError(f"--mm2-property {item!r}: expected KEY=VALUE")
    return key.strip(), value.strip()


def parse_shape(text: str) -> tuple[int, int]:
    """``TOPICSxPARTITIONS`` (e.g. ``2000x5``) as (topics, partitions); ValueError naming the option otherwise."""
    match = re.fullmatch(r"\s*(\d+)\s*[xX]\s*(\d+)\s*", text)
    if not match or int(match.group(1)) < 1 or int(match.group(2)) < 1:
        raise ValueError(f"--wide {text!r}: expected TOPICSxPARTITIONS with both at least 1, e.g. 2000x5")
    return int(match.group(1)), int(match.group(2))


def validate(options: BenchOptions) -> None:
    """Raise SystemExit-worthy ValueError for sizes that cannot be measured."""
    unknown = sorted(set(options.systems) - set(SYSTEMS))
    if unknown:
        raise ValueError(f"unknown systems {', '.join(unknown)}; choose from {', '.join(SYSTEMS)}")
    for name in ("partitions", "records", "record_size", "repeats", "cores"):
        if getattr(options, name) < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be at least 1")
    if any(rate < 1 for rate in options.rates):
        raise ValueError("--rates must be positive records per second")
    if options.latency_warmup_seconds < 0:
        raise ValueError("--latency-warmup-seconds must not be negative")
    if options.wide is not None:
        for name in ("wide_records", "wide_record_size", "wide_trickle_rate"):
            if getattr(options, name) < 1:
                raise ValueError(f"--{name.replace('_', '-')} must be at least 1")
        if options.wide_trickle_seconds <= 0:
            raise ValueError("--wide-trickle-seconds must be positive")
