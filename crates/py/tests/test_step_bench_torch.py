"""The step benchmark's torch half on the CPU, with a stand-in for TE (`fake_te`): the layers it
builds for each model layout and the step they run (skipped where torch is missing)."""

from __future__ import annotations

import pytest

from adaptive_fp8.bench import step_bench as sb
from adaptive_fp8.bench.step_spec import built_groups
from step_tiny import TINY, torch_or_skip


@pytest.mark.parametrize("model,extra", [("mla_moe", ["--dense-layers", "1", "--ep", "2"]), ("gqa_moe", ["--execution", "eager,graphed", "--grad-accum", "3"])])
def test_the_step_runs_end_to_end_with_a_te_stand_in(tmp_path, model, extra, root):
    torch = torch_or_skip()
    import json as _json

    import fake_te

    cfg = tmp_path / f"{model}.json"
    cfg.write_text(_json.dumps(TINY[model]))
    args = sb.parser().parse_args(["--model", str(cfg), "--tp", "2", "--tokens", "64", "--layers", "2",
                                   "--steps", "1", "--repeats", "2", "--warmup", "1", "--oracle-repeats", "1", *extra])
    torch.manual_seed(0)
    fake_te.calls.clear()
    logs = []
    out = sb.run(args, log=lambda *a, **k: logs.append(a), te=fake_te, device="cpu")
    assert all("error" not in r for r in out["results"]), out["results"]
    # The writer's document is the one the Rust reader reads: its schema, each row's verdict.
    from schema_check import check, schema

    check(out, *schema(root, "adaptive-fp8-step-results.v1.schema.json"))
    assert all(r["verdict"]["by"] in ("oracle", "bf16", "fp8") for r in out["results"])
    row = out["results"][0]
    assert set(row["modes"]) == {"bf16", "fp8", "oracle"}
    assert row["modes"]["bf16"]["fp8_groups"] == []
    names = set(row["modes"]["fp8"]["fp8_groups"])
    # every module of the layer was built and ran under the autocast of its mode
    grouped = [c for c in fake_te.calls if c[0] == "GroupedLinear"]
    assert grouped, fake_te.calls
    spec_rows = {c[3] for c in grouped}
    if model == "mla_moe":
        assert out["layer_types"] == ["dense", "moe"]
        assert {"q_down_proj", "kv_up_proj", "shared.fc2", "fc1", "experts.fc1"} <= names
        # 64 tokens x top-4 = 256 expert rows on this rank (more in FP8 modes: padded to 16 per expert)
        assert any(r >= 64 * 4 for r in spec_rows)
    else:
        assert out["execution"] == "eager,graphed" and [r["execution"] for r in out["results"]] == ["eager", "graphed"]
        assert ("make_graphed_callables", 2) in fake_te.calls  # attention blocks only: MoE stays eager
        assert out["grad_accum"] == 3 and "3 micro-batch(es) per step" in sb.markdown(out)
        assert "shared.fc1" not in names
    assert sb.markdown(out).count("| oracle |") == len(out["results"])


def _one_layer(tmp_path, cfg: dict, tp: int):
    """One eager layer of `cfg` (an HF config) at `tp` in the TE stand-in: the results, and the
    stand-in's record of what it built (each LayerNormLinear's (in, out), its normalizations)."""
    torch = torch_or_skip()
    import json as _json

    import fake_te

    path = tmp_path / "config.json"
    path.write_text(_json.dumps(cfg))
    args = sb.parser().parse_args(["--model", str(path), "--tp", str(tp), "--tokens", "64", "--layers", "1",
                                   "--steps", "1", "--repeats", "1", "--warmup", "1", "--oracle", "none"])
    torch.manual_seed(0)
    fake_te.calls.clear()
    fake_te.normalizations.clear()
    out = sb.run(args, log=lambda *a, **k: None, te=fake_te, device="cpu")
    assert all("error" not in r for r in out["results"]), out["results"]
    norm_linears = {(c[1], c[2]) for c in fake_te.calls if c[0] == "LayerNormLinear"}
    return norm_linears, set(fake_te.normalizations)


