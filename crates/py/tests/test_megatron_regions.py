"""`enable()` and `apply_te_precision_config()` choose the launch region from the plan, against
stand-ins for megatron-core and Transformer Engine (no torch needed): a plan with no FP8 module
is the BF16 model (config.fp8 cleared, modules untouched), FP8 dense modules enter FP8
themselves, FP8 experts keep the global region."""

from __future__ import annotations

import contextlib
import json
import sys
import types
from types import SimpleNamespace

import pytest

import adaptive_fp8.megatron as af8m

POLICY = {
    "version": 1,
    "speedup_threshold": 1.0,
    "rules": {
        "layernorm_column": {"qkv": [{"tp": 1, "min_tokens": 1024}], "fc1": [{"tp": 1, "min_tokens": 1 << 30}]},
        "row": {"proj": [{"tp": 1, "min_tokens": 1024}], "fc2": [{"tp": 1, "min_tokens": 1 << 30}]},
        "column_grouped": [{"etp": 1, "num_gemms": 8, "min_tokens": 8192}],
        "row_grouped": [{"etp": 1, "num_gemms": 8, "min_tokens": 8192}],
    },
}


@pytest.fixture()
def stand_ins(monkeypatch):
    """megatron.core (0.19) with the six TE wrappers, fp8_utils, parallel_state and the
    quantization config; transformer_engine.pytorch with its two contexts. Records contexts."""
    state = {"autocast": [], "init": []}

    @contextlib.contextmanager
    def autocast(enabled=True, calibrating=False, recipe=None, amax_reduction_group=None):
        state["autocast"].append((enabled, recipe))
        yield

    @contextlib.contextmanager
    def quantized_model_init(enabled=False, recipe=None):
        state["init"].append(enabled)
        yield

    te = types.ModuleType("transformer_engine")
    tep = types.ModuleType("transformer_engine.pytorch")
    tep.autocast, tep.quantized_model_init = autocast, quantized_model_init
    te.pytorch = tep

    class Wrapper:
        def __init__(self, *args, **kwargs):
            self.args, self.kwargs = args, kwargs
            self.is_first_microbatch, self.cache_flags = True, []

        def forward(self, x):
            # Megatron's TE wrappers hand the weight-cache flag to TE, then clear it.
            self.cache_flags.append(self.is_first_microbatch)
            self.is_first_microbatch = False
            return x

    mte = types.ModuleType("megatron.core.extensions.transformer_engine")
    mte.HAVE_TE = True
    for name in af8m.WRAPPED_CLASSES:
        setattr(mte, name, type(name, (Wrapper,), {}))

    class RecipeConfig:
        @staticmethod
        def from_config_dict(d):
            return SimpleNamespace(content=d)

    # torch's global optimizer-step hook, which the BF16 region's FP8 modules count steps by.
    optim = types.ModuleType("torch.optim.optimizer")
    optim.register_optimizer_step_post_hook = state.setdefault("step_hooks", []).append
    mods = {
        "torch": types.ModuleType("torch"),
        "torch.optim": types.ModuleType("torch.optim"),
        "torch.optim.optimizer": optim,
        "transformer_engine": te,
        "transformer_engine.pytorch": tep,
        "megatron": types.ModuleType("megatron"),
        "megatron.core": types.ModuleType("megatron.core"),
        "megatron.core.extensions": types.ModuleType("megatron.core.extensions"),
        "megatron.core.extensions.transformer_engine": mte,
        "megatron.core.fp8_utils": types.ModuleType("megatron.core.fp8_utils"),
        "megatron.core.parallel_state": types.ModuleType("megatron.core.parallel_state"),
        "megatron.core.quantization": types.ModuleType("megatron.core.quantization"),
        "megatron.core.quantization.quant_config": types.ModuleType("megatron.core.quantization.quant_config"),
    }
    mods["megatron.core"].__version__ = "0.19.2"
    mods["megatron.core"].parallel_state = mods["megatron.core.parallel_state"]
    mods["megatron.core.fp8_utils"].get_fp8_recipe = lambda c: f"recipe:{c.fp8_recipe}:{c.fp8}"
    mods["megatron.core.parallel_state"].model_parallel_is_initialized = lambda: False
    mods["megatron.core.quantization.quant_config"].RecipeConfig = RecipeConfig
    for k, v in mods.items():
        monkeypatch.setitem(sys.modules, k, v)
    af8m._said.clear()
    monkeypatch.setattr(af8m, "_steps_taken", None)
    yield SimpleNamespace(mte=mte, state=state)
    af8m.disable()


