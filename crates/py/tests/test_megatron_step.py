"""The Megatron judge's pure half: module paths to plan names, the modes, the config it builds
from a plan's architecture, and the precision check against the plan."""

from __future__ import annotations

import os
from types import SimpleNamespace as NS

import pytest

import adaptive_fp8 as af8
from adaptive_fp8.bench import megatron_step as ms
from adaptive_fp8.bench.step_bench import parser
from adaptive_fp8.bench.step_spec import StepBenchError

def test_paths_and_modes():
    assert ms.plan_name("decoder.layers.11.mlp.experts.linear_fc1") == "decoder.layers.mlp.experts.linear_fc1"
    assert ms.plan_name("mtp.layers.0.mtp_model_layer.mlp.linear_fc1") == "mtp.layers.mtp_model_layer.mlp.linear_fc1"
    names = [m[0] for m in ms.mode_names(["p/a.json"], False, ["policy:a.json"])]
    assert names == ["bf16", "fp8", "hook:a.json", "native:a.json"]
    both = [m[0] for m in ms.mode_names(["p/a.json"], True, ["policy:a.json"])]
    assert both[2:5] == ["hook:a.json", "hook:a.json@fp8", "hook:a.json@bf16"] and len(set(both)) == len(both)
    # --integration picks one: a model fewer per policy, the other integration's rows absent.
    for one in ("hook", "native"):
        a = parser().parse_args(["--model", "m.yaml", "--trainer", "megatron", "--integration", one])
        picked = ms.mode_names(["p/a.json", "p/b.json"], False, ["policy:a.json", "policy:b.json"], ms.integrations(a))
        assert [m[0] for m in picked] == ["bf16", "fp8", f"{one}:a.json", f"{one}:b.json"]
        assert {m[1] for m in picked[2:]} == {one}
    default = parser().parse_args(["--model", "m.yaml", "--trainer", "megatron"])
    assert ms.integrations(default) == ("hook", "native")

def test_config_from_a_moe_plan(root):
    p = af8._plan(root / "fixtures/models/deepseek_v3.yaml", None, dict(tp=1, ep=64, etp=1, seq_length=1024))
    kw = ms.config_kwargs(p["architecture"]["llm"], 3, 1, 4096)
    assert kw["num_layers"] == 3 and kw["moe_layer_freq"] == [0, 1, 1] and kw["num_moe_experts"] == 256
    assert kw["multi_latent_attention"] and kw["kv_lora_rank"] == 512 and kw["moe_shared_expert_intermediate_size"] == 2048
    assert kw["normalization"] == "RMSNorm" and kw["gated_linear_unit"] and kw["_vocab"] == 4096
    # The q/kv up projections as the plan has them (TELayerNormColumnParallelLinear).
    assert kw["qk_layernorm"] is True
    assert "qk_layernorm" not in ms.config_kwargs(af8._plan(root / "fixtures/models/llama3_2_1b.yaml", None, {})["architecture"]["llm"], 2, 2, 4096)

def test_config_from_an_ungated_layernorm_plan(tmp_path):
    # StarCoder2's layout: Megatron's GPTModel gets LayerNorm and no gated linear unit, so fc1
    # is as wide as the FFN, as the plan has it.
    cfg = tmp_path / "config.json"
    cfg.write_text('{"model_type": "starcoder2", "hidden_size": 512, "intermediate_size": 2048, '
                   '"num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 2}')
    kw = ms.config_kwargs(af8._plan(cfg, None, dict(tp=1, seq_length=1024))["architecture"]["llm"], 2, 0, 4096)
    assert kw["normalization"] == "LayerNorm" and kw["gated_linear_unit"] is False
    assert (kw["ffn_hidden_size"], kw["num_query_groups"]) == (2048, 2)


def test_a_tp_group_is_built_as_megatron_trains_one(root):
    # TP 1: nothing changes. TP 4: sequence parallel, and the experts' TP as the plan has it
    # (DeepSeek-V3's config pins expert_tensor_parallel_size 1 at any TP).
    assert ms.parallel_kwargs(1, 1) == {} and ms.parallel_kwargs(1, None) == {}
    p = af8._plan(root / "fixtures/models/deepseek_v3.yaml", None, dict(tp=4, seq_length=4096))
    assert ms.expert_tp(p["modules"]) == 1
    assert ms.parallel_kwargs(4, ms.expert_tp(p["modules"])) == {
        "tensor_model_parallel_size": 4, "sequence_parallel": True, "expert_tensor_parallel_size": 1}
    dense = af8._plan(root / "fixtures/models/llama3_2_1b.yaml", None, dict(tp=2, seq_length=4096))
    assert ms.expert_tp(dense["modules"]) is None
    assert ms.parallel_kwargs(2, None) == {"tensor_model_parallel_size": 2, "sequence_parallel": True}


