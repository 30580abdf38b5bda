"""scripts/device/regen_queue.py, which committed shipped rows `regen_shipped.sh`'s queue makes
again, on copies of a committed row's reports (reports/h200/step_model/)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

ROW, BASE = "llama3_2_1b_tp1", "llama3_2_1b_tp1_ep1_etp1"


def _copy(root, tmp_path, settled=True):
    """The committed row's inputs and check, in a reports folder of the test's own: with
    `settled`, marked as today's worker writes them (its settling bound, `settle_s`, and BF16
    weights, `fp8_param` false); without,
    as a worker before settling wrote them (no `settle_s`)."""
    reports = tmp_path / "reports"
    reports.mkdir()
    for end in ("inputs", "check"):
        shutil.copy(root / "reports" / "h200" / "step_model" / f"{BASE}_{end}_step.json", reports)
        if settled:
            _edit(reports / f"{BASE}_{end}_step.json", lambda d: d.update(settle_s=12.0, fp8_param=False))
        else:
            _edit(reports / f"{BASE}_{end}_step.json", lambda d: d.pop("settle_s", None))
    return reports


def _queue(root, fp8sel, reports, row=ROW):
    script = root / "scripts" / "device" / "regen_queue.py"
    return subprocess.run([sys.executable, str(script), row, "--fp8sel", str(fp8sel), "--reports", str(reports),
                           "--work", str(reports.parent)], capture_output=True, text=True)


def _edit(path, change):
    doc = json.loads(path.read_text())
    change(doc)
    path.write_text(json.dumps(doc))


def _refit(fp8sel, reports):
    """Today's fp8sel's layout from the row's reports (as the queue refits it)."""
    out = reports.parent / "refit.json"
    subprocess.run([str(fp8sel), "merge-policy", "--step-model", str(reports / f"{BASE}_inputs_step.json"),
                    "--step-check", str(reports / f"{BASE}_check_step.json"), "--output", str(out)],
                   check=True, capture_output=True)
    return json.loads(out.read_text())["provenance"]["step"]["model"][0]


def _plan_at(layout, execution, tokens):
    """The layout's policy plan at a count: the groups of every key FP8 from at or below it."""
    return sorted(g for k in layout["thresholds"].values()
                  if (k["executions"].get(execution, {}).get("from_step_tokens") or tokens + 1) <= tokens
                  for g in k["groups"])


def _as_policy(fp8sel, reports):
    """The check's plan rows made the policy's plans (the refit reads only its all-BF16 and all-FP8
    steps, so the policy stays): a row whose check timed its policy's plans."""
    for _ in range(3):
        layout = _refit(fp8sel, reports)
        other = {(n["execution"], n["tokens"]) for n in layout["not_the_policy"]}
        if not other:
            return
        def timed_as_policy(d):
            for r in d["step_times"]:
                if r["mode"] == "plan" and (r["execution"], r["tokens"]) in other:
                    r["fp8_groups"] = _plan_at(layout, r["execution"], r["tokens"])
        _edit(reports / f"{BASE}_check_step.json", timed_as_policy)
    raise AssertionError(f"the check's plans do not settle to the policy's: {other}")


def _timed_again(fp8sel, reports):
    """A recheck that timed again, with the same steps, every count where a step the check timed
    disagrees with the model: a row whose check did what today's check does."""
    check = json.loads((reports / f"{BASE}_check_step.json").read_text())
    inputs = json.loads((reports / f"{BASE}_inputs_step.json").read_text())
    own = {(r["execution"], r["tokens"]) for r in check["step_times"] if r["mode"] == "bf16" and r in inputs["step_times"]}
    off = {(r["execution"], r["tokens"]) for r in _refit(fp8sel, reports)["check"]
           if r["disagrees"] and not (r["calibrated"] and r["mode"] != "plan")} - own
    check["step_times"] = [r for r in check["step_times"] if (r["execution"], r["tokens"]) in off]
    (reports / f"{BASE}_recheck_step.json").write_text(json.dumps(check))
    return sorted(off)


def test_a_row_whose_check_timed_other_plans_than_its_policys_is_made_again(root, tmp_path, fp8sel):
    reports = _copy(root, tmp_path)
    _as_policy(fp8sel, reports)
    _timed_again(fp8sel, reports)
    o = _queue(root, fp8sel, reports)
    assert o.returncode == 0, o.stderr
    # One plan row at a count off the calibration changed to another plan: today's policy there
    # was not timed.
    layout = _refit(fp8sel, reports)
    row = next(r for r in layout["check"] if r["mode"] == "plan" and not r["calibrated"])
    def another(d):
        for r in d["step_times"]:
            if r["mode"] == "plan" and (r["execution"], r["tokens"]) == (row["execution"], row["tokens"]):
                r["fp8_groups"] = [] if r["fp8_groups"] else ["fc1"]
    _edit(reports / f"{BASE}_check_step.json", another)
    o = _queue(root, fp8sel, reports)
    assert o.returncode == 1 and "plans that are not its policy's" in o.stderr, o.stderr


