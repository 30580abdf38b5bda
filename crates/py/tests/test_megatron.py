"""`selective_fp8_init_decision` on stand-in config objects: the seed's callback semantics."""

from __future__ import annotations

import json
import warnings
from types import SimpleNamespace

import pytest

from adaptive_fp8 import megatron
from adaptive_fp8.megatron import selective_fp8_init_decision as decide

POLICY = {
    "version": 1,
    "speedup_threshold": 1.0,
    "rules": {
        "layernorm_column": {"qkv": [{"tp": 8, "min_tokens": 8192}]},
        "row": {"fc2": [{"tp": 8, "min_tokens": 4096}]},
        "column_grouped": [{"etp": 1, "num_gemms": 8, "min_tokens": 16384}],
        "row_grouped": [{"etp": 2, "num_gemms": 8, "min_tokens": 16384}],
    },
}


@pytest.fixture()
def policy_file(tmp_path):
    f = tmp_path / "policy.json"
    f.write_text(json.dumps(POLICY))
    megatron._said.clear()
    return f


def config(policy_file, **kw):
    base = dict(
        fp8_dynamic_policy_path=str(policy_file),
        tensor_model_parallel_size=8,
        expert_tensor_parallel_size=None,
        context_parallel_size=1,
        moe_router_topk=8,
        seq_length=4096,
        micro_batch_size=1,
        fp8_dynamic_num_tokens=None,
    )
    base.update(kw)
    return SimpleNamespace(**base)


def test_dense_modules(policy_file):
    c = config(policy_file)
    assert decide(c, "TERowParallelLinear", "fc2", {}) is True
    assert decide(c, "TELayerNormColumnParallelLinear", "qkv", {}) is False  # 4096 < 8192
    assert decide(config(policy_file, micro_batch_size=2), "TELayerNormColumnParallelLinear", "qkv", {})
    # A class object works as well as its name; an unknown class falls back to the ub_name.
    assert decide(c, type("TERowParallelLinear", (), {}), "fc2", {}) is True
    assert decide(c, "MyLinear", "fc2", {}) is True
    # No rule for TP 4: BF16.
    assert decide(config(policy_file, tensor_model_parallel_size=4), "TERowParallelLinear", "fc2", {}) is False


def test_context_parallelism_divides_the_tokens(policy_file):
    assert decide(config(policy_file, seq_length=8192), "TERowParallelLinear", "fc2", {})
    assert not decide(
        config(policy_file, seq_length=8192, context_parallel_size=4), "TERowParallelLinear", "fc2", {}
    )


def test_experts_read_num_gemms_from_init_kwargs(policy_file):
    c = config(policy_file, expert_tensor_parallel_size=1)
    kw = {"num_gemms": 8, "is_expert": True}
    assert decide(c, "TEColumnParallelGroupedLinear", None, kw)  # 4096 x 8 = 32768
    assert not decide(config(policy_file, expert_tensor_parallel_size=1, moe_router_topk=2), "TEColumnParallelGroupedLinear", None, kw)
    assert not decide(c, "TEColumnParallelGroupedLinear", None, {"num_gemms": 4, "is_expert": True})
    # ETP defaults to TP as in Megatron: TP 8 has no grouped rule here.
    assert not decide(config(policy_file), "TEColumnParallelGroupedLinear", None, kw)
    assert decide(config(policy_file, expert_tensor_parallel_size=2), "TERowParallelGroupedLinear", None, kw)
    # A non-grouped expert class is promoted (SequentialMLP experts).
    assert decide(c, "TELayerNormColumnParallelLinear", "fc1", kw)


def test_cannot_decide_says_why_once(policy_file):
    c = config(policy_file)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        for _ in range(50):
            assert decide(c, "TEColumnParallelGroupedLinear", None, {"is_expert": True}) is False
    msgs = [str(x.message) for x in w]
    assert len(msgs) == 1 and "num_gemms" in msgs[0], msgs
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        nothing = config(policy_file, seq_length=None)
        for _ in range(10):
            assert decide(nothing, "TERowParallelLinear", "fc2", {}) is False
    assert len(w) == 1 and "seq_length" in str(w[0].message)


def test_a_module_that_cannot_be_classified_is_bf16_with_its_reason_in_the_hooks_shape(policy_file):
    # The hook unpacks (fp8, reason, recipe) for every module it builds: a module the policy cannot
    # classify (no TE class known, its ub_name not in the fallback table) is BF16 in that shape,
    # not a crash of the build.
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        fp8, reason, recipe = megatron._decide(config(policy_file), "MyLinear", "router", {})
    assert (fp8, recipe) == (False, None)
    assert reason.startswith("cannot be decided (") and "ub_name `router`" in reason, reason
    assert any("cannot be decided" in str(x.message) for x in w)


def test_vlm_components_use_their_own_token_counts(root):
    megatron._said.clear()
    vit = SimpleNamespace(
        fp8_dynamic_policy_path="policies/qwen3_vl_235b_a22b.vit.json",
        fp8_dynamic_policy_root=str(root),
        tensor_model_parallel_size=1,
        seq_length=32768,
        fp8_dynamic_num_tokens=16384,
    )
    llm_like = SimpleNamespace(**{**vars(vit), "fp8_dynamic_num_tokens": 256})
    import adaptive_fp8 as af8

    p = af8.Policy.load(root / "policies/qwen3_vl_235b_a22b.vit.json")
    for cls, ub in [("TELayerNormColumnParallelLinear", "qkv"), ("TERowParallelLinear", "proj")]:
        assert decide(vit, cls, ub, {}) == p.decide(cls, ub_name=ub, tp=1, num_tokens=16384).fp8
        assert decide(llm_like, cls, ub, {}) == p.decide(cls, ub_name=ub, tp=1, num_tokens=256).fp8


