"""The step benchmark's pure half (layout from the plan, noise verdicts, tables); its GPU half
runs on the device (scripts/device/step_bench.sh)."""

from __future__ import annotations

import subprocess
import sys

import pytest

import adaptive_fp8 as af8
from adaptive_fp8.bench import collector as col
from adaptive_fp8.bench import step_bench as sb
from adaptive_fp8.bench.step_spec import Spec, StepBenchError, built_groups, composition, decisions, group_keys
from step_tiny import TINY, torch_or_skip

GROUPS = ["qkv", "proj", "fc1", "fc2"]


def _spec(root, model="qwen2_5_72b.yaml", component="llm", **kw):
    p = af8._plan(str(root / "fixtures" / "models" / model), None, kw)
    return Spec.from_plan(p["modules"], p["architecture"].get(component), model, component)


def test_spec_from_the_plan_matches_qwen_72b_per_rank(root):
    s = _spec(root, tp=8, seq_length=4096)
    # 64 heads, 8 KV groups, hidden 8192, ffn 29568 -> per rank of TP 8:
    assert (s.hidden, s.heads, s.groups, s.head_dim, s.attention) == (8192, 8, 1, 128, "mha")
    m = s.modules
    assert (m["qkv"].out_features, m["proj"].in_features, m["fc1"].out_features, m["fc2"].in_features) == (1280, 1024, 7392, 3696)
    assert s.tokens == 4096 and s.moe_layers == 0
    assert composition(s, 2) == ["dense", "dense"]
    assert built_groups(s, ["dense"]) == ["qkv", "proj", "fc1", "fc2"]


def test_spec_of_deepseek_v3_has_mla_moe_and_shared_experts(root):
    s = _spec(root, "deepseek_v3.yaml", tp=8, ep=64, seq_length=4096)
    assert s.attention == "mla" and (s.heads, s.head_dim, s.v_head_dim, s.rope_dim) == (16, 192, 128, 64)
    assert (s.num_experts, s.topk, s.local_experts) == (256, 8, 4)
    assert (s.dense_layers, s.moe_layers) == (3, 58)
    # q_down/kv_down run on the sequence-parallel shard and are gathered before the up projections.
    assert s.modules["q_down_proj"].rows == 4096 // 8 and s.modules["q_up_proj"].rows == 4096
    # 2 layers: the dense share (3 of 61) rounds to none; asking for one is allowed.
    assert composition(s, 2) == ["moe", "moe"]
    assert composition(s, 2, 1) == ["dense", "moe"]
    g = built_groups(s, ["dense", "moe"])
    assert g == ["q_down_proj", "q_up_proj", "kv_down_proj", "kv_up_proj", "proj", "fc1", "fc2",
                 "experts.fc1", "experts.fc2", "shared.fc1", "shared.fc2"]
    with pytest.raises(StepBenchError, match="between 0 and"):
        composition(s, 2, 3)
    # The results list the keys of the groups built: the dense fc1 of a step of MoE layers has no
    # verdict (its key is the dense layers' own; the shared experts' fc1 has another).
    p = af8._plan(str(root / "fixtures" / "models" / "deepseek_v3.yaml"), None, dict(tp=8, ep=64, seq_length=4096))
    every = group_keys(p["modules"], "llm", p["architecture"]["llm"])
    moe = group_keys(p["modules"], "llm", p["architecture"]["llm"], built_groups(s, ["moe", "moe"]))
    assert set(every) - set(moe) == {"fc1", "fc2"} and moe["experts.fc1"]["scale"] == 8


def test_spec_of_a_vlm_vision_encoder_is_a_non_gated_layernorm_mha(root):
    s = _spec(root, "qwen3_vl_235b_a22b.yaml", "vit", tp=4, seq_length=4096, vit_num_tokens=4096)
    assert (s.norm, s.gated, s.causal, s.heads, s.groups, s.head_dim) == ("LayerNorm", False, False, 4, 4, 72)
    # ffn 4304 / 4 = 1076 is not a multiple of 16: TE cannot run fc1/fc2 in FP8.
    assert s.fp8_capable() == {"qkv": True, "proj": True, "fc1": False, "fc2": False}
    llm = _spec(root, "qwen3_vl_235b_a22b.yaml", tp=4, seq_length=4096)
    assert "shared.fc1" not in llm.modules and (llm.local_experts, llm.topk) == (16, 8)


