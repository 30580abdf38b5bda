"""Compares each new bench report with the committed one of the same layout, point by point.

    python3 scripts/device/compare_reports.py PAIRS DIR

PAIRS: lines `NAME COMMITTED.json`; DIR holds NAME.json. Prints a Markdown table: points in
both, statuses that differ, and the new/old speedup ratio (median, p10-p90, worst) over the
points that passed in both.
"""

import json
import statistics
import sys
from pathlib import Path


def key(p):
    return (p["component"], p["module"], p["tp"], p["etp"], p["tokens"])


def load(path):
    return {key(p): p for p in json.loads(Path(path).read_text())["points"]}


def main(pairs, folder):
    print("| layout | points in both | status differs | new/old speedup p50 (p10-p90) | worst |")
    print("|---|---:|---:|---|---:|")
    for line in Path(pairs).read_text().split("\n"):
        if not line.strip():
            continue
        name, ref = line.split()
        new_path = Path(folder) / f"{name}.json"
        if not new_path.exists():
            print(f"| {name} | no new report | | | |")
            continue
        new, old = load(new_path), load(ref)
        both = sorted(set(new) & set(old))
        differ = [k for k in both if new[k]["status"] != old[k]["status"]]
        ratios = sorted(
            new[k]["speedup"] / old[k]["speedup"]
            for k in both
            if new[k]["status"] == old[k]["status"] == "ok" and old[k].get("speedup")
        )
        if not ratios:
            print(f"| {name} | {len(both)} | {len(differ)} | - | - |")
            continue
        q = statistics.quantiles(ratios, n=10) if len(ratios) > 1 else [ratios[0]] * 9
        worst = max(ratios, key=lambda r: abs(r - 1))
        print(f"| {name} | {len(both)} | {len(differ)} | {statistics.median(ratios):.3f} ({q[0]:.3f}-{q[-1]:.3f}) | {worst:.3f} |")
        for k in differ:
            print(f"|  differs: {k} | old {old[k]['status']} | new {new[k]['status']}: {new[k].get('reason', '')} | | |")


if __name__ == "__main__":
    main(*sys.argv[1:3])
