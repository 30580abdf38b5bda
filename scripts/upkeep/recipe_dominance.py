"""Where blockwise FP8 beats tensorwise, module by module, in the committed per-module H200 sweeps
made in both recipes (reports/h200/<layout>.json, blockwise; reports/h200/tensorwise/<layout>.json):
the only places a per-module recipe mix could be faster than the tensorwise policy by speed alone.

    python scripts/upkeep/recipe_dominance.py [--margin 0.03]

Prints each (layout, module, tokens) where blockwise's FP8 time is more than MARGIN below
tensorwise's and below BF16's, then a count line. Reads the reports only; CPU.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def fp8_times(path: Path) -> dict[tuple[str, int], tuple[float, float]]:
    """(module, tokens) -> (BF16 ms, FP8 ms), medians of the report's ok points."""
    d = json.loads(path.read_text())
    return {
        (p["module"], p["tokens"]): (p["bf16"]["total_ms"]["median"], p["fp8"]["total_ms"]["median"])
        for p in d["points"]
        if p.get("status") == "ok"
    }


def blockwise_wins(block: dict, tensor: dict, margin: float) -> list[tuple[str, int, float, float, float]]:
    """Points both recipes measured where blockwise FP8 is faster than tensorwise by more than
    ``margin`` and faster than BF16: (module, tokens, bf16, blockwise, tensorwise)."""
    out = []
    for k in sorted(set(block) & set(tensor)):
        bf16, fb = block[k]
        ft = tensor[k][1]
        if fb < ft * (1 - margin) and fb < bf16:
            out.append((k[0], k[1], bf16, fb, ft))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--margin", type=float, default=0.03, help="how much faster blockwise must be (default 0.03)")
    a = ap.parse_args(argv)
    both = sorted((ROOT / "reports/h200/tensorwise").glob("*.json"))
    points = 0
    wins = 0
    for t in both:
        b = ROOT / "reports/h200" / t.name
        if not b.is_file():
            continue
        block, tensor = fp8_times(b), fp8_times(t)
        points += len(set(block) & set(tensor))
        for m, tok, bf16, fb, ft in blockwise_wins(block, tensor, a.margin):
            wins += 1
            print(f"{t.stem} {m} {tok}: bf16 {bf16:.3f} ms, blockwise {fb:.3f}, tensorwise {ft:.3f}")
    if not points:
        print("error: no layout measured in both recipes under reports/h200/", file=sys.stderr)
        return 1
    print(f"{wins} of {points} points measured in both recipes: blockwise FP8 faster than tensorwise by more than {100 * a.margin:g}% and than BF16")
    return 0


if __name__ == "__main__":
    sys.exit(main())
