"""The hook against Megatron's native per-module config, with the same FP8 modules, in every
committed Megatron judge run (pure: reads the step benchmark's JSON, no torch).

A judge run (``step_bench --trainer megatron``) times each policy twice, through the hook
(``hook:P``) and through the native config (``native:P``), in models built apart. This pairs the
two rows of each count where both ran the same FP8 groups and prints, per GPU and execution and
token band, how the hook's median step compares with native's: the ratio and the difference in
ms. Pairs with no FP8 group (both the BF16 model) say what two models built alike differ by.
Pairs are told apart by the two models' launch regions (``hook/native``, from the run's precision
checks; ``?`` where a run recorded none): graphed FP8 plans ran native in the BF16 region, on
stale FP8 weights, until 2026-12-06, and both integrations in the FP8 region since.

    python3 scripts/upkeep/hook_native.py                 # every run under docs/device-logs
    python3 scripts/upkeep/hook_native.py --rows A.json   # one run, a row per pair
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

#: The GPUs the summary tells apart, by the name in a run's ``device``.
GPUS = ("H100", "H200")

#: Upper ends of the token bands the summary groups pairs by.
BANDS = (2048, 4608, 8192)


def regions(doc: dict) -> dict[tuple, str]:
    """Each mode's launch region by ``(tokens, execution, mode)``, from the run's precision checks."""
    return {(c.get("tokens"), c.get("execution"), c.get("mode")): str(c.get("region") or "?")
            for c in doc.get("precision_checks", []) if isinstance(c, dict)}


def pairs(doc: dict) -> list[dict]:
    """The hook/native pairs of one judge document: one per count and policy whose two rows ran
    the same FP8 groups and both have a median."""
    out = []
    device = str(doc.get("device", ""))
    gpu = next((g for g in GPUS if g in device), "other")
    where = regions(doc)
    for r in doc.get("results", []):
        modes = r.get("modes", {})
        for name, hook in modes.items():
            if not name.startswith("hook:"):
                continue
            native = modes.get("native:" + name[len("hook:"):])
            if not native or not hook.get("ms_median") or not native.get("ms_median"):
                continue
            if sorted(hook.get("fp8_groups", [])) != sorted(native.get("fp8_groups", [])):
                continue
            nname = "native:" + name[len("hook:"):]
            at = (r.get("tokens"), r.get("execution"))
            out.append({
                "gpu": gpu,
                "regions": f"{where.get((*at, name), '?')}/{where.get((*at, nname), '?')}",
                "execution": r["execution"],
                "tokens": r["tokens"],
                "fp8_groups": len(hook.get("fp8_groups", [])),
                "ratio": hook["ms_median"] / native["ms_median"],
                "diff_ms": hook["ms_median"] - native["ms_median"],
            })
    return out


def band(tokens: int) -> tuple[int, str]:
    """The token band of a count: its place in :data:`BANDS` and its name."""
    lo = 0
    for i, hi in enumerate(BANDS):
        if tokens <= hi:
            return i, f"{lo + 1}-{hi}"
        lo = hi
    return len(BANDS), f"over {lo}"


def summary(rows: list[dict]) -> list[dict]:
    """Per (GPU, execution, with FP8 or not, regions, token band): the pairs' count and the median
    and range of the ratio and of the ms difference."""
    groups: dict[tuple, list[dict]] = {}
    for p in rows:
        key = (p["gpu"], p["execution"], "FP8" if p["fp8_groups"] else "none", p.get("regions", "?"),
               band(p["tokens"]))
        groups.setdefault(key, []).append(p)
    out = []
    for key in sorted(groups):
        ps = groups[key]
        ratios = [p["ratio"] for p in ps]
        diffs = [p["diff_ms"] for p in ps]
        out.append({
            "gpu": key[0], "execution": key[1], "fp8": key[2], "regions": key[3], "band": key[4][1],
            "pairs": len(ps),
            "ratio_median": statistics.median(ratios), "ratio_min": min(ratios), "ratio_max": max(ratios),
            "diff_median_ms": statistics.median(diffs), "slower": sum(r > 1 for r in ratios),
        })
    return out


def judge_docs(root: Path) -> list[tuple[Path, dict]]:
    """Every Megatron judge document under ``root``, read once; a file that is not one is passed
    over."""
    out = []
    for p in sorted(root.rglob("*.json")):
        try:
            doc = json.loads(p.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(doc, dict) and doc.get("trainer") == "megatron" and isinstance(doc.get("results"), list):
            out.append((p, doc))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", default="docs/device-logs", help="the folder whose judge runs are read")
    ap.add_argument("--rows", nargs="+", metavar="FILE", help="print each pair of these runs instead")
    a = ap.parse_args(argv)
    if a.rows:
        print("| file | GPU | execution | regions | tokens | FP8 groups | hook / native | hook - native ms |")
        print("|---|---|---|---|---:|---:|---:|---:|")
        for f in a.rows:
            try:
                doc = json.loads(Path(f).read_text())
            except (OSError, ValueError) as e:
                print(f"hook_native: {f}: {e}", file=sys.stderr)
                return 2
            for p in pairs(doc):
                print(f"| {f} | {p['gpu']} | {p['execution']} | {p['regions']} | {p['tokens']} | {p['fp8_groups']} | "
                      f"{p['ratio']:.3f} | {p['diff_ms']:+.3f} |")
        return 0
    root = Path(a.root)
    if not root.is_dir():
        print(f"hook_native: {root}: not a folder; fix: --root the folder of the judge runs", file=sys.stderr)
        return 2
    rows = [p for _, doc in judge_docs(root) for p in pairs(doc)]
    print("| GPU | execution | FP8 groups | regions | tokens | pairs | hook / native: median (min-max) | hook slower | hook - native ms, median |")
    print("|---|---|---|---|---|---:|---|---:|---:|")
    for s in summary(rows):
        print(f"| {s['gpu']} | {s['execution']} | {s['fp8']} | {s['regions']} | {s['band']} | {s['pairs']} | "
              f"{s['ratio_median']:.3f} ({s['ratio_min']:.3f}-{s['ratio_max']:.3f}) | {s['slower']} of {s['pairs']} | "
              f"{s['diff_median_ms']:+.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
