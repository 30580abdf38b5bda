"""The engine from Python: loading, deciding, errors that name the file, the path and the fix."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import adaptive_fp8 as af8

POLICY = {
    "version": 1,
    "speedup_threshold": 1.0,
    "rules": {
        "row": {"fc2": [{"tp": 8, "min_tokens": 4096, "measured_speedup": 1.2}]},
        "column_grouped": [{"etp": 1, "num_gemms": 8, "min_tokens": 16384}],
    },
}


def policy(**extra) -> af8.Policy:
    return af8.Policy.from_json(json.dumps({**POLICY, **extra}), "test.json")


def test_decide_dense_by_class_and_by_kind():
    p = policy()
    d = p.decide("TERowParallelLinear", ub_name="fc2", tp=8, seq_length=4096)
    assert d.fp8 and bool(d)
    assert d.key == {"kind": "row", "ub_name": "fc2", "tp": 8}
    assert (d.min_tokens, d.measured_speedup, d.kind, d.num_tokens) == (4096, 1.2, "row", 4096)
    assert not p.decide(kind="row", ub_name="fc2", tp=8, seq_length=4095).fp8
    # Context parallelism divides the tokens each rank's GEMMs see.
    assert not p.decide(kind="row", ub_name="fc2", tp=8, seq_length=8192, cp=4).fp8
    # The override wins over seq x mbs.
    assert p.decide(kind="row", ub_name="fc2", tp=8, seq_length=16, num_tokens=5000).fp8
    # No ub_name: no dense rule can match.
    d = p.decide("TERowParallelLinear", tp=8, seq_length=65536)
    assert not d.fp8 and d.key is None and "no ub_name" in d.reason
    # Another TP: no rule, BF16, and the key says which.
    d = p.decide("TERowParallelLinear", ub_name="fc2", tp=4, seq_length=65536)
    assert not d.fp8 and d.min_tokens is None and "no rule" in d.reason


def test_experts_need_num_gemms_and_topk():
    p = policy()
    d = p.decide("TEColumnParallelGroupedLinear", etp=1, num_gemms=8, topk=8, seq_length=4096)
    assert d.fp8 and d.num_tokens == 32768
    d = p.decide("TELayerNormColumnParallelLinear", expert=True, etp=1, num_gemms=8, topk=2, seq_length=4096)
    assert d.kind == "column_grouped" and not d.fp8
    with pytest.raises(af8.PlanError, match="num_gemms"):
        p.decide("TEColumnParallelGroupedLinear", etp=1, topk=8, seq_length=4096)
    with pytest.raises(af8.PlanError, match="topk"):
        p.decide("TEColumnParallelGroupedLinear", etp=1, num_gemms=8, seq_length=4096)


def test_bad_arguments_are_plan_errors():
    p = policy()
    for kw in [{}, {"te_class": "Nope", "seq_length": 1}, {"kind": "linear", "seq_length": 1}]:
        with pytest.raises(af8.PlanError):
            p.decide(**kw)
    with pytest.raises(af8.PlanError, match="start at 1"):
        p.decide(kind="row", ub_name="fc2", tp=0, seq_length=1)
    with pytest.raises(af8.PlanError, match="num_tokens"):
        p.decide(kind="row", ub_name="fc2", tp=8)


def test_policy_errors_are_value_errors_naming_file_path_and_fix(tmp_path):
    assert issubclass(af8.PolicyError, ValueError)
    bad = dict(POLICY)
    bad["rules"] = {"row": {"fc2": [{"tp": 0, "min_tokens": 1}]}}
    f = tmp_path / "bad.json"
    f.write_text(json.dumps(bad))
    with pytest.raises(af8.PolicyError) as e:
        af8.Policy.load(f)
    msg = str(e.value)
    assert str(f) in msg and "rules.row.fc2[0].tp" in msg and "fix:" in msg
    with pytest.raises(af8.PolicyError, match="not a regular file"):
        af8.Policy.load("/dev/zero")
    with pytest.raises(af8.PolicyError, match="twice"):
        af8.Policy.from_json('{"version": 1, "version": 1, "speedup_threshold": 1, "rules": {}}')
    with pytest.raises(af8.ConfigError, match="field `moe_router_topk`"):
        cfg = tmp_path / "m.yaml"
        cfg.write_text(
            "num_layers: 2\nhidden_size: 64\nnum_attention_heads: 4\nseq_length: 8\n"
            "num_moe_experts: 4\nmoe_router_topk: 5\n"
        )
        af8.plan(cfg)


def test_estimated_policies_say_so():
    p = policy(provenance={"estimated": True, "models": ["m"]})
    assert p.estimated and p.models == ["m"]
    assert p.decide(kind="row", ub_name="fc2", tp=8, seq_length=4096).estimated
    assert "estimated" in repr(p)
    assert not policy().estimated


def test_round_trip_and_len(root):
    p = af8.Policy.load(root / "policies" / "qwen2_5_72b.json")
    assert len(p) > 0
    assert (root / "policies" / "qwen2_5_72b.json").read_text() == p.to_json()


def test_check_lists_missing_keys(root):
    missing = af8.check(
        root / "fixtures/models/deepseek_v3.yaml",
        root / "policies/deepseek_v3.json",
        tp=8,
        ep=16,
        etp=2,
        seq_length=4096,
    )
    assert missing and all(m["modules"] for m in missing)
    assert not af8.check(
        root / "fixtures/models/qwen2_5_72b.yaml", root / "policies/qwen2_5_72b.json", tp=4, seq_length=4096
    )
    no_policy = af8.check(root / "fixtures/models/llama3_2_1b.yaml", None, seq_length=4096)
    assert no_policy == [
        {"component": "llm", "key": None, "modules": [m["name"] for m in af8.plan(root / "fixtures/models/llama3_2_1b.yaml", seq_length=4096)]}
    ]


def test_importing_never_imports_torch():
    code = (
        "import sys, adaptive_fp8, adaptive_fp8.megatron, adaptive_fp8.te; "
        "bad = [m for m in ('torch', 'transformer_engine', 'megatron') if m in sys.modules]; "
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_plan_and_check_carry_their_warnings_and_emit_them(root):
    model = root / "fixtures/models/llama3_2_1b.yaml"
    other = root / "policies/qwen2_5_72b.json"
    with pytest.warns(af8.AdaptiveFp8Warning, match="other per-rank GEMM shapes"):
        rows = af8.plan(model, other, seq_length=4096)
    assert isinstance(rows, af8.PlanRows) and rows and rows.summary["other_model"]
    assert any("other per-rank GEMM shapes" in w for w in rows.warnings)
    with pytest.warns(af8.AdaptiveFp8Warning):
        res = af8.check(model, other, seq_length=4096)
    assert isinstance(res, af8.CheckResult) and not res.ok and res.other_model
    assert list(res) == []  # every key has a rule: it is the shapes that differ
    ok = af8.check(model, root / "policies/llama3_2_1b.json", seq_length=4096)
    assert ok.ok and ok.other_model == []


def test_plan_warns_of_a_token_count_the_trainer_stops_at_and_refuses_zero(root):
    model, p = root / "fixtures/models/llama3_2_1b.yaml", root / "policies/llama3_2_1b.json"
    # FP8 modules at 8196 tokens: each rank's rows off TE's multiple of 16 (the engine's rule,
    # as fp8sel explain says it).
    with pytest.warns(af8.AdaptiveFp8Warning, match="off this layout's step of 16"):
        rows = af8.plan(model, p, tp=1, seq_length=8196)
    assert any("Caller must pad" in w for w in rows.warnings)
    assert not any("off this layout's step" in w for w in af8.plan(model, p, tp=1, seq_length=8192).warnings)
    for kw in ({"seq_length": 0}, {"seq_length": 4096, "micro_batch_size": 0}):
        with pytest.raises(af8.PlanError, match="starts at 1"):
            af8.plan(model, p, tp=1, **kw)


def test_plan_refuses_an_uncovered_layout_unless_allowed(root):
    model = root / "fixtures/models/llama3_2_1b.yaml"
    policy = root / "policies/llama3_2_1b.json"
    with pytest.raises(af8.MissingRulesError, match="tp=4") as e:
        af8.plan(model, policy, tp=4, seq_length=4096)
    assert isinstance(e.value, af8.PlanError)
    assert f"fp8sel gen-policy --model {model} --tp 4 --out fp8sel-fill" in str(e.value)
    rows = af8.plan(model, policy, tp=4, seq_length=4096, allow_missing=True)
    assert rows and not any(r["use_fp8"] for r in rows)
    assert rows.summary["missing_rules"]


def test_eager_thresholds_of_gpu_time_alone_are_warned_in_eager_only(root, tmp_path):
    p = json.loads((root / "policies/llama3_2_1b.json").read_text())
    p["provenance"]["eager_source"] = "gpu_time"
    f = tmp_path / "gpu_only.json"
    f.write_text(json.dumps(p))
    model = root / "fixtures/models/llama3_2_1b.yaml"
    with pytest.warns(af8.AdaptiveFp8Warning, match="GPU time alone"):
        af8.plan(model, f, seq_length=4096)
    rows = af8.plan(model, f, seq_length=4096, execution="graphed")
    assert not any("GPU time alone" in w for w in rows.warnings)