def test_spec_refuses_inconsistent_plans_with_the_reason(root):
    p = af8._plan(str(root / "fixtures" / "models" / "qwen2_5_72b.yaml"), None, dict(tp=8, seq_length=4096))
    arch = p["architecture"]["llm"]
    with pytest.raises(StepBenchError, match="head_dim"):
        Spec.from_plan(p["modules"], dict(arch, head_dim=96), "qwen", "llm")
    with pytest.raises(StepBenchError, match="no vit modules"):
        Spec.from_plan(p["modules"], arch, "qwen", "vit")
    rows = [r for r in p["modules"] if r["ub_name"] != "fc2"]
    with pytest.raises(StepBenchError, match="lack fc2"):
        Spec.from_plan(rows, arch, "qwen", "llm")


def test_policy_modes_follow_the_plan(root):
    pol = str(root / "policies" / "qwen2_5_72b.json")
    model = str(root / "fixtures" / "models" / "qwen2_5_72b.yaml")
    small = decisions(af8.plan(model, pol, tp=8, seq_length=256))
    large = decisions(af8.plan(model, pol, tp=1, seq_length=65536))
    assert set(small) == set(large) == {"qkv", "proj", "fc1", "fc2"}
    assert all(large.values()), large  # big GEMMs: FP8 pays everywhere
    assert not all(small.values()), small  # 256 tokens at TP 8: some modules stay BF16


def test_deepseek_policy_decides_experts_and_shared_experts_apart(root):
    pol = str(root / "policies" / "deepseek_v3.json")
    d = decisions(af8.plan(str(root / "fixtures" / "models" / "deepseek_v3.yaml"), pol, tp=8, ep=64, seq_length=4096))
    assert {"experts.fc1", "experts.fc2", "shared.fc1", "shared.fc2", "fc1", "fc2"} <= set(d)
    # the dense fc2 and the shared experts' fc2 share the row/fc2 key: one answer for both.
    assert d["fc2"] == d["shared.fc2"]


class _UnitBench:
    """A stand-in for step_layers.Bench whose step time is a model: the dense fc2 alone saves
    1 ms, the shared experts' fc2 alone costs 0.3, so the key they share pays (0.7) only together."""

    gains = {"fc2": 1.0, "shared.fc2": -0.3, "proj": 0.5}

    collector = col.Collector()

    def build(self, spec, kinds, fp8):
        return dict(fp8)

    def step_fn(self, spec, model, execution):
        return model

    def check(self, step, name):
        pass

    def time_ms(self, step):
        return 10.0 - sum(self.gains[g] for g, on in step.items() if on)

    def free(self, collect=False):
        pass


def test_the_te_block_oracle_searches_a_shared_key_as_one_unit():
    # DeepSeek-V3's dense fc2 and shared-expert fc2 share the row/fc2 key: searched apart, the
    # oracle would keep fc2 alone, which no policy can run; searched as the key, both.
    from types import SimpleNamespace

    row_fc2 = {"kind": "row", "ub_name": "fc2", "tp": 1}
    keys = {"proj": {"key": {"kind": "row", "ub_name": "proj", "tp": 1}, "scale": 1},
            "fc2": {"key": row_fc2, "scale": 1}, "shared.fc2": {"key": row_fc2, "scale": 1}}
    groups = ["proj", "fc2", "shared.fc2"]
    units = sb.search_units(keys, groups)
    assert units == {"proj": ["proj"], "fc2+shared.fc2": ["fc2", "shared.fc2"]}
    # A group without a key is its own unit, not dropped.
    assert sb.search_units({}, ["fc2"]) == {"fc2": ["fc2"]}
    modes = {"bf16": dict.fromkeys(groups, False), "fp8": dict.fromkeys(groups, True)}
    args = SimpleNamespace(oracle="greedy", oracle_repeats=3, repeats=3)
    spec = SimpleNamespace(tokens=3072)
    row = sb._one(_UnitBench(), args, spec, ["dense", "moe"], modes, units, "eager", lambda *a, **k: None, [])
    assert row["modes"]["oracle"]["fp8_groups"] == groups
    assert {t["group"] for t in row["oracle_trials"] if t["search"] != "final"} == {"proj", "fc2+shared.fc2"}
    # Searched per group (the old way), the same model's oracle splits the key.
    alone = sb.search_units({}, groups)
    row = sb._one(_UnitBench(), args, spec, ["dense", "moe"], modes, alone, "eager", lambda *a, **k: None, [])
    assert row["modes"]["oracle"]["fp8_groups"] == ["proj", "fc2"]


