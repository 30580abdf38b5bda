"""The TP-with-communication tool's pure half: modules at TP from the plan, crossovers, tables.
Its GPU half runs under torchrun on the device (scripts/device/trainer_loop.sh)."""

from __future__ import annotations

import subprocess
import sys

import pytest

import adaptive_fp8 as af8
from adaptive_fp8 import te_tp


def test_modules_at_tp_have_full_and_per_rank_shapes(root):
    rows = af8.plan(str(root / "fixtures" / "models" / "qwen2_5_72b.yaml"), None, tp=2, seq_length=4096)
    ms = {m.group: m for m in te_tp.tp_modules(rows, 2)}
    assert set(ms) == {"qkv", "proj", "fc1", "fc2"}
    # qkv: column, hidden 8192 -> (64 + 2*8) * 128 = 10240 in all, 5120 per rank
    assert (ms["qkv"].full_in, ms["qkv"].full_out, ms["qkv"].local_out) == (8192, 10240, 5120)
    # fc2: row, 29568 in all, 14784 per rank, out 8192
    assert (ms["fc2"].kind, ms["fc2"].full_in, ms["fc2"].local_in, ms["fc2"].full_out) == ("row", 29568, 14784, 8192)


def test_moe_models_keep_only_their_dense_modules(root):
    rows = af8.plan(str(root / "fixtures" / "models" / "qwen3_vl_235b_a22b.yaml"), None, tp=2, seq_length=4096)
    assert [m.group for m in te_tp.tp_modules(rows, 2)] == ["qkv", "proj"]
    with pytest.raises(te_tp.TpError, match="no dense"):
        te_tp.tp_modules([r for r in rows if r["ub_name"] not in te_tp.DENSE], 2)


def test_crossover_is_where_fp8_wins_to_the_end():
    assert te_tp.crossover([(1024, 0.8), (2048, 1.05), (4096, 0.99), (8192, 1.2), (16384, 1.3)]) == 8192
    assert te_tp.crossover([(1024, 1.1), (2048, 1.2)]) == 1024
    assert te_tp.crossover([(1024, 1.1), (2048, 0.9)]) is None
    assert te_tp.crossover([(4096, 1.1), (1024, 0.5)]) == 4096  # order of measurement does not matter


def test_summary_and_table_show_both_crossovers():
    mk = lambda g, t, tp, loc: {"group": g, "tokens": t, "status": "ok",
                                "tp": {"bf16_ms": 2.0, "fp8_ms": 2.0 / tp, "speedup": tp},
                                "local": {"bf16_ms": 1.5, "fp8_ms": 1.5 / loc, "speedup": loc}}
    res = [mk("qkv", 1024, 0.9, 0.8), mk("qkv", 4096, 1.1, 0.95), mk("qkv", 16384, 1.3, 1.2),
           {"group": "fc2", "tokens": 1024, "status": "failed", "reason": "FP8 relative error 0.3 above 0.15"}]
    s = te_tp.summarize(res)
    assert s == [{"group": "qkv", "crossover_tp": 4096, "crossover_local": 16384},
                 {"group": "fc2", "crossover_tp": None, "crossover_local": None}]
    out = {"model": "m", "tp": 2, "recipe": "r", "device": "d", "te_version": "t", "results": res, "crossovers": s}
    md = te_tp.markdown(out)
    assert "| qkv | 4096 | 2.000 | 1.818 | 1.10 | 1.500 | 1.579 | 0.95 | 25% |" in md
    assert "| qkv | 4096 | 16384 |" in md and "| fc2 | never | never |" in md and "failed: FP8 relative error" in md


def test_outside_torchrun_it_says_how_to_run():
    r = subprocess.run([sys.executable, "-m", "adaptive_fp8.te_tp", "--model", "m.yaml"], capture_output=True, text=True, env={"PATH": ""})
    assert r.returncode == 2 and "run under torchrun" in r.stderr
    r = subprocess.run([sys.executable, "-m", "adaptive_fp8.te_tp", "--model", "m.yaml", "--tokens", "1,x"], capture_output=True, text=True)
    assert r.returncode == 2 and "comma-separated positive integers" in r.stderr
    h = subprocess.run([sys.executable, "-m", "adaptive_fp8.te_tp", "--help"], capture_output=True, text=True)
    assert h.returncode == 0 and "sequence_parallel" in h.stdout and "crossover" in h.stdout
