"""`strait failover` and `strait failback`: move a flow's consumer groups to the other cluster.

Both print a report per group and partition: committed offset on the cluster the groups leave,
the exact offset written on the cluster they move to, and the records that would be lost or read
again (counted from the records themselves; expected 0 and 0). Exit codes: 0 when every group
moved cleanly, 3 when a group has records lost or re-read, a partition without exact translation,
or was not written (active members); 4 when the flow did not drain in time (nothing changed).
"""

from __future__ import annotations

import argparse
import json
import os
from dataclasses import asdict

from strait.coord.redis_client import connect
from strait.failover import DEFAULT_TIMEOUT, FailoverReport, failback, failover
from strait.config.model import DEFAULT_REDIS_URL

EXIT_NOT_CLEAN = 3
EXIT_NOT_DRAINED = 4


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the `failover` and `failback` commands."""
    for name, help_text in (
        ("failover", "drain a flow, stop it and move its consumer groups to the target"),
        ("failback", "after a failover: replicate the new primary back, move the groups home, restart the flow"),
    ):
        parser = subparsers.add_parser(name, help=help_text, description=help_text)
        parser.add_argument("--flow", required=True, help='the flow as configured, e.g. "A->B"')
        parser.add_argument("--group", action="append", default=[], metavar="G",
                            help="a consumer group to move (repeatable; default: every group the flow's "
                                 "group filter matches)")
        parser.add_argument("--dry-run", action="store_true", help="report without changing anything")
        parser.add_argument("--json", action="store_true", help="print the report as JSON")
        parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT,
                            help=f"seconds to wait for the flow to drain (default {DEFAULT_TIMEOUT:.0f})")
        parser.add_argument("--redis-url", help="where the configuration is stored (default $STRAIT_REDIS_URL)")
        parser.set_defaults(handler=_failover if name == "failover" else _failback)


def _client(args: argparse.Namespace):  # noqa: ANN202  (a redis.Redis)
    return connect(args.redis_url or os.environ.get("STRAIT_REDIS_URL", DEFAULT_REDIS_URL))


def _failover(args: argparse.Namespace) -> int:
    return _print(failover(_client(args), args.flow, args.group, dry_run=args.dry_run, timeout=args.timeout), args)


def _failback(args: argparse.Namespace) -> int:
    return _print(failback(_client(args), args.flow, args.group, dry_run=args.dry_run, timeout=args.timeout), args)


def _print(report: FailoverReport, args: argparse.Namespace) -> int:
    if args.json:
        print(json.dumps({**asdict(report), "clean": report.clean}, indent=2, sort_keys=True))
    else:
        print(render(report))
    if not report.drained and not report.dry_run:
        return EXIT_NOT_DRAINED
    return 0 if report.clean else EXIT_NOT_CLEAN


def render(report: FailoverReport) -> str:
    """The report as text: a summary line, lag left, one table of partitions, then notes."""
    mode = " (dry run: nothing changed)" if report.dry_run else ""
    lines = [f"{report.action} of flow {report.flow}{mode}: "
             f"{'drained' if report.drained else 'NOT drained'} after {report.drain_seconds:.1f}s"
             + (f", done {report.seconds_after_drain:.1f}s after drain" if report.seconds_after_drain is not None
                else "")
             + (f", configuration version {report.config_version}" if report.config_version is not None else "")]
    for lag in report.lag:
        lines.append(f"  behind: {lag.topic}[{lag.partition}] end {lag.end} copied to "
                     f"{'-' if lag.copied_to is None else lag.copied_to} ({lag.lag} records)")
    header = ("GROUP", "STATE", "TOPIC", "PARTITION", "FROM OFFSET", "TO TOPIC", "TO OFFSET", "LOST", "RE-READ", "NOTE")
    rows = [header] + [(g.group, g.state, p.topic, str(p.partition), str(p.source_offset), p.target_topic,
                        _cell(p.target_offset), _cell(p.lost), _cell(p.reread), p.note)
                       for g in report.groups for p in g.partitions]
    rows += [(g.group, g.state, "-", "-", "-", "-", "-", "-", "-", "no committed offsets")
             for g in report.groups if not g.partitions]
    if len(rows) > 1:
        widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
        lines += ["  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip() for row in rows]
    elif report.drained:
        lines.append("no consumer groups to move")
    lines += [f"note: {note}" for g in report.groups for note in g.notes]
    lines += [f"note: {note}" for note in report.notes]
    return "\n".join(lines)


def _cell(value: int | None) -> str:
    return "-" if value is None else str(value)