def test_a_row_calibrated_at_fewer_counts_than_todays_default_is_made_again(root, tmp_path, fp8sel):
    from adaptive_fp8.bench.step_inputs import default_calibration

    reports = _copy(root, tmp_path)
    doc = json.loads((reports / f"{BASE}_inputs_step.json").read_text())
    swept = sorted({m["tokens"] for m in doc["modules"]})
    # A row made before the default calibrated the second-smallest count: its whole steps there
    # dropped from the committed inputs.
    dropped = default_calibration(swept)[1]
    _edit(reports / f"{BASE}_inputs_step.json",
          lambda d: d.update(step_times=[r for r in d["step_times"] if r["tokens"] != dropped]))
    doc = json.loads((reports / f"{BASE}_inputs_step.json").read_text())
    timed = {r["tokens"] for r in doc["step_times"]}
    missing = sorted(set(default_calibration(swept)) - timed)
    assert missing == [dropped]
    o = _queue(root, fp8sel, reports)
    assert o.returncode == 1 and "not calibrated at every count of today's default" in o.stderr, o.stderr
    # Those counts failed in the inputs (the worker does not ask for them again): the row stands,
    # its check timed its policy's plans.
    def failed_there(d):
        d["failed"] += [{"execution": ex, "tokens": t, "error": "out of memory (test)"}
                        for ex in ("eager", "graphed") for t in missing]
    _edit(reports / f"{BASE}_inputs_step.json", failed_there)
    _as_policy(fp8sel, reports)
    _timed_again(fp8sel, reports)
    o = _queue(root, fp8sel, reports)
    assert o.returncode == 0, o.stderr


def test_a_row_whose_check_did_not_time_a_count_it_disagreed_at_again_is_made_again(root, tmp_path, fp8sel):
    reports = _copy(root, tmp_path)
    _as_policy(fp8sel, reports)
    off = _timed_again(fp8sel, reports)
    assert off, "the committed row's check disagrees with today's model somewhere"
    o = _queue(root, fp8sel, reports)
    assert o.returncode == 0, o.stderr
    # The recheck left one of them out: that count's first steps decided.
    execution, tokens = off[-1]
    _edit(reports / f"{BASE}_recheck_step.json",
          lambda d: d.update(step_times=[r for r in d["step_times"] if (r["execution"], r["tokens"]) != (execution, tokens)]))
    o = _queue(root, fp8sel, reports)
    assert o.returncode == 1 and "did not time again" in o.stderr and f"{execution} {tokens}" in o.stderr, o.stderr
    # A second re-timing round (its own document) timed it: the row stands again.
    recheck = json.loads((reports / f"{BASE}_check_step.json").read_text())
    recheck["step_times"] = [r for r in recheck["step_times"] if (r["execution"], r["tokens"]) == (execution, tokens)]
    (reports / f"{BASE}_recheck2_step.json").write_text(json.dumps(recheck))
    o = _queue(root, fp8sel, reports)
    assert o.returncode == 0, o.stderr


def test_a_row_measured_before_the_worker_settled_is_made_again(root, tmp_path, fp8sel):
    # Documents that predate settling (no settle_s, as the first H200 rows were): made again.
    reports = _copy(root, tmp_path, settled=False)
    o = _queue(root, fp8sel, reports)
    assert o.returncode == 1 and "before settling" in o.stderr and "inputs_step.json has no settle_s" in o.stderr, o.stderr
    # The inputs settled, the check not: still made again.
    _edit(reports / f"{BASE}_inputs_step.json", lambda d: d.update(settle_s=12.0))
    o = _queue(root, fp8sel, reports)
    assert o.returncode == 1 and "check_step.json has no settle_s" in o.stderr, o.stderr
    # Both settled, and the rest as today's check leaves it: the row stands.
    _edit(reports / f"{BASE}_check_step.json", lambda d: d.update(settle_s=12.0))
    for end in ("inputs", "check"):
        _edit(reports / f"{BASE}_{end}_step.json", lambda d: d.update(fp8_param=False))
    _as_policy(fp8sel, reports)
    _timed_again(fp8sel, reports)
    assert _queue(root, fp8sel, reports).returncode == 0