def test_verdict_is_a_tie_unless_the_whole_band_is_on_one_side():
    assert sb.verdict([0.9, 0.92, 0.95, 0.97, 0.99]) == "faster"
    assert sb.verdict([1.01, 1.05, 1.1]) == "slower"
    assert sb.verdict([0.95, 0.99, 1.0, 1.02, 1.04]) == "tie"
    with pytest.raises(sb.StepBenchError):
        sb.quantile([], 0.5)


def test_summary_pairs_rounds_and_names_fp8_groups():
    modes = {"bf16": dict.fromkeys(GROUPS, False), "fp8": dict.fromkeys(GROUPS, True)}
    modes["oracle"] = dict(modes["bf16"], fc1=True)
    times = {"-": [10.0, 12.0, 11.0], "qkv+proj+fc1+fc2": [9.0, 13.0, 10.0], "fc1": [9.5, 11.0, 10.5]}
    row = sb.summarize(4096, modes, times, [])
    row["execution"] = "eager"
    fp8 = row["modes"]["fp8"]
    # paired per round: 0.9, 1.083, 0.909 -> median 0.909, band contains 1 -> tie
    assert fp8["vs_bf16_median"] == pytest.approx(10 / 11)
    assert fp8["verdict_vs_bf16"] == "tie"
    assert row["modes"]["oracle"]["fp8_groups"] == ["fc1"]
    assert row["modes"]["oracle"]["verdict_vs_bf16"] == "faster"
    assert row["modes"]["oracle"]["vs_best_of_bf16_fp8"] == pytest.approx(10.5 / 10.0)
    # all-FP8 has the least median (10.0); the oracle against it per round: 1.056, 0.846, 1.05
    assert row["modes"]["oracle"]["vs_min_of"] == "fp8"
    assert row["modes"]["oracle"]["vs_min_median"] == pytest.approx(1.05)
    assert row["modes"]["oracle"]["vs_min_p10"] < 0.9 < 1.05 < row["modes"]["oracle"]["vs_min_p90"]
    failed = {"tokens": 1024, "execution": "graphed", "error": "RuntimeError: capture failed"}
    out = {"model": "m", "tp": 8, "layers": 2, "execution": "eager", "steps": 10, "repeats": 3, "recipe": "r",
           "device": "d", "te_version": "t", "results": [row, failed]}
    md = sb.markdown(out)
    assert "| eager | 4096 | oracle | fc1 |" in md and md.count("\n") == 4 + 3 + 1
    assert "| faster | 1.050 (0.846-1.056) of fp8 |" in md
    assert "| graphed | 1024 | - | - | - | - | error: RuntimeError: capture failed | - |" in md
    # A mode whose groups are another's is that program's rows, and says so.
    modes["policy:p.json"] = dict(modes["bf16"])
    times_again = sb.summarize(4096, modes, times, [])
    md = sb.markdown(dict(out, results=[dict(times_again, execution="eager")]))
    assert "| policy:p.json (= bf16: the same program, timed once) | - |" in md
    # Megatron's judge builds one model per mode: the same groups, timed apart.
    md = sb.markdown(dict(out, trainer="megatron", results=[dict(times_again, execution="eager")]))
    assert "| policy:p.json (= bf16: its FP8 groups, its own model, timed apart) | - |" in md and "timed once" not in md
    assert "| oracle | fc1 |" in md and "| bf16 | - |" in md
    # The header says how the FP8 modes held their weights (TE blocks before the field: FP8).
    head = lambda **kw: sb.markdown(dict(out, **kw)).split("\n")[0]
    assert ", r, BF16 weights, d," in head(trainer="megatron", fp8_param=False)
    assert ", r, FP8 weights (--fp8-param), d," in head(trainer="megatron", fp8_param=True)
    assert "BF16 weights" in head(fp8_param=False) and "FP8 weights" in head()


def test_help_teaches_and_bad_tokens_are_refused():
    run = lambda *a: subprocess.run([sys.executable, "-m", "adaptive_fp8.bench.step_bench", *a], capture_output=True, text=True)
    h = run("--help")
    assert h.returncode == 0 and "oracle" in h.stdout and "--tokens" in h.stdout
    bad = run("--model", "x.yaml", "--tokens", "2048,abc")
    assert bad.returncode == 2 and "comma-separated positive integers" in bad.stderr


@pytest.mark.parametrize("module", ["bench.step_bench", "bench.step_spec", "bench.step_layers", "bench.te_worker", "bench.te_tp", "megatron", "te", "bench.probe_host", "bench.numerics", "bench.convergence", "bench.recipe_names", "amax_eps"])
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
        t = 10.0 + sum(self.delta[g] for g in GROUPS if mode[g]) + (self.fixed if any(mode.values()) else 0.0)
        return t * (1 + self.rng.uniform(-self.noise, self.noise))

    def pair(self, a, b) -> float:
        return self.ms(a) / self.ms(b)


