"""How far whole steps move between two passes of the same measurement, per variant: the
repeatability a host-bound step's model error stands on. Reads step-inputs documents named
`ab_<model>_<variant>_p<pass>.json` (`bash scripts/device/step_model.sh rounds-ab` or
`affinity-ab`), prints every row (median ms, p10-p90 width, steps a round), then per model and
variant how far each row's median moved from pass 1 to pass 2 (median and largest). Writes nothing
but stdout.

    python3 scripts/device/ab_moves.py DIR
"""

from __future__ import annotations

import glob
import json
import os
import statistics
import sys


def tag(path: str) -> tuple[str, str, str]:
    """`(model, variant, pass)` of `ab_<model>_<variant>_p<pass>.json` (the model may hold `_`)."""
    name, variant, p = os.path.basename(path).removeprefix("ab_").removesuffix(".json").rsplit("_", 2)
    return name, variant, p.removeprefix("p")


def width(walls: list[float]) -> float:
    """The p10-p90 width over the median."""
    q = statistics.quantiles(sorted(walls), n=10)
    return (q[-1] - q[0]) / statistics.median(walls)


def moves(docs: dict[tuple[str, str, str], dict]) -> dict[tuple[str, str], list[float]]:
    """Per (model, variant): each row's |pass 2 / pass 1 - 1| where both passes have the row."""
    med: dict[tuple, dict[str, float]] = {}
    for (name, variant, p), d in docs.items():
        for r in d["step_times"]:
            med.setdefault((name, variant, r["execution"], r["tokens"], r["mode"]), {})[p] = statistics.median(r["wall_ms"])
    out: dict[tuple[str, str], list[float]] = {}
    for (name, variant, *_), v in sorted(med.items()):
        if "1" in v and "2" in v:
            out.setdefault((name, variant), []).append(abs(v["2"] / v["1"] - 1))
    return out


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: ab_moves.py DIR (with ab_<model>_<variant>_p<pass>.json)", file=sys.stderr)
        return 2
    docs = {}
    for f in sorted(glob.glob(os.path.join(argv[0], "ab_*_p*.json"))):
        with open(f) as fh:
            docs[tag(f)] = json.load(fh)
    if not docs:
        print(f"{argv[0]}: no ab_<model>_<variant>_p<pass>.json", file=sys.stderr)
        return 1
    print("| model | variant | pass | execution | tokens | mode | steps a round | median ms | p10-p90 width |")
    print("|---|---|---:|---|---:|---|---:|---:|---:|")
    for (name, variant, p), d in docs.items():
        for r in d["step_times"]:
            print(f"| {name} | {variant} | {p} | {r['execution']} | {r['tokens']} | {r['mode']} | {r.get('steps', d.get('steps'))} | "
                  f"{statistics.median(r['wall_ms']):.3f} | {100 * width(r['wall_ms']):.1f}% |")
    print("\n| model | variant | rows | median move between passes | largest |\n|---|---|---:|---:|---:|")
    for (name, variant), m in moves(docs).items():
        print(f"| {name} | {variant} | {len(m)} | {100 * statistics.median(m):.1f}% | {100 * max(m):.1f}% |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
