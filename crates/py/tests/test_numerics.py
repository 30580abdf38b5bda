"""The numerics probe and the convergence check: the recipe rules, the round trip's error on
tensors whose answer is known (with torch; skipped without it), the report the Rust merge reads,
the hooks on a model's modules, and the convergence summary and plot."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest

from adaptive_fp8.bench import convergence, numerics
from adaptive_fp8.bench.gpt_train import Schedule, token_batches
from adaptive_fp8.bench.corpus import Corpus
from adaptive_fp8.bench.quant_error import ErrorSums, OperandRule, recipe_rules


def test_recipe_rules_follow_each_recipe_and_the_epsilons():
    b = recipe_rules("blockwise", epsilons={"fp8_quant_bwd_grad": 1e-12})
    assert b["input"] == OperandRule("e4m3", (1, 128), "pow2", 0.0)
    assert b["weight"].block == (128, 128)
    assert b["grad_output"].amax_epsilon == 1e-12 and b["grad_output"].fmt == "e4m3"
    assert recipe_rules("tensorwise", "hybrid")["grad_output"] == OperandRule("e5m2", None, "fp32", 0.0)
    assert recipe_rules("current")["input"].block is None
    mx = recipe_rules("mxfp8", "hybrid")
    assert mx["weight"] == OperandRule("e4m3", (1, 32), "e8m0") and mx["grad_output"].fmt == "e5m2"
    nv = recipe_rules("nvfp4")
    assert nv["input"] == OperandRule("e2m1", (1, 16), "nvfp4") and nv["weight"].block == (16, 16)
    with pytest.raises(ValueError, match="recipe 'mxfp4'"):
        recipe_rules("mxfp4")
    with pytest.raises(ValueError, match="fp8 format"):
        recipe_rules("blockwise", "e5m2")


def test_error_sums_aggregate_over_tensors_not_per_tensor_means():
    a = ErrorSums(err2=1.0, ref2=100.0, underflow=1, nonzero=10, saturated=0, elements=10, tensors=1)
    a.add(ErrorSums(err2=3.0, ref2=300.0, underflow=0, nonzero=30, saturated=4, elements=40, tensors=1))
    s = a.summary()
    assert s["rel_rms"] == pytest.approx(0.1)
    assert s["underflow"] == pytest.approx(1 / 40) and s["saturated"] == pytest.approx(4 / 50)
    assert s["tensors"] == 2
    assert ErrorSums().summary()["rel_rms"] == 0.0


ROWS = [
    {"component": "llm", "name": "decoder.layers.mlp.linear_fc1", "key": {"kind": "layernorm_column", "ub_name": "fc1", "tp": 1}},
    {"component": "llm", "name": "decoder.layers.mlp.linear_fc2", "key": {"kind": "row", "ub_name": "fc2", "tp": 1}},
    {"component": "llm", "name": "decoder.layers.self_attention.linear_proj", "key": {"kind": "row", "ub_name": "proj", "tp": 1}},
]


def _sums(rel: float) -> ErrorSums:
    return ErrorSums(err2=rel * rel, ref2=1.0, nonzero=4, elements=4, tensors=1)


def test_the_report_is_the_format_the_merge_reads_and_the_table_puts_the_worst_first():
    sums = {
        ("decoder.layers.mlp.linear_fc1", "input"): _sums(0.02),
        ("decoder.layers.mlp.linear_fc1", "grad_output"): _sums(0.05),
        ("decoder.layers.mlp.linear_fc2", "weight"): _sums(0.2),
    }
    rep = numerics.report("m", "delayed", "e4m3", ROWS, sums, {"layers": 1})
    assert rep["format"] == "fp8sel-numerics" and rep["version"] == 1
    # A module the probe never saw is left out, not written as zero error.
    assert [m["name"] for m in rep["modules"]] == ["decoder.layers.mlp.linear_fc1", "decoder.layers.mlp.linear_fc2"]
    assert list(rep["modules"][0]["operands"]) == ["input", "grad_output"]
    assert numerics.worst(rep["modules"][0]) == ("grad_output", pytest.approx(0.05))
    assert "current amax" in rep["notes"][0]
    t = numerics.table(rep)
    assert t.index("linear_fc2") < t.index("linear_fc1") and "0.2000" in t
    # The contract with the Rust reader: this exact report is fixtures/numerics/probe_sample.json,
    # which crates/merge/tests/numerics_parse.rs parses and applies as a bound.
    golden = _root() / "fixtures/numerics/probe_sample.json"
    assert rep == json.loads(golden.read_text())


def test_model_flags_are_checked_before_any_import():
    ap = numerics.parser()
    assert numerics.check_model_args(ap.parse_args(["--model", "x", "--layers", "0"])) == "--layers 0: must be at least 1"
    assert numerics.check_model_args(ap.parse_args(["--model", "x", "--ep", "0"])) == "--ep 0: must be at least 1"
    assert numerics.check_model_args(ap.parse_args(["--model", "x", "--lr", "-1"])) == "--lr -1.0: must be positive"
    assert numerics.check_model_args(ap.parse_args(["--model", "x"])) is None


def test_the_probe_and_the_check_fail_clearly_without_a_gpu_stack(tmp_path):
    for mod, extra in (("numerics", []), ("convergence", ["--policy", "policies/llama3_2_1b.json", "--out", str(tmp_path)])):
        r = subprocess.run([sys.executable, "-m", f"adaptive_fp8.bench.{mod}", "--model", "fixtures/models/llama3_2_1b.yaml", "--layers", "1", *extra],
                           capture_output=True, text=True, cwd=_root())
        assert r.returncode == 2, r.stderr
        assert f"{mod}: " in r.stderr and ("skipped" in r.stderr or "CUDA" in r.stderr), r.stderr
        assert r.stdout == ""
    r = subprocess.run([sys.executable, "-m", "adaptive_fp8.bench.numerics", "--model", "no/such.yaml"], capture_output=True, text=True, cwd=_root())
    assert r.returncode == 2 and "numerics:" in r.stderr and "no/such.yaml" in r.stderr


def _root():
    from pathlib import Path

    return Path(__file__).resolve().parents[3]


def test_schedule_warms_up_then_decays_to_the_floor():
    s = Schedule(lr=1e-3, steps=100, warmup=10)
    assert s.at(0) == pytest.approx(1e-4) and s.at(9) == pytest.approx(1e-3)
    assert s.at(10) == pytest.approx(1e-3)
    assert s.at(99) == pytest.approx(1e-4, rel=0.01) and s.at(200) == pytest.approx(1e-4)
    assert all(s.at(i) >= s.at(i + 1) for i in range(10, 120))


def test_batches_carry_one_more_token_for_the_labels_and_are_deterministic():
    c = Corpus(seed=1, vocab=128)
    a = list(token_batches(c, 16, 3, 2, stream=0))
    assert len(a) == 2 and all(len(b) == 3 and all(len(s) == 17 for s in b) for b in a)
    assert a == list(token_batches(Corpus(seed=1, vocab=128), 16, 3, 2, stream=0))
    assert a != list(token_batches(c, 16, 3, 2, stream=1))


def _run(losses, final, bad=0):
    return {"losses": losses, "final_eval": final, "nonfinite_steps": bad}


def test_convergence_verdict_compares_gaps_within_the_run_to_run_band():
    base = [3.0, 2.9] * 20
    runs = {"bf16": _run(base, 2.00), "fp8": _run(base, 2.05), "adaptive": _run(base, 2.02)}
    s = convergence.summarize(runs, ["a"], ["a", "b"])
    assert s["verdict"] == "pass" and s["gap_to_bf16"]["fp8"] == pytest.approx(0.05)
    assert "plan_note" not in s and s["band"] == pytest.approx(s["bf16_tail_noise"])
    runs["adaptive"] = _run(base, 2.09)
    assert convergence.summarize(runs, ["a"], ["a", "b"])["verdict"] == "fail"
    # A second BF16 run 0.05 away: two runs of one program differ that much, so 0.09 vs 0.05 is a tie.
    runs["bf16-repeat"] = _run(base, 1.95)
    s = convergence.summarize(runs, ["a"], ["a", "b"])
    assert s["band"] == pytest.approx(0.05) and s["verdict"] == "pass" and "(a tie)" in s["verdict_text"]
    runs["adaptive"] = _run(base, 2.01, bad=1)
    s = convergence.summarize(runs, [], ["a", "b"])
    assert s["verdict"] == "fail" and s["nonfinite"] == {"adaptive": 1}
    assert "all BF16" in s["plan_note"]
    assert "all FP8" in convergence.summarize(runs, ["a", "b"], ["a", "b"])["plan_note"]


def test_a_diverged_runs_report_is_json_the_reader_takes(root):
    # A run whose loss went NaN at step 7: the report carries it as null (JSON has no NaN), in the
    # shape docs/schemas/adaptive-fp8-convergence.v1.schema.json (fp8_report::convergence) reads.
    import json

    from schema_check import check, schema

    def run(final, bad=0):
        losses = [5.0 - i * 0.01 for i in range(40)]
        return {"losses": losses, "grad_norms": [1.0] * 40, "evals": [[20, 4.0], [40, final]], "final_eval": final,
                "nonfinite_steps": bad, "fp8_groups": [], "recipes": {}}

    runs = {"bf16": run(3.0), "fp8": run(float("nan"), bad=1), "adaptive": run(3.01)}
    runs["fp8"]["losses"][7] = float("nan")
    runs["adaptive"]["fp8_groups"], runs["adaptive"]["recipes"] = ["decoder.layers.mlp.linear_fc1"], {"decoder.layers.mlp.linear_fc1": ["Float8BlockScaling"]}
    out = {"format": convergence.FORMAT, "version": convergence.VERSION, "model": "m", "recipe": "blockwise", "policy": "p.json",
           "notes": [], "plan_fp8": ["decoder.layers.mlp.linear_fc1"], "groups": ["decoder.layers.mlp.linear_fc1"], "corpus_floor": 1.5,
           "settings": {"layers": 2, "seq_length": 1024, "micro_batch_size": 4, "steps": 40, "warmup_steps": 4, "lr": 1e-3, "seed": 0,
                        "vocab": 4096, "ep": None, "eval_batches": 8, "deterministic": False},
           "device": "d", "te_version": "t", "megatron_core_version": "m", "runs": runs}
    out["summary"] = convergence.summarize(runs, out["plan_fp8"], out["groups"])
    text = convergence.document(out)
    def no_constant(c):
        raise ValueError(f"{c} in the report: not JSON")

    doc = json.loads(text, parse_constant=no_constant)
    assert doc["runs"]["fp8"]["losses"][7] is None and doc["summary"]["gap_to_bf16"]["fp8"] is None
    check(doc, *schema(root, "adaptive-fp8-convergence.v1.schema.json"))


def test_smoothing_skips_nan_and_the_plot_has_both_panels():
    assert convergence.smooth([1.0, float("nan"), 3.0], 2) == [1.0, 1.0, 2.0]
    runs = {m: _run([5.0 - i * 0.01 + (0.001 if m != "bf16" else 0) for i in range(60)], 2.0) for m in ("bf16", "fp8", "adaptive")}
    runs["fp8"]["losses"][7] = float("nan")
    out = convergence.svg(runs, "t")
    assert out.startswith("<svg") and out.count("<polyline") == 5 and "gap to BF16" in out and "nan" not in out
    assert convergence.tail_noise([1.0, 1.0, 1.0]) == 0.0 and convergence.tail_noise([1.0, 2.0] * 10) > 0
    with pytest.raises(SystemExit):
        convergence.parser().parse_args(["--model", "x", "--policy", "p", "--out", "o", "--modes", "fp8,bf16"])


@pytest.fixture
def torch():
    """torch, or a skip that names why (the round trip's tests need it; the rest of this file
    runs without it)."""
    return pytest.importorskip("torch", reason="skipped: torch not installed (the round trip's tests need it)")


def test_round_trip_is_exact_on_representable_values_and_bounded_on_random_data(torch):
    from adaptive_fp8.bench.quant_error import error_sums, round_trip

    torch.manual_seed(0)
    exact = torch.tensor([[1.0, -2.0, 0.5, 0.0] * 32])  # powers of two: exact in E4M3 under any pow2 scale
    for recipe in ("blockwise", "tensorwise", "mxfp8"):
        q, _ = round_trip(exact, recipe_rules(recipe)["input"])
        assert torch.equal(q, exact), recipe
    x = torch.randn(256, 512)
    for recipe, bound in (("blockwise", 0.07), ("tensorwise", 0.07), ("mxfp8", 0.07)):
        s = error_sums(x, recipe_rules(recipe)["input"]).summary()
        # E4M3 has 3 mantissa bits: relative rounding error of a normal value is at most 2^-4.
        assert 0.01 < s["rel_rms"] < bound, (recipe, s)
    w = error_sums(torch.randn(300, 200), recipe_rules("blockwise")["weight"]).summary()
    assert 0.01 < w["rel_rms"] < 0.07 and w["elements"] == 60000


def test_nvfp4_is_exact_on_its_grid_and_coarser_than_fp8_on_random_data(torch):
    from adaptive_fp8.bench.quant_error import E2M1_VALUES, error_sums, round_trip

    # Every E2M1 value, signed, in 16-element blocks whose amax is 6: scales of exactly 1.
    grid = torch.tensor([[v * s for v in E2M1_VALUES for s in (1.0, -1.0)]] * 4)
    for op in ("input", "weight"):
        q, codes = round_trip(grid, recipe_rules("nvfp4")[op])
        assert torch.equal(q, grid), op
        assert set(codes.abs().unique().tolist()) <= set(E2M1_VALUES)
    # Round to nearest under a block scale of 1 (the block's amax is 6): 2.4 -> 2, 2.6 -> 3, 5.5 -> 6.
    q, _ = round_trip(torch.tensor([[2.4, 2.6, 5.5, 6.0] + [0.0] * 12]), recipe_rules("nvfp4")["input"])
    assert q[0, :4].tolist() == [2.0, 3.0, 6.0, 6.0]
    x = torch.randn(256, 512)
    fp4 = error_sums(x, recipe_rules("nvfp4")["input"]).summary()
    fp8 = error_sums(x, recipe_rules("mxfp8")["input"]).summary()
    # Two mantissa bits fewer than E4M3, block scales in E4M3: several times MXFP8's error.
    assert 0.05 < fp4["rel_rms"] < 0.2 and fp4["rel_rms"] > 3 * fp8["rel_rms"], (fp4, fp8)
    assert fp4["nonfinite"] == 0 and fp4["elements"] == x.numel()


def test_per_tensor_scaling_underflows_small_values_that_blocks_keep(torch):
    from adaptive_fp8.bench.quant_error import error_sums

    x = torch.randn(64, 256)
    x[:, :128] *= 1e-6  # one block of tiny values beside one of normal ones, in every row
    tensor = error_sums(x, recipe_rules("tensorwise")["input"]).summary()
    block = error_sums(x, recipe_rules("blockwise")["input"]).summary()
    assert tensor["underflow"] > 0.3 and block["underflow"] == 0.0
    # Saturation: the per-tensor scale puts the amax exactly at E4M3's largest value.
    assert tensor["saturated"] > 0


def test_epsilon_floors_the_amax_of_an_all_small_block(torch):
    from adaptive_fp8.bench.quant_error import error_sums

    x = torch.full((1, 128), 1e-20)
    free = error_sums(x, recipe_rules("blockwise")["input"]).summary()
    eps = error_sums(x, recipe_rules("blockwise", epsilons={"fp8_quant_fwd_inp": 1e-12})["input"]).summary()
    assert free["underflow"] == 0.0 and eps["underflow"] == 1.0


def test_non_finite_elements_are_counted_and_left_out(torch):
    from adaptive_fp8.bench.quant_error import error_sums

    x = torch.ones(2, 128)
    x[0, 0] = float("inf")
    x[1, 5] = float("nan")
    s = error_sums(x, recipe_rules("blockwise")["grad_output"]).summary()
    assert s["nonfinite"] == 2 and s["rel_rms"] == 0.0 and math.isfinite(s["rel_rms"])


def test_the_probe_hooks_record_every_operand_of_the_selected_modules(torch):
    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a = torch.nn.Linear(128, 256, bias=False)
            self.b = torch.nn.Linear(256, 128, bias=False)
            self.skip = torch.nn.Linear(128, 128)

        def forward(self, x):
            return self.skip(self.b(torch.relu(self.a(x))))

    net = Net()
    probe = numerics.Probe(net, recipe_rules("blockwise"), lambda m: m is not net.skip and isinstance(m, torch.nn.Linear), lambda p: f"g.{p}")
    x = torch.randn(32, 128)
    net(x).sum().backward()  # inactive: nothing recorded
    assert probe.sums == {}
    probe.active = True
    for _ in range(2):
        probe.record_weights()
        net(x).sum().backward()
    probe.close()
    assert set(probe.sums) == {(f"g.{m}", op) for m in "ab" for op in ("input", "weight", "grad_output")}
    assert all(s.tensors == 2 for s in probe.sums.values())
    assert probe.sums[("g.a", "input")].elements == 2 * 32 * 128
    net(x).sum().backward()  # hooks removed
    assert probe.sums[("g.a", "input")].tensors == 2


def test_a_fused_norm_modules_input_is_taken_after_its_norm(torch):
    class NormLinear(torch.nn.Linear):
        normalization = "RMSNorm"
        eps = 1e-6

        def __init__(self):
            super().__init__(128, 128, bias=False)
            self.layer_norm_weight = torch.nn.Parameter(torch.ones(128))

        def forward(self, x):
            y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.layer_norm_weight
            return super().forward(y)

    m = NormLinear()
    probe = numerics.Probe(m, recipe_rules("tensorwise"), lambda mod: mod is m, lambda p: "n")
    probe.active = True
    x = 1000.0 * torch.randn(8, 128)
    m(x)
    s = probe.sums[("n", "input")]
    # The normalized input has unit RMS: its energy is rows * cols, not 1e6 times that.
    assert s.ref2 == pytest.approx(8 * 128, rel=1e-3)


def test_the_check_is_deterministic_by_default_and_sets_what_megatrons_mode_needs():
    base = ["--model", "m.yaml", "--policy", "p.json", "--out", "o"]
    assert convergence.parser().parse_args(base).deterministic is True
    assert convergence.parser().parse_args(base + ["--no-deterministic"]).deterministic is False
    env = {"CUBLAS_WORKSPACE_CONFIG": ":16:8"}
    notes = convergence.deterministic_setup(env)
    # TE refuses deterministic_mode unless this is 0; the user's own cuBLAS setting is kept.
    assert env == {"NVTE_ALLOW_NONDETERMINISTIC_ALGO": "0", "CUBLAS_WORKSPACE_CONFIG": ":16:8"}
    assert notes and "deterministic" in notes[0]
    env = {}
    convergence.deterministic_setup(env)
    assert env["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"


def test_the_tools_arguments_carry_what_the_judge_reads(root):
    # numerics and convergence build GPTModel through the Megatron judge, whose parser has more
    # arguments than theirs (a run on the H200 failed on a missing etp, then execution).
    import adaptive_fp8 as af8
    from adaptive_fp8.bench import megatron_step as ms
    from adaptive_fp8.bench.gpt_train import judge_args

    model = str(root / "fixtures/models/llama3_2_1b.yaml")
    for tool, extra in ((numerics, []), (convergence, ["--policy", "p.json", "--out", "o"])):
        args = judge_args(tool.parser().parse_args(["--model", model, "--seq-length", "4096", *extra]))
        assert args.tokens == [4096] and args.execution == ["eager"] and args.grad_accum == 1
        assert args.fp8_param is False and args.etp is None
        kw = ms._plan_kwargs(args, args.tokens[0])
        assert af8._plan(args.model, None, kw)["modules"], tool


def test_recipe_counts_compare_what_the_hook_planned_with_what_te_ran():
    from adaptive_fp8.bench.recipe_names import recipe_counts

    planned = [
        {"fp8": True, "recipe": "tensorwise"},
        {"fp8": True, "recipe": None},  # the trainer's recipe
        {"fp8": False, "recipe": None},
        {"fp8": True, "recipe": "blockwise"},
    ]
    ran = {"decoder.layers.0.mlp.linear_fc1": "Float8CurrentScaling", "decoder.layers.0.mlp.linear_fc2": "Float8BlockScaling",
           "decoder.layers.0.self_attention.linear_qkv": "Float8BlockScaling"}
    want, got = recipe_counts(planned, ran, "blockwise")
    assert want == got == {"Float8CurrentScaling": 1, "Float8BlockScaling": 2}
    # A module that ran the trainer's recipe where the policy gave it tensorwise is seen.
    ran["decoder.layers.0.mlp.linear_fc1"] = "Float8BlockScaling"
    want, got = recipe_counts(planned, ran, "blockwise")
    assert want != got and got == {"Float8BlockScaling": 3}
