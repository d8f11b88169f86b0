"""`strait status [--json]`: per-flow drift between source and target, read from Redis only.

The configsync replica that holds a flow publishes its drift report after every pass; this command
lists every configured flow with its report (or says that none is there) without touching Kafka.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from strait.settings import settings_of
from strait.config.store import ConfigStoreError, load_stored_config
from strait.coord.redis_client import connect
from strait.progress import read_resume_report
from strait.source_watch import SourceView, read_source_view
from strait_configsync.drift import FlowReport, age, read_reports

NO_REPORT = "no report (is `strait run configsync` running?)"


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the `status` command."""
    parser = subparsers.add_parser("status", help="per-flow drift: topics, partitions, configs and ACLs")
    parser.add_argument("--redis-url", help="the coordination Redis (default $STRAIT_REDIS_URL)")
    parser.add_argument("--json", action="store_true", help="print the reports as JSON")
    parser.set_defaults(handler=_status)


def _status(args: argparse.Namespace) -> int:
    client = connect(settings_of(args).coordination_url())
    try:
        _version, config = load_stored_config(client)
        flows = {flow.name: flow.enabled for flow in config.flows}
    except ConfigStoreError:
        flows = {}
    reports = read_reports(client)
    for name in reports:
        flows.setdefault(name, True)
    rows = [_row(name, enabled, reports.get(name)) for name, enabled in flows.items()]
    for row in rows:
        source = _source(read_source_view(client, row["flow"]))
        if source is not None:  # published by the heartbeat service's source watch
            row["source"] = source
        resumed = read_resume_report(client, row["flow"])
        if resumed is not None:  # published by the replicator when the flow's query last started
            row["resumed"] = resumed
    topology = read_topology(client)
    if args.json:
        print(json.dumps({"flows": rows, "topology": topology}, indent=2, sort_keys=True))
        return 0
    print(_table(rows) if rows else "no flows configured (`strait config apply FILE` stores one)")
    for row in rows:
        if "source" in row:
            print(f"{row['flow']}: {row['source']['summary']}")
        for topic, how in sorted(row.get("resumed", {}).get("topics", {}).items()):
            bound = how["duplicates_at_most"]
            print(f"{row['flow']}: {topic} resumed from {how['evidence']} at {_utc(row['resumed']['at'])}, "
                  f"at most {'an unknown number of' if bound < 0 else bound} record(s) copied twice")
    if topology:
        print("\ntopology (from heartbeat topics: cluster <- upstream clusters and hops)")
        for alias, cluster in sorted(topology.items()):
            upstream = ", ".join(f"{up} ({hops} hop{'s' if hops != 1 else ''})"
                                 for up, hops in sorted(cluster.get("upstream_clusters", {}).items()))
            print(f"  {alias} <- {upstream or 'nothing yet'}")
    return 0


def read_topology(client: Any, namespace: str = "strait") -> dict[str, dict[str, Any]]:
    """The topology the heartbeat service published per cluster alias (JSON at <ns>:topology:<alias>)."""
    topology: dict[str, dict[str, Any]] = {}
    for key in client.scan_iter(match=f"{namespace}:topology:*"):
        raw = client.get(key)
        name = key.decode() if isinstance(key, bytes) else key
        try:
            value = json.loads(raw) if raw else None
        except ValueError:
            continue  # a fenced write stores plain JSON; anything else is not ours to show
        if isinstance(value, dict):
            topology[name.rsplit(":", 1)[-1]] = value
    return topology


def _source(view: SourceView | None) -> dict[str, Any] | None:
    """What the heartbeat service's source watch last published: reachability, RPO now, worst lag."""
    if view is None:
        return None
    now = time.time()
    lag = max((p.lag_seconds(now) for p in view.partitions), default=0.0)
    since = view.unreachable_since
    state = (f"source {view.source} unreachable since {_utc(since)} ({now - since:.0f}s)" if since is not None
             else f"source {view.source} reachable")
    rpo = view.rpo_records
    summary = f"{state}; not yet copied: {'unknown' if rpo is None else rpo} record(s), oldest {lag:.1f}s old"
    return {"reachable": since is None, "unreachable_since": since, "rpo_records": rpo,
            "lag_seconds": round(lag, 1), "summary": summary}


def _utc(seconds: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(seconds))


def _row(name: str, enabled: bool, report: FlowReport | None) -> dict[str, Any]:
    if report is None:
        return {"flow": name, "enabled": enabled, "state": "disabled" if not enabled else "unknown",
                "report": None}
    return {"flow": name, "enabled": enabled, "state": report.state, "age_seconds": round(age(report), 1),
            "report": report.to_dict()}


def _table(rows: list[dict[str, Any]]) -> str:
    header = ("FLOW", "STATE", "IN SYNC", "MISSING", "PARTITIONS", "CONFIG DRIFT", "ACL DRIFT", "AGE")
    lines = [header]
    notes: list[str] = []
    for row in rows:
        report = row["report"]
        if report is None:
            lines.append((row["flow"], row["state"], "-", "-", "-", "-", "-", "-"))
            if row["enabled"]:
                notes.append(f"{row['flow']}: {NO_REPORT}")
            continue
        lines.append((row["flow"], row["state"], f"{report['topics_in_sync']}/{report['topics_replicated']}",
                      str(report["missing_count"]), str(report["partition_mismatch_count"]),
                      str(report["config_drift_count"]), str(report["acl_drift"]), f"{row['age_seconds']:.0f}s"))
        notes += _details(row["flow"], report)
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    table = ["  ".join(cell.ljust(widths[i]) for i, cell in enumerate(line)).rstrip() for line in lines]
    return "\n".join(table + ([""] + notes if notes else []))


def _details(flow: str, report: dict[str, Any]) -> list[str]:
    notes = [f"{flow}: missing on target: {topic}" for topic in report["missing"]]
    notes += [f"{flow}: {m['topic']} has {m['target']} partitions, source has {m['source']}"
              for m in report["partition_mismatch"]]
    notes += [f"{flow}: {d['topic']} config differs: {', '.join(d['keys'])}" for d in report["config_drift"]]
    notes += [f"{flow}: ACL missing on target: {acl}" for acl in report["acls_missing"]]
    notes += [f"{flow}: ACL deleted on source, kept on target: {acl}" for acl in report["acls_deleted_on_source"]]
    if report["acl_sync"] not in ("ok", "disabled"):
        notes.append(f"{flow}: ACL sync: {report['acl_sync']}")
    notes += [f"{flow}: error ({e['kind']}): {e['message']}" for e in report["errors"]]
    return notes