def test_oracle_keeps_the_groups_that_pay_and_drops_the_ones_that_lose():
    f = FakeStep({"qkv": 0.3, "proj": -0.6, "fc1": -1.0, "fc2": -0.8})
    best, trials = sb.search_oracle(f.pair, 7, GROUPS, release=lambda m: f.released.append(sb.key(m)))
    assert sb.key(best) == "proj+fc1+fc2"
    assert {t["search"] for t in trials} == {"up", "down"}  # both passes agree: no final
    # Every superseded mode is let go (the caller keeps the ones it still times), never the answer.
    assert sb.key(best) not in f.released
    assert {"-", "qkv+proj+fc1+fc2", "qkv"} <= set(f.released)


def test_oracle_finds_groups_that_only_pay_together():
    # A fixed FP8 cost (a shared cast, an optimizer switch) that no single group repays alone.
    f = FakeStep(dict.fromkeys(GROUPS, -0.5), fixed=1.2)
    best, trials = sb.search_oracle(f.pair, 7, GROUPS)
    assert not any(t["kept"] for t in trials if t["search"] == "up")
    assert sb.key(best) == "qkv+proj+fc1+fc2", trials
    assert trials[-1]["search"] == "final" and trials[-1]["kept"]


def test_a_trial_stops_early_only_where_the_full_run_could_not_be_faster():
    import random

    from adaptive_fp8.bench.step_common import faster_beyond_noise

    rng = random.Random(7)
    saved = 0
    for _ in range(3000):
        n = rng.randint(1, 9)
        ratios = [rng.choice([1.0, rng.uniform(0.95, 1.05)]) for _ in range(n)]
        it = iter(ratios)
        got, kept = faster_beyond_noise(lambda: next(it), n)
        # The verdict of all n pairs, from the pairs it timed: the same, and a prefix of them.
        assert kept == (sb.verdict(ratios) == "faster"), (ratios, got)
        assert got == ratios[: len(got)]
        saved += n - len(got)
        if kept:
            assert len(got) == n
    assert saved > 0
    # 7 repeats: p90 is the second largest, so two ratios >= 1 end the trial.
    it = iter([1.01, 0.9, 1.0, 0.8, 0.8, 0.8, 0.8])
    got, kept = faster_beyond_noise(lambda: next(it), 7)
    assert (len(got), kept) == (3, False)


def test_oracle_inside_the_noise_stays_bf16_in_most_runs():
    # A 0.1% gain under 5% noise is a tie. One trial keeps a tie only when six of its seven
    # ratios fall below 1 (p90 < 1): 8/128 of the time, so over the oracle's eight or nine trials
    # about 63% of runs stay all-BF16 (one seed is one sample path, not the rule). A looser
    # verdict (say the median) would keep noise in nearly every run.
    runs = [sb.key(sb.search_oracle(FakeStep(dict.fromkeys(GROUPS, -0.01), noise=0.05, seed=s).pair, 7, GROUPS)[0])
            for s in range(1, 101)]
    assert runs.count("-") >= 50, runs