def test_gated_attention_is_built_and_gated_delta_net_refused():
    arch = {"hidden_size": 1024, "ffn_hidden_size": 3072, "num_attention_heads": 8, "num_query_groups": 2,
            "head_dim": 128, "gated_mlp": True, "norm": "RmsNorm", "attention_output_gate": True}
    assert ms.config_kwargs(arch, 2, 2, 4096)["attention_output_gate"] is True
    assert "attention_output_gate" not in ms.config_kwargs(dict(arch, attention_output_gate=False), 2, 2, 4096)
    gdn = dict(arch, linear_attention={"full_attention_layers": 1})
    with pytest.raises(ms.StepBenchError, match="Gated DeltaNet"):
        ms.config_kwargs(gdn, 2, 2, 4096)


def test_class_check_names_a_module_built_as_another_kind(root):
    plan = af8._plan(root / "fixtures/models/deepseek_v3.yaml", None, dict(tp=1, ep=16, seq_length=1536))["modules"]
    built = {r["name"].replace("layers.", "layers.1.", 1): r["te_class"] for r in plan if r["component"] == "llm"}
    assert ms.compare_classes(built, plan) == []
    q_up = "decoder.layers.1.self_attention.linear_q_up_proj"
    bad = ms.compare_classes(dict(built, **{q_up: "TEColumnParallelLinear"}), plan)
    assert bad == [f"{q_up}: built as TEColumnParallelLinear, the plan has TELayerNormColumnParallelLinear"]

def test_a_model_built_unlike_its_plan_is_an_error_not_a_row(root):
    args = _count_args(root)
    modes = ms.mode_names(args.policy, False, ["policy:llama3_2_1b.json"])
    judge = _FakeJudge(root, "eager")
    judge.te_classes = lambda model: {"decoder.layers.0.mlp.linear_fc2": "TELinear"}
    with pytest.raises(ms.StepBenchError, match="mode bf16 .*linear_fc2: built as TELinear"):
        ms._one_count(judge, args, 4096, "eager", modes, "blockwise", [], [], log=lambda *a, **k: None)

def test_a_dropped_model_gives_its_storage_back():

    class FP8Param:  # TE's FP8 weights refuse a plain tensor as data and clear themselves
        grad = main_grad = None
        cleared = False

        @property
        def data(self):
            return "fp8"

        @data.setter
        def data(self, value):
            raise TypeError("incompatible tensor type")

        def clear(self):
            self.cleared = True

    plain, fp8 = NS(data="w", grad="g", main_grad="mg"), FP8Param()
    bucket = NS(param_data=None, grad_data="view")
    buffer = NS(grad_data="base", shared_buffer="base", buckets=[bucket])
    state, ws = {"p": "moments"}, {"weight": "fp8 copy"}
    ms.release_storage([plain, fp8], [buffer], state, [NS(_fp8_workspaces=ws), NS()], lambda p: "empty")
    assert (plain.data, plain.grad, plain.main_grad) == ("empty", None, None) and fp8.cleared
    assert buffer.grad_data is buffer.shared_buffer is bucket.grad_data is None
    assert state == {} and ws == {}

def test_precision_check_names_every_difference(root):
    plan = af8.plan(root / "fixtures/models/llama3_2_1b.yaml", root / "policies/llama3_2_1b.json", seq_length=4096)
    seen = {r["name"].replace("layers.", f"layers.{i}.", 1): r["use_fp8"] for r in plan for i in range(2)}
    assert ms.compare_precisions(seen, plan) == []
    flipped = dict(seen, **{"decoder.layers.1.mlp.linear_fc2": not seen["decoder.layers.1.mlp.linear_fc2"]})
    bad = ms.compare_precisions(flipped, plan)
    assert len(bad) == 1 and "decoder.layers.1.mlp.linear_fc2" in bad[0]
    assert ms.compare_precisions({**seen, "decoder.layers.0.extra.linear": False}, plan)[0].endswith("not in the plan")
    missing = {k: v for k, v in seen.items() if "linear_proj" not in k}
    assert ms.compare_precisions(missing, plan) == ["decoder.layers.self_attention.linear_proj: planned, not built"]

