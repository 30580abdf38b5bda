"""The keys backfill: older step results made foldable by the engine's plan, timings untouched."""

import hashlib
import json
import subprocess
import sys

from conftest import ROOT

# Repository upkeep, not the package: scripts/upkeep/.
sys.path.insert(0, str(ROOT / "scripts" / "upkeep"))
import backfill_keys as bk  # noqa: E402

RUNS = "docs/device-logs/trainer_loop"


def _run(*args, cwd):
    return subprocess.run([sys.executable, str(ROOT / "scripts" / "upkeep" / "backfill_keys.py"), *args], capture_output=True, text=True, cwd=cwd)


def test_the_committed_copy_is_what_the_tool_writes_from_its_source(root, tmp_path):
    committed = root / "reports/h200/step/llama3_2_1b_tp2_ep1_etp1_comm_step.json"
    copy = json.loads(committed.read_text())
    source = root / RUNS / "h/sb/llama1b_tp2_comm.json"
    assert copy["backfilled_from"] == hashlib.sha256(source.read_bytes()).hexdigest()
    out = tmp_path / "again.json"
    r = _run(str(source), "--out", str(out), cwd=root)
    assert r.returncode == 0, r.stderr
    assert json.loads(out.read_text()) == copy
    # The timings are the run's own; only the keys, the model's name and a note are added.
    original = json.loads(source.read_text())
    assert copy["results"] == original["results"]
    assert set(copy) - set(original) == {"group_keys", "model_name", "backfilled_from"}
    assert {g: k["key"]["tp"] for g, k in copy["group_keys"].items()} == {"qkv": 2, "proj": 2, "fc1": 2, "fc2": 2}


def test_a_moe_run_gets_the_keys_of_the_expert_parallel_size_it_ran_at(root, tmp_path):
    # DeepSeek-V3 at TP 8 ran at EP 64 (4 local experts), two MoE layers: no dense fc1/fc2 key.
    v, digest = bk.read_results(root / RUNS / "ab/sb/deepseek_v3_tp8.json")
    out = bk.backfill(v, digest, root / RUNS / "ab/sb/deepseek_v3_tp8.json", root, {"ep": 64, "etp": None})
    keys = out["group_keys"]
    assert keys["experts.fc1"]["key"]["num_gemms"] == 4 and keys["experts.fc1"]["scale"] == 8
    assert "fc1" not in keys and "shared.fc1" in keys and out["ep"] == 64
    assert ", ep added by" in out["notes"][-1]


def test_bad_input_is_refused_with_the_file_and_the_fix(root, tmp_path):
    copy = root / "reports/h200/step/llama3_2_1b_tp2_ep1_etp1_comm_step.json"
    r = _run(str(copy), "--out", str(tmp_path / "x.json"), cwd=root)
    assert r.returncode == 2 and "already has `group_keys`: fold it as it is" in r.stderr
    src = root / RUNS / "h/sb/llama1b_tp2_comm.json"
    r = _run(str(src), "--out", str(src), cwd=root)
    assert r.returncode == 2 and "is the input" in r.stderr
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    r = _run(str(bad), "--out", str(tmp_path / "y.json"), cwd=root)
    assert r.returncode == 2 and str(bad) in r.stderr and "not JSON" in r.stderr
    moved = tmp_path / "moved.json"
    moved.write_text(src.read_text())
    r = _run(str(moved), "--out", str(tmp_path / "z.json"), "--root", str(tmp_path), cwd=root)
    assert r.returncode == 2 and "give --root the repository" in r.stderr
    header = json.loads(src.read_text())
    header["ep"] = 8
    conflict = tmp_path / "ep.json"
    conflict.write_text(json.dumps(header))
    r = _run(str(conflict), "--out", str(tmp_path / "w.json"), "--ep", "16", cwd=root)
    assert r.returncode == 2 and "`ep` is 8 in the file, 16 given" in r.stderr
    assert not list(tmp_path.glob("*.tmp")) and not (tmp_path / "w.json").exists()


def test_a_run_without_the_oracle_is_marked_for_its_fastest_mode_only_when_asked(root, tmp_path):
    # Qwen2.5-72B's TP 2 run over two H200s (run g) timed BF16, all-FP8 and four policies, no
    # oracle: the committed copy is the tool's, marked so the merge reads each row's fastest mode.
    committed = root / "reports/h200/step/qwen2_5_72b_tp2_ep1_etp1_comm_step.json"
    source = root / RUNS / "g/sb/qwen72b_tp2_comm_b.json"
    out = tmp_path / "g.json"
    r = _run(str(source), "--fastest-mode", "--out", str(out), cwd=root)
    assert r.returncode == 0, r.stderr
    copy = json.loads(out.read_text())
    assert copy == json.loads(committed.read_text())
    assert copy["verdict_without_oracle"] == "fastest_mode" and copy["results"] == json.loads(source.read_text())["results"]
    # Without the flag the copy is unmarked (the merge refuses its rows); a run with the oracle in
    # every row is refused the mark.
    r = _run(str(source), "--out", str(tmp_path / "plain.json"), cwd=root)
    assert r.returncode == 0 and "verdict_without_oracle" not in json.loads((tmp_path / "plain.json").read_text())
    r = _run(str(root / RUNS / "h/sb/llama1b_tp2_comm.json"), "--fastest-mode", "--out", str(tmp_path / "h.json"), cwd=root)
    assert r.returncode == 2 and "every row has an oracle" in r.stderr and not (tmp_path / "h.json").exists()


def test_a_run_with_its_keys_is_marked_without_a_backfill(root, tmp_path):
    # Today's step_bench with --oracle none writes its keys: --fastest-mode adds the mark and the
    # source's digest (the standing leaves the source out once folded), nothing else.
    source = root / "docs/device-logs/default_judge/retune10/q72_tp4_gaps.json"
    committed = root / "reports/h200/step/qwen2_5_72b_tp4_ep1_etp1_gap2_step.json"
    out = tmp_path / "gap.json"
    r = _run(str(source), "--fastest-mode", "--out", str(out), cwd=root)
    assert r.returncode == 0, r.stderr
    copy, original = json.loads(out.read_text()), json.loads(source.read_text())
    assert copy == json.loads(committed.read_text())
    assert set(copy) - set(original) == {"verdict_without_oracle", "backfilled_from"}
    assert copy["backfilled_from"] == hashlib.sha256(source.read_bytes()).hexdigest()
    assert copy["group_keys"] == original["group_keys"] and copy["results"] == original["results"]
    # Without the flag such a run is refused: its keys need no backfill.
    r = _run(str(source), "--out", str(tmp_path / "plain.json"), cwd=root)
    assert r.returncode == 2 and "--fastest-mode marks it" in r.stderr
