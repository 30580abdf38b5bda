"""scripts/device/ab_moves.py, the A/B passes' movement table, on made-up step-inputs documents
(its GPU half is `step_model.sh rounds-ab` and `affinity-ab`)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys


def _load(root):
    spec = importlib.util.spec_from_file_location("ab_moves", root / "scripts" / "device" / "ab_moves.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _doc(ms: float) -> dict:
    rows = [{"execution": "eager", "tokens": t, "mode": m, "wall_ms": [ms * j for j in (0.9, 1.0, 1.0, 1.1)], "steps": 5}
            for t in (1024, 2048) for m in ("bf16", "fp8")]
    return {"steps": 5, "step_times": rows}


def test_names_with_underscores_and_each_variants_move_between_passes(root, tmp_path):
    ab = _load(root)
    assert ab.tag("x/ab_llama3_2_1b_pinned_p2.json") == ("llama3_2_1b", "pinned", "2")
    docs = {("m_1", "free", "1"): _doc(10.0), ("m_1", "free", "2"): _doc(11.0),
            ("m_1", "pinned", "1"): _doc(10.0), ("m_1", "pinned", "2"): _doc(10.2),
            ("m_1", "alone", "1"): _doc(10.0)}
    moved = ab.moves(docs)
    assert sorted(moved) == [("m_1", "free"), ("m_1", "pinned")]  # one pass alone moves nowhere
    assert all(abs(x - 0.1) < 1e-9 for x in moved[("m_1", "free")]) and len(moved[("m_1", "free")]) == 4
    assert all(abs(x - 0.02) < 1e-9 for x in moved[("m_1", "pinned")])
    for k, d in docs.items():
        (tmp_path / f"ab_{k[0]}_{k[1]}_p{k[2]}.json").write_text(json.dumps(d))
    script = str(root / "scripts" / "device" / "ab_moves.py")
    o = subprocess.run([sys.executable, script, str(tmp_path)], capture_output=True, text=True)
    assert o.returncode == 0, o.stderr
    assert "| m_1 | free | 4 | 10.0% | 10.0% |" in o.stdout and "| m_1 | pinned | 4 | 2.0% | 2.0% |" in o.stdout
    o = subprocess.run([sys.executable, script, str(tmp_path / "none")], capture_output=True, text=True)
    assert o.returncode == 1 and "no ab_" in o.stderr
