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
    print("files by time, with the machine's CPU seconds shared among the tests running at once:")
    tests = [r for r in rows if "::" in r["what"]]
    cpu = machine_cpu_of(tests)
    files: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    for index, row in enumerate(tests):
        spent = files[row["what"].split("::")[0]]
        spent[0] += row["end"] - row["start"]
        spent[1] += cpu.get(index, 0.0)
    for name, (seconds, used) in sorted(files.items(), key=lambda kv: -kv[1][0])[:30]:
        print(f"  {seconds:6.0f} s {used:7.0f} cpu-s {name}")
    print(f"machine busy while tests ran: {sum(cpu.values()):.0f} cpu-s")


def machine_cpu_of(tests: list[dict]) -> dict[int, float]:
    """Test index -> the machine's busy seconds while it ran, each stretch between two tests' starts or
    ends shared equally among the tests running through it (rows with a ``busy`` pair only)."""
    samples = sorted({(r["start"], r["busy"][0]) for r in tests if "busy" in r}
                     | {(r["end"], r["busy"][1]) for r in tests if "busy" in r})
    cpu: dict[int, float] = defaultdict(float)
    for (began, busy_then), (ended, busy_after) in zip(samples, samples[1:]):
        running = [i for i, r in enumerate(tests) if "busy" in r and r["start"] <= began and r["end"] >= ended]
        for index in running:
            cpu[index] += max(0.0, busy_after - busy_then) / len(running)
    return cpu


if __name__ == "__main__":
    main(sys.argv[1])
