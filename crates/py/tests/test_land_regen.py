"""scripts/upkeep/land_regen.py: a device call's regen tarball put where the repository keeps it."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import tarfile

LAYOUT = "qwen2_5_72b_tp1_ep1_etp1"


def _doc(tag: str, device: str = "NVIDIA H200") -> str:
    """A step report as far as landing reads it: its GPU, and a tag to tell it by."""
    return json.dumps({"device": device, "tag": tag})


def _tarball(path, files: dict[str, str]):
    with tarfile.open(path, "w:gz") as t:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
    return path


def _repo(tmp_path):
    repo = tmp_path / "repo"
    logs = repo / "docs/device-logs/regen_shipped"
    (logs / "qwen2_5_72b_tp1").mkdir(parents=True)
    (logs / "qwen2_5_72b_tp1" / "old.log").write_text("old")
    (logs / "steps.txt").write_text("qwen2_5_72b_tp1 rc=0 in 200 s\n")
    reports = repo / "reports/h200/step_model"
    reports.mkdir(parents=True)
    for end in ("inputs", "check", "recheck", "recheck2"):
        (reports / f"{LAYOUT}_{end}_step.json").write_text("old")
    (reports / "llama3_2_1b_tp1_ep1_etp1_check_step.json").write_text("kept")
    return repo


def _land(root, repo, tarball, *extra):
    script = root / "scripts" / "upkeep" / "land_regen.py"
    return subprocess.run([sys.executable, str(script), str(tarball), "--root", str(repo), *extra], capture_output=True, text=True)


def test_a_finished_row_replaces_its_layouts_reports_and_logs_and_a_cut_row_only_its_log(root, tmp_path):
    repo = _repo(tmp_path)
    tarball = _tarball(tmp_path / "regen_shipped.tar.gz", {
        "regen/steps.txt": "qwen2_5_72b_tp1 rc=0 in 120 s\ntensorwise/deepseek_v3_tp8_ep64 rc=124 in 500 s\n",
        "regen/qwen2_5_72b_tp1/gen.log": "new log",
        "regen/qwen2_5_72b_tp1/qwen2_5_72b.json": "{}",
        "regen/qwen2_5_72b_tp1/qwen2_5_72b.md": "# summary",
        f"regen/qwen2_5_72b_tp1/reports/{LAYOUT}_inputs_step.json": _doc("new inputs"),
        f"regen/qwen2_5_72b_tp1/reports/{LAYOUT}_check_step.json": _doc("new check"),
        "regen/qwen2_5_72b_tp1/reports/qwen2_5_72b_blockwise_numerics.json": "not a step report",
        f"regen/tensorwise/deepseek_v3_tp8_ep64/gen.log": "cut log",
    })
    dry = _land(root, repo, tarball, "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert f"remove {repo}/reports/h200/step_model/{LAYOUT}_recheck_step.json" in dry.stdout
    assert (repo / f"reports/h200/step_model/{LAYOUT}_recheck_step.json").exists(), "a dry run writes nothing"

    o = _land(root, repo, tarball)
    assert o.returncode == 0, o.stderr
    reports = repo / "reports/h200/step_model"
    assert (reports / f"{LAYOUT}_inputs_step.json").read_text() == _doc("new inputs")
    assert (reports / f"{LAYOUT}_check_step.json").read_text() == _doc("new check")
    # The old run's re-timing rounds are not read beside the new check; other layouts stay.
    assert not (reports / f"{LAYOUT}_recheck_step.json").exists()
    assert not (reports / f"{LAYOUT}_recheck2_step.json").exists()
    assert (reports / "llama3_2_1b_tp1_ep1_etp1_check_step.json").read_text() == "kept"
    assert not (reports / "qwen2_5_72b_blockwise_numerics.json").exists()
    logs = repo / "docs/device-logs/regen_shipped"
    assert sorted(p.name for p in (logs / "qwen2_5_72b_tp1").iterdir()) == ["gen.log", "qwen2_5_72b.json", "qwen2_5_72b.md"]
    # The cut row: its log only; no recipe report appears.
    assert (logs / "cut" / "tensorwise_deepseek_v3_tp8_ep64.gen.log").read_text() == "cut log"
    assert not (repo / "reports/h200/tensorwise").exists()
    assert (logs / "steps.txt").read_text().splitlines()[1:] == ["qwen2_5_72b_tp1 rc=0 in 120 s", "tensorwise/deepseek_v3_tp8_ep64 rc=124 in 500 s"]
    # Landed again (a later call's tarball holds the earlier rows too): the same files, no line twice.
    again = _land(root, repo, tarball)
    assert again.returncode == 0, again.stderr
    assert len((logs / "steps.txt").read_text().splitlines()) == 3
    assert (reports / f"{LAYOUT}_check_step.json").read_text() == _doc("new check")


def test_a_run_whose_line_matches_an_older_days_lands_and_a_later_calls_repeat_does_not(root):
    sys.path.insert(0, str(root / "scripts" / "upkeep"))
    import land_regen as lr

    ledger = ["q_tp8 rc=0 in 75 s", "q_tp1 rc=0 in 200 s", "a rc=0 in 9 s"]
    # The same row and seconds as an older day's line: a new run, kept (the queue reads the last).
    assert lr.unlanded(["b rc=0 in 9 s", "q_tp8 rc=0 in 75 s"], ledger) == ["b rc=0 in 9 s", "q_tp8 rc=0 in 75 s"]
    # A later call on one machine repeats the earlier call's rows first: only what follows lands.
    assert lr.unlanded(["q_tp1 rc=0 in 200 s", "a rc=0 in 9 s", "c rc=0 in 5 s"], ledger) == ["c rc=0 in 5 s"]
    assert lr.unlanded(["q_tp1 rc=0 in 200 s", "a rc=0 in 9 s"], ledger) == []
    assert lr.unlanded(["x rc=0 in 1 s"], []) == ["x rc=0 in 1 s"]


def test_a_judge_tarball_lands_under_judge(root, tmp_path):
    repo = _repo(tmp_path)
    o = _land(root, repo, _tarball(tmp_path / "regen_judge.tar.gz", {"regen/judge/steps.txt": "judge x rc=0 in 90 s\n",
                                                                      "regen/judge/x.json": "{}"}))
    assert o.returncode == 0, o.stderr
    assert (repo / "docs/device-logs/regen_shipped/judge/x.json").read_text() == "{}"
    assert (repo / "docs/device-logs/regen_shipped/steps.txt").read_text() == "qwen2_5_72b_tp1 rc=0 in 200 s\n"


def test_a_member_outside_regen_or_a_finished_row_without_reports_writes_nothing(root, tmp_path):
    repo = _repo(tmp_path)
    before = (repo / "docs/device-logs/regen_shipped/steps.txt").read_text()
    o = _land(root, repo, _tarball(tmp_path / "evil.tar.gz", {"regen/steps.txt": "", "regen/../../x": "x"}))
    assert o.returncode == 2 and "not a file under regen/" in o.stderr and "fix:" in o.stderr
    assert not (tmp_path / "x").exists()
    # All or nothing: a good row is not landed beside one that brought back no report.
    o = _land(root, repo, _tarball(tmp_path / "empty.tar.gz", {
        "regen/steps.txt": "qwen2_5_72b_tp1 rc=0 in 9 s\nllama3_2_1b_tp1 rc=0 in 9 s\n",
        f"regen/qwen2_5_72b_tp1/reports/{LAYOUT}_check_step.json": _doc("new check"),
        "regen/llama3_2_1b_tp1/gen.log": "log"}))
    assert o.returncode == 2 and "no step report" in o.stderr
    assert (repo / "docs/device-logs/regen_shipped/steps.txt").read_text() == before
    assert (repo / f"reports/h200/step_model/{LAYOUT}_recheck_step.json").read_text() == "old"
    o = _land(root, repo, tmp_path / "missing.tar.gz")
    assert o.returncode == 2 and "missing.tar.gz" in o.stderr


def test_two_rows_of_one_layout_land_the_later_ones_files(root, tmp_path):
    # Both rows bring the layout's check and no re-timing: the committed re-timing goes once (the
    # second removal finds it gone), and the later row's check stands.
    repo = _repo(tmp_path)
    o = _land(root, repo, _tarball(tmp_path / "twice.tar.gz", {
        "regen/steps.txt": "qwen2_5_72b_tp1 rc=0 in 9 s\nqwen2_5_72b_tp1_again rc=0 in 9 s\n",
        f"regen/qwen2_5_72b_tp1/reports/{LAYOUT}_check_step.json": _doc("first"),
        f"regen/qwen2_5_72b_tp1_again/reports/{LAYOUT}_check_step.json": _doc("second")}))
    assert o.returncode == 0, o.stderr
    base = repo / "reports/h200/step_model"
    assert (base / f"{LAYOUT}_check_step.json").read_text() == _doc("second")
    assert not (base / f"{LAYOUT}_recheck_step.json").exists()


def test_another_gpus_tarball_or_report_is_refused_whole(root, tmp_path):
    # The shipped folders are the H200's: an H100's run (as `regen/gpu.txt` or a report's
    # `device` says) lands nowhere, not even its H200 rows beside it.
    repo = _repo(tmp_path)
    before = (repo / "docs/device-logs/regen_shipped/steps.txt").read_text()
    rows = {"regen/steps.txt": "qwen2_5_72b_tp1 rc=0 in 9 s\nllama3_2_1b_tp1 rc=0 in 9 s\n",
            f"regen/qwen2_5_72b_tp1/reports/{LAYOUT}_check_step.json": _doc("h200"),
            "regen/llama3_2_1b_tp1/reports/llama3_2_1b_tp1_ep1_etp1_check_step.json": _doc("h100", "NVIDIA H100 80GB HBM3")}
    o = _land(root, repo, _tarball(tmp_path / "h100_report.tar.gz", rows))
    assert o.returncode == 2, o.stdout
    assert "field `device`: measured on 'NVIDIA H100 80GB HBM3'" in o.stderr and "fix:" in o.stderr
    rows = {**rows, "regen/gpu.txt": "NVIDIA H100 80GB HBM3, 580.159.04\n",
            "regen/llama3_2_1b_tp1/reports/llama3_2_1b_tp1_ep1_etp1_check_step.json": _doc("h200 too")}
    o = _land(root, repo, _tarball(tmp_path / "h100_gpu.tar.gz", rows))
    assert o.returncode == 2 and "regen/gpu.txt: measured on 'NVIDIA H100 80GB HBM3'" in o.stderr
    # A report that is not JSON is damaged, not landed.
    o = _land(root, repo, _tarball(tmp_path / "bad.tar.gz", {"regen/steps.txt": "qwen2_5_72b_tp1 rc=0 in 9 s\n",
                                                            f"regen/qwen2_5_72b_tp1/reports/{LAYOUT}_check_step.json": "{oops"}))
    assert o.returncode == 2 and "not a step report" in o.stderr
    assert (repo / "docs/device-logs/regen_shipped/steps.txt").read_text() == before
    assert (repo / f"reports/h200/step_model/{LAYOUT}_check_step.json").read_text() == "old"


def test_every_re_timing_round_lands_and_a_plans_file_does_not(root, tmp_path):
    repo = _repo(tmp_path)
    rounds = {f"regen/qwen2_5_72b_tp1/reports/{LAYOUT}_{w}_step.json": _doc(w) for w in ("inputs", "check", "recheck", "recheck2", "recheck3")}
    o = _land(root, repo, _tarball(tmp_path / "rounds.tar.gz", {
        "regen/steps.txt": "qwen2_5_72b_tp1 rc=0 in 9 s\n", **rounds,
        f"regen/qwen2_5_72b_tp1/reports/{LAYOUT}_recheck2_plans_step.json": _doc("plans"),
        f"regen/qwen2_5_72b_tp1/reports/{LAYOUT}_recheck1_step.json": _doc("not a round's name")}))
    assert o.returncode == 0, o.stderr
    base = repo / "reports/h200/step_model"
    for w in ("inputs", "check", "recheck", "recheck2", "recheck3"):
        assert (base / f"{LAYOUT}_{w}_step.json").read_text() == _doc(w)
    assert not (base / f"{LAYOUT}_recheck2_plans_step.json").exists()
    assert not (base / f"{LAYOUT}_recheck1_step.json").exists()
