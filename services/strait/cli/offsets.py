"""`strait offsets translate --flow A->B --group G [--json]`: where a source group would resume on the target.

Reads the flow's offset syncs from the beginning and the group's committed offsets on the source,
and prints per partition the committed source offset, the exact target offset, or why there is
none yet. Exit code 0 when every partition translates, 3 when some are not replicated yet.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict

from strait.translation import PartitionTranslation, translate_source_group
from strait.cli.service_options import add_config_source, config_from_args

EXIT_UNTRANSLATED = 3


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the `offsets` command group."""
    offsets = subparsers.add_parser("offsets", help="consumer-group offset translation")
    commands = offsets.add_subparsers(dest="offsets_command", metavar="COMMAND", required=True)
    translate = commands.add_parser("translate", help="translate a source group's committed offsets exactly")
    translate.add_argument("--flow", required=True, help='the flow, e.g. "A->B"')
    translate.add_argument("--group", required=True, help="the consumer group on the flow's source")
    translate.add_argument("--json", action="store_true", help="print the translation as JSON")
    translate.add_argument("--timeout", type=float, default=30.0, help="seconds per Kafka read (default 30)")
    add_config_source(translate)
    translate.set_defaults(handler=_translate)


def _translate(args: argparse.Namespace) -> int:
    config = config_from_args(args)
    flow = config.flow(args.flow)
    rows = translate_source_group(config, flow, args.group, args.timeout)
    if args.json:
        print(json.dumps({"flow": flow.name, "group": args.group,
                          "partitions": [asdict(row) for row in rows]}, indent=2, sort_keys=True))
    else:
        print(_table(flow.name, args.group, rows))
    return EXIT_UNTRANSLATED if any(row.downstream is None for row in rows) else 0


def _table(flow: str, group: str, rows: list[PartitionTranslation]) -> str:
    if not rows:
        return f"group {group} has no committed offsets on topics of flow {flow}"
    header = ("TOPIC", "PARTITION", "SOURCE OFFSET", "TARGET TOPIC", "TARGET OFFSET", "NOTE")
    lines = [header] + [(r.topic, str(r.partition), str(r.upstream), r.remote_topic,
                         "-" if r.downstream is None else str(r.downstream), r.reason) for r in rows]
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    return "\n".join("  ".join(cell.ljust(widths[i]) for i, cell in enumerate(line)).rstrip() for line in lines)

