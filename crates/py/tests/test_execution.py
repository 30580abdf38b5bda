"""A rule's `min_tokens_graphed`: the Python API and both integrations pick the threshold by the
trainer's execution (eager unless told; Megatron's `cuda_graph_impl`)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

import adaptive_fp8 as af8
from adaptive_fp8 import megatron, te

RULE = [{"tp": 1, "min_tokens": 8192, "min_tokens_graphed": 1024}]
POLICY = {
    "version": 1,
    "speedup_threshold": 1.0,
    "rules": {"layernorm_column": {"qkv": RULE, "fc1": RULE}, "row": {"proj": RULE, "fc2": RULE}},
}


@pytest.fixture()
def policy_file(tmp_path):
    f = tmp_path / "both.json"
    f.write_text(json.dumps(POLICY))
    megatron._said.clear()
    return f


def test_policy_decide_by_execution(policy_file):
    p = af8.Policy.load(policy_file)
    eager = p.decide("TERowParallelLinear", ub_name="fc2", tp=1, num_tokens=4096)
    graphed = p.decide("TERowParallelLinear", ub_name="fc2", tp=1, num_tokens=4096, execution="graphed")
    assert not eager.fp8 and eager.min_tokens == 8192
    assert graphed.fp8 and graphed.min_tokens == 1024 and "min_tokens_graphed 1024" in graphed.reason
    with pytest.raises(af8.PlanError, match="unknown execution"):
        p.decide("TERowParallelLinear", ub_name="fc2", tp=1, num_tokens=4096, execution="captured")


def test_plan_by_execution(root, policy_file):
    model = root / "fixtures/models/llama3_2_1b.yaml"
    assert af8.plan_summary(model, policy_file, seq_length=2048)["fp8_modules"] == 0
    assert af8.plan_summary(model, policy_file, seq_length=2048, execution="graphed")["fp8_modules"] == 64


def test_megatron_reads_cuda_graph_impl(policy_file):
    base = dict(
        fp8_dynamic_policy_path=str(policy_file), tensor_model_parallel_size=1, seq_length=4096,
        micro_batch_size=1,
    )
    assert megatron.execution_of(SimpleNamespace(**base)) == "eager"
    assert megatron.execution_of(SimpleNamespace(**base, cuda_graph_impl="none")) == "eager"
    for impl in ("local", "transformer_engine", "full_iteration"):
        assert megatron.execution_of(SimpleNamespace(**base, cuda_graph_impl=impl)) == "graphed"
    assert megatron.execution_of(SimpleNamespace(**base, enable_cuda_graph=True)) == "graphed"
    decide = megatron.selective_fp8_init_decision
    assert not decide(SimpleNamespace(**base, cuda_graph_impl="none"), "TERowParallelLinear", "fc2", {})
    assert decide(SimpleNamespace(**base, cuda_graph_impl="transformer_engine"), "TERowParallelLinear", "fc2", {})


def test_plain_te_apply_takes_the_execution(policy_file):
    class Linear:
        pass

    class LayerNormLinear(Linear):
        pass

    classes = {"LayerNormLinear": LayerNormLinear, "Linear": Linear}
    named = [("layers.0.self_attention.linear_qkv", LayerNormLinear()), ("layers.0.mlp.linear_fc2", Linear())]
    p = af8.Policy.load(policy_file)
    eager = te.plan_modules(named, p, tokens=4096, classes=classes)
    graphed = te.plan_modules(named, p, tokens=4096, classes=classes, execution="graphed")
    assert [r["fp8"] for r in eager] == [False, False]
    assert [r["fp8"] for r in graphed] == [True, True]
