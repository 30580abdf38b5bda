"""The step benchmark's pure half (layout from the plan, noise verdicts, tables); its GPU half
runs on the device (scripts/device/step_bench.sh)."""

from __future__ import annotations

import subprocess
import sys

import pytest

import adaptive_fp8 as af8
from adaptive_fp8 import step_bench as sb


def _plan(root, model="qwen2_5_72b.yaml", policy=None, **kw):
    return af8.plan(str(root / "fixtures" / "models" / model), policy, **kw)


def test_layout_from_the_plan_matches_qwen_72b_per_rank(root):
    L = sb.Layout.from_plan(_plan(root, tp=8, seq_length=4096), 128, "qwen")
    # 64 heads, 8 KV groups, hidden 8192, ffn 29568 -> per rank of TP 8:
    assert (L.hidden, L.heads, L.groups, L.head_dim) == (8192, 8, 1, 128)
    assert (L.qkv_out, L.proj_in, L.fc1_out, L.fc2_in) == (1280, 1024, 7392, 3696)
    assert L.gemm_rows == 4096


def test_wrong_head_dim_is_refused_with_the_fix(root):
    with pytest.raises(sb.StepBenchError, match="--head-dim"):
        sb.Layout.from_plan(_plan(root, tp=8, seq_length=4096), 96, "qwen")


def test_moe_models_are_refused(root):
    rows = _plan(root, "deepseek_v3.yaml", tp=8, ep=64, seq_length=4096)
    with pytest.raises(sb.StepBenchError, match="MoE|MLA"):
        sb.Layout.from_plan(rows, 128, "deepseek_v3")


def test_policy_modes_follow_the_plan(root):
    pol = str(root / "policies" / "qwen2_5_72b.json")
    small = sb.fp8_groups(_plan(root, policy=pol, tp=8, seq_length=256))
    large = sb.fp8_groups(_plan(root, policy=pol, tp=1, seq_length=65536))
    assert set(small) == set(large) == set(sb.GROUPS)
    assert all(large.values()), large  # big GEMMs: FP8 pays everywhere
    assert not all(small.values()), small  # 256 tokens at TP 8: some modules stay BF16


def test_verdict_is_a_tie_unless_the_whole_band_is_on_one_side():
    assert sb.verdict([0.9, 0.92, 0.95, 0.97, 0.99]) == "faster"
    assert sb.verdict([1.01, 1.05, 1.1]) == "slower"
    assert sb.verdict([0.95, 0.99, 1.0, 1.02, 1.04]) == "tie"
    with pytest.raises(sb.StepBenchError):
        sb.quantile([], 0.5)


def test_summary_pairs_rounds_and_names_fp8_groups():
    modes = {"bf16": dict.fromkeys(sb.GROUPS, False), "fp8": dict.fromkeys(sb.GROUPS, True)}
    modes["oracle"] = dict(modes["bf16"], fc1=True)
    times = {"bbbb": [10.0, 12.0, 11.0], "8888": [9.0, 13.0, 10.0], "bb8b": [9.5, 11.0, 10.5]}
    row = sb.summarize(4096, modes, times, [])
    fp8 = row["modes"]["fp8"]
    # paired per round: 0.9, 1.083, 0.909 -> median 0.909, band contains 1 -> tie
    assert fp8["vs_bf16_median"] == pytest.approx(10 / 11)
    assert fp8["verdict_vs_bf16"] == "tie"
    assert row["modes"]["oracle"]["fp8_groups"] == ["fc1"]
    assert row["modes"]["oracle"]["verdict_vs_bf16"] == "faster"
    assert row["modes"]["oracle"]["vs_best_of_bf16_fp8"] == pytest.approx(10.5 / 10.0)
    out = {"model": "m", "tp": 8, "layers": 2, "execution": "eager", "steps": 10, "repeats": 3,
           "device": "d", "te_version": "t", "results": [row]}
    md = sb.markdown(out)
    assert "| 4096 | oracle | fc1 |" in md and md.count("\n") == 4 + 3


def test_help_teaches_and_bad_tokens_are_refused():
    run = lambda *a: subprocess.run([sys.executable, "-m", "adaptive_fp8.step_bench", *a], capture_output=True, text=True)
    h = run("--help")
    assert h.returncode == 0 and "oracle" in h.stdout and "--tokens" in h.stdout
    bad = run("--model", "x.yaml", "--tokens", "2048,abc")
    assert bad.returncode == 2 and "comma-separated positive integers" in bad.stderr


@pytest.mark.parametrize("module", ["step_bench", "te_worker", "megatron", "te"])
def test_importing_does_not_import_torch(module):
    code = f"import sys, adaptive_fp8.{module}; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


class FakeStep:
    """A step-time model: a base, a per-group FP8 delta, a fixed cost paid once any group is FP8,
    and seeded multiplicative noise."""

    def __init__(self, delta: dict[str, float], fixed: float = 0.0, noise: float = 0.005, seed: int = 1):
        import random

        self.delta, self.fixed, self.rng, self.noise = delta, fixed, random.Random(seed), noise
        self.released: list[str] = []

    def ms(self, mode: dict[str, bool]) -> float:
        t = 10.0 + sum(self.delta[g] for g in sb.GROUPS if mode[g]) + (self.fixed if any(mode.values()) else 0.0)
        return t * (1 + self.rng.uniform(-self.noise, self.noise))

    def pair(self, a, b) -> float:
        return self.ms(a) / self.ms(b)


def test_oracle_keeps_the_groups_that_pay_and_drops_the_ones_that_lose():
    f = FakeStep({"qkv": 0.3, "proj": -0.6, "fc1": -1.0, "fc2": -0.8})
    best, trials = sb.search_oracle(f.pair, 7, release=lambda m: f.released.append(sb.key(m)))
    assert sb.key(best) == "b888"
    assert {t["search"] for t in trials} == {"up", "down"}  # both passes agree: no final
    # Every superseded mode is let go (the caller keeps the ones it still times), never the answer.
    assert sb.key(best) not in f.released
    assert {"bbbb", "8888", "8bbb"} <= set(f.released)


def test_oracle_finds_groups_that_only_pay_together():
    # A fixed FP8 cost (a shared cast, an optimizer switch) that no single group repays alone.
    f = FakeStep(dict.fromkeys(sb.GROUPS, -0.5), fixed=1.2)
    best, trials = sb.search_oracle(f.pair, 7)
    assert not any(t["kept"] for t in trials if t["search"] == "up")
    assert sb.key(best) == "8888", trials
    assert trials[-1]["search"] == "final" and trials[-1]["kept"]


def test_oracle_inside_the_noise_stays_bf16():
    f = FakeStep(dict.fromkeys(sb.GROUPS, -0.01), noise=0.05)
    best, _ = sb.search_oracle(f.pair, 7)
    assert sb.key(best) == "bbbb"


def test_the_recipe_flag_picks_the_te_recipe_without_importing_torch():
    import sys

    from adaptive_fp8 import step_bench

    a = step_bench.parser().parse_args(["--model", "m.yaml", "--recipe", "current"])
    assert step_bench.te_recipe_name(a) == "Float8CurrentScaling(fp8_format=E4M3)"
    a = step_bench.parser().parse_args(["--model", "m.yaml", "--recipe", "delayed"])
    assert step_bench.te_recipe_name(a).startswith("DelayedScaling(amax_compute_algo=max, amax_history_len=1024, fp8_format=HYBRID")
    a = step_bench.parser().parse_args(["--model", "m.yaml"])
    assert step_bench.te_recipe_name(a) == "Float8BlockScaling"
    assert "torch" not in sys.modules
