"""Which overlap form fits a host-bound step between two calibrated counts. The step model's
held-out misses sit where a step's GPU time is under 1.5 x its host time (median error -5 to -10%
on the H200: the step slower than predicted); this reads step-inputs documents calibrated at
every count (`step_inputs --calibrate` = `--tokens`, `bash scripts/device/step_model.sh
hostbound`), keeps the smallest and largest count as the calibration, and predicts each count
between from that count's own measured GPU time (so a GPU curve's error is not the form's):

- `max+k`: the model's form, `max(H, G) + k * min(H, G)`, `k` linear in tokens between the two
  (H: the smaller of the two steps' host time and wall time, as `Fit::calibrate`);
- `G+idle`: the GPU's time plus its idle time, `G + I`, `I = wall - G` linear between the two;
- `max+e`: `max(H, G) + e`, the excess `e = wall - max(H, G)` in ms linear between the two;
- `max+k@x`: the model's form calibrated at a third count too, the one between whose GPU time is
  nearest its host's (the crossover, where `k` peaks), itself left out of the summary.

Prints one row per layout, execution, mode and count (measured wall, host, GPU, each form's error),
then each form's median |error| and median error. Writes nothing but stdout.

    python3 scripts/device/hostbound.py hb_deepseek_v3_tp8.json ...
"""

from __future__ import annotations

import json
import os
import statistics
import sys

FORMS = ("max+k", "G+idle", "max+e", "max+k@x")


def share(wall: float, host: float, gpu: float) -> float:
    """`(wall - max) / min` within 0..1, as the model's `share`."""
    hi, lo = max(host, gpu), min(host, gpu)
    return min(1.0, max(0.0, (wall - hi) / lo)) if lo > 0 else 0.0


def lerp(a: tuple[float, float], b: tuple[float, float], t: float) -> float:
    return a[1] + (b[1] - a[1]) * (t - a[0]) / (b[0] - a[0])


def predict(lo: dict, hi: dict, host: float, t: int, gpu: float) -> dict[str, float]:
    """Each form's wall at `t` (GPU `gpu`) from the two calibration rows `lo` and `hi`."""
    k = lerp((lo["tokens"], share(lo["wall"], host, lo["gpu"])), (hi["tokens"], share(hi["wall"], host, hi["gpu"])), t)
    idle = lerp((lo["tokens"], lo["wall"] - lo["gpu"]), (hi["tokens"], hi["wall"] - hi["gpu"]), t)
    excess = lerp((lo["tokens"], lo["wall"] - max(host, lo["gpu"])), (hi["tokens"], hi["wall"] - max(host, hi["gpu"])), t)
    return {
        "max+k": max(host, gpu) + min(1.0, max(0.0, k)) * min(host, gpu),
        "G+idle": gpu + idle,
        "max+e": max(host, gpu) + excess,
    }


def with_crossover(lo: dict, mid: dict, hi: dict, host: float, t: int, gpu: float) -> float:
    """The model's form with `k` linear through three calibrated counts."""
    a, b = (lo, mid) if t <= mid["tokens"] else (mid, hi)
    k = lerp((a["tokens"], share(a["wall"], host, a["gpu"])), (b["tokens"], share(b["wall"], host, b["gpu"])), t)
    return max(host, gpu) + min(1.0, max(0.0, k)) * min(host, gpu)


def rows_of(doc: dict) -> dict[tuple[str, str], list[dict]]:
    """Whole-step rows with host and GPU time, by (execution, mode), ascending counts."""
    out: dict[tuple[str, str], list[dict]] = {}
    for r in doc["step_times"]:
        if r.get("host_ms") is None or r.get("gpu_ms") is None or r["mode"] == "plan":
            continue
        out.setdefault((r["execution"], r["mode"]), []).append(
            {"tokens": r["tokens"], "wall": statistics.median(r["wall_ms"]), "host": r["host_ms"], "gpu": r["gpu_ms"]})
    return {k: sorted(v, key=lambda r: r["tokens"]) for k, v in out.items()}


def errors(name: str, doc: dict) -> list[tuple[str, dict[str, float]]]:
    """One line and each form's relative error per count between the calibration's two."""
    out = []
    for (execution, mode), rows in sorted(rows_of(doc).items()):
        if len(rows) < 3:
            continue
        lo, hi = rows[0], rows[-1]
        host = min(min(r["wall"], r["host"]) for r in (lo, hi))
        mid = min(rows[1:-1], key=lambda r: abs(r["gpu"] / host - 1))
        for r in rows[1:-1]:
            p = predict(lo, hi, host, r["tokens"], r["gpu"])
            if r is not mid:
                p["max+k@x"] = with_crossover(lo, mid, hi, host, r["tokens"], r["gpu"])
            err = {f: p[f] / r["wall"] - 1 for f in FORMS if f in p}
            cell = {f: f"{100 * err[f]:+.1f}%" if f in err else "(x)" for f in FORMS}
            line = (f"| {name} | {execution} | {mode} | {r['tokens']} | {r['wall']:.2f} | {r['host']:.2f} | {r['gpu']:.2f} | "
                    f"{r['gpu'] / host:.2f} | " + " | ".join(cell[f] for f in FORMS) + " |")
            out.append((line, err))
    return out


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: hostbound.py STEP_INPUTS.json ...", file=sys.stderr)
        return 2
    print("| layout | execution | mode | tokens | wall ms | host ms | GPU ms | GPU / H | " + " | ".join(FORMS) + " |")
    print("|---|---|---|---:|---:|---:|---:|---:|" + "---:|" * len(FORMS))
    every = []
    for path in argv:
        with open(path) as f:
            doc = json.load(f)
        for line, err in errors(os.path.basename(path).removesuffix(".json"), doc):
            print(line)
            every.append(err)
    if not every:
        print("no count between two calibrated counts with host and GPU time", file=sys.stderr)
        return 1
    print("\n| form | counts | median \\|error\\| | median error | within 3% |\n|---|---:|---:|---:|---:|")
    for f in FORMS:
        v = [e[f] for e in every if f in e]
        print(f"| {f} | {len(v)} | {100 * statistics.median(abs(x) for x in v):.1f}% | {100 * statistics.median(v):+.1f}% | "
              f"{sum(abs(x) <= 0.03 for x in v)} of {len(v)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
