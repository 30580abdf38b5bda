"""The Megatron judge's results as the tables docs/PERFORMANCE.md shows (integration overhead)
and the precision checks (decisions against `fp8sel explain`):

    python3 scripts/device/megatron_judge_table.py docs/device-logs/megatron_judge/*/*.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def overhead(path: str, d: dict) -> list[str]:
    out = [f"**{d['model']}**, {d['layers']} layers, {d['steps']} steps x {d['repeats']} interleaved rounds "
           f"(`{Path(path).parent.name}/{Path(path).name}`)", "",
           "| tokens | mode | ms/step p50 (p10-p90) | / BF16 p50 (p10-p90) | verdict | / cheaper region |",
           "|---|---|---|---|---|---|"]
    for row in d["results"]:
        if "error" in row:
            out.append(f"| {row['tokens']} | error: {row['error']} | | | | |")
            continue
        m = row["modes"]
        for name, r in m.items():
            base = name.split("@")[0]
            cheap = ""
            if "@" not in name and f"{base}@fp8" in m:
                regions = [m[k]["vs_bf16_median"] for k in (f"{base}@fp8", f"{base}@bf16") if k in m]
                cheap = f"{r['vs_bf16_median'] / min(regions):.3f}"
            out.append(f"| {row['tokens']} | {name} | {r['ms_median']:.2f} ({r['ms_p10']:.2f}-{r['ms_p90']:.2f}) | "
                       f"{r['vs_bf16_median']:.3f} ({r['vs_bf16_p10']:.3f}-{r['vs_bf16_p90']:.3f}) | {r['verdict_vs_bf16']} | {cheap} |")
    return out + [""]


def checks(runs: list[tuple[str, dict]]) -> list[str]:
    out = ["| run | model | modes checked | TE module instances | FP8 | differ from explain |", "|---|---|---|---|---|---|"]
    for path, d in runs:
        ch = d.get("precision_checks", [])
        out.append(f"| `{Path(path).parent.name}/{Path(path).name}` | {Path(d['model']).name} | {len(ch)} | "
                   f"{sum(c['te_modules'] for c in ch)} | {sum(c['fp8_modules'] for c in ch)} | {sum(len(c['mismatches']) for c in ch)} |")
    return out + [""]


def main(paths: list[str]) -> None:
    runs = [(p, json.load(open(p))) for p in sorted(paths) if "/pol_" not in p]
    lines = ["### Decisions in the step against `fp8sel explain`", ""] + checks(runs)
    lines += ["### Integration overhead", ""]
    for p, d in runs:
        if d["repeats"] >= 21:
            lines += overhead(p, d)
    print("\n".join(lines))


if __name__ == "__main__":
    main(sys.argv[1:])