def config(tmp_path, **kw):
    f = tmp_path / "policy.json"
    f.write_text(json.dumps(POLICY))
    base = dict(
        num_layers=2, hidden_size=1024, num_attention_heads=8, ffn_hidden_size=4096, num_query_groups=8,
        kv_channels=128, gated_linear_unit=True, normalization="RMSNorm", tensor_model_parallel_size=1,
        expert_model_parallel_size=1, expert_tensor_parallel_size=1, context_parallel_size=1,
        sequence_parallel=False, seq_length=4096, micro_batch_size=1, fp8="e4m3", fp8_recipe="blockwise",
        fp8_param=True, fp8_dynamic_policy_path=str(f), moe_router_topk=None, num_moe_experts=None,
        moe_ffn_hidden_size=None, moe_layer_freq=None,
    )
    base.update(kw)
    return SimpleNamespace(**base)


def moe(tmp_path, **kw):
    return config(tmp_path, num_moe_experts=8, moe_ffn_hidden_size=512, moe_router_topk=2, moe_layer_freq=1, **kw)


def build_dense(mte):
    qkv = mte.TELayerNormColumnParallelLinear(1024, 3072, tp_comm_buffer_name="qkv")
    fc1 = mte.TELayerNormColumnParallelLinear(1024, 8192, tp_comm_buffer_name="fc1")
    return qkv, fc1


def test_no_fp8_module_is_the_bf16_model(stand_ins, tmp_path):
    c = config(tmp_path, seq_length=512)  # below every threshold
    plan = af8m.enable(c)
    assert plan.region == "bf16" and c.fp8 is None and c.fp8_param is False
    assert "no module runs FP8" in str(plan)
    qkv, fc1 = build_dense(stand_ins.mte)
    # Nothing wraps the modules: their forward is the class's, and no context was entered.
    assert "forward" not in vars(qkv) and "forward" not in vars(fc1)
    assert stand_ins.state["init"] == [] and [r["fp8"] for r in plan.rows] == [False, False]


def test_dense_fp8_modules_enter_fp8_themselves(stand_ins, tmp_path):
    c = config(tmp_path)
    plan = af8m.enable(c)
    assert plan.region == "bf16" and c.fp8 is None
    qkv, fc1 = build_dense(stand_ins.mte)
    assert [r["fp8"] for r in plan.rows] == [True, False]
    assert qkv._selective_fp8_enabled and "forward" not in vars(fc1)
    # Megatron re-arms the FP8 weight cache each step only under config.fp8, which this region
    # cleared: eager, the module keeps its cache and re-arms it itself after each optimizer step.
    assert getattr(qkv, "disable_parameter_transpose_cache", False) is False
    hooks = stand_ins.state["step_hooks"]
    assert len(hooks) == 1  # torch's global optimizer-step hook, registered once
    qkv.forward(1), qkv.forward(1)  # two micro-batches: quantize the weights once, then reuse
    hooks[0](None, (), {})  # optimizer.step()
    qkv.forward(1), qkv.forward(1)
    assert qkv.cache_flags == [True, False, True, False]
    # The trainer's recipe, read before config.fp8 was cleared.
    assert stand_ins.state["autocast"][0] == (True, "recipe:blockwise:e4m3")
    # Graphed, replays skip the wrapper: the FP8 region, whose graphs re-arm the weight cache
    # each step (Megatron's skip flag); the BF16 module leaves it, the FP8 one runs in it.
    c = config(tmp_path, cuda_graph_impl="local")
    plan = af8m.enable(c)
    assert plan.region == "fp8" and c.fp8 == "e4m3" and "CUDA-graphed" in plan.notes[0]
    qkv, fc1 = build_dense(stand_ins.mte)
    assert "forward" not in vars(qkv) and fc1._selective_fp8_disabled
    af8m.disable()
    # Forced, the BF16 region is allowed there (a choice of speed): the FP8 module quantizes its
    # weights in every forward, its cache off.
    plan = af8m.enable(config(tmp_path, cuda_graph_impl="local"), region="bf16")
    assert plan.region == "bf16" and "region bf16 asked for" in str(plan)
    qkv, fc1 = build_dense(stand_ins.mte)
    assert qkv.disable_parameter_transpose_cache is True
    af8m.disable()
    # An MoE model graphed with BF16 experts keeps the BF16 region (no FP8 padding of its
    # experts): its FP8 modules quantize their own weights. Native would need the FP8 region
    # there, which pads the BF16 experts: its config writes every module BF16 instead, and says so.
    c = moe(tmp_path, seq_length=2048, cuda_graph_impl="local")
    plan = af8m.enable(c)
    assert plan.region == "bf16" and c.fp8 is None
    qkv, fc1 = build_dense(stand_ins.mte)
    assert qkv.disable_parameter_transpose_cache is True
    af8m.disable()
    c = moe(tmp_path, seq_length=2048, cuda_graph_impl="local", fp8_param=False)
    with pytest.warns(UserWarning, match="written BF16: .*pads the BF16 routed experts"):
        native = af8m.apply_te_precision_config(c)
    assert native.region == "bf16" and native.fp8_instances == 0 and c.fp8 is None
    assert "written BF16" in native.notes[0]
    assert all(m["config"] == "bf16" for m in native.config["matchers"].values())


