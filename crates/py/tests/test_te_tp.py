"""The TP-with-communication tool's pure half: modules at TP from the plan, crossovers, tables.
Its GPU half runs under torchrun on the device (scripts/device/trainer_loop.sh)."""

from __future__ import annotations

import subprocess
import sys

import pytest

import adaptive_fp8 as af8
from adaptive_fp8.bench import te_tp


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
    r = subprocess.run([sys.executable, "-m", "adaptive_fp8.bench.te_tp", "--model", "m.yaml"], capture_output=True, text=True, env={"PATH": ""})
    assert r.returncode == 2 and "run under torchrun" in r.stderr
    r = subprocess.run([sys.executable, "-m", "adaptive_fp8.bench.te_tp", "--model", "m.yaml", "--tokens", "1,x"], capture_output=True, text=True)
    assert r.returncode == 2 and "comma-separated positive integers" in r.stderr
    h = subprocess.run([sys.executable, "-m", "adaptive_fp8.bench.te_tp", "--help"], capture_output=True, text=True)
    assert h.returncode == 0 and "sequence_parallel" in h.stdout and "crossover" in h.stdout


def _synthetic(root, tokens=(1024, 4096, 16384)):
    """A te_tp result as the GPU half writes it, with made-up times: FP8 wins from 4096 tokens."""
    model = str(root / "fixtures" / "models" / "qwen2_5_72b.yaml")
    plans = {t: af8._plan(model, None, dict(tp=2, seq_length=t, micro_batch_size=1)) for t in tokens}
    st = lambda v: {"median": v, "p10": 0.9 * v, "p90": 1.1 * v}
    results = []
    for t in tokens:
        for g in te_tp.DENSE:
            sp = 0.8 if t < 4096 else 1.3
            way = {"bf16": {"fwd_ms": st(0.4), "bwd_ms": st(0.6), "total_ms": st(1.0)},
                   "fp8": {"fwd_ms": st(0.4 / sp), "bwd_ms": st(0.6 / sp), "total_ms": st(1.0 / sp)},
                   "bf16_ms": 1.0, "fp8_ms": 1.0 / sp, "speedup": sp, "fp8_error": 0.03}
            results.append({"group": g, "kind": "x", "tokens": t, "status": "ok", "tp": way, "local": way})
    results.append({"group": "qkv", "kind": "x", "tokens": 3000, "status": "skipped", "reason": "tokens not divisible"})
    plans[3000] = plans[1024]
    out = {"tp": 2, "warmup": 5, "iters": 20, "te_version": "2.20.2", "results": results}
    dev = {"name": "NVIDIA H200", "compute_capability": "9.0", "driver": "", "cublaslt": "", "nvrtc": "", "sm_count": 132}
    return te_tp.to_report(out, plans, model, "blockwise", dev)


def test_the_report_merges_into_a_policy_and_never_with_one_rank_tp_reports(root, fp8sel, tmp_path):
    rep = _synthetic(root)
    assert rep["provenance"]["tp_comm"] is True and rep["provenance"]["model"] == "qwen2_5_72b"
    pts = [p for p in rep["points"] if p["status"] == "ok"]
    assert {p["ub_name"] for p in pts} == set(te_tp.DENSE)
    q = next(p for p in pts if p["ub_name"] == "qkv")
    # per-rank shape from the plan, the layer count as instances
    assert (q["in_features"], q["out_features"], q["instances"], q["tp"]) == (8192, 5120, 80, 2)
    path = tmp_path / "tp2_comm.json"
    te_tp.write_report(str(path), rep)
    out = tmp_path / "pol.json"
    run = lambda *a: subprocess.run([str(fp8sel), *a], capture_output=True, text=True, cwd=root)
    r = run("merge-policy", "--reports", str(path), "--trainer", "eager", "--output", str(out))
    assert r.returncode == 0, r.stderr
    pol = af8.Policy.load(str(out))
    assert pol.decide("TELayerNormColumnParallelLinear", ub_name="qkv", tp=2, seq_length=4096)
    assert not pol.decide("TELayerNormColumnParallelLinear", ub_name="qkv", tp=2, seq_length=1024)
    # a one-GPU TE report of the same TP: refused, naming both files and the reason
    one_rank = str(root / "reports" / "h200" / "te" / "te_qwen2_5_72b_tp2.json")
    r = run("merge-policy", "--reports", str(path), one_rank, "--trainer", "eager", "--output", str(tmp_path / "x.json"))
    assert r.returncode == 2 and "TP communication" in r.stderr and "te_qwen2_5_72b_tp2.json" in r.stderr
    # TP 1 has no communication: it merges with the TP 2 report
    tp1 = str(root / "reports" / "h200" / "te" / "te_qwen2_5_72b_tp1.json")
    r = run("merge-policy", "--reports", str(path), tp1, "--trainer", "eager", "--output", str(tmp_path / "y.json"))
    assert r.returncode == 0, r.stderr


def test_report_with_delayed_is_refused_with_the_fix():
    r = subprocess.run([sys.executable, "-m", "adaptive_fp8.bench.te_tp", "--model", "m.yaml", "--recipe", "delayed", "--report", "x.json"], capture_output=True, text=True)
    assert r.returncode == 2 and "--report is for blockwise and tensorwise" in r.stderr


def test_one_timing_summary_for_every_benchmark():
    from adaptive_fp8 import _common
    from adaptive_fp8.bench import te_worker

    v = [float(x) for x in range(11, 0, -1)]
    assert _common.stat(v) == {"median": 6.0, "p10": 2.0, "p90": 10.0}
    # the TE worker and te_tp summarize with the same function
    assert te_worker._stat is _common.stat is te_tp.stat
