"""`strait failover` and `strait failback`: move a flow's consumer groups to the other cluster.

A planned failover (source reachable) prints per group and partition the committed offset on the
cluster the groups leave, the exact offset written on the cluster they move to, and the records that
would be lost or read again (counted from the records themselves; expected 0 and 0). When the source
does not answer (or with ``--source-down``) the unplanned failover of :mod:`strait.disaster` runs
instead and reports the RPO per source partition and the checkpoint each group moved to.

Exit codes: 0 clean (nothing lost or read again, every group moved); 3 moved, with records lost,
possibly read again, untranslated or a group not written (active members); 4 nothing moved (a
planned flow that did not drain in time, or no group could be written).
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict

import time

from strait.settings import settings_of
from strait.config.store import load_stored_config
from strait.coord.redis_client import connect
from strait.disaster import (
    DisasterReport,
    copy_stranded,
    failover_source_down,
    source_unreachable,
    stranded_ranges,
)
from strait.failover import DEFAULT_TIMEOUT, FailoverReport, failback, failover

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
        if name == "failover":
            parser.add_argument("--source-down", action="store_true",
                                help="the source is gone: move the groups from checkpoints and state on the target "
                                     "(detected by itself when the source does not answer in 5 s)")
        else:
            parser.add_argument("--stranded", choices=("list", "copy"),
                                help="after an unplanned failover, with the source back: only list (or copy to the "
                                     "target, by running the stopped flow until they are copied) the records that "
                                     "never left the source; the groups are not moved")
        parser.set_defaults(handler=_failover if name == "failover" else _failback)


def _client(args: argparse.Namespace):  # noqa: ANN202  (a redis.Redis)
    return connect(settings_of(args).coordination_url())


def _failover(args: argparse.Namespace) -> int:
    client = _client(args)
    _version, config = load_stored_config(client)
    flow = config.flow(args.flow)
    reason = f"--source-down: cluster {flow.source} taken as gone" if args.source_down else \
        source_unreachable(config, flow.source)
    if reason is None:
        return _print(failover(client, args.flow, args.group, dry_run=args.dry_run, timeout=args.timeout), args)
    report = failover_source_down(client, config, flow, args.group, dry_run=args.dry_run, reason=reason)
    print(json.dumps(report.to_dict(), indent=2, sort_keys=True) if args.json else render_disaster(report))
    if report.clean:
        return 0
    return EXIT_NOT_CLEAN if report.moved else EXIT_NOT_DRAINED


def _failback(args: argparse.Namespace) -> int:
    client = _client(args)
    _version, config = load_stored_config(client)
    flow = config.flow(args.flow)
    if args.stranded is None:
        return _print(failback(client, args.flow, args.group, dry_run=args.dry_run, timeout=args.timeout), args)
    stranded = stranded_ranges(client, config, flow)
    copied = args.stranded == "copy" and not args.dry_run and bool(stranded)
    if copied:
        copy_stranded(client, config, flow, stranded, args.timeout)
    if args.json:
        print(json.dumps({"flow": flow.name, "copied": copied, "records": sum(r.records for r in stranded),
                          "stranded": [{**asdict(r), "records": r.records} for r in stranded]}, indent=2))
    else:
        for r in stranded:
            print(f"stranded on {flow.source}: {r.topic}[{r.partition}] offsets {r.start}..{r.end - 1} "
                  f"({r.records} record(s)) never reached {flow.target} before the failover")
        total = sum(r.records for r in stranded)
        print(f"{total} stranded record(s) copied to {flow.target}" if copied else
              f"{total} stranded record(s); `--stranded copy` copies them" if stranded else
              f"no stranded records of flow {flow.name}")
    return 0


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



def render_disaster(report: DisasterReport) -> str:
    """The unplanned failover's report as text: summary, RPO per source partition, groups, notes."""
    mode = " (dry run: nothing changed)" if report.dry_run else ""
    since = f", unreachable since {_utc(report.source_unreachable_since)}" if report.source_unreachable_since else ""
    lines = [f"{report.action} of flow {report.flow}{mode}: {report.reason}{since}; done in {report.seconds:.1f}s"
             + (f", flow stopped (configuration version {report.config_version})"
                if report.config_version is not None else "")]
    rpo = report.rpo_records
    seen = f" (as {report.source} was last seen at {_utc(report.source_last_seen_at)})" \
        if report.source_last_seen_at else ""
    lines.append(f"RPO: {'unknown' if rpo is None else rpo} record(s) on {report.source} never copied{seen}")
    rows = [("TOPIC", "PARTITION", "COPIED TO", "LAST SEEN END", "SEEN AT", "NOT COPIED", "BASIS")]
    rows += [(p.topic, str(p.partition), _cell(p.copied_to), _cell(p.end_seen),
              _utc(p.end_seen_at) if p.end_seen_at else "-", _cell(p.rpo_records), p.basis) for p in report.partitions]
    lines += _table(rows) if len(rows) > 1 else []
    rows = [("GROUP", "STATE", "TOPIC", "PARTITION", "CHECKPOINT", "AGE", "WAS", "TO OFFSET", "MAY RE-READ", "NOTE")]
    rows += [(g.group, g.state, p.remote_topic, str(p.partition), f"{p.checkpoint_upstream}->{p.checkpoint_downstream}",
              f"{p.checkpoint_age_seconds:.1f}s", _cell(p.previous_target_offset), str(p.target_offset),
              f"<= {p.reread_at_most}", p.note) for g in report.groups for p in g.partitions]
    rows += [(g.group, g.state, "-", "-", "-", "-", "-", "-", "-", "") for g in report.groups if not g.partitions]
    lines += _table(rows) if len(rows) > 1 else ["no consumer groups to move"]
    lines += [f"note: {note}" for g in report.groups for note in g.notes]
    lines += [f"note: {note}" for note in report.notes]
    lines.append("records a group consumed on the source after its checkpoint are read again on the target "
                 "(MAY RE-READ bounds them; the checkpoint AGE bounds how long ago they were consumed)")
    return "\n".join(lines)


def _table(rows: list[tuple[str, ...]]) -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return ["  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip() for row in rows]


def _utc(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    return time.strftime("%H:%M:%S", time.gmtime(seconds)) + f".{int(seconds % 1 * 10)} UTC"
