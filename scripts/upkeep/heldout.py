"""The step model's held-out error on every committed set of its measurements, by today's tool.

Each ``*_inputs_step.json`` in the repository with a ``_check_step.json`` (and a
``_recheck_step.json``) beside it is fitted again by ``fp8sel merge-policy --step-model
--step-check`` (no GPU), and its check rows at counts the calibration did not use are compared
with the model: per set and execution the median and worst |predicted / measured - 1| and how
many lie within 3%, then the totals. Run it before and after a change to the model
(``fp8_merge::model``) to see what the change does on every measurement on record.

    python scripts/upkeep/heldout.py [--fp8sel BIN] [--root .] [--order]

With ``--order`` it prints instead the signed error (predicted / measured - 1) by the place of
the count in the order its check timed it (the check document's order; a count timed again,
in a recheck, left out), MoE and dense apart: whether a check's first counts ran slower.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

INPUTS = "_inputs_step.json"
#: fp8_merge::model::SEQUENCE_GRAIN: today's check times only counts on it (graphed steps off it
#: ran 1.1-10 x slower in every mode alike on the H200, a cost of that length no model predicts).
GRAIN = 128


def sets(root: Path) -> list[tuple[Path, list[Path]]]:
    """Each committed inputs file of the blockwise recipe (another recipe's inputs carry its name, or
    lie in its folder: `reports/h200/<recipe>/step_model/`) and its checks."""
    files = subprocess.run(["git", "ls-files", f"*{INPUTS}"], cwd=root, capture_output=True, text=True, check=True).stdout.split()
    out = []
    for f in sorted(files):
        base = f[: -len(INPUTS)]
        checks = [Path(base + end) for end in ("_check_step.json", "_recheck_step.json") if (root / (base + end)).is_file()]
        other = base.endswith(("_tensorwise", "_delayed", "_mxfp8")) or {"tensorwise", "delayed", "mxfp8"} & set(Path(f).parts)
        if checks and not other:
            out.append((Path(f), checks))
    return out


def errors(policy: dict) -> tuple[dict[str, list[float]], int]:
    """Each execution's held-out |error| over the policy's layouts, and how many held-out rows
    lie off the sequence grain (older checks timed such counts; today's never does): left out."""
    by: dict[str, list[float]] = {}
    off = 0
    for layout in policy["provenance"]["step"]["model"]:
        for r in layout["check"]:
            if r["calibrated"]:
                continue
            if r["tokens"] % GRAIN:
                off += 1
                continue
            by.setdefault(r["execution"], []).append(abs(r["error"]))
    return by, off


#: The places of a count in its check's timing order, as the ``--order`` table groups them.
PLACES = ((1, 3, "1st-3rd"), (4, 6, "4th-6th"), (7, 10**9, "7th on"))


def by_order(policy: dict, checks: list[Path], moe: bool, into: dict) -> None:
    """Each held-out error on the grain, keyed by (moe, place in the check's timing order)."""
    first = json.loads(checks[0].read_text())
    again = {(s["execution"], s["tokens"]) for c in checks[1:] for s in json.loads(c.read_text())["step_times"]}
    order: list = []
    for s in first["step_times"]:
        k = (s["execution"], s["tokens"])
        if k not in order:
            order.append(k)
    for layout in policy["provenance"]["step"]["model"]:
        for r in layout["check"]:
            k = (r["execution"], r["tokens"])
            if r["calibrated"] or r["tokens"] % GRAIN or k in again or k not in order:
                continue
            place = order.index(k) + 1
            name = next(n for lo, hi, n in PLACES if lo <= place <= hi)
            host_bound = r["predicted_gpu_ms"] < HOST_BOUND * r["predicted_host_ms"]
            into.setdefault((moe, name), []).append((r["error"], host_bound))


#: The model's GPU over host time under which a step counts as host-bound in ``--order``.
HOST_BOUND = 1.5


def order_table(into: dict) -> str:
    rows = [
        "| steps | place in the check's order | held-out steps | median error | within 3% | host-bound (GPU / host under 1.5): steps, median error |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for moe in (True, False):
        for _, _, name in PLACES:
            got = into.get((moe, name), [])
            if not got:
                continue
            e = [x for x, _ in got]
            hb = [x for x, h in got if h]
            host = f"{len(hb)}, {100 * statistics.median(hb):+.1f}%" if hb else "0"
            rows.append(f"| {'MoE' if moe else 'dense'} | {name} | {len(e)} | {100 * statistics.median(e):+.1f}% | {sum(abs(x) <= 0.03 for x in e)} of {len(e)} | {host} |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--fp8sel", default=os.environ.get("FP8SEL", "target/release/fp8sel"), help="the binary to fit with (default $FP8SEL, else target/release/fp8sel)")
    ap.add_argument("--root", default=".", help="the repository (default .)")
    ap.add_argument("--order", action="store_true", help="the error by the place of each count in its check's timing order, MoE and dense apart")
    args = ap.parse_args(argv)
    root = Path(args.root)
    total = within = off_grain = 0
    placed: dict = {}
    if not args.order:
        print("| set | execution | held-out | median | worst | within 3% |\n|---|---|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "p.json"
        for inputs, checks in sets(root):
            cmd = [args.fp8sel, "merge-policy", "--step-model", str(inputs), "--step-check", *map(str, checks), "--output", str(out)]
            run = subprocess.run(cmd, cwd=root, capture_output=True, text=True)
            if run.returncode != 0:
                print(f"heldout: {inputs}: fp8sel failed: {run.stderr.strip()[-300:]}", file=sys.stderr)
                return 1
            policy = json.loads(out.read_text())
            if args.order:
                moe = any(g["group"].startswith("experts.") for g in json.loads((root / inputs).read_text())["groups"])
                by_order(policy, [root / c for c in checks], moe, placed)
                continue
            by, off = errors(policy)
            off_grain += off
            for execution, e in sorted(by.items()):
                n3 = sum(x <= 0.03 for x in e)
                total, within = total + len(e), within + n3
                print(f"| {inputs} | {execution} | {len(e)} | {100 * statistics.median(e):.1f}% | {100 * max(e):.1f}% | {n3} |")
    if args.order:
        print(order_table(placed))
        return 0
    print(f"\n{within} of {total} held-out steps within 3% ({off_grain} older ones at counts off the {GRAIN}-token grain left out)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