def test_fp8_experts_keep_the_global_region(stand_ins, tmp_path):
    c = moe(tmp_path)  # 4096 x topk 2 = 8192 tokens: experts FP8
    plan = af8m.enable(c)
    assert plan.region == "fp8" and c.fp8 == "e4m3" and "routed experts" in plan.notes[0]
    mte = stand_ins.mte
    fc1 = mte.TELayerNormColumnParallelLinear(1024, 8192, tp_comm_buffer_name="fc1")
    exp = mte.TEColumnParallelGroupedLinear(8, 1024, 1024, tp_comm_buffer_name="fc1", is_expert=True)
    assert [r["fp8"] for r in plan.rows] == [False, True]
    assert fc1._selective_fp8_disabled and stand_ins.state["init"] == [False]
    fc1.forward(1)
    assert stand_ins.state["autocast"] == [(False, None)]
    assert "forward" not in vars(exp)
    # A BF16 region with FP8 experts would run them unpadded: refused.
    with pytest.raises(ValueError, match="global FP8 region"):
        af8m.enable(moe(tmp_path), region="bf16")


def test_a_forced_region_and_delayed_scaling(stand_ins, tmp_path):
    c = config(tmp_path)
    assert af8m.enable(c, region="fp8").region == "fp8" and c.fp8 == "e4m3"
    c = config(tmp_path, fp8_recipe="delayed")
    plan = af8m.enable(c)
    assert plan.region == "fp8" and "delayed" in plan.notes[0]
    with pytest.raises(ValueError, match="region"):
        af8m.enable(config(tmp_path), region="sideways")


def test_an_expert_decided_fp8_in_the_bf16_region_is_an_error(stand_ins, tmp_path):
    # The config says dense (no experts), but the model builds FP8 experts: the prediction was wrong.
    c = config(tmp_path, moe_router_topk=2)
    assert af8m.enable(c).region == "bf16"
    with pytest.raises(RuntimeError, match="pads expert tokens"):
        stand_ins.mte.TEColumnParallelGroupedLinear(8, 1024, 1024, tp_comm_buffer_name="fc1", is_expert=True)


def test_native_config_on_a_transformer_config(stand_ins, tmp_path):
    c = config(tmp_path)
    n = af8m.apply_te_precision_config(c)
    assert n.region == "bf16" and c.fp8 is None and n.fp8_instances == 4
    m = c.quant_recipe.content["matchers"]
    assert m["self_attention_linear_qkv"]["config"] == "fp8" and m["mlp_linear_fc1"]["config"] == "bf16"
    assert list(m)[-1] == "default"
    c = moe(tmp_path)
    n = af8m.apply_te_precision_config(c)
    assert n.region == "fp8" and c.fp8 == "e4m3"
    assert c.quant_recipe.content["matchers"]["mlp_experts_linear_fc1"]["config"] == "fp8"
    with pytest.raises(Exception, match="delayed"):
        af8m.apply_te_precision_config(config(tmp_path, fp8_recipe="delayed"))


