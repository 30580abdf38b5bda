"""The Megatron judge's pure half (adaptive_fp8.bench.megatron_config): which layers and which
models it builds, without torch or Megatron."""
from __future__ import annotations

import pytest

import adaptive_fp8 as af8
from adaptive_fp8.bench import megatron_step as ms


def test_forced_region_same_as_auto_is_not_built_twice():
    # --regions both: @fp8 where the automatic mode ran in the FP8 region is the same model.
    resolved = {("hook", "p/a.json"): "fp8"}
    assert "same model" in ms.same_as_auto(resolved, "hook", "p/a.json", "fp8")
    assert ms.same_as_auto(resolved, "hook", "p/a.json", "bf16") == ""
    assert ms.same_as_auto(resolved, "native", "p/a.json", "fp8") == ""  # another integration's model
    assert ms.same_as_auto(resolved, "hook", "p/b.json", "fp8") == ""  # another policy
    assert ms.same_as_auto(resolved, "hook", "p/a.json", "auto") == ""
    assert ms.same_as_auto({}, "hook", "p/a.json", "fp8") == ""  # the automatic mode was not built


def test_dense_layers_follow_the_model_and_unbuilt_mlps_are_not_misses(root):
    plan = af8._plan(str(root / "fixtures/models/deepseek_v3.yaml"), str(root / "policies/deepseek_v3.json"),
                     dict(tp=1, ep=16, seq_length=4096))
    arch = plan["architecture"]["llm"]
    assert ms.dense_layers(arch, 2, None) == 0 and ms.dense_layers(arch, 61, None) == 3 and ms.dense_layers(arch, 2, 1) == 1
    with pytest.raises(ms.StepBenchError, match="between 0 and --layers"):
        ms.dense_layers(arch, 2, 3)
    dense = af8._plan(str(root / "fixtures/models/llama3_2_1b.yaml"), None, dict(tp=1, seq_length=4096))["architecture"]["llm"]
    assert ms.dense_layers(dense, 4, None) == 4
    with pytest.raises(ms.StepBenchError, match="no MoE layers"):
        ms.dense_layers(dense, 4, 1)
    # One MoE layer built: the dense MLP's groups are not in it, and that is not a miss.
    rows = plan["modules"]
    kw = ms.config_kwargs(arch, 1, 0, 8192)
    unbuilt = ms.unbuilt_mlps(rows, kw)
    assert unbuilt == {"decoder.layers.mlp.linear_fc1", "decoder.layers.mlp.linear_fc2"}
    seen = {r["name"].replace("layers.", "layers.0.", 1): r["use_fp8"] for r in rows
            if r["component"] == "llm" and r["name"] not in unbuilt and not r["name"].startswith("mtp.")}
    assert ms.compare_precisions(seen, rows, unbuilt) == []
    assert sorted(ms.compare_precisions(seen, rows)) == sorted(f"{n}: planned, not built" for n in unbuilt)
    # Dense layers only: the experts and the shared experts are what is not built.
    only_dense = ms.unbuilt_mlps(rows, ms.config_kwargs(arch, 1, 1, 8192))
    assert only_dense and all(".experts." in n or ".shared_experts." in n for n in only_dense)
    assert ms.unbuilt_mlps(rows, ms.config_kwargs(arch, 2, 1, 8192)) == set()


def test_router_padding_flag_parses():
    from adaptive_fp8.bench.step_bench import parser

    a = parser().parse_args(["--model", "m.yaml", "--trainer", "megatron", "--moe-router-padding"])
    assert a.moe_router_padding is True
    assert parser().parse_args(["--model", "m.yaml"]).moe_router_padding is False


def test_native_modes_expect_what_the_native_config_writes():
    doc = {"modules": [{"name": "a", "use_fp8": True}, {"name": "b", "use_fp8": False}], "native_bf16_because": "padded_experts"}
    assert [m["use_fp8"] for m in ms.mode_plan(doc, "native:p.json")] == [False, False]
    assert [m["use_fp8"] for m in ms.mode_plan(doc, "hook:p.json")] == [True, False]  # the hook runs the plan
    assert ms.mode_plan(dict(doc, native_bf16_because=None), "native:p.json@fp8") == doc["modules"]


def test_a_rank_with_fewer_experts_than_megatron_builds_is_refused(root):
    # Mixtral's 8 experts, top-2 (examples/models): one a rank at EP 8, which Megatron cannot build
    # alone (one expert is no MoE layer, and top-2 needs two); EP 4 holds two.
    mixtral = str(root / "examples/models/mixtral_8x7b.json")
    arch = af8._plan(mixtral, None, dict(tp=1, ep=8, seq_length=4096))["architecture"]["llm"]
    why = ms.one_rank_refusal(arch, 8)
    assert why and "1 of the model's 8 experts" in why and "judge at EP 4 or below" in why
    assert "gen-policy --ep 4" in why
    assert ms.one_rank_refusal(arch, 4) is None and ms.one_rank_refusal(arch, 1) is None
    # DeepSeek-V3 (256 experts, top-8) at EP 16 holds 16: built; at EP 64, 4: refused, EP 32 named.
    dsv3 = af8._plan(str(root / "fixtures/models/deepseek_v3.yaml"), None, dict(tp=1, ep=16, seq_length=4096))
    assert ms.one_rank_refusal(dsv3["architecture"]["llm"], 16) is None
    assert "judge at EP 32 or below" in ms.one_rank_refusal(dsv3["architecture"]["llm"], 64)
    dense = af8._plan(str(root / "fixtures/models/llama3_2_1b.yaml"), None, dict(tp=1, seq_length=4096))
    assert ms.one_rank_refusal(dense["architecture"]["llm"], 8) is None