def test_an_ungated_layernorm_model_builds_one_fc1_of_the_ffn_width(tmp_path):
    # StarCoder2's layout: LayerNorm fused into qkv and fc1, fc1 as wide as the FFN (not twice).
    built, norms = _one_layer(tmp_path, {"model_type": "starcoder2", "hidden_size": 128, "intermediate_size": 384,
                                         "num_hidden_layers": 2, "num_attention_heads": 8,
                                         "num_key_value_heads": 2}, 2)
    assert norms == {"LayerNorm"}, norms
    # per rank at TP 2: qkv (8 + 2 + 2 heads of 16) / 2 = 96, fc1 384 / 2 = 192 (gated would be 384)
    assert {n for k, n in built if k == 128} == {96, 192}, built


def test_moe_routing_pads_fp8_expert_rows_and_keeps_every_token(tmp_path):
    torch = torch_or_skip()
    import fake_te

    cfg = tmp_path / "m.json"
    cfg.write_text(__import__("json").dumps(TINY["gqa_moe"]))
    args = sb.parser().parse_args(["--model", str(cfg), "--tokens", "40", "--layers", "1"])
    import adaptive_fp8 as af8

    spec, _ = sb.spec_at(af8, args, 40)
    from adaptive_fp8.bench import step_layers

    bench = step_layers.Bench(args, fake_te, "cpu")
    outs = {}
    for fp8 in (False, True):
        mode = dict.fromkeys(built_groups(spec, ["moe"]), fp8)
        torch.manual_seed(3)
        block = step_layers.MoeBlock.make(bench, spec, mode)
        fake_te.calls.clear()
        x = torch.randn(40, 1, spec.hidden, dtype=torch.bfloat16)
        with fake_te.autocast(enabled=True):
            outs[fp8] = block(x)
        rows = [c[3] for c in fake_te.calls if c[0] == "GroupedLinear"]
        assert rows[0] % (16 if fp8 else 1) == 0 and rows[0] >= 40 * spec.topk
        if not fp8:
            assert rows[0] == 40 * spec.topk  # no padding in BF16
    # padding rows never reach the output: same weights, same tokens -> same result
    assert torch.allclose(outs[False].float(), outs[True].float(), atol=1e-2)


@pytest.mark.parametrize("cfg,tp,fc1,norm", [
    # GPT-2 by its own names: ungated, 4 x width, LayerNorm.
    ({"model_type": "gpt2", "n_embd": 128, "n_head": 8, "n_layer": 2}, 2, 256, "LayerNorm"),
    # ChatGLM by its own: gated (2 x 320 over TP 2), RMSNorm, two key/value groups.
    ({"model_type": "chatglm", "num_layers": 2, "hidden_size": 128, "ffn_hidden_size": 320, "kv_channels": 16,
      "num_attention_heads": 8, "multi_query_attention": True, "multi_query_group_num": 2}, 2, 320, "RMSNorm"),
    # Falcon's new decoder: ungated, LayerNorm, its MLP 4 x width.
    ({"model_type": "falcon", "hidden_size": 128, "num_attention_heads": 8, "num_hidden_layers": 2,
      "new_decoder_architecture": True, "num_kv_heads": 2}, 2, 256, "LayerNorm"),
])
def test_families_read_by_their_own_names_build_their_plans_shapes(tmp_path, cfg, tp, fc1, norm):
    built, norms = _one_layer(tmp_path, cfg, tp)
    assert norms == {norm}, norms
    assert fc1 in {n for _, n in built}, built


@pytest.mark.parametrize("flags, fp8_weights", [([], False), (["--fp8-param"], True), (["--fp8-param-gather"], True)])
def test_fp8_modules_hold_bf16_weights_unless_fp8_ones_are_asked_for(tmp_path, flags, fp8_weights):
    """As Megatron trains without --fp8-param-gather (and as a policy's FP8 groups run in the BF16
    launch region), an FP8 module of the TE blocks holds BF16 weights; a BF16 module never FP8 ones."""
    torch_or_skip()
    import fake_te

    cfg = tmp_path / "m.json"
    cfg.write_text(__import__("json").dumps(TINY["gqa_moe"]))
    args = sb.parser().parse_args(["--model", str(cfg), "--tokens", "40", "--layers", "1", *flags])
    import adaptive_fp8 as af8
    from adaptive_fp8.bench import step_layers

    spec, _ = sb.spec_at(af8, args, 40)
    bench = step_layers.Bench(args, fake_te, "cpu")
    for fp8 in (False, True):
        mode = dict.fromkeys(built_groups(spec, ["moe"]), fp8)
        mods = [m for m in step_layers.MoeBlock.make(bench, spec, mode).modules() if hasattr(m, "fp8_weights")]
        assert mods and all(m.fp8_weights is (fp8 and fp8_weights) for m in mods)
