"""`strait verify --flow A->B [--topic T ...] [--json]`: per-partition parity of source and target.

Reads the flow's offset syncs, then every selected source partition and the newest copies of its
records on the target, and reports per partition the offset ranges, counts, SHA-256 checksums and the
first mismatch. Duplicates (older copies left by at-least-once replays) are reported, never a failure.
Target records after the last copy that equal no source record (written by someone else) are
reported with their target offsets. Exit code 0 on parity, 1 when a record is mismatched, missing,
unexpected (anywhere on the target) or not replicated yet.

A flow with target_partitions places records by key, so its topics are checked key by key instead:
every record in its key's partition, each key's records in their source order (see strait.verify_keys).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from strait.config.model import FlowConfig, StraitConfig
from strait.verify import FlowParity, PartitionParity, PartitionPlan, verify_flow
from strait.verify_keys import KeyParity, verify_keys
from strait.cli.service_options import add_config_source, config_from_args

EXIT_MISMATCH = 1
COUNTS = ("source_records", "matched", "mismatched", "missing", "pending", "unexpected", "unexpected_tail",
          "duplicates")


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the `verify` command."""
    verify = subparsers.add_parser("verify", help="per-partition parity check of a flow's source and target",
                                   description=__doc__.split("\n\n", 1)[1] if __doc__ else None)
    verify.add_argument("--flow", required=True, help='the flow, e.g. "A->B"')
    verify.add_argument("--topic", action="append", default=[], metavar="T",
                        help="a source (or remote) topic to check; repeat for more (default: every replicated topic)")
    verify.add_argument("--json", action="store_true", help="print the result as JSON")
    verify.add_argument("--timeout", type=float, default=30.0, help="seconds per Kafka read (default 30)")
    add_config_source(verify)
    verify.set_defaults(handler=_verify)


def _verify(args: argparse.Namespace) -> int:
    config = config_from_args(args)
    flow = config.flow(args.flow)
    if flow.repartitions:
        return _verify_keys(config, flow, args)
    with _progress(enabled=sys.stderr.isatty() and not args.json) as progress:
        def on_plan(plans: list[PartitionPlan]) -> None:
            progress.update(task, total=sum(p.source_offsets for p in plans))

        task = progress.add_task(f"verifying {flow.name}", total=None)
        result = verify_flow(config, flow, args.topic, args.timeout, on_plan,
                             lambda n: progress.advance(task, n))
    print(json.dumps(as_json(result), indent=2, sort_keys=True) if args.json else report(result))
    return 0 if result.ok else EXIT_MISMATCH


@contextmanager
def _progress(enabled: bool) -> Iterator[Progress]:
    """A progress bar on stderr when it is a terminal; otherwise a silent one."""
    progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                        TextColumn("offsets"), TimeRemainingColumn(), console=Console(stderr=True),
                        transient=True, disable=not enabled)
    with progress:
        yield progress


def _verify_keys(config: StraitConfig, flow: FlowConfig, args: argparse.Namespace) -> int:
    results = verify_keys(config, flow, args.topic, args.timeout)
    ok = all(r.ok for r in results)
    if args.json:
        print(json.dumps({"flow": flow.name, "ok": ok, "per_key": True,
                          "topics": [{**asdict(r), "ok": r.ok} for r in results]}, indent=2, sort_keys=True))
    else:
        print(key_report(flow.name, results))
    return 0 if ok else EXIT_MISMATCH