def test_a_row_measured_with_fp8_weights_is_made_again(root, tmp_path, fp8sel):
    """FP8 groups with FP8 weights (fp8_param true, or absent: the documents before the field):
    TE FusedAdam re-quantized each weight alone every step, a cost the BF16 weights a policy's FP8
    groups run with do not have; made again. Today's (BF16 weights) stand."""
    reports = _copy(root, tmp_path)
    _as_policy(fp8sel, reports)
    _timed_again(fp8sel, reports)
    assert _queue(root, fp8sel, reports).returncode == 0
    for end, change in (("inputs", lambda d: d.pop("fp8_param")), ("check", lambda d: d.update(fp8_param=True))):
        path = reports / f"{BASE}_{end}_step.json"
        before = path.read_text()
        _edit(path, change)
        o = _queue(root, fp8sel, reports)
        assert o.returncode == 1 and "held FP8 weights" in o.stderr and f"{end}_step.json" in o.stderr, o.stderr
        path.write_text(before)


def test_a_check_that_lost_counts_or_is_missing_makes_the_row_again(root, tmp_path, fp8sel):
    reports = _copy(root, tmp_path)
    _edit(reports / f"{BASE}_check_step.json",
          lambda d: d["failed"].append({"execution": "eager", "tokens": 8192, "error": "out of memory (test)"}))
    o = _queue(root, fp8sel, reports)
    assert o.returncode == 1 and "lost counts" in o.stderr, o.stderr
    (reports / f"{BASE}_check_step.json").unlink()
    o = _queue(root, fp8sel, reports)
    assert o.returncode == 1 and "no check report" in o.stderr, o.stderr


def test_a_row_that_is_not_a_layout_is_refused(root, tmp_path, fp8sel):
    o = _queue(root, fp8sel, _copy(root, tmp_path), row="llama3_2_1b")
    assert o.returncode == 2 and "fix:" in o.stderr, o.stderr


def test_a_recipes_row_reads_its_recipes_folder_and_wants_inputs_measured_in_it(root, tmp_path, fp8sel):
    # By default a tensorwise row reads reports/h200/tensorwise/step_model (here: none there).
    script = root / "scripts" / "device" / "regen_queue.py"
    o = subprocess.run([sys.executable, str(script), f"tensorwise/{ROW}", "--fp8sel", str(fp8sel)],
                       capture_output=True, text=True, cwd=tmp_path)
    assert o.returncode == 1 and "reports/h200/tensorwise/step_model" in o.stderr, o.stderr
    # Blockwise measurements are not the tensorwise row's.
    o = _queue(root, fp8sel, _copy(root, tmp_path), row=f"tensorwise/{ROW}")
    assert o.returncode == 1 and "measured in blockwise" in o.stderr, o.stderr


def _need(root, row, steps):
    script = root / "scripts" / "device" / "regen_queue.py"
    return subprocess.run([sys.executable, str(script), row, "--need", "--steps", str(steps)], capture_output=True, text=True)


def test_a_rows_need_is_its_last_finished_time_with_a_margin_else_its_blockwise_layouts(root, tmp_path):
    steps = tmp_path / "steps.txt"
    steps.write_text("qwen2_5_72b_tp1 rc=0 in 232 s\nqwen2_5_72b_tp1 rc=124 in 300 s (cut)\n"
                     "qwen2_5_72b_tp1 rc=0 in 100 s (again)\ntensorwise/deepseek_v3_tp8_ep64 rc=0 in 50 s\n"
                     "deepseek_v3_tp8_ep64 rc=0 in 200 s\n")
    said = {row: _need(root, row, steps) for row in ("qwen2_5_72b_tp1", "delayed/qwen2_5_72b_tp1",
                                                      "tensorwise/deepseek_v3_tp8_ep64", "llama3_2_1b_tp1")}
    assert all(o.returncode == 0 for o in said.values()), {r: o.stderr for r, o in said.items()}
    # The last finished run counts (not the cut one, not the older one); a recipe's row without
    # a time of its own takes its blockwise layout's, one with a time its own.
    assert [int(o.stdout) for o in said.values()] == [135, 135, 75, 480]


def test_need_without_a_steps_file_names_it_and_the_fix(root, tmp_path):
    o = _need(root, "llama3_2_1b_tp1", tmp_path / "missing.txt")
    assert o.returncode == 2 and "missing.txt" in o.stderr and "fix:" in o.stderr


def test_the_queue_refuses_a_tree_without_the_committed_rows(root, tmp_path):
    """With no committed row log the queue cannot tell which rows are done (it would make every
    row again): regen_shipped.sh stops before the GPU, says why and how to name rows."""
    (tmp_path / "scripts" / "device").mkdir(parents=True)
    shutil.copy(root / "scripts" / "device" / "regen_shipped.sh", tmp_path / "scripts" / "device")
    r = subprocess.run(["bash", "scripts/device/regen_shipped.sh"], cwd=tmp_path, capture_output=True, text=True)
    assert r.returncode == 2, r.stderr
    assert "no committed row under docs/device-logs/regen_shipped/" in r.stderr
    assert "name the rows to run" in r.stderr
    assert r.stdout == ""
