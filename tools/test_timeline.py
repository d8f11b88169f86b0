"""Where a parallel test run's time went, from its ``STRAIT_TEST_TIMELINE`` file.

    python tools/test_timeline.py TIMELINE.jsonl

Per worker: busy in tests, waiting for the machine, alone; the exclusive regions in order; the
longest tests; the idle tail at the end.
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict


def main(path: str) -> None:
    """Print the summary of one timeline file."""
    rows = [json.loads(line) for line in open(path, encoding="utf-8") if line.strip()]
    if not rows:
        print("empty timeline")
        return
    origin = min(r["start"] for r in rows)
    finish = max(r["end"] for r in rows)
    print(f"wall {finish - origin:.0f} s")
    by_worker: dict[str, list[dict]] = defaultdict(list)
    for row in rows:
        by_worker[row["worker"]].append(row)
    for worker, items in sorted(by_worker.items()):
        tests = [r for r in items if "::" in r["what"]]
        waits = [r for r in items if r["what"].startswith("waiting")]
        alone = [r for r in items if r["what"] == "alone"]
        last = max(r["end"] for r in tests) if tests else origin
        print(f"{worker}: tests {sum(r['end'] - r['start'] for r in tests):.0f} s, "
              f"waiting {sum(r['end'] - r['start'] for r in waits):.0f} s, "
              f"alone {sum(r['end'] - r['start'] for r in alone):.0f} s, done at {last - origin:.0f} s")
    print("exclusive regions and waits:")
    for row in sorted((r for r in rows if "::" not in r["what"]), key=lambda r: r["start"]):
        if row["end"] - row["start"] >= 1:
            print(f"  {row['start'] - origin:7.0f} {row['end'] - row['start']:6.0f} s {row['worker']} {row['what']}")
    print("files by time (CPU seconds of the worker and the processes it waited for):")
    files: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    for row in rows:
        if "::" in row["what"]:
            spent = files[row["what"].split("::")[0]]
            spent[0] += row["end"] - row["start"]
            spent[1] += row.get("cpu", 0.0)
    for name, (seconds, cpu) in sorted(files.items(), key=lambda kv: -kv[1][0])[:30]:
        print(f"  {seconds:6.0f} s {cpu:7.0f} cpu-s {name}")


if __name__ == "__main__":
    main(sys.argv[1])