def test_relative_policy_paths_resolve_against_the_root(policy_file, monkeypatch):
    c = config(policy_file, fp8_dynamic_policy_path="policy.json")
    monkeypatch.setenv("ADAPTIVE_FP8_ROOT", str(policy_file.parent))
    assert decide(c, "TERowParallelLinear", "fc2", {})
    monkeypatch.delenv("ADAPTIVE_FP8_ROOT")
    monkeypatch.chdir(policy_file.parent)
    assert decide(c, "TERowParallelLinear", "fc2", {})


def test_no_policy_path_means_bf16_said_once(policy_file):
    c = config(policy_file, fp8_dynamic_policy_path=None)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        assert not decide(c, "TERowParallelLinear", "fc2", {})
        assert not decide(c, "TERowParallelLinear", "proj", {})
    assert len(w) == 1


def test_a_broken_policy_is_an_error_not_a_warning(tmp_path):
    f = tmp_path / "p.json"
    f.write_text("{")
    import adaptive_fp8 as af8

    with pytest.raises(af8.PolicyError):
        decide(SimpleNamespace(fp8_dynamic_policy_path=str(f), seq_length=1), "TELinear", "qkv", {})


def test_enable_refuses_without_megatron():
    with pytest.raises(ModuleNotFoundError):
        megatron.enable(SimpleNamespace())


def test_a_trainer_on_another_recipe_is_warned_once(tmp_path):
    p = dict(POLICY, provenance={"recipe": ["blockwise"]})
    f = tmp_path / "blockwise.json"
    f.write_text(json.dumps(p))
    megatron._said.clear()
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        c = config(f, fp8_recipe="tensorwise")
        assert decide(c, "TERowParallelLinear", "fc2", {}) is True  # still answers
        decide(c, "TELayerNormColumnParallelLinear", "qkv", {})
    said = [str(x.message) for x in w if "recipe" in str(x.message)]
    assert len(said) == 1, said
    assert "blockwise" in said[0] and "Float8CurrentScaling" in said[0] and "--recipe tensorwise" in said[0]
    # The policy's own recipe, or a config that does not say: silent.
    for rec in ("blockwise", None):
        megatron._said.clear()
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            decide(config(f, fp8_recipe=rec), "TERowParallelLinear", "fc2", {})
        assert not [x for x in w if "recipe" in str(x.message)]


def test_policy_recipes_and_warning_from_python(tmp_path):
    from adaptive_fp8 import Policy

    p = Policy.from_json(json.dumps(dict(POLICY, provenance={"recipe": ["delayed fp8_format=hybrid amax_history_len=1024 amax_compute_algo=max"]})), "d.json")
    assert p.recipes == ["delayed"]
    assert p.recipe_warning("delayed") is None
    assert "DelayedScaling" not in (p.recipe_warning("current") or "")
    assert "Float8CurrentScaling" in p.recipe_warning("current")
    with pytest.raises(ValueError, match="alias current"):
        p.recipe_warning("fp4")
    assert Policy.from_json(json.dumps(POLICY), "seed.json").recipes == []
    # A recipe plan gives each FP8 module its recipe: no warning for the trainer's (the Megatron
    # judge ran such a tensorwise file under a blockwise trainer, each module read back tensorwise).
    planned = dict(POLICY, provenance={"recipe": ["tensorwise"]}, recipes={"base": "tensorwise", "keys": []})
    assert Policy.from_json(json.dumps(planned), "t.json").recipe_warning("blockwise") is None


class _FakeCuda:
    """torch.cuda as far as the device check reads it."""

    def __init__(self, name, started=True):
        self.name, self.started = name, started

    def is_initialized(self):
        return self.started

    def get_device_name(self):
        return self.name


def test_a_trainer_on_another_gpu_is_warned_once_and_torch_is_never_imported(tmp_path, monkeypatch):
    import sys

    from adaptive_fp8 import Policy

    p = dict(POLICY, provenance={"device": ["NVIDIA H200"]})
    f = tmp_path / "h200.json"
    f.write_text(json.dumps(p))
    pol = Policy.from_json(json.dumps(p), "h200.json")
    assert pol.device_warning("NVIDIA H200") is None and pol.device_warning("nvidia h200 ") is None
    assert "fp8sel gen-policy" in pol.device_warning("NVIDIA H100 80GB HBM3")
    assert Policy.from_json(json.dumps(POLICY), "seed.json").device_warning("NVIDIA H100 80GB HBM3") is None

    def said(cuda):
        megatron._said.clear()
        if cuda is None:
            monkeypatch.delitem(sys.modules, "torch", raising=False)
        else:
            monkeypatch.setitem(sys.modules, "torch", SimpleNamespace(cuda=cuda))
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            assert decide(config(f), "TERowParallelLinear", "fc2", {}) is True  # still answers
            decide(config(f), "TELayerNormColumnParallelLinear", "qkv", {})
        return [str(x.message) for x in w if "this GPU" in str(x.message)]

    got = said(_FakeCuda("NVIDIA H100 80GB HBM3"))
    assert len(got) == 1 and "measured on NVIDIA H200" in got[0] and "NVIDIA H100 80GB HBM3" in got[0], got
    assert said(_FakeCuda("NVIDIA H200")) == []
    # No torch imported, or CUDA not started: nothing to compare, and nothing started for it.
    assert said(None) == [] and "torch" not in sys.modules
    assert said(_FakeCuda("NVIDIA H100 80GB HBM3", started=False)) == []