def test_recipe_check_reads_each_fp8_modules_recipe_against_the_plan(root):
    # A per-module recipe plan (fc1 tensorwise, fc2 blockwise at 7168, made by gen-policy
    # --recipes on the H200): each FP8 module must run under its own recipe.
    pol = root / "docs/device-logs/recipe_plans/gen_L1/mixed.json"
    plan = af8.plan(root / "fixtures/models/llama3_2_1b.yaml", pol, seq_length=7168, root=root)
    fp8 = [r for r in plan if r["use_fp8"]]
    assert {r["recipe"] for r in fp8} == {"tensorwise", "blockwise"}, [(r["name"], r["recipe"]) for r in plan]
    cls = {"tensorwise": "Float8CurrentScaling", "blockwise": "Float8BlockScaling"}
    ran = {r["name"].replace("layers.", f"layers.{i}.", 1): cls[r["recipe"]] for r in fp8 for i in range(2)}
    assert ms.compare_recipes(ran, plan, "blockwise") == []
    # Every module under the trainer's recipe (the per-module plan not applied): each is named.
    flat = dict.fromkeys(ran, "Float8BlockScaling")
    bad = ms.compare_recipes(flat, plan, "blockwise")
    assert bad and all("the plan says tensorwise (Float8CurrentScaling)" in b for b in bad), bad
    # A plain policy's FP8 modules run the trainer's recipe.
    plain = af8.plan(root / "fixtures/models/llama3_2_1b.yaml", root / "policies/llama3_2_1b.json", seq_length=16384)
    ran = {r["name"].replace("layers.", "layers.0.", 1): "Float8CurrentScaling" for r in plain if r["use_fp8"]}
    assert ran and ms.compare_recipes(ran, plain, "tensorwise") == []
    assert len(ms.compare_recipes(ran, plain, "blockwise")) == len(ran)
    # A module that ran FP8 with no recipe read back is named, not passed for want of a recipe.
    seen = dict.fromkeys(ran, True)
    quiet = {k: v for k, v in ran.items() if "linear_fc1" not in k}
    bad = ms.compare_recipes(quiet, plain, "tensorwise", seen)
    assert bad == ["decoder.layers.0.mlp.linear_fc1: ran FP8, no recipe read back (fp8_meta has none)"], bad
    assert ms.compare_recipes(ran, plain, "tensorwise", seen) == []


def test_the_cli_takes_the_megatron_trainer():
    a = parser().parse_args(["--model", "m.yaml", "--trainer", "megatron", "--regions", "both", "--no-fp8-param"])
    assert a.trainer == "megatron" and a.regions == "both" and a.fp8_param is False and a.vocab == 8192
    from adaptive_fp8.bench.step_bench import default_repeats

    default_repeats(a)
    assert a.repeats == 21 and a.oracle_repeats == 7
    b = parser().parse_args(["--model", "m.yaml"])
    default_repeats(b)
    assert b.trainer == "te" and b.repeats == 7 and b.oracle_repeats is None
    c = parser().parse_args(["--model", "m.yaml", "--trainer", "megatron", "--oracle-repeats", "11"])
    default_repeats(c)
    assert c.oracle_repeats == 11

def test_the_judge_prefers_expandable_segments_and_keeps_the_users_setting():
    from adaptive_fp8.bench.step_bench import ALLOC_CONF, prefer_expandable_segments

    env: dict = {}
    assert prefer_expandable_segments(env) == "expandable_segments:True" and env[ALLOC_CONF] == "expandable_segments:True"
    mine = {ALLOC_CONF: "max_split_size_mb:512"}
    assert prefer_expandable_segments(mine) == "max_split_size_mb:512"


def test_a_tp_group_runs_with_megatrons_one_hardware_queue_unless_the_user_chose():
    from adaptive_fp8._common import MAX_CONNECTIONS, megatron_tp_environment

    env: dict = {}
    assert megatron_tp_environment(env) == "1" and env[MAX_CONNECTIONS] == "1"
    assert megatron_tp_environment({MAX_CONNECTIONS: "8"}) == "8"


def test_the_allocator_is_set_before_the_megatron_judge_loads(root, monkeypatch, capsys):
    from adaptive_fp8.bench import step_bench

    monkeypatch.delenv(step_bench.ALLOC_CONF, raising=False)
    seen = []

    def run(args, progress=None):
        seen.append(os.environ.get(step_bench.ALLOC_CONF))
        raise StepBenchError("stop here")

    monkeypatch.setattr(ms, "run", run)
    rc = step_bench.main(["--model", str(root / "fixtures/models/llama3_2_1b.yaml"), "--trainer", "megatron", "--tokens", "1024"])
    assert rc == 2 and seen == ["expandable_segments:True"] and "stop here" in capsys.readouterr().err


