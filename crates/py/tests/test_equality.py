"""Python and Rust decide identically: `adaptive_fp8.plan` against `fp8sel explain --json`, and
`Policy.decide` against `fp8sel decide --json`, for every module of every fixture model."""

from __future__ import annotations

import itertools
import json
import subprocess

import pytest

import adaptive_fp8 as af8

# Every fixture model (YAML and HF forms), its policies, and layouts that divide it.
MODELS = [
    ("fixtures/models/qwen2_5_72b.yaml", {"policy": "policies/qwen2_5_72b.json"}, [1, 2, 4, 8], [1]),
    ("fixtures/models/hf/qwen2_5_72b.json", {"policy": "policies/qwen2_5_72b.json"}, [4], [1]),
    ("fixtures/models/llama3_2_1b.yaml", {"policy": "policies/llama3_2_1b.json"}, [1, 2], [1]),
    ("fixtures/models/hf/llama3_2_1b.json", {}, [1], [1]),
    ("fixtures/models/deepseek_v3.yaml", {"policy": "policies/deepseek_v3.json"}, [1, 8], [8, 32, 64]),
    ("fixtures/models/hf/deepseek_v3.json", {"policy": "policies/deepseek_v3.json"}, [2], [16]),
    (
        "fixtures/models/qwen3_vl_235b_a22b.yaml",
        {
            "policy": "policies/qwen3_vl_235b_a22b.llm.json",
            "vit_policy": "policies/qwen3_vl_235b_a22b.vit.json",
        },
        [1, 2],
        [4, 8],
    ),
    ("fixtures/models/hf/qwen3_vl_235b_a22b.json", {}, [1], [8]),
]
TOKENS = [(1024, 1, 1), (4096, 2, 1), (32768, 1, 4)]  # seq, mbs, cp


def cli_plan(fp8sel, root, model, policies, tp, ep, seq, mbs, cp):
    args = [str(fp8sel), "explain", "--json", "--model", model, "--tp", str(tp), "--ep", str(ep)]
    args += ["--seq-length", str(seq), "--micro-batch-size", str(mbs), "--cp", str(cp)]
    for k, v in policies.items():
        args += [f"--{k.replace('_', '-')}", v]
    out = subprocess.run(args, cwd=root, capture_output=True, text=True)
    return out.returncode, out.stdout, out.stderr


CASES = [
    (m, pol, tp, ep, t)
    for m, pol, tps, eps, in [(m, p, t, e) for m, p, t, e in MODELS]
    for tp, ep, t in itertools.product(tps, eps, TOKENS)
]


@pytest.mark.parametrize("model,policies,tp,ep,tokens", CASES)
def test_plan_equals_explain_json(fp8sel, root, model, policies, tp, ep, tokens):
    seq, mbs, cp = tokens
    code, out, err = cli_plan(fp8sel, root, model, policies, tp, ep, seq, mbs, cp)
    kw = {k: str(root / v) for k, v in policies.items()}
    policy = kw.pop("policy", None)
    call = dict(tp=tp, ep=ep, seq_length=seq, micro_batch_size=mbs, cp=cp, root=str(root), **kw)
    if code != 0:
        # A layout the model cannot take: Python refuses it too.
        with pytest.raises(ValueError):
            af8.plan(root / model, policy, **call)
        return
    cli = json.loads(out)
    if cli["summary"]["missing_rules"]:
        # explain shows the gaps; plan() refuses them unless told to plan them BF16.
        with pytest.raises(af8.MissingRulesError):
            af8.plan(root / model, policy, **call)
        call["allow_missing"] = True
    py_rows = af8.plan(root / model, policy, **call)
    assert py_rows == cli["modules"]
    assert py_rows.warnings == cli["warnings"]
    call.pop("allow_missing", None)
    assert af8.plan_summary(root / model, policy, **call) == cli["summary"]
    assert len(py_rows) > 0


def cli_decide(fp8sel, root, policy, **kw):
    args = [str(fp8sel), "decide", "--json", "--policy", policy]
    for k, v in kw.items():
        if v is True:
            args.append(f"--{k.replace('_', '-')}")
        elif v is not None:
            args += [f"--{k.replace('_', '-')}", str(v)]
    out = subprocess.run(args, cwd=root, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


@pytest.mark.parametrize(
    "policy,kw",
    [
        (
            "policies/qwen2_5_72b.json",
            dict(te_class=c, ub_name=ub, tp=tp, seq_length=s, micro_batch_size=1, cp=cp),
        )
        for c, ub in [
            ("TELayerNormColumnParallelLinear", "qkv"),
            ("TERowParallelLinear", "proj"),
            ("TELayerNormColumnParallelLinear", "fc1"),
            ("TERowParallelLinear", "fc2"),
            ("SomethingElse", "fc2"),
        ]
        for tp in (1, 4, 8)
        for s in (256, 2048, 16384)
        for cp in (1, 2)
    ]
    + [
        (
            "policies/deepseek_v3.json",
            dict(
                te_class=c,
                tp=8,
                etp=1,
                num_gemms=g,
                topk=8,
                num_tokens=t,
                expert=True,
            ),
        )
        for c in ("TEColumnParallelGroupedLinear", "TERowParallelGroupedLinear")
        for g in (4, 8, 32)
        for t in (512, 4096, 32768)
    ],
)
def test_decide_equals_fp8sel_decide(fp8sel, root, policy, kw):
    cli = cli_decide(fp8sel, root, policy, **kw)
    p = af8.Policy.load(root / policy)
    te_class = kw.pop("te_class")
    d = p.decide(te_class, **kw)
    assert d.fp8 == cli["use_fp8"]
    assert d.reason == cli["reason"]
    assert d.kind == cli["module_kind"]
    assert d.num_tokens == cli["num_tokens"]
    assert d.min_tokens == (cli["rule"] or {}).get("min_tokens")