def key_report(flow: str, results: tuple[KeyParity, ...]) -> str:
    """A human report of a per-key check: one line per topic, the first problems, the verdict."""
    if not results:
        return f"flow {flow}: no replicated topic to verify"
    header = ("TOPIC", "REMOTE", "PARTITIONS", "RECORDS", "KEYS", "MISSING", "PENDING", "MISPLACED", "OTHER", "STATUS")
    rows = [header] + [(r.topic, r.remote_topic, str(r.target_partitions), str(r.source_records), str(r.keys),
                        str(r.missing), str(r.pending), str(r.misplaced), str(r.other_records),
                        "ok" if r.ok else "MISMATCH") for r in results]
    lines = _aligned(rows)
    lines += [f"{r.topic}: {r.first_problem}" for r in results if r.first_problem]
    verdict = "PARITY PER KEY" if all(r.ok for r in results) else "MISMATCH"
    records = sum(r.source_records for r in results)
    lines.append(f"{verdict}: flow {flow}, {len(results)} topic(s), {records} source record(s) checked key by key")
    return "\n".join(lines)


def as_json(result: FlowParity) -> dict[str, object]:
    """The result as a JSON-ready dict: verdict, totals and every partition."""
    return {"flow": result.flow, "ok": result.ok,
            "totals": {name: result.total(name) for name in COUNTS},
            "partitions": [{**asdict(p), "ok": p.ok} for p in result.partitions]}


def report(result: FlowParity) -> str:
    """A human report: one line per partition, then the first mismatches and the verdict."""
    if not result.partitions:
        return f"flow {result.flow}: no replicated topic to verify"
    lines = _table(result.partitions)
    for p in result.partitions:
        lines += _notes(p)
    totals = ", ".join(f"{result.total(name)} {name.replace('_', ' ')}" for name in COUNTS)
    verdict = "PARITY" if result.ok else "MISMATCH"
    lines.append(f"{verdict}: flow {result.flow}, {len(result.partitions)} partition(s): {totals}")
    return "\n".join(lines)


def _table(partitions: tuple[PartitionParity, ...]) -> list[str]:
    header = ("TOPIC", "PARTITION", "SOURCE OFFSETS", "TARGET OFFSETS", "RECORDS", "MISSING", "MISMATCHED",
              "PENDING", "DUPLICATES", "CHECKSUM", "STATUS")
    rows = [header] + [(p.topic, str(p.partition), _range(p.source_start, p.source_end),
                        _range(p.target_start, p.target_end), str(p.source_records), str(p.missing),
                        str(p.mismatched), str(p.pending), str(p.duplicates), _checksum(p),
                        "ok" if p.ok else "MISMATCH") for p in partitions]
    return _aligned(rows)


def _aligned(rows: list[tuple[str, ...]]) -> list[str]:
    """Rows of cells as lines with left-aligned columns (the first row is the header)."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return ["  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip() for row in rows]


def _range(first: int | None, last: int | None) -> str:
    return "-" if first is None else f"{first}..{last}"


def _checksum(p: PartitionParity) -> str:
    if p.source_sha256 == p.target_sha256:
        return p.source_sha256[:12]
    return f"{p.source_sha256[:12]}!={p.target_sha256[:12]}"


def _notes(p: PartitionParity) -> list[str]:
    where = f"{p.topic}[{p.partition}] -> {p.remote_topic}[{p.partition}]"
    notes = []
    if p.first_mismatch is not None:
        m = p.first_mismatch
        notes.append(f"{where}: first mismatch ({m.kind}) at source offset "
                     f"{'-' if m.source_offset is None else m.source_offset}, target offset "
                     f"{'-' if m.target_offset is None else m.target_offset}: {m.detail}")
    if p.pending:
        notes.append(f"{where}: {p.pending} record(s) not replicated yet (after source offset "
                     f"{'-' if p.source_end is None else p.source_end})")
    if p.unexpected:
        notes.append(f"{where}: {p.unexpected} target record(s) are copies of no source record")
    if p.unexpected_tail:
        notes.append(f"{where}: {p.unexpected_tail} target record(s) after the last copy are copies of no source "
                     f"record (target offsets {p.unexpected_tail_start}..{p.unexpected_tail_end})")
    if p.unchecked_below is not None:
        notes.append(f"{where}: source offsets below {p.unchecked_below} not checked "
                     f"(their offset syncs were compacted away)")
    return notes