def test_megatron_refuses_what_it_does_not_time(root, capsys):
    from adaptive_fp8.bench.step_bench import main

    rc = main(["--model", str(root / "fixtures/models/llama3_2_1b.yaml"), "--trainer", "megatron", "--tp-comm"])
    assert rc == 2 and "no --tp-comm" in capsys.readouterr().err
    # The TE blocks apply a policy one way: --integration is refused there, not ignored.
    rc = main(["--model", str(root / "fixtures/models/llama3_2_1b.yaml"), "--integration", "native"])
    err = capsys.readouterr().err
    assert rc == 2 and "--integration" in err and "fix: drop --integration, or add --trainer megatron" in err

def test_graphed_is_megatrons_local_graphs_in_the_scope_each_layer_allows():
    assert ms.graph_kwargs({"num_layers": 2}, "eager") == {}
    assert ms.graph_kwargs({"num_layers": 2}, "graphed") == {"cuda_graph_impl": "local", "cuda_graph_modules": []}
    moe = ms.graph_kwargs({"num_moe_experts": 8}, "graphed")
    assert moe == {"cuda_graph_impl": "local", "cuda_graph_modules": ["moe_router", "moe_preprocess"]}
    with pytest.raises(ms.StepBenchError, match="expected eager or graphed"):
        ms.graph_kwargs({}, "full_iteration")

class _FakeJudge:
    """The torch half's interface, recording what the orchestration asks of it; its modules
    run as ``precisions_from`` plans them."""

    ep = 1

    def __init__(self, root, precisions_from: str):
        from adaptive_fp8.bench.collector import Collector

        self.calls: list[str] = []
        self.root, self.precisions_from = root, precisions_from
        self.collector, self.collect_in_steps = Collector(), False
        self.said: list[str] = []
        self.args = None  # a test sets the judge's arguments where a build reads them

    def build(self, kw, integ, policy, region, recipe, tokens, execution):
        self.calls.append(f"build {integ} {execution}")
        if integ == "native" and self.args is not None and self.args.native_fp8_weights == "clear":
            self.said.append("config.fp8_param cleared: (as apply_te_precision_config notes it)")
        return {"integ": integ, "policy": policy, "tokens": tokens}, "fp8"

    def step_fn(self, model, tokens, vocab, grad_accum=1, execution="eager"):
        calls = self.calls

        def step():
            calls.append(f"step {model['integ']}")
            step.losses.append(2.5)

        step.losses = []
        return step

    def capture_graphs(self):
        self.calls.append("capture")

    def precisions(self, model):
        if model["policy"] is None:
            return {}
        plan = af8._plan(self.root / "fixtures/models/llama3_2_1b.yaml", model["policy"],
                         dict(tp=1, seq_length=model["tokens"], execution=self.precisions_from))["modules"]
        return {m["name"].replace("layers.", f"layers.{i}.", 1): m["use_fp8"] for m in plan for i in range(2)}

    stale: tuple = ()  # what the look for stale FP8 weights finds in native models
    look_fails = ""  # why the look cannot be made, where a test says so

    def fp8_weight_freshness(self, model, step):
        from adaptive_fp8.bench.fp8_weights import Freshness

        if self.look_fails:
            return self.look_fails

        fp8 = sum(self.precisions(model).values())
        return Freshness(cached=fp8, stale=list(self.stale) if model["integ"] == "native" else [])

    def recipes(self, model):
        # Every FP8 module under the trainer's recipe (the policies here have no recipe plan).
        return {k: "Float8BlockScaling" for k, on in self.precisions(model).items() if on}

    def formats(self, model):
        return {k: "E4M3" for k, on in self.precisions(model).items() if on}

    def te_classes(self, model):
        plan = af8._plan(self.root / "fixtures/models/llama3_2_1b.yaml", None, dict(tp=1, seq_length=model["tokens"]))["modules"]
        return {m["name"].replace("layers.", f"layers.{i}.", 1): m["te_class"] for m in plan for i in range(2)}

    def drop(self, step):
        self.calls.append("drop")

    def time_ms(self, step, steps):
        with self.collector:  # as the judge's: a full collection inside a timed step, where asked
            step()
            if self.collect_in_steps:
                __import__("gc").collect()
        return 10.0

def _count_args(root, **kw):
    a = parser().parse_args(["--model", str(root / "fixtures/models/llama3_2_1b.yaml"), "--trainer", "megatron",
                             "--layers", "2", "--warmup", "2", "--repeats", "3", "--policy", str(root / "policies/llama3_2_1b.json")])
    for k, v in kw.items():
        setattr(a, k, v)
    return a

