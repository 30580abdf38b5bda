"""scripts/device/calibration_xv.py, which calibrated counts predict held-out steps best, on
documents from the CLI tests' stand-in worker (a made-up dense step; its GPU half is
`step_model.sh calibrate-all`)."""

from __future__ import annotations

import json
import subprocess
import sys


def _stand_in(root, tmp_path, tokens: str) -> dict:
    """The stand-in's inputs document at `tokens` (whole steps where the real default calibrates: smallest, second-smallest, middle, largest)."""
    out = tmp_path / f"in_{tokens.replace(',', '_')}.json"
    fake = root / "crates" / "cli" / "tests" / "fake_te" / "adaptive_fp8" / "bench" / "step_inputs.py"
    args = ["--model", "m", "--tp", "1", "--ep", "1", "--etp", "1", "--tokens", tokens, "--execution", "eager,graphed",
            "--grad-accum", "1", "--layers", "2", "--recipe", "blockwise", "--json", str(out)]
    subprocess.run([sys.executable, str(fake), *args], check=True, capture_output=True)
    return json.loads(out.read_text())


def test_candidates_are_compared_on_the_same_held_out_steps(root, tmp_path, fp8sel):
    # Whole steps at 1024, 1408, 2048 and at 2048, 2688, 4096: merged, five counts timed.
    a, b = _stand_in(root, tmp_path, "1024,1408,2048"), _stand_in(root, tmp_path, "2048,2688,4096")
    doc = dict(a)
    key = lambda r: (r["execution"], r["tokens"], r["mode"])
    seen = {key(r) for r in a["step_times"]}
    doc["step_times"] = a["step_times"] + [r for r in b["step_times"] if key(r) not in seen]
    doc["modules"] = a["modules"] + [m for m in b["modules"] if m["tokens"] not in {x["tokens"] for x in a["modules"]}]
    f = tmp_path / "all.json"
    f.write_text(json.dumps(doc))
    script = str(root / "scripts" / "device" / "calibration_xv.py")
    base = [sys.executable, script, "--fp8sel", str(fp8sel), "--work", str(tmp_path / "w"), "--sweep", "1024,2048,4096"]
    o = subprocess.run([*base, "--candidates", "1024,4096", "1024,2048,4096", "--", str(f)], capture_output=True, text=True)
    assert o.returncode == 0, o.stderr
    # 1408 and 2688 held out from both: 2 counts x 2 executions x (all-BF16, all-FP8).
    for cand in ("1024,4096", "1024,2048,4096"):
        row = next(x for x in o.stdout.splitlines() if x.startswith(f"| **all**, {cand} |"))
        assert row.split("|")[2].strip() == "8", row
    # The stand-in's step is one segment (the larger of host and GPU time): the model's own form,
    # near exact wherever it is calibrated around.
    three = next(x for x in o.stdout.splitlines() if x.startswith("| **all**, 1024,2048,4096 |"))
    assert float(three.split("|")[3].strip().rstrip("%")) < 3.0, three
    # --summary: one row per candidate, the document's count within 3% beside the totals.
    o = subprocess.run([*base, "--summary", "--candidates", "1024,4096", "1024,2048,4096", "--", str(f), str(f)],
                       capture_output=True, text=True)
    assert o.returncode == 0, o.stderr
    rows = [x for x in o.stdout.splitlines() if x.startswith("| 1024")]
    assert [r.split("|")[1].strip() for r in rows] == ["1024,4096", "1024,2048,4096"], o.stdout
    assert all(r.split("|")[2].strip() == "16" for r in rows), rows
    half = int(rows[1].split("|")[5].split()[0]) // 2  # the same document twice
    assert rows[1].split("|")[6].strip() == f"{half} of 8, {half} of 8", rows[1]
    # A candidate at a count without whole steps is refused, naming the counts.
    o = subprocess.run([*base, "--candidates", "1024,8192", "--", str(f)], capture_output=True, text=True)
    assert o.returncode == 2 and "[8192]" in o.stderr and "fix:" in o.stderr


def test_the_committed_table_in_results_is_todays_tools(root, fp8sel):
    # RESULTS renders docs/device-logs/step_model/calibrate_all/calibration_xv.md verbatim; the
    # numbers are today's fp8sel's fit of the committed H200 documents, so a change to the model
    # must make the table again (the command below, as step_model.sh calibrate-all runs it).
    d = root / "docs" / "device-logs" / "step_model" / "calibrate_all"
    docs = [d / f"ca_{m}.json" for m in ("Llama-3.1-8B_tp1", "MoE-64x1408_tp1", "qwen2_5_72b_tp8", "deepseek_v3_tp8")]
    cmd = [sys.executable, str(root / "scripts" / "device" / "calibration_xv.py"), "--fp8sel", str(fp8sel), "--summary",
           "--sweep", "1024,2048,4096,8192,16384", "--candidates", "1024,4096,16384", "1024,2048,16384",
           "1024,2048,4096,16384", "1024,2048,4096,8192,16384", "--", *map(str, docs)]
    o = subprocess.run(cmd, capture_output=True, text=True, cwd=root)
    assert o.returncode == 0, o.stderr
    made = [line for line in o.stdout.splitlines() if line.startswith("|")]
    committed = (d / "calibration_xv.md").read_text().splitlines()
    assert made == committed, f"stale: make it again with {' '.join(cmd[1:])} | grep '^|' > {d / 'calibration_xv.md'}"