def test_native_config_in_graphed_steps_keeps_the_fp8_region(stand_ins, tmp_path):
    # Dense FP8 modules, CUDA-graphed: megatron-core's graphs re-quantize cached FP8 weights only
    # under config.fp8, so the native config keeps the global region (eager clears it, above).
    c = config(tmp_path, cuda_graph_impl="local", fp8_param=False)
    n = af8m.apply_te_precision_config(c)
    assert n.region == "fp8" and c.fp8 == "e4m3" and n.fp8_instances == 4 and n.notes == []
    assert c.quant_recipe.content["matchers"]["mlp_linear_fc1"]["config"] == "bf16"
    # Forcing the BF16 region there would train on the captured step's FP8 weights: refused.
    with pytest.raises(ValueError, match="region bf16: .*CUDA-graphed.*every replay reuses"):
        af8m.apply_te_precision_config(config(tmp_path, cuda_graph_impl="local"), region="bf16")
    # A config launched without --fp8-format cannot hold that region: refused, naming the flags.
    with pytest.raises(ValueError, match=r"config.fp8 is unset.*--fp8-format e4m3 --fp8-recipe blockwise"):
        af8m.apply_te_precision_config(config(tmp_path, cuda_graph_impl="local", fp8=None))
    # With no FP8 module at the count, graphed or not, it is the BF16 model.
    n = af8m.apply_te_precision_config(config(tmp_path, cuda_graph_impl="local", seq_length=512))
    assert n.region == "bf16" and n.fp8_instances == 0


def test_native_fp8_region_with_fp8_weights_names_the_bf16_modules(stand_ins, tmp_path):
    # qkv BF16 at every count, routed experts FP8 at 4096 x 2: the FP8 region with a BF16 group.
    c = moe(tmp_path)
    pol = json.loads(json.dumps(POLICY))
    pol["rules"]["layernorm_column"]["qkv"][0]["min_tokens"] = 1 << 30
    (tmp_path / "qkv_bf16.json").write_text(json.dumps(pol))
    c.fp8_dynamic_policy_path = str(tmp_path / "qkv_bf16.json")
    with pytest.warns(UserWarning, match="dequantize"):
        n = af8m.apply_te_precision_config(c)
    assert n.region == "fp8" and len(n.notes) == 1
    assert "self_attention_linear_qkv" in n.notes[0] and "adaptive_fp8.megatron.enable" in n.notes[0]
    assert "note: config.fp8_param" in str(n)
    # Cleared on request, as fp8sel te-precision-config launches it: a note, no warning.
    c2 = moe(tmp_path)
    c2.fp8_dynamic_policy_path = c.fp8_dynamic_policy_path
    n2 = af8m.apply_te_precision_config(c2, fp8_weights="clear")
    assert c2.fp8_param is False and len(n2.notes) == 1 and "fp8_param cleared" in n2.notes[0]
    assert "self_attention_linear_qkv" in n2.notes[0] and n2.region == "fp8"
    c3 = moe(tmp_path)  # no BF16 group in the region: the FP8 weights stay
    assert af8m.apply_te_precision_config(c3, fp8_weights="clear").notes == [] and c3.fp8_param is True
    with pytest.raises(ValueError, match="fp8_weights 'drop': use keep or clear"):
        af8m.apply_te_precision_config(moe(tmp_path), fp8_weights="drop")
    # Without FP8 weights, or with no BF16 group in the region, there is nothing to say.
    c.fp8_param = False
    assert af8m.apply_te_precision_config(c).notes == []
    assert af8m.apply_te_precision_config(moe(tmp_path)).notes == []


def test_megatron_fields_carry_gated_delta_net(tmp_path):
    # A TransformerConfig with the gated_delta_net variant plans its linear-attention layers.
    c = config(tmp_path, experimental_attention_variant=SimpleNamespace(value="gated_delta_net"),
               linear_attention_freq=(1, 1, 1, 0), linear_num_key_heads=4, linear_num_value_heads=8,
               linear_key_head_dim=128, linear_value_head_dim=128, attention_output_gate=True, num_layers=4)
    f = af8m.megatron_fields(c)
    assert f["experimental_attention_variant"] == "gated_delta_net" and f["linear_attention_freq"] == [1, 1, 1, 0]
    plan = json.loads(af8m._plan_json(f, None, seq_length=4096))
    rows = {m["name"]: m for m in plan["modules"]}
    assert rows["decoder.layers.self_attention.in_proj"]["layers"] == 3
    assert rows["decoder.layers.self_attention.linear_qkv"]["layers"] == 1
    # Every TransformerConfig has Gated DeltaNet defaults (0.19: 16 key heads, ...); without the
    # variant they stay out, and the model plans as the full attention it is.
    plain = config(tmp_path, linear_attention_freq=None, linear_num_key_heads=16, linear_num_value_heads=32,
                   linear_key_head_dim=128, linear_value_head_dim=128, attention_output_gate=False)
    f = af8m.megatron_fields(plain)
    assert "linear_num_key_heads" not in f
    names = {m["name"] for m in json.loads(af8m._plan_json(f, None, seq_length=4096))["modules"]}
    assert "decoder.layers.self_attention.in_proj" not in names