def test_graphed_counts_record_every_model_then_capture_once_then_warm_up(root):
    args = _count_args(root)
    modes = ms.mode_names(args.policy, False, ["policy:llama3_2_1b.json"])
    judge, notes, checks = _FakeJudge(root, "graphed"), [], []
    judge.args = args
    row = ms._one_count(judge, args, 4096, "graphed", modes, "blockwise", notes, checks, log=lambda *a, **k: None)
    # What the native build noted is the results' note, named by its mode (once a count).
    assert [n for n in notes if "fp8_param" in n] == ["native:llama3_2_1b.json: config.fp8_param cleared: (as apply_te_precision_config notes it)"]
    assert judge.said == []
    first = judge.calls.index("capture")
    assert judge.calls[:first] == [x for m in ("bf16", "fp8", "hook", "native") for x in (f"build {m} graphed", f"step {m}")]
    assert judge.calls.count("capture") == 1 and all(c.startswith("step") for c in judge.calls[first + 1:])
    assert row["execution"] == "graphed" and set(row["modes"]) == {"bf16", "fp8", "hook:llama3_2_1b.json", "native:llama3_2_1b.json"}
    # The policy's graphed thresholds decided: checked against the graphed plan, which differs
    # from the eager one at this count.
    assert [c["execution"] for c in checks] == ["graphed", "graphed"] and checks[0]["mismatches"] == []
    assert checks[0]["fp8_modules"] > 0
    # The recipes read back, counted: every FP8 module under the trainer's here.
    assert checks[0]["recipes"] == {"Float8BlockScaling": checks[0]["fp8_modules"]}
    # Full collections inside the timed rounds are noted, once per count (4 modes x 3 rounds).
    assert not any("garbage collector" in n for n in notes)
    judge.collect_in_steps = True
    ms._one_count(judge, args, 4096, "graphed", modes, "blockwise", notes, checks, log=lambda *a, **k: None)
    assert [n for n in notes if "garbage collector" in n] == [n for n in notes if n.startswith("graphed at 4096: Python's garbage collector ran 12 full")]
    assert sum("garbage collector" in n for n in notes) == 1

def test_eager_counts_check_against_the_eager_plan(root):
    args = _count_args(root)
    modes = ms.mode_names(args.policy, False, ["policy:llama3_2_1b.json"])
    judge = _FakeJudge(root, "graphed")  # runs the graphed decisions in an eager step
    with pytest.raises(ms.StepBenchError, match="precisions differ from the plan"):
        ms._one_count(judge, args, 4096, "eager", modes, "blockwise", [], [], log=lambda *a, **k: None)
    assert "capture" not in judge.calls

def test_a_module_under_another_recipe_than_the_plan_stops_the_count(root):
    class OtherRecipe(_FakeJudge):
        def recipes(self, model):
            return {k: "Float8CurrentScaling" for k, on in self.precisions(model).items() if on}

    args = _count_args(root)
    modes = ms.mode_names(args.policy, False, ["policy:llama3_2_1b.json"])
    judge = OtherRecipe(root, "eager")
    with pytest.raises(ms.StepBenchError, match="recipes differ from the plan: .*ran Float8CurrentScaling, the plan says blockwise"):
        ms._one_count(judge, args, 16384, "eager", modes, "blockwise", [], [], log=lambda *a, **k: None)


def test_a_module_in_another_fp8_format_than_the_run_stops_the_count(root):
    # The judge must run the format the policy was measured in (the TE blocks' --fp8-format).
    class Hybrid(_FakeJudge):
        def formats(self, model):
            return {k: "HYBRID" for k, on in self.precisions(model).items() if on}

    args = _count_args(root)
    modes = ms.mode_names(args.policy, False, ["policy:llama3_2_1b.json"])
    with pytest.raises(ms.StepBenchError, match="recipes differ from the plan: .*ran fp8_format HYBRID, the run asks for E4M3"):
        ms._one_count(Hybrid(root, "eager"), args, 16384, "eager", modes, "blockwise", [], [], log=lambda *a, **k: None)
    assert ms.compare_formats({"a": "HYBRID", "b": "E4M3"}, "hybrid") == ["b: ran fp8_format E4M3, the run asks for HYBRID"]
    assert ms.compare_formats({}, "e4m3") == []
    # A module under its own recipe (a per-module recipe plan) runs that recipe's format.
    own = [{"name": "decoder.layers.mlp.linear_fc1", "recipe": "blockwise"}, {"name": "decoder.layers.mlp.linear_fc2"}]
    ran = {"decoder.layers.0.mlp.linear_fc1": "E4M3", "decoder.layers.0.mlp.linear_fc2": "E4M3"}
    assert ms.compare_formats(ran, "hybrid", own) == ["decoder.layers.0.mlp.linear_fc2: ran fp8_format E4M3, the run asks for HYBRID"]


