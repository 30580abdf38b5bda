"""`adaptive_fp8.te.plan_modules` with stand-in classes: naming, kinds and the seed's rules."""

from __future__ import annotations

import json

import adaptive_fp8 as af8
from adaptive_fp8 import te as af8te


class Linear: ...


class LayerNormLinear: ...


class LayerNormMLP: ...


class GroupedLinear:
    def __init__(self, n):
        self.num_gemms = n


CLASSES = {
    "LayerNormMLP": LayerNormMLP,
    "LayerNormLinear": LayerNormLinear,
    "GroupedLinear": GroupedLinear,
    "Linear": Linear,
}

POLICY = af8.Policy.from_json(
    json.dumps(
        {
            "version": 1,
            "speedup_threshold": 1.0,
            "rules": {
                "layernorm_column": {
                    "qkv": [{"tp": 1, "min_tokens": 8192}],
                    "fc1": [{"tp": 1, "min_tokens": 1024}],
                },
                "row": {"proj": [{"tp": 1, "min_tokens": 2048}], "fc2": [{"tp": 1, "min_tokens": 2048}]},
                "row_grouped": [{"etp": 1, "num_gemms": 4, "min_tokens": 8192}],
            },
        }
    )
)


def modules():
    return [
        ("", object()),
        ("layers.0.self_attention.linear_qkv", LayerNormLinear()),
        ("layers.0.self_attention.o_proj", Linear()),
        ("layers.0.mlp", LayerNormMLP()),
        ("layers.1.mlp.experts.fc2", GroupedLinear(4)),
        ("layers.1.mlp.experts.fc1", GroupedLinear(4)),
        ("head", Linear()),
    ]


def plan(**kw):
    rows = af8te.plan_modules(modules(), POLICY, classes=CLASSES, **kw)
    return {r["name"]: r for r in rows}


def test_names_kinds_and_tokens():
    r = plan(tokens=4096, topk=2)
    assert set(r) == {
        "layers.0.self_attention.linear_qkv",
        "layers.0.self_attention.o_proj",
        "layers.0.mlp",
        "layers.1.mlp.experts.fc2",
        "layers.1.mlp.experts.fc1",
        "head",
    }
    assert r["layers.0.self_attention.linear_qkv"]["ub_name"] == "qkv"
    assert not r["layers.0.self_attention.linear_qkv"]["fp8"]  # 4096 < 8192
    assert r["layers.0.self_attention.o_proj"]["fp8"]  # Linear named o_proj: row/proj
    assert r["layers.0.mlp"]["fp8"]  # fc1 and fc2 both win
    assert r["layers.1.mlp.experts.fc2"]["fp8"]  # 4096 x 2 >= 8192
    assert not r["layers.1.mlp.experts.fc1"]["fp8"]  # no column_grouped rule
    assert not r["head"]["fp8"] and "names=" in r["head"]["reason"]


def test_layernorm_mlp_needs_both_halves():
    # fc1 wins from 1024 tokens, fc2 only from 2048: one module, so FP8 needs both.
    r = plan(tokens=1500, topk=2)["layers.0.mlp"]
    assert not r["fp8"]
    assert "fc1: tokens 1500 >= min_tokens 1024" in r["reason"]
    assert "fc2: tokens 1500 < min_tokens 2048" in r["reason"]
    assert plan(tokens=2048, topk=2)["layers.0.mlp"]["fp8"]


def test_grouped_without_topk_is_bf16_with_the_reason():
    r = plan(tokens=1 << 20)
    assert not r["layers.1.mlp.experts.fc2"]["fp8"]
    assert "topk" in r["layers.1.mlp.experts.fc2"]["reason"]


def test_name_map_can_be_replaced():
    r = plan(tokens=1 << 20, topk=8, names={"head": "fc2"})
    assert r["head"]["ub_name"] == "fc2" and r["head"]["fp8"]
    assert r["layers.0.self_attention.o_proj"]["ub_name"] is None


def test_hf_style_projection_names():
    # Separate q/k/v and input projections are attention inputs (qkv), not the output proj;
    # gate_proj is the gated MLP's fc1, down_proj its fc2, o_proj the attention output.
    names = {"self_attn.q_proj": "qkv", "self_attn.k_proj": "qkv", "self_attn.v_proj": "qkv",
             "linear_attn.in_proj_qkvz": "qkv", "self_attn.o_proj": "proj", "linear_attn.out_proj": "proj",
             "mlp.gate_proj": "fc1", "mlp.up_proj": "fc1", "mlp.down_proj": "fc2"}
    # GPT-NeoX / Falcon (the MLP's `dense_*` before the attention output's `dense`), GPT-J,
    # GPT-2's input projections, Mixtral's experts.
    names |= {"attention.query_key_value": "qkv", "attention.dense": "proj", "mlp.dense_h_to_4h": "fc1",
              "mlp.dense_4h_to_h": "fc2", "mlp.fc_in": "fc1", "mlp.fc_out": "fc2", "attn.c_attn": "qkv",
              "mlp.c_fc": "fc1", "experts.0.w1": "fc1", "experts.0.w3": "fc1", "experts.0.w2": "fc2"}
    for name, ub in names.items():
        assert af8te.ub_name_of(name) == ub, name
    # GPT-2's c_proj names both outputs: the MLP's by its parent.
    assert [af8te.ub_name_of(f"h.0.{n}.c_proj") for n in ("attn", "mlp")] == ["proj", "fc2"]
    assert af8te.ub_name_of("mlp.c_proj") == "fc2"
