"""scripts/upkeep/hook_native.py: the hook against Megatron's native config with the same FP8
modules, in the committed judge runs (pure: it reads step benchmark JSON)."""

from __future__ import annotations

import json
import sys

from conftest import ROOT

sys.path.insert(0, str(ROOT / "scripts" / "upkeep"))
import hook_native as hn  # noqa: E402


def _mode(ms: float, groups: list[str]) -> dict:
    return {"ms_median": ms, "fp8_groups": groups}


def _doc(device: str, execution: str, tokens: int, modes: dict) -> dict:
    return {"trainer": "megatron", "device": device,
            "results": [{"tokens": tokens, "execution": execution, "modes": modes}]}


def test_only_rows_with_the_same_fp8_groups_pair():
    doc = _doc("NVIDIA H100 80GB HBM3", "graphed", 1536, {
        "bf16": _mode(19.0, []),
        "hook:a.json": _mode(18.4, ["fc1", "fc2"]),
        "native:a.json": _mode(18.0, ["fc2", "fc1"]),
        "hook:b.json": _mode(18.4, ["fc1"]),
        "native:b.json": _mode(18.0, ["fc1", "fc2"]),  # not the same plan: no pair
        "hook:c.json": _mode(0.0, []),  # no median: no pair
        "native:c.json": _mode(18.0, []),
    })
    ps = hn.pairs(doc)
    assert len(ps) == 1
    p = ps[0]
    assert (p["gpu"], p["execution"], p["tokens"], p["fp8_groups"]) == ("H100", "graphed", 1536, 2)
    assert p["regions"] == "?/?"  # the run recorded no precision checks
    assert abs(p["ratio"] - 18.4 / 18.0) < 1e-12 and abs(p["diff_ms"] - 0.4) < 1e-9


def test_pairs_carry_each_models_launch_region():
    doc = _doc("NVIDIA H100 80GB HBM3", "graphed", 4096, {
        "hook:a.json": _mode(11.1, ["fc1"]), "native:a.json": _mode(11.0, ["fc1"])})
    doc["precision_checks"] = [
        {"tokens": 4096, "execution": "graphed", "mode": "hook:a.json", "region": "bf16"},
        {"tokens": 4096, "execution": "graphed", "mode": "native:a.json", "region": "fp8"},
        {"tokens": 4096, "execution": "eager", "mode": "native:a.json", "region": "bf16"},  # another execution
    ]
    assert [p["regions"] for p in hn.pairs(doc)] == ["bf16/fp8"]
    rows = [dict(p, tokens=4096) for p in hn.pairs(doc)] + [dict(hn.pairs(doc)[0], regions="fp8/fp8")]
    assert [x["regions"] for x in hn.summary(rows)] == ["bf16/fp8", "fp8/fp8"]


def test_bands_and_summary_group_and_order_the_pairs():
    assert hn.band(1) == (0, "1-2048") and hn.band(2048) == (0, "1-2048")
    assert hn.band(2049) == (1, "2049-4608") and hn.band(9000) == (3, "over 8192")
    rows = [
        {"gpu": "H200", "execution": "graphed", "tokens": 9000, "fp8_groups": 2, "ratio": 0.99, "diff_ms": -0.1},
        {"gpu": "H200", "execution": "graphed", "tokens": 1536, "fp8_groups": 2, "ratio": 1.02, "diff_ms": 0.3},
        {"gpu": "H200", "execution": "graphed", "tokens": 1024, "fp8_groups": 4, "ratio": 1.00, "diff_ms": 0.0},
        {"gpu": "H200", "execution": "graphed", "tokens": 1024, "fp8_groups": 0, "ratio": 0.98, "diff_ms": -0.2},
    ]
    s = hn.summary(rows)
    assert [(x["fp8"], x["band"], x["pairs"]) for x in s] == [
        ("FP8", "1-2048", 2), ("FP8", "over 8192", 1), ("none", "1-2048", 1)]
    assert s[0]["slower"] == 1 and abs(s[0]["ratio_median"] - 1.01) < 1e-12


def test_main_reads_a_folder_and_passes_over_other_json(tmp_path, capsys):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "run.json").write_text(json.dumps(_doc("NVIDIA H200", "eager", 3072, {
        "hook:p.json": _mode(10.5, ["fc1"]), "native:p.json": _mode(10.0, ["fc1"])})))
    (tmp_path / "other.json").write_text(json.dumps({"trainer": "te", "results": []}))
    (tmp_path / "broken.json").write_text("{")
    assert hn.main(["--root", str(tmp_path)]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 3 and out[2].startswith("| H200 | eager | FP8 | ?/? | 2049-4608 | 1 | 1.050"), out
    assert hn.main(["--root", str(tmp_path / "missing")]) == 2
    assert "not a folder" in capsys.readouterr().err


def test_the_committed_runs_pair():
    rows = [p for _, doc in hn.judge_docs(ROOT / "docs" / "device-logs") for p in hn.pairs(doc)]
    assert len(rows) >= 200, len(rows)
    assert {"eager", "graphed"} <= {p["execution"] for p in rows}
    # The H100's graphed runs of 2026-12-06 with both integrations in the FP8 region.
    assert any(p["regions"] == "fp8/fp8" and p["execution"] == "graphed" for p in rows)