def test_megatrons_recipe_subclass_is_read_as_tes_recipe():
    # Megatron builds delayed scaling as TEDelayedScaling(DelayedScaling): on the H100 (TE 2.20.2,
    # megatron-core 0.19.2) the judge stopped a delayed policy's count on that name.
    from enum import Enum

    from adaptive_fp8.bench.recipe_names import recipe_format, te_recipe_class

    class Format(Enum):
        E4M3 = 1
        HYBRID = 2

    class DelayedScaling:
        fp8_format = Format.HYBRID

    class TEDelayedScaling(DelayedScaling):
        pass

    class Mine:
        pass

    assert te_recipe_class(TEDelayedScaling()) == "DelayedScaling"
    assert te_recipe_class(DelayedScaling()) == "DelayedScaling"
    assert te_recipe_class(Mine()) == "Mine"  # not TE's: the check names it
    assert recipe_format(TEDelayedScaling()) == "HYBRID" and recipe_format(Mine()) is None
    assert ms.compare_recipes({"decoder.layers.0.mlp.linear_fc1": te_recipe_class(TEDelayedScaling())},
                              [{"name": "decoder.layers.mlp.linear_fc1", "component": "llm", "use_fp8": True}], "delayed") == []


def test_an_fp8_module_with_no_recipe_read_back_stops_the_count(root):
    class Silent(_FakeJudge):
        def recipes(self, model):
            return {}

    args = _count_args(root)
    modes = ms.mode_names(args.policy, False, ["policy:llama3_2_1b.json"])
    with pytest.raises(ms.StepBenchError, match="recipes differ from the plan: .*no recipe read back"):
        ms._one_count(Silent(root, "eager"), args, 16384, "eager", modes, "blockwise", [], [], log=lambda *a, **k: None)


def test_group_keys_for_merge_policy_step(root):
    from adaptive_fp8.bench.step_spec import group_keys

    p = af8._plan(root / "fixtures/models/deepseek_v3.yaml", None, dict(tp=8, ep=64, etp=1, seq_length=1024))
    keys = group_keys(p["modules"], "llm", p["architecture"]["llm"])
    # Dense fc2 and the shared experts' fc2 share one key; experts compare routed tokens (top-8).
    assert keys["fc2"]["key"] == keys["shared.fc2"]["key"] == {"kind": "row", "ub_name": "fc2", "tp": 8}
    assert keys["experts.fc1"] == {"key": {"kind": "column_grouped", "etp": 1, "num_gemms": 4}, "scale": 8}
    assert keys["q_down_proj"]["scale"] == 1 and "mtp" not in "".join(keys)

def test_the_step_backend_command_line_parses():
    # What `fp8sel gen-policy --backend step` runs (crates/pipeline/src/step.rs asserts the same
    # line): the real worker must take it.
    argv = ("--model m.yaml --tp 2 --ep 8 --etp 1 --tokens 1024,4096 --execution eager,graphed "
            "--grad-accum 8 --trainer te --layers 2 --recipe blockwise --json r.json --config-root configs").split()
    a = parser().parse_args(argv)
    assert (a.tp, a.ep, a.etp, a.tokens, a.execution, a.grad_accum, a.trainer, a.layers) == (2, 8, 1, [1024, 4096], ["eager", "graphed"], 8, "te", 2)

def test_each_step_re_arms_the_fp8_weight_cache_as_megatrons_schedule_does():
    from types import SimpleNamespace

    from adaptive_fp8.bench.megatron_step import first_microbatch

    calls = []
    model = SimpleNamespace(set_is_first_microbatch=lambda: calls.append(1))
    first_microbatch(model)
    first_microbatch(model)
    assert calls == [1, 1]
    first_microbatch(object())  # a model without the method (plain TE) is left alone