def test_megatron_fields_read_a_transformer_config(tmp_path):
    c = moe(tmp_path, multi_latent_attention=False, mtp_num_layers=None)
    f = af8m.megatron_fields(c)
    assert f["num_moe_experts"] == 8 and f["moe_layer_freq"] == 1 and "multi_latent_attention" not in f
    assert "mtp_num_layers" not in f and "name" not in f
    assert af8m.megatron_fields(c, name="m")["name"] == "m"


def test_a_layout_the_policy_does_not_cover_is_refused_unless_allowed(stand_ins, tmp_path):
    # POLICY has TP 1 rules only: at TP 2 no module is covered.
    c = config(tmp_path, tensor_model_parallel_size=2)
    with pytest.raises(af8m.MissingRulesError, match=r"missing rule llm \(kind=layernorm_column, ub_name=qkv, tp=2\)") as e:
        af8m.enable(c)
    assert "fp8sel gen-policy --model YOUR_MODEL_CONFIG --tp 2 --out fp8sel-fill" in str(e.value)
    assert c.fp8 == "e4m3", "nothing was changed before the refusal"
    with pytest.raises(af8m.MissingRulesError):
        af8m.apply_te_precision_config(config(tmp_path, tensor_model_parallel_size=2))
    plan = af8m.enable(config(tmp_path, tensor_model_parallel_size=2), allow_missing=True)
    assert plan.region == "bf16"
    n = af8m.apply_te_precision_config(config(tmp_path, tensor_model_parallel_size=2), allow_missing=True)
    assert n.fp8_instances == 0


def test_the_hook_warns_of_eager_thresholds_of_gpu_time_alone(stand_ins, tmp_path):
    gpu_only = dict(POLICY, provenance={"eager_source": "gpu_time"})
    c = config(tmp_path)
    with open(c.fp8_dynamic_policy_path, "w") as f:
        json.dump(gpu_only, f)
    with pytest.warns(UserWarning, match="GPU time alone"):
        af8m.enable(c)
    af8m._said.clear()
    graphed = config(tmp_path, cuda_graph_impl="local")
    with open(graphed.fp8_dynamic_policy_path, "w") as f:
        json.dump(gpu_only, f)
    import warnings as w

    with w.catch_warnings(record=True) as seen:
        w.simplefilter("always")
        af8m.enable(graphed)
    assert not any("GPU time alone" in str(x.message) for x in seen)


def test_a_per_module_recipe_plan_runs_each_module_under_its_own_recipe(stand_ins, tmp_path):
    mixed = dict(POLICY, recipes={"base": "blockwise", "keys": [
        {"key": {"kind": "layernorm_column", "ub_name": "qkv", "tp": 1},
         "eager": [{"from": 1024, "recipe": "tensorwise"}], "graphed": [{"from": 1024, "recipe": "tensorwise"}]}]})
    f = tmp_path / "mixed.json"
    f.write_text(json.dumps(mixed))
    # In the global FP8 region (FP8 experts) FP8 weights are built in the trainer's recipe: a
    # module of another recipe is refused.
    af8m.enable(moe(tmp_path, fp8_dynamic_policy_path=str(f)))
    with pytest.raises(RuntimeError, match="fp8_param"):
        build_dense(stand_ins.mte)
    plan = af8m.enable(config(tmp_path, fp8_dynamic_policy_path=str(f)))
    assert plan.region == "bf16"
    qkv, fc1 = build_dense(stand_ins.mte)
    assert [(r["fp8"], r["recipe"]) for r in plan.rows] == [(True, "tensorwise"), (False, None)]
    assert plan.rows[0]["reason"].startswith("recipe plan: eager: bf16 below 1024, tensorwise from 1024")
    assert "fp8 tensorwise TELayerNormColumnParallelLinear" in str(plan)
    qkv.forward(1)
    # Its own recipe's context, not the trainer's blockwise.
    assert stand_ins.state["autocast"][-1] == (True, "recipe:tensorwise:e4m3")
    # The proj key the plan does not list follows the rules under the base recipe.
    proj = stand_ins.mte.TERowParallelLinear(1024, 1024, tp_comm_buffer_name="proj")
    assert plan.rows[-1]["fp8"] and plan.rows[-1]["recipe"] == "blockwise"
    proj.forward(1)
    assert stand_ins.state["autocast"][-1] == (True, "recipe:blockwise:e4m3")