def test_the_recipe_flag_picks_the_te_recipe_without_importing_torch():
    from adaptive_fp8.bench import step_bench

    a = step_bench.parser().parse_args(["--model", "m.yaml", "--recipe", "current"])
    assert step_bench.te_recipe_name(a) == "Float8CurrentScaling(fp8_format=E4M3)"
    a = step_bench.parser().parse_args(["--model", "m.yaml", "--recipe", "delayed"])
    assert step_bench.te_recipe_name(a).startswith("DelayedScaling(amax_compute_algo=max, amax_history_len=1024, fp8_format=HYBRID")
    a = step_bench.parser().parse_args(["--model", "m.yaml"])
    assert step_bench.te_recipe_name(a) == "Float8BlockScaling"
    # In a fresh interpreter: where torch is installed, an earlier test in this one may import it.
    code = ("import sys; from adaptive_fp8.bench import step_bench as s; "
            "s.te_recipe_name(s.parser().parse_args(['--model', 'm.yaml', '--recipe', 'delayed'])); "
            "sys.exit('torch' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


def test_bad_layer_mix_and_execution_are_refused_before_torch(root):
    run = lambda *a: subprocess.run([sys.executable, "-m", "adaptive_fp8.bench.step_bench", *a], capture_output=True, text=True)
    ds = str(root / "fixtures" / "models" / "deepseek_v3.yaml")
    r = run("--model", ds, "--tp", "8", "--tokens", "1024", "--layers", "2", "--dense-layers", "5")
    assert r.returncode == 2 and "--dense-layers 5 must be between 0 and --layers 2" in r.stderr
    r = run("--model", ds, "--execution", "eager,compiled")
    assert r.returncode == 2 and "expected eager, graphed" in r.stderr
    llama = str(root / "fixtures" / "models" / "llama3_2_1b.yaml")
    r = run("--model", llama, "--component", "vit", "--tokens", "1024")
    assert r.returncode == 2 and "no vit modules" in r.stderr


def test_a_policy_without_rules_for_the_layout_is_named_in_the_notes(root):
    # A TE policy measured at ETP 1 judged at the layout Megatron runs by default (ETP = TP = 2):
    # its expert rules do not apply, the experts run BF16, and the result must say so.
    pol = str(root / "crates" / "py" / "tests" / "data" / "mixtral_8x7b_tp2_etp1.json")
    model = str(root / "examples" / "models" / "mixtral_8x7b.json")
    for etp, expect_note in ((None, True), (1, False)):
        args = sb.parser().parse_args(["--model", model, "--tp", "2", "--ep", "8", "--tokens", "8192", "--policy", pol]
                                      + (["--etp", str(etp)] if etp else []))
        spec, kw = sb.spec_at(af8, args, 8192)
        kinds = composition(spec, 2)
        _, modes, notes = sb.modes_for(af8, args, spec, kinds, kw)
        pm = modes["policy:mixtral_8x7b_tp2_etp1.json"]
        assert any("column_grouped etp=2 num_gemms=1" in n for n in notes) == expect_note, notes
        assert pm["experts.fc1"] is not expect_note  # FP8 experts only where the rule applies


def test_results_are_written_after_each_case_so_a_time_limit_keeps_them(tmp_path):
    torch = torch_or_skip()
    import json as _json

    import fake_te

    cfg = tmp_path / "m.json"
    cfg.write_text(_json.dumps(TINY["gqa_moe"]))
    args = sb.parser().parse_args(["--model", str(cfg), "--tokens", "32,64", "--layers", "1", "--steps", "1",
                                   "--repeats", "2", "--warmup", "1", "--oracle", "none"])
    seen = []
    torch.manual_seed(0)
    out = sb.run(args, log=lambda *a, **k: None, te=fake_te, device="cpu", progress=lambda o: seen.append(o))
    assert [len(o["results"]) for o in seen] == [1, 2] and not seen[0]["complete"]
    assert out["complete"] and len(out["results"]) == 2
    from adaptive_fp8._common import emit

    p = tmp_path / "o.json"
    emit(seen[0], sb.markdown(seen[0]), str(p), None, quiet=True)
    assert _json.loads(p.read_text())["complete"] is False and not list(tmp_path.glob(".*.tmp"))


# -- --tp-comm: a real TP group (pure refusals here; the stand-in run under torchrun below) -----


def test_tp_comm_is_refused_with_the_fix_where_it_cannot_run(root):
    from adaptive_fp8.bench.step_spec import full_features, tp_comm_layout

    q = _spec(root, tp=2, seq_length=4096)
    kinds = composition(q, 2)
    tp_comm_layout(q, kinds, 2, 2)  # dense GQA at TP 2 over 2 ranks: fine
    for world, tp, msg in ((None, 2, "torchrun --nproc-per-node 2"), (4, 2, "give --nproc-per-node 2"), (1, 1, "needs --tp 2 or more")):
        with pytest.raises(StepBenchError, match=msg):
            tp_comm_layout(_spec(root, tp=tp, seq_length=4096), kinds, tp, world)
    ds = _spec(root, "deepseek_v3.yaml", tp=2, ep=16, seq_length=4096)
    with pytest.raises(StepBenchError, match="mla attention and MoE layers: drop --tp-comm"):
        tp_comm_layout(ds, composition(ds, 2), 2, 2)
    odd = _spec(root, tp=4, seq_length=1026)
    with pytest.raises(StepBenchError, match="1026 tokens do not split over TP 4"):
        tp_comm_layout(odd, composition(odd, 1), 4, 4)
    # Column modules get their out features back, row modules their in features.
    m = q.modules
    assert full_features(m["qkv"], 2) == (8192, 10240) and full_features(m["fc2"], 2) == (29568, 8192)
    r = subprocess.run([sys.executable, "-m", "adaptive_fp8.bench.step_bench", "--model", str(root / "fixtures" / "models" / "qwen2_5_72b.yaml"),
                        "--tp", "2", "--tp-comm", "--tokens", "1024"], capture_output=True, text=True, env={k: v for k, v in __import__("os").environ.items() if k != "WORLD_SIZE"})
    assert r.returncode == 2 and "runs under torchrun" in r.stderr, r.stderr


_TP_DRIVER = """
import json, os, sys
sys.path.insert(0, {tests!r})
import torch, fake_te
from adaptive_fp8.bench import step_bench as sb
args = sb.parser().parse_args({argv!r})
torch.manual_seed(0)
out = sb.run(args, log=lambda *a, **k: None, te=fake_te, device="cpu")
rank = os.environ["RANK"]
rows = sorted({{(c[0], c[1], c[2], c[3]) for c in fake_te.calls if c[0] != "make_graphed_callables"}})
json.dump({{"out": out, "rows": rows}}, open(os.path.join({tmp!r}, "rank" + rank + ".json"), "w"))
"""


def test_tp_comm_runs_the_step_over_a_real_group_with_a_te_stand_in(tmp_path, root):
    torch_or_skip()
    import json as _json
    import os

    cfg = tmp_path / "gqa.json"
    dense = dict(TINY["gqa_moe"], architectures=["Qwen2ForCausalLM"], model_type="qwen2")
    for k in ("num_experts", "num_experts_per_tok", "moe_intermediate_size"):
        dense.pop(k)
    cfg.write_text(_json.dumps(dense))
    argv = ["--model", str(cfg), "--tp", "2", "--tp-comm", "--tokens", "64", "--layers", "2", "--steps", "1", "--repeats", "2",
            "--warmup", "1", "--oracle-repeats", "1", "--execution", "eager,graphed"]
    drv = tmp_path / "drv.py"
    drv.write_text(_TP_DRIVER.format(tests=str(root / "crates" / "py" / "tests"), argv=argv, tmp=str(tmp_path)))
    env = dict(os.environ, OMP_NUM_THREADS="1")
    r = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", str(drv)],
                       capture_output=True, text=True, env=env, timeout=240)
    assert r.returncode == 0, r.stderr[-3000:]
    ranks = [_json.loads((tmp_path / f"rank{i}.json").read_text()) for i in (0, 1)]
    out = ranks[0]["out"]
    assert out["tp_comm"] and out["complete"] and "a TP group of 2 GPUs" in sb.markdown(out)
    assert [r["execution"] for r in out["results"]] == ["eager", "graphed"] and all("error" not in r for r in out["results"])
    # Every rank saw the slowest rank's times, so both took the same oracle decisions.
    assert [r["modes"]["oracle"]["fp8_groups"] for r in out["results"]] == [r["modes"]["oracle"]["fp8_groups"] for r in ranks[1]["out"]["results"]]
    # Column modules ran on the gathered sequence (64 rows) with a rank's split of the features;
    # 32-row shards entered them (the stand-in notes rows after its gather).
    rows = {(c[0], c[1], c[2]): c[3] for c in map(tuple, ranks[1]["rows"])}
    hidden, heads, kv, hd, ffn = 128, 8, 2, 16, 256
    assert rows[("LayerNormLinear", hidden, (heads + 2 * kv) * hd // 2)] == 64
    assert rows[("Linear", heads * hd // 2, hidden)] == 64
    assert rows[("LayerNormLinear", hidden, 2 * ffn // 2)] == 64 and rows[("Linear", ffn // 2, hidden)] == 64


def test_policies_with_one_file_name_stay_apart_in_the_modes(root):
    # policies/qwen2_5_72b.json and policies/tensorwise/qwen2_5_72b.json are different policies;
    # the first H200 run of the TP 2 step named two such files `policy:qwen2_5_72b.json` and kept
    # only one.
    paths = ["policies/qwen2_5_72b.json", "policies/tensorwise/qwen2_5_72b.json", "/tmp/x/other.json"]
    assert [sb.policy_mode_name(p, paths) for p in paths] == [
        "policy:policies/qwen2_5_72b.json", "policy:tensorwise/qwen2_5_72b.json", "policy:other.json"]
    q = str(root / "fixtures" / "models" / "qwen2_5_72b.yaml")
    pols = [str(root / p) for p in paths[:2]] + [str(root / "policies" / "delayed" / "qwen2_5_72b.json")]
    args = sb.parser().parse_args(["--model", q, "--tp", "8", "--tokens", "1024", *sum((["--policy", p] for p in pols), [])])
    spec, kw = sb.spec_at(af8, args, 1024)
    _, modes, _ = sb.modes_for(af8, args, spec, composition(spec, 2), kw)
    assert len([m for m in modes if m.startswith("policy:")]) == 3


def test_every_tool_takes_the_recipe_names_of_one_list():
    from adaptive_fp8.bench import convergence, numerics, probe_host, te_tp
    from adaptive_fp8.bench.recipe_names import RECIPE_CLASSES, RECIPES
    from adaptive_fp8.bench.te_worker import recipe_spec

    def choices(ap):
        return next(a.choices for a in ap._actions if "--recipe" in a.option_strings)

    for tool in (sb, probe_host, numerics, convergence):
        assert list(choices(tool.parser())) == list(RECIPES), tool.__name__
    assert list(choices(te_tp.parser())) == [r for r in RECIPES if r != "mxfp8"]
    # Each name builds the TE class it maps to.
    assert all(recipe_spec({"recipe": r})[0] == RECIPE_CLASSES[r] for r in RECIPES)


# -- the results document: each row's verdict as measured, against the reader's schema ----------

from adaptive_fp8.bench.step_common import results_document, row_verdict  # noqa: E402
from schema_check import check as check_schema, schema as load_schema  # noqa: E402


def _mode(groups, ratio=1.0, **extra):
    return {"fp8_groups": groups, "ms_median": 10.0 * ratio, "ms_p10": 9.8 * ratio, "ms_p90": 10.2 * ratio,
            "vs_bf16_median": ratio, "vs_bf16_p10": ratio - 0.02, "vs_bf16_p90": ratio + 0.02,
            "verdict_vs_bf16": "tie", "vs_best_of_bf16_fp8": ratio, **extra}


def _row(oracle, **policies):
    modes = {"bf16": _mode([]), "fp8": _mode(["fc1", "fc2", "qkv"], 0.95), "oracle": oracle, **policies}
    return {"tokens": 3072, "execution": "eager", "modes": modes}


def test_a_reference_or_policy_faster_than_the_oracle_beyond_the_noise_is_the_verdict():
    beaten = _mode(["fc1"], vs_min_of="fp8", vs_min_median=1.02, vs_min_p10=1.011, vs_min_p90=1.031)
    assert row_verdict(_row(beaten), True) == {"fp8_groups": ["fc1", "fc2", "qkv"], "by": "fp8"}
    by_bf16 = _mode(["fc1"], vs_min_of="bf16", vs_min_median=1.03, vs_min_p10=1.02, vs_min_p90=1.04)
    assert row_verdict(_row(by_bf16), True) == {"fp8_groups": [], "by": "bf16"}
    # Within the noise (the band reaches 1), or the oracle itself the fastest: the search's.
    tie = _mode(["fc1"], vs_min_of="fp8", vs_min_median=1.01, vs_min_p10=0.992, vs_min_p90=1.045)
    assert row_verdict(_row(tie), True) == {"fp8_groups": ["fc1"], "by": "oracle"}
    # In the Megatron judge `fp8` is Megatron's global FP8: not the oracle's program.
    assert row_verdict(_row(beaten), False) == {"fp8_groups": ["fc1"], "by": "oracle"}
    # A policy measured ahead of every reference beyond the noise: the fastest such.
    oracle = _mode(["fc1"], vs_min_of="oracle", vs_min_median=1.0, vs_min_p10=1.0, vs_min_p90=1.0)
    a = _mode(["qkv"], 0.9, vs_min_of="oracle", vs_min_median=0.974, vs_min_p10=0.95, vs_min_p90=0.997)
    b = _mode(["fc1"], 0.9, vs_min_of="oracle", vs_min_median=0.970, vs_min_p10=0.94, vs_min_p90=1.004)
    assert row_verdict(_row(oracle, **{"policy:a.json": a, "policy:b.json": b}), True) == {"fp8_groups": ["qkv"], "by": "policy:a.json"}
    # No oracle (a judge run), or a failed count: no verdict.
    row = _row(oracle)
    del row["modes"]["oracle"]
    assert row_verdict(row, True) is None
    assert row_verdict({"tokens": 1024, "execution": "eager", "error": "RuntimeError: x"}, True) is None


def _results():
    header = {"model": "m.yaml", "model_name": "m", "component": "llm", "trainer": "te", "recipe": "Float8BlockScaling",
              "fp8_recipe": "blockwise", "device": "cpu", "te_version": "stand-in", "tp": 1, "layers": 2,
              "layer_types": ["dense", "dense"], "steps": 1, "repeats": 2, "execution": "eager", "grad_accum": 1,
              "oracle_repeats": 2, "notes": [], "complete": True,
              "group_keys": {"fc1": {"key": {"kind": "layernorm_column", "ub_name": "fc1", "tp": 1}, "scale": 1}}}
    oracle = _mode(["fc1"], vs_min_of="oracle", vs_min_median=1.0, vs_min_p10=1.0, vs_min_p90=1.0)
    rows = [dict(_row(oracle), oracle_trials=[{"search": "up", "group": "fc1", "ratio_median": 0.97, "ratio_p10": 0.95,
                                              "ratio_p90": 0.99, "kept": True, "pairs": 3}]),
            {"tokens": 4096, "execution": "eager", "error": "OutOfMemoryError: CUDA out of memory."}]
    return results_document(header, rows, te_blocks=True)


def test_the_results_match_the_readers_schema_and_a_planted_field_fails(root):
    schema, defs = load_schema(root, "adaptive-fp8-step-results.v1.schema.json")
    doc = _results()
    check_schema(doc, schema, defs)
    assert doc["format"] == "adaptive-fp8-step-results" and doc["results"][0]["verdict"]["by"] == "oracle"
    assert "verdict" not in doc["results"][1]
    # What settling took, as the judges record it (adaptive_fp8.bench.settle.Once.record).
    from adaptive_fp8.bench.settle import Once

    once = Once(12.0)
    once(iter([(30.0, 0.2)] * 2 + [(20.0, 0.2)] * 9).__next__, "eager at 2048")
    check_schema(dict(doc, settle_s=12.0, settled=once.record()), schema, defs)
    for plant in (lambda d: d.update(argv=["x"]), lambda d: d["results"][0]["modes"]["bf16"].update(ahead=True),
                  lambda d: d.update(settled={"at": "eager at 2048", "rounds": 3}),
                  lambda d: d["results"][0]["verdict"].update(why="x"), lambda d: d["results"][0].pop("execution")):
        d = _results()
        plant(d)
        with pytest.raises(ValueError):
            check_schema(d, schema, defs)



def test_the_te_block_judges_run_settles_once_and_records_it_without_torch(tmp_path, monkeypatch):
    """`step_bench.run` (TE blocks, no oracle), its bench a stand-in whose first rounds run slow:
    settled once before its first timed count, recorded in the results (typed), the timed rounds
    all warm."""
    import json as _json

    from adaptive_fp8.bench import step_layers
    from bench_stand_in import StandInBench

    cfg = tmp_path / "gqa.json"
    dense = dict(TINY["gqa_moe"], architectures=["Qwen2ForCausalLM"], model_type="qwen2")
    for k in ("num_experts", "num_experts_per_tok", "moe_intermediate_size"):
        dense.pop(k)
    cfg.write_text(_json.dumps(dense))
    monkeypatch.setattr(step_layers, "Bench", lambda args, te, device: StandInBench(ms=lambda n: 14.0 if n <= 6 else 10.0))
    args = sb.parser().parse_args(["--model", str(cfg), "--tokens", "64,128", "--layers", "1", "--oracle", "none", "--repeats", "3"])
    out = sb.run(args, log=lambda *a, **k: None, te=None, device="cpu")
    assert out["settle_s"] == 12.0 and out["settled"]["at"] == "eager at 64" and out["settled"]["flat"]
    assert all(m["ms_median"] == 10.0 for r in out["results"] for m in r["modes"].values()), out["results"]


def test_a_count_out_of_gpu_memory_says_what_frees_it():
    """A failed count is a result row; one that ran out of GPU memory (torch's OutOfMemoryError,
    stood in for by name) also names what frees memory in this judge, and still reads as one."""
    OutOfMemoryError = type("OutOfMemoryError", (RuntimeError,), {})
    row = sb.failed_row(2048, "graphed", OutOfMemoryError("CUDA out of memory. Tried to allocate 140.00 MiB. " + "x" * 400))
    assert row["tokens"] == 2048 and row["execution"] == "graphed"
    assert row["error"].startswith("OutOfMemoryError: CUDA out of memory.") and row["error"].endswith(sb.OOM_FIX)
    assert "--layers" in row["error"]
    from adaptive_fp8.bench.step_inputs import is_oom
    assert is_oom(row["error"])
    other = sb.failed_row(1024, "eager", RuntimeError("capture failed"))
    assert other["error"] == "RuntimeError: capture failed"
