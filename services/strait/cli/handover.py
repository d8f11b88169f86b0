"""`strait handover --to mm2 --flow A->B`: hand a stopped flow's copy back to MirrorMaker 2.

Writes strait's progress of each partition into MM2's Connect offsets topic on the target, in
Connect's format; MirrorMaker 2 started afterwards on the same clusters continues where strait's
copies end, with no second copy. Taking over from MM2 needs no command: strait's replicator reads
MM2's offsets by itself (:mod:`strait.progress`).
"""

from __future__ import annotations

import argparse

from strait.cli.service_options import add_config_source, config_from_args
from strait.progress import hand_over_to_mm2


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the `handover` command."""
    handover = subparsers.add_parser("handover", help="hand a stopped flow's progress to MirrorMaker 2")
    handover.add_argument("--to", required=True, choices=["mm2"], help="who copies the flow next")
    handover.add_argument("--flow", required=True, help='the flow, e.g. "A->B" (stop it first)')
    handover.add_argument("--timeout", type=float, default=30.0, help="seconds per Kafka read (default 30)")
    add_config_source(handover)
    handover.set_defaults(handler=_handover)


def _handover(args: argparse.Namespace) -> int:
    config = config_from_args(args)
    flow = config.flow(args.flow)
    handed = hand_over_to_mm2(config, flow, args.timeout)
    topic = flow.topic_names().mm2_offsets.topic
    for (source_topic, partition), offset in sorted(handed.items()):
        print(f"{source_topic}[{partition}] MirrorMaker 2 goes on at offset {offset}")
    print(f"wrote {len(handed)} partitions to {topic} on {flow.target}; start MirrorMaker 2 now")
    return 0