def test_both_judges_report_a_mode_with_the_same_fields():
    from adaptive_fp8.bench import megatron_step
    from adaptive_fp8.bench.step_common import mode_stats

    base = [10.0, 10.0, 12.0, 10.0, 10.0]
    fp8 = [8.0, 8.0, 9.6, 8.0, 8.0]
    s = mode_stats(fp8, base, best=8.0, fp8_groups=["a"], baseline=False)
    assert s["vs_bf16_median"] == pytest.approx(0.8) and s["verdict_vs_bf16"] == "faster"
    assert s["ms_median"] == 8.0 and s["vs_best_of_bf16_fp8"] == pytest.approx(1.0)
    assert mode_stats(base, base, 8.0, [], baseline=True)["verdict_vs_bf16"] == "-"
    row = megatron_step.summarize_modes(4096, {"bf16": [], "fp8": ["a"]}, {"bf16": base, "fp8": fp8})
    assert row["execution"] == "eager" and {k: v for k, v in row["modes"]["fp8"].items() if not k.startswith("vs_min")} == s
    assert megatron_step.summarize_modes(4096, {"bf16": [], "fp8": ["a"]}, {"bf16": base, "fp8": fp8}, "graphed")["execution"] == "graphed"
    assert row["modes"]["bf16"]["vs_bf16_median"] == 1.0 and row["modes"]["bf16"]["vs_best_of_bf16_fp8"] == pytest.approx(1.25)

def test_the_minimum_is_the_fastest_reference_paired_by_round():
    from adaptive_fp8.bench import megatron_step

    # Round 3 is slow for every mode (host noise): paired, it cancels; the oracle is fastest.
    times = {
        "bf16": [10.0, 10.0, 15.0, 10.0, 10.0],
        "fp8": [11.0, 11.0, 16.5, 11.0, 11.0],
        "oracle": [9.0, 9.0, 13.5, 9.0, 9.0],
        "hook:p.json": [9.9, 9.9, 14.85, 9.9, 9.9],
    }
    groups = {"bf16": [], "fp8": ["a", "b"], "oracle": ["a"], "hook:p.json": []}
    row = megatron_step.summarize_modes(3072, groups, times, "graphed")
    hook = row["modes"]["hook:p.json"]
    assert hook["vs_min_of"] == "oracle"
    assert hook["vs_min_median"] == pytest.approx(1.1) and hook["vs_min_p10"] == pytest.approx(1.1) and hook["vs_min_p90"] == pytest.approx(1.1)
    assert row["modes"]["oracle"]["vs_min_median"] == pytest.approx(1.0)
    # Without an oracle the minimum is the faster of BF16 and all-FP8.
    del times["oracle"], groups["oracle"]
    assert megatron_step.summarize_modes(3072, groups, times)["modes"]["hook:p.json"]["vs_min_of"] == "bf16"


def test_a_release_frees_every_model_built_since_the_last():
    from types import SimpleNamespace as NS

    class Step:  # what Judge.step_fn returns: the step's model (or DDP wrapper) and optimizer
        def __init__(self, name):
            self.param = NS(data=name, grad="g", dtype=None, device=None)
            self.keep = NS(parameters=lambda: [self.param], modules=lambda: [])
            self.opt = NS(state={"moments": name})

    calls = []
    judge = object.__new__(ms.Judge)  # the torch half without torch: a stand-in module
    judge.torch = NS(empty=lambda n, dtype, device: "empty", cuda=NS(empty_cache=lambda: calls.append("empty_cache")))
    a, b = Step("a"), Step("b")
    judge.live = [a, b]
    judge.drop(a)  # an eager candidate the oracle gave up
    assert a.param.data == "empty" and a.opt.state == {} and judge.live == [b] and b.param.data == "b"
    judge.release_graphs("eager")  # the end of a count: the rest
    assert b.param.data == "empty" and b.param.grad is None and judge.live == [] and calls == ["empty_cache"]


def test_the_judge_reads_precision_and_class_of_te_modules_only():
    TELinear = type("TELinear", (), {"fp8": True})
    model = type("Model", (), {"named_modules": lambda self: [("a", TELinear()), ("b", object())]})()
    judge = object.__new__(ms.Judge)
    assert judge.precisions(model) == {"a": True} and judge.te_classes(model) == {"a": "TELinear"}


def test_a_graphed_release_deletes_megatrons_graphs_before_freeing_the_models(monkeypatch):
    # Megatron's own delete, pool and all: keeping its pool for the next captures broke the
    # second capture on the H200 (tried on the H200).
    import sys

    calls = []
    pool = NS(global_mempool=(0, 1))

    def delete_cuda_graphs():
        calls.append("delete")
        pool.global_mempool = None

    graphs = NS(delete_cuda_graphs=delete_cuda_graphs, CudaGraphManager=pool)
    transformer = NS(cuda_graphs=graphs)
    for name, mod in {
        "megatron": NS(core=NS(transformer=transformer)),
        "megatron.core": NS(transformer=transformer),
        "megatron.core.transformer": transformer,
        "megatron.core.transformer.cuda_graphs": graphs,
    }.items():
        monkeypatch.setitem(sys.modules, name, mod)
    monkeypatch.delenv("AF8_POOL_PROBE", raising=False)
    judge = object.__new__(ms.Judge)
    judge.torch = NS(cuda=NS(empty_cache=lambda: calls.append("empty_cache")))
    judge.live = []
    judge.release_graphs("graphed")
    assert calls == ["delete", "empty_cache"] and pool.global_mempool is None


