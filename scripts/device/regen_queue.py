"""Whether a shipped layout's committed step-model reports still stand, for `regen_shipped.sh`'s
queue: a row is made again unless its reports are today's tool's output. Exit 0 (done: the
row is skipped) or 1 (stale: the reason on stderr), 2 on bad use.

A row (`<model>_tp<T>[_ep<E>]`, a vision encoder's `<model>_vit_tp<T>`; `<recipe>/<row>` for a
recipe besides blockwise, whose reports are in `reports/h200/<recipe>/step_model`, as
`fp8_pipeline::shipped::step_model_dir` reads them) is stale when
- it has no check report in --reports, or its check lost counts (`failed`: out of memory, a
  failed capture), or its inputs were measured in another recipe;
- its inputs or check held FP8 weights in their FP8 groups (`fp8_param` true, or absent: the
  documents before the field), which TE's FusedAdam re-quantizes one by one each step; today's
  worker measures BF16 weights, as Megatron trains by default and a policy's FP8 groups run;
- its inputs or check were measured by a worker before settling (no `settle_s`: today's worker
  settles before each run's first timed whole steps and times short counts in more rounds);
- its inputs were not calibrated at every count of today's default (`step_inputs`'
  `default_calibration` of the swept counts, per execution timed; counts that failed in the
  inputs are excepted, since the worker does not ask for them again);
- today's fp8sel, refitting it (`merge-policy --step-model ... --step-check ...`), finds checked
  plans that are not its policy's (provenance `step.model[].not_the_policy`), or cannot refit it;
- a step its check timed disagrees with today's model at a count no recheck timed again (today's
  check times each such count again: `fp8_pipeline`'s re-timing round).

    python3 scripts/device/regen_queue.py [RECIPE/]ROW --fp8sel FP8SEL [--reports DIR] [--work DIR]

With `--need`, it prints instead the seconds a call should have left before it starts the row:
the row's last finished time in the committed `steps.txt` (a recipe row without one: its
blockwise layout's; the step's cost barely depends on the recipe), with a margin (`need`).

    python3 scripts/device/regen_queue.py [RECIPE/]ROW --need [--steps FILE]
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import subprocess
import sys
import tempfile


def default_calibration(tokens: list[int]) -> list[int]:
    """The worker's own default (`adaptive_fp8.bench.step_inputs.default_calibration`), read from
    the installed package where there is one, so the queue follows the tool as it stands."""
    try:
        from adaptive_fp8.bench.step_inputs import default_calibration as of_the_worker
    except ImportError as e:
        raise RuntimeError(f"adaptive_fp8 does not import ({e}); fix: install the wheel (te_env.sh does on "
                           "the device)") from e
    return of_the_worker(tokens)


def recipe_of(row: str) -> tuple[str, str]:
    """The row's recipe (blockwise unless it names one) and the row without it."""
    recipe, _, rest = row.rpartition("/")
    return recipe or "blockwise", rest


def reports_of(recipe: str) -> str:
    """Where the committed step reports of `recipe`'s shipped policies are."""
    return "reports/h200/step_model" if recipe == "blockwise" else f"reports/h200/{recipe}/step_model"


def layout_glob(row: str) -> tuple[str, str, str]:
    """The row's model, TP and EP (`1` where the row names none)."""
    model, sep, rest = row.partition("_tp")
    tp, _, ep = rest.partition("_ep")
    if not sep or not tp.isdigit() or (ep and not ep.isdigit()):
        raise ValueError(f"row {row!r}: not <model>_tp<T>[_ep<E>]; fix: name a row of regen_shipped.sh's ROWS")
    return model, tp, ep or "1"


def recheck_rounds(base: str) -> list[str]:
    """The re-timing rounds beside a layout's check, in round order (`<base>_recheck_step.json`,
    then `<base>_recheck2_step.json`, ...: fp8_report::step_inputs::check_round_word), up to the
    first one missing."""
    out = []
    for n in range(1, 64):
        path = f"{base}_{'recheck' if n == 1 else f'recheck{n}'}_step.json"
        if not os.path.exists(path):
            break
        out.append(path)
    return out


