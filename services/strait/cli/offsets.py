"""`strait offsets translate --flow A->B --group G [--json]`: where a source group would resume on the target.

Reads the flow's offset syncs from the beginning and the group's committed offsets on the source,
and prints per partition the committed source offset, the exact target offset, or why there is
none yet. When the source does not answer (or with ``--source-down``) the answer comes from the
newest checkpoints on the target instead, with their age. ``--topic T --partition P --offset N``
translates one source offset exactly from the offset syncs, for consumers that keep their offsets
outside Kafka (Spark, Flink); with the source gone that needs ``offset_syncs_topic_location: target``.
Exit code 0 when every partition translates, 3 when some are not replicated yet.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict

import time

from strait.config.model import FlowConfig, StraitConfig
from strait.disaster import source_unreachable
from strait.errors import StraitError
from strait.translation import (
    CommittedOffset,
    PartitionTranslation,
    load_index,
    read_stored_checkpoints,
    translate_offset,
    translate_source_group,
)
from strait.cli.service_options import add_config_source, config_from_args

EXIT_UNTRANSLATED = 3


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the `offsets` command group."""
    offsets = subparsers.add_parser("offsets", help="consumer-group offset translation")
    commands = offsets.add_subparsers(dest="offsets_command", metavar="COMMAND", required=True)
    translate = commands.add_parser("translate", help="translate a source group's committed offsets exactly")
    translate.add_argument("--flow", required=True, help='the flow, e.g. "A->B"')
    translate.add_argument("--group", help="the consumer group on the flow's source")
    translate.add_argument("--topic", help="with --partition and --offset: translate one source offset")
    translate.add_argument("--partition", type=int)
    translate.add_argument("--offset", type=int, help="a source offset: the next record a consumer would read")
    translate.add_argument("--source-down", action="store_true",
                           help="answer from the target alone (checkpoints; syncs kept on the target); detected by "
                                "itself when the source does not answer in 5 s")
    translate.add_argument("--json", action="store_true", help="print the translation as JSON")
    translate.add_argument("--timeout", type=float, default=30.0, help="seconds per Kafka read (default 30)")
    add_config_source(translate)
    translate.set_defaults(handler=_translate)


class OffsetsArgumentError(StraitError):
    """The command line asks for neither a group nor one offset, or for both."""


def _translate(args: argparse.Namespace) -> int:
    config = config_from_args(args)
    flow = config.flow(args.flow)
    single = (args.topic, args.partition, args.offset)
    if (args.group is None) == all(v is None for v in single) or (None in single and any(v is not None for v in single)):
        raise OffsetsArgumentError("give either --group G, or --topic T --partition P --offset N")
    down = args.source_down or source_unreachable(config, flow.source) is not None
    if args.group is None:
        return _translate_one(config, flow, args.topic, args.partition, args.offset, args.json, down, args.timeout)
    if down:
        rows = _from_checkpoints(config, flow, args.group, args.timeout)
        print(json.dumps({"flow": flow.name, "group": args.group, "source_down": True, "partitions": rows},
                         indent=2, sort_keys=True) if args.json else _checkpoint_table(flow, args.group, rows))
        return 0 if rows else EXIT_UNTRANSLATED
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



def _translate_one(config: StraitConfig, flow: FlowConfig, topic: str, partition: int, offset: int, as_json: bool,
                   source_down: bool, timeout: float) -> int:
    """One source offset through the offset syncs (on the target when the source is down)."""
    location = flow.topic_names().offset_syncs
    if source_down and location.alias == flow.source:
        raise OffsetsArgumentError(f"flow {flow.name}: the offset syncs live on {flow.source}, which does not answer; "
                                   f"set offset_syncs_topic_location: target to translate without the source")
    row = translate_offset(flow, load_index(config, flow, timeout), CommittedOffset(topic, partition, offset))
    if as_json:
        print(json.dumps({"flow": flow.name, **asdict(row)}, indent=2, sort_keys=True))
    else:
        print(_table(flow.name, f"offset {offset}", [row]))
    return EXIT_UNTRANSLATED if row.downstream is None else 0


def _from_checkpoints(config: StraitConfig, flow: FlowConfig, group: str, timeout: float) -> list[dict[str, object]]:
    """The group's newest checkpoints on the target, per remote partition, with their age."""
    stored = read_stored_checkpoints(config.cluster(flow.target).librdkafka_config("consumer"),
                                     flow.topic_names().checkpoints, timeout)
    now = time.time()
    return [{"remote_topic": c.checkpoint.topic, "partition": c.checkpoint.partition,
             "upstream": c.checkpoint.upstream_offset, "downstream": c.checkpoint.downstream_offset,
             "checkpoint_age_seconds": round(now - c.written_at, 3)}
            for key, c in sorted(stored.items()) if key[0] == group]


def _checkpoint_table(flow: FlowConfig, group: str, rows: list[dict[str, object]]) -> str:
    if not rows:
        return f"group {group} has no checkpoint of flow {flow.name} on {flow.target}"
    lines = [("TARGET TOPIC", "PARTITION", "SOURCE OFFSET", "TARGET OFFSET", "CHECKPOINT AGE")]
    lines += [(str(r["remote_topic"]), str(r["partition"]), str(r["upstream"]), str(r["downstream"]),
               f"{r['checkpoint_age_seconds']:.1f}s") for r in rows]
    widths = [max(len(line[i]) for line in lines) for i in range(len(lines[0]))]
    table = ["  ".join(cell.ljust(widths[i]) for i, cell in enumerate(line)).rstrip() for line in lines]
    return "\n".join([f"{flow.source} does not answer: from the newest checkpoints on {flow.target} (what group "
                      f"{group} committed when each was taken)", *table])