def test_the_recipe_each_fp8_module_ran_is_read_from_te():
    """`Judge.recipes`: TE's `fp8_meta["recipe"]` of each module that ran FP8, by class name."""

    class Float8CurrentScaling:
        pass

    class Float8BlockScaling:
        pass

    def te(name, fp8, recipe):
        cls = type(sorted(ms.TE_CLASSES)[0], (), {})
        m = cls()
        m.fp8, m.fp8_meta = fp8, {"recipe": recipe} if recipe is not None else {}
        return name, m

    mods = [te("a.linear_fc1", True, Float8CurrentScaling()), te("a.linear_fc2", True, Float8BlockScaling()),
            te("a.linear_qkv", False, Float8BlockScaling()), te("a.linear_proj", True, None)]
    model = NS(named_modules=lambda: mods)
    judge = object.__new__(ms.Judge)
    assert judge.recipes(model) == {"a.linear_fc1": "Float8CurrentScaling", "a.linear_fc2": "Float8BlockScaling"}


def test_a_count_out_of_gpu_memory_says_what_frees_it_in_each_judge():
    """Each judge's out-of-memory row names what frees memory there, in flags its command takes:
    the Megatron judge builds a count's models for that count, so fewer counts per run free
    nothing there, and fewer modes do."""
    import re

    from adaptive_fp8.bench import step_bench as sb

    known = {o for a in sb.parser()._actions for o in a.option_strings}
    OutOfMemoryError = type("OutOfMemoryError", (RuntimeError,), {})
    for fix in (sb.OOM_FIX, ms.MEGATRON_OOM_FIX):
        named = re.findall(r"--[a-z][a-z-]*", fix)
        assert named and set(named) <= known, (fix, set(named) - known)
        row = sb.failed_row(6144, "graphed", OutOfMemoryError("CUDA out of memory."), fix)
        assert row["error"] == f"OutOfMemoryError: CUDA out of memory.; {fix}"
    assert "--policy" in ms.MEGATRON_OOM_FIX and "--tokens" not in ms.MEGATRON_OOM_FIX


def test_the_judges_fp8_fields_are_the_recipe_the_te_blocks_run():
    """The Megatron judge's TransformerConfig takes the run's format and delayed scaling's amax
    options (TE's defaults where none are given, as the TE blocks): the same recipe in both."""
    args = lambda *a: parser().parse_args(["--model", "m.yaml", "--trainer", "megatron", *a])
    assert ms.precision_kwargs(args(), "bf16", "blockwise") == {}
    # Weights as Megatron trains by default (BF16); FP8 ones where asked, by Megatron's flag too.
    assert ms.precision_kwargs(args(), "fp8", "blockwise") == {"fp8": "e4m3", "fp8_recipe": "blockwise", "fp8_param": False}
    for flag in ("--fp8-param", "--fp8-param-gather"):
        assert ms.precision_kwargs(args(flag), "fp8", "blockwise")["fp8_param"] is True
    assert ms.precision_kwargs(args("--fp8-param", "--no-fp8-param"), "fp8", "blockwise")["fp8_param"] is False
    tw = ms.precision_kwargs(args("--recipe", "tensorwise", "--fp8-format", "hybrid"), "hook", "tensorwise")
    assert tw["fp8"] == "hybrid" and "fp8_amax_history_len" not in tw
    dl = ms.precision_kwargs(args("--recipe", "delayed"), "fp8", "delayed")
    assert (dl["fp8"], dl["fp8_amax_history_len"], dl["fp8_amax_compute_algo"]) == ("hybrid", 1024, "max")
    dl = ms.precision_kwargs(args("--recipe", "delayed", "--fp8-amax-history-len", "1", "--fp8-amax-compute-algo", "most_recent"), "fp8", "delayed")
    assert (dl["fp8_amax_history_len"], dl["fp8_amax_compute_algo"]) == (1, "most_recent")
    assert ms.precision_kwargs(args("--recipe", "nvfp4"), "fp8", "nvfp4")["fp4_recipe"] == "nvfp4"

