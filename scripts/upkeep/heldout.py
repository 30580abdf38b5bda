"""The step model's held-out error on every committed set of its measurements, by today's tool.

Each ``*_inputs_step.json`` in the repository with a ``_check_step.json`` (and its re-timing
rounds, ``_recheck_step.json``, ``_recheck2_step.json``, ...) beside it is fitted again by ``fp8sel
merge-policy --step-model --step-check`` (no GPU), and its check rows at counts the calibration did not use are compared
with the model: per set and execution the median and worst |predicted / measured - 1| and how
many lie within 3%, then the totals. Run it before and after a change to the model
(``fp8_merge::model``) to see what the change does on every measurement on record.

    python scripts/upkeep/heldout.py [--fp8sel BIN] [--root .]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from itertools import takewhile
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
        # The check's rounds in order: check, recheck, recheck2, ... (fp8_report::step_inputs::check_round_word).
        words = ["check", "recheck", *(f"recheck{n}" for n in range(2, 64))]
        checks = list(takewhile(lambda p: (root / p).is_file(), (Path(f"{base}_{w}_step.json") for w in words)))
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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--fp8sel", default=os.environ.get("FP8SEL", "target/release/fp8sel"), help="the binary to fit with (default $FP8SEL, else target/release/fp8sel)")
    ap.add_argument("--root", default=".", help="the repository (default .)")
    args = ap.parse_args(argv)
    root = Path(args.root)
    total = within = off_grain = 0
    print("| set | execution | held-out | median | worst | within 3% |\n|---|---|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "p.json"
        for inputs, checks in sets(root):
            cmd = [args.fp8sel, "merge-policy", "--step-model", str(inputs), "--step-check", *map(str, checks), "--output", str(out)]
            run = subprocess.run(cmd, cwd=root, capture_output=True, text=True)
            if run.returncode != 0:
                print(f"heldout: {inputs}: fp8sel failed: {run.stderr.strip()[-300:]}", file=sys.stderr)
                return 1
            by, off = errors(json.loads(out.read_text()))
            off_grain += off
            for execution, e in sorted(by.items()):
                n3 = sum(x <= 0.03 for x in e)
                total, within = total + len(e), within + n3
                print(f"| {inputs} | {execution} | {len(e)} | {100 * statistics.median(e):.1f}% | {100 * max(e):.1f}% | {n3} |")
    print(f"\n{within} of {total} held-out steps within 3% ({off_grain} older ones at counts off the {GRAIN}-token grain left out)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
