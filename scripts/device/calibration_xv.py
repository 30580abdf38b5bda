"""Which counts the step model should calibrate at, judged on counts it did not see. Reads
step-inputs documents whose whole steps were timed (with host and GPU time) at many counts
(`bash scripts/device/step_model.sh calibrate-all`, or `hostbound`), and for each candidate set of
calibrated counts fits the tool's own model (`fp8sel merge-policy --step-model`) on the module
rows at the sweep's counts and the whole steps at the candidate's counts, then compares its
prediction with the whole steps at the held-out counts (the same for every candidate: those in
none of them). Prints each candidate's median |error|, its bias (the signed median) and how many
held-out steps are within 3%, per document and over all (--summary: one row per candidate, each
document's count within 3% beside the totals). Writes its work files under --work.

    python3 scripts/device/calibration_xv.py --sweep 1024,2048,4096,8192,16384 \
        --candidates 1024,4096,16384 1024,2048,4096,16384 -- DOC.json ...
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile


def counts(s: str) -> frozenset[int]:
    return frozenset(int(x) for x in s.split(","))


def split(doc: dict, sweep: frozenset[int], calibrated: frozenset[int]) -> tuple[dict, dict]:
    """The inputs (modules at the sweep's counts, whole steps at `calibrated`) and a check of
    every other whole step (host and GPU time dropped: a check has neither)."""
    inputs = dict(doc, modules=[m for m in doc["modules"] if m["tokens"] in sweep],
                  step_times=[r for r in doc["step_times"] if r["tokens"] in calibrated])
    check = dict(doc, modules=[], step_times=[dict(r, host_ms=None, gpu_ms=None)
                                              for r in doc["step_times"] if r["tokens"] not in calibrated])
    return inputs, check


def held_out_errors(fp8sel: str, work: str, tag: str, inputs: dict, check: dict, held: frozenset[int]) -> list[float]:
    """The model's `error` at each held-out count's all-BF16 and all-FP8 step."""
    paths = [os.path.join(work, f"{tag}_{x}.json") for x in ("inputs", "check", "policy")]
    for p, d in zip(paths, (inputs, check)):
        with open(p, "w") as f:
            json.dump(d, f)
    done = subprocess.run([fp8sel, "merge-policy", "--step-model", paths[0], "--step-check", paths[1], "--output", paths[2]],
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{tag}: fp8sel merge-policy failed: {done.stderr.strip()[-400:]}")
    with open(paths[2]) as f:
        policy = json.load(f)
    return [r["error"] for lm in policy["provenance"]["step"]["model"] for r in lm["check"]
            if r["tokens"] in held and r["mode"] in ("bf16", "fp8")]


def line(name: str, errors: list[float]) -> str:
    if not errors:
        return f"| {name} | 0 | - | - | - |"
    within = sum(abs(e) <= 0.03 for e in errors)
    return (f"| {name} | {len(errors)} | {100 * statistics.median(abs(e) for e in errors):.1f}% | "
            f"{100 * statistics.median(errors):+.1f}% | {within} of {len(errors)} |")


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sweep", type=counts, required=True, help="the counts whose module rows the model reads (gen-policy's --tokens)")
    ap.add_argument("--candidates", type=counts, nargs="+", required=True, help="sets of calibrated counts to compare")
    ap.add_argument("--fp8sel", default=os.environ.get("FP8SEL", "fp8sel"))
    ap.add_argument("--work", default=None, help="where the fitted files go (default: a temporary folder)")
    ap.add_argument("--summary", action="store_true", help="one row per candidate (the per-document rows left out)")
    ap.add_argument("docs", nargs="+")
    a = ap.parse_args(argv)
    work = a.work or tempfile.mkdtemp(prefix="calibration_xv_")
    os.makedirs(work, exist_ok=True)
    every: dict[str, list[float]] = {}
    per_doc: dict[str, list[str]] = {}
    if not a.summary:
        print("| document, candidate | held-out steps | median \\|error\\| | median error | within 3% |\n|---|---:|---:|---:|---:|")
    for path in a.docs:
        with open(path) as f:
            doc = json.load(f)
        timed = frozenset(r["tokens"] for r in doc["step_times"] if r.get("host_ms") is not None)
        held = timed - frozenset().union(*a.candidates)
        missing = [sorted(c - timed) for c in a.candidates if not c <= timed]
        if missing or not held:
            print(f"{path}: whole steps at {sorted(timed)}: a candidate's counts {missing} not timed, or no count left to "
                  "hold out; fix: time whole steps at every candidate count and at others", file=sys.stderr)
            return 2
        name = os.path.basename(path).removesuffix(".json")
        for i, c in enumerate(a.candidates):
            label = ",".join(map(str, sorted(c)))
            e = held_out_errors(a.fp8sel, work, f"{name}_{i}", *split(doc, a.sweep, c), held)
            every.setdefault(label, []).extend(e)
            per_doc.setdefault(label, []).append(f"{sum(abs(x) <= 0.03 for x in e)} of {len(e)}")
            if not a.summary:
                print(line(f"{name}, {label}", e))
    if not a.summary:
        for label, e in every.items():
            print(line(f"**all**, {label}", e))
        return 0
    names = ", ".join(os.path.basename(p).removesuffix(".json") for p in a.docs)
    print(f"| calibrated counts | held-out steps | median \\|error\\| | median error | within 3% | within 3%: {names} |")
    print("|---|---:|---:|---:|---:|---|")
    for label, e in every.items():
        print(line(label, e) + f" {', '.join(per_doc[label])} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