def stale(row: str, fp8sel: str, reports: str | None, work: str) -> str | None:
    """Why `row` must be made again, or None where its committed reports stand (`reports`: where
    they are, default its recipe's folder)."""
    recipe, layout = recipe_of(row)
    reports = reports or reports_of(recipe)
    model, tp, ep = layout_glob(layout)
    checks = sorted(glob.glob(os.path.join(reports, f"{model}_tp{tp}_ep{ep}_etp*_check_step.json")))
    if not checks:
        return f"{row}: no check report under {reports}"
    for c in checks:
        with open(c) as f:
            if json.load(f)["failed"]:
                return f"{row}: its check lost counts (failed rows in {c})"
    inputs = checks[0].removesuffix("_check_step.json") + "_inputs_step.json"
    with open(inputs) as f:
        doc = json.load(f)
    docs = []
    for path in (inputs, checks[0]):
        with open(path) as f:
            docs.append((path, json.load(f)))
    for path, d in docs:
        if d.get("settle_s") is None:
            return f"{row}: measured by a worker before settling and longer short counts ({path} has no settle_s)"
    for path, d in docs:
        if d.get("fp8_param", True):
            return (f"{row}: its FP8 groups held FP8 weights ({path}: fp8_param {d.get('fp8_param', 'absent')}): "
                    "TE FusedAdam's per-weight re-quantization, not the BF16 weights a policy's FP8 groups run with")

    if doc["fp8_recipe"] != recipe:
        return f"{row}: its inputs were measured in {doc['fp8_recipe']} ({inputs})"
    want = set(default_calibration(sorted({m["tokens"] for m in doc["modules"]})))
    for ex in sorted({r["execution"] for r in doc["step_times"]}):
        failed = {x["tokens"] for x in doc["failed"] if x["execution"] == ex}
        timed = {r["tokens"] for r in doc["step_times"] if r["execution"] == ex and r["mode"] == "bf16"}
        if not want <= timed | failed:
            return f"{row}: {ex} not calibrated at every count of today's default {sorted(want)} (timed at {sorted(timed)})"
    rechecks = recheck_rounds(checks[0].removesuffix("_check_step.json"))
    argv = [fp8sel, "merge-policy", "--step-model", inputs, "--step-check", checks[0]]
    for r in rechecks:
        argv += ["--step-check", r]
    out = os.path.join(work, f"{row.replace('/', '_')}.refit.json")
    done = subprocess.run([*argv, "--output", out], capture_output=True, text=True)
    if done.returncode != 0:
        return f"{row}: today's fp8sel cannot refit it: {done.stderr.strip()[-300:]}"
    with open(out) as f:
        layouts = json.load(f)["provenance"]["step"]["model"]
    if any(lm.get("not_the_policy") for lm in layouts):
        return f"{row}: its check timed plans that are not its policy's"
    again = set()
    for recheck in rechecks:
        with open(recheck) as f:
            again |= {(r["execution"], r["tokens"]) for r in json.load(f)["step_times"]}
    # The inputs' own rounds the check document holds (a calibrated count's all-BF16 plan) are
    # the calibration, not steps the check timed.
    with open(checks[0]) as f:
        own = {(r["execution"], r["tokens"]) for r in json.load(f)["step_times"]
               if r["mode"] == "bf16" and r in doc["step_times"]}
    untimed = sorted({(r["execution"], r["tokens"]) for lm in layouts for r in lm["check"]
                      if r["disagrees"] and not (r["calibrated"] and r["mode"] != "plan")} - again - own)
    if untimed:
        counts = ", ".join(f"{e} {t}" for e, t in untimed)
        return f"{row}: its check disagreed with the model at {len(untimed)} count(s) it did not time again ({counts})"
    return None


#: Where `regen_shipped.sh` lists every row it ran: `<row> rc=<code> in <seconds> s[ (why)]`.
STEPS = "docs/device-logs/regen_shipped/steps.txt"
#: A row that never finished: what the slowest layout took (DeepSeek-V3 TP 1 EP 8, 482 s, with
#: five steps a round), less than a call's budget so that a fresh call starts it.
UNKNOWN_NEED = 480


def need(row: str, steps: str = STEPS) -> int:
    """Seconds to have left before starting `row`: 1.2 x its last finished time plus 15 s (in
    steps.txt one layout's finished times moved by at most 13% between runs of one tool), else
    its blockwise layout's, else UNKNOWN_NEED."""
    last: dict[str, int] = {}
    with open(steps) as f:
        for line in f:
            got = re.match(r"(\S+) rc=0 in (\d+) s", line)
            if got:
                last[got.group(1)] = int(got.group(2))
    seen = last.get(row, last.get(recipe_of(row)[1]))
    return UNKNOWN_NEED if seen is None else int(1.2 * seen) + 15


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("row")
    ap.add_argument("--fp8sel", default=os.environ.get("FP8SEL", "fp8sel"))
    ap.add_argument("--reports", default=None, help="where the committed step reports are (default: the row's recipe's folder)")
    ap.add_argument("--work", default=None, help="where the refitted policy goes (default: a temporary folder)")
    ap.add_argument("--need", action="store_true", help="print the seconds to have left before starting the row instead")
    ap.add_argument("--steps", default=STEPS, help=f"with --need: the rows' finished times (default {STEPS})")
    a = ap.parse_args(argv)
    if a.need:
        try:
            print(need(a.row, a.steps))
        except OSError as e:
            print(f"regen_queue: {a.steps}: {e.strerror}; fix: run from the repository root or pass --steps", file=sys.stderr)
            return 2
        return 0
    try:
        why = stale(a.row, a.fp8sel, a.reports, a.work or tempfile.mkdtemp(prefix="regen_queue_"))
    except (ValueError, RuntimeError) as e:
        print(f"regen_queue: {e}", file=sys.stderr)
        return 2
    if why:
        print(why, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
