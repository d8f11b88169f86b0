"""`strait offsets translate --flow A->B --group G [--json]`: where a source group would resume on the target.

Reads the flow's offset syncs from the beginning and the group's committed offsets on the source,
and prints per partition the committed source offset, the exact target offset, or why there is
none yet. Exit code 0 when every partition translates, 3 when some are not replicated yet.
"""

from __future__ import annotations

import argparse
import json
import os
from dataclasses import asdict
from pathlib import Path

from strait.config import load_config
from strait.config.model import StraitConfig
from strait.config.store import load_stored_config
from strait.coord.redis_client import connect
from strait.translation import PartitionTranslation, translate_source_group

DEFAULT_REDIS_URL = "redis://127.0.0.1:19079/0"
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
    source = translate.add_mutually_exclusive_group()
    source.add_argument("--config", type=Path, help="a YAML or MM2 properties file instead of the stored config")
    source.add_argument("--redis-url", help="where the configuration is stored (default $STRAIT_REDIS_URL)")
    translate.set_defaults(handler=_translate)


def _config(args: argparse.Namespace) -> StraitConfig:
    if args.config is not None:
        return load_config(args.config)
    client = connect(args.redis_url or os.environ.get("STRAIT_REDIS_URL", DEFAULT_REDIS_URL))
    return load_stored_config(client)[1]


def _translate(args: argparse.Namespace) -> int:
    config = _config(args)
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

