"""Adaptive FP8 for plain Transformer Engine models (no Megatron).

    import adaptive_fp8, adaptive_fp8.te
    policy = adaptive_fp8.Policy.load("policies/qwen2_5_72b.json")
    decisions = adaptive_fp8.te.apply(model, policy, tokens=4096, tp=1)
    optimizer = torch.optim.AdamW(model.parameters())   # after apply: BF16 modules get new weights
    with te.fp8_autocast(enabled=True, fp8_recipe=recipe):
        loss = model(x).sum()

``apply`` walks ``model.named_modules()`` and decides every ``te.Linear``, ``te.LayerNormLinear``,
``te.GroupedLinear`` and ``te.LayerNormMLP``. A module's ``ub_name`` (the policy's shape key:
qkv, proj, fc1, fc2) comes from its name through a map you can extend or replace (``names=``).
A BF16 module runs its forward under ``fp8_autocast(enabled=False)``; if it holds FP8 weights
(built under ``fp8_model_init``), they are replaced by BF16 copies.

Kinds follow the seed: ``LayerNormLinear`` is ``layernorm_column``; a plain ``Linear`` has no
parallel class, so its kind comes from its ub_name (qkv/fc1 -> layernorm_column, proj/fc2 ->
row); ``GroupedLinear`` fc1/fc2 are the grouped expert kinds (``topk`` required);
``LayerNormMLP`` runs FP8 only when both its fc1 and its fc2 would.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping, Optional

from . import Policy
from ._megatron_config import check_device

#: Default name -> ub_name map: the first key found in a module's own name (its last dotted
#: component, lower-cased) wins. Order matters: `down_proj` and the input projections before
#: `proj`, GPT-NeoX's and Falcon's MLP names (`dense_h_to_4h`) before their attention output's
#: (`dense`). HF-style separate input projections (`q_proj`, `k_proj`, `v_proj`, `in_proj`) are
#: attention inputs, decided as `qkv`; `gate_proj` (Mixtral's `w1` and `w3`) is the gated MLP's
#: first half, `fc1`. A dotted key matches the end of the whole name: GPT-2's `c_proj` names
#: both outputs, `mlp.c_proj` is its MLP's (`fc2`), any other its attention's (`proj`).
DEFAULT_NAMES: dict[str, str] = {
    "qkv": "qkv",
    "query_key_value": "qkv",
    "c_attn": "qkv",
    "q_proj": "qkv",
    "k_proj": "qkv",
    "v_proj": "qkv",
    "in_proj": "qkv",
    "fc1": "fc1",
    "gate_up": "fc1",
    "gate_proj": "fc1",
    "up_proj": "fc1",
    "dense_h_to_4h": "fc1",
    "fc_in": "fc1",
    "c_fc": "fc1",
    "w1": "fc1",
    "w3": "fc1",
    "fc2": "fc2",
    "down_proj": "fc2",
    "dense_4h_to_h": "fc2",
    "fc_out": "fc2",
    "w2": "fc2",
    "mlp.c_proj": "fc2",
    "o_proj": "proj",
    "out_proj": "proj",
    "proj": "proj",
    "dense": "proj",
}

_GROUPED_KIND = {"fc1": "column_grouped", "fc2": "row_grouped"}


def ub_name_of(name: str, names: Mapping[str, str] = DEFAULT_NAMES) -> Optional[str]:
    """The ub_name of a module from its dotted name, or ``None``: the first key that is in its own
    name (the last dotted component, lower-cased), or, for a dotted key, that ends its name."""
    full = name.lower()
    own = full.rsplit(".", 1)[-1]
    for key, ub in names.items():
        if (full == key or full.endswith("." + key)) if "." in key else key in own:
            return ub
    return None


def plan_modules(
    named_modules: Iterable[tuple[str, Any]],
    policy: Policy,
    *,
    tokens: int,
    tp: int = 1,
    etp: Optional[int] = None,
    topk: Optional[int] = None,
    names: Optional[Mapping[str, str]] = None,
    classes: Mapping[str, type],
    execution: str = "eager",
) -> list[dict]:
    """Decides every TE module of ``named_modules`` (pure: nothing is changed). ``classes`` maps
    ``Linear``, ``LayerNormLinear``, ``GroupedLinear``, ``LayerNormMLP`` to the TE classes (or
    stand-ins); ``execution`` is ``eager`` or ``graphed`` (the step captured in CUDA graphs: a
    rule's ``min_tokens_graphed`` applies). Returns one row per TE module: name, class,
    ub_name, num_gemms, fp8, reason."""
    name_map = dict(DEFAULT_NAMES if names is None else names)
    rows = []
    for name, module in named_modules:
        cls = next((c for c, t in classes.items() if isinstance(module, t)), None)
        if cls is None:
            continue
        ub = ub_name_of(name, name_map)
        row = {"name": name, "te_class": cls, "ub_name": ub, "num_gemms": None}
        if cls == "LayerNormMLP":
            parts = [
                policy.decide(kind="layernorm_column", ub_name="fc1", tp=tp, num_tokens=tokens, execution=execution),
                policy.decide(kind="row", ub_name="fc2", tp=tp, num_tokens=tokens, execution=execution),
            ]
            row["fp8"] = all(d.fp8 for d in parts)
            row["reason"] = "; ".join(f"{p}: {d.reason}" for p, d in zip(("fc1", "fc2"), parts))
        elif cls == "GroupedLinear":
            num_gemms = int(getattr(module, "num_gemms"))
            row["num_gemms"] = num_gemms
            kind = _GROUPED_KIND.get(ub or "")
            if kind is None or topk is None:
                row["fp8"] = False
                row["reason"] = (
                    "grouped module without an fc1/fc2 name: BF16"
                    if kind is None
                    else "grouped module without topk: BF16 (pass topk=moe_router_topk)"
                )
            else:
                d = policy.decide(
                    kind=kind,
                    tp=tp,
                    etp=etp or tp,
                    num_gemms=num_gemms,
                    topk=topk,
                    num_tokens=tokens,
                    execution=execution,
                )
                row["fp8"], row["reason"] = d.fp8, d.reason
        else:
            # LayerNormLinear has a class of its own; a plain Linear is decided by its ub_name,
            # as the seed does for an unknown class.
            te_class = "TELayerNormColumnParallelLinear" if cls == "LayerNormLinear" else "Linear"
            if ub is None:
                row["fp8"], row["reason"] = False, "no ub_name from its name: BF16 (see names=)"
            else:
                d = policy.decide(te_class, ub_name=ub, tp=tp, num_tokens=tokens, execution=execution)
                row["fp8"], row["reason"] = d.fp8, d.reason
        rows.append(row)
    return rows


def te_classes() -> dict[str, type]:
    """Transformer Engine's module classes the policy decides."""
    import transformer_engine.pytorch as te

    return {
        # LayerNormLinear/LayerNormMLP first: isinstance must not match a base class first.
        "LayerNormMLP": te.LayerNormMLP,
        "LayerNormLinear": te.LayerNormLinear,
        "GroupedLinear": te.GroupedLinear,
        "Linear": te.Linear,
    }


def _bf16_weights(module: Any) -> None:
    """Replaces FP8 parameters (built under ``fp8_model_init``) by BF16 copies."""
    import torch

    for pname, p in list(module.named_parameters(recurse=False)):
        if hasattr(p, "dequantize") and type(p).__name__ != "Parameter":
            new = torch.nn.Parameter(
                p.dequantize().to(torch.bfloat16).detach().clone(),
                requires_grad=p.requires_grad,
            )
            setattr(module, pname, new)
            # TE keeps a flag for "weights are FP8": they no longer are.
            if hasattr(module, "primary_weights_in_fp8"):
                module.primary_weights_in_fp8 = False


def apply(
    model: Any,
    policy: Policy,
    *,
    tokens: int,
    tp: int = 1,
    etp: Optional[int] = None,
    topk: Optional[int] = None,
    names: Optional[Mapping[str, str]] = None,
    execution: str = "eager",
) -> list[dict]:
    """Decides every TE module of ``model`` and makes the BF16 ones run BF16. ``tokens`` is the
    count the policy compares (``seq_length * micro_batch_size / cp``); ``topk`` is needed for
    grouped experts; ``execution`` is ``"graphed"`` when the step runs in CUDA graphs (eager
    otherwise). Build the optimizer after this call. Returns the decisions
    (:func:`plan_modules`)."""
    from .megatron import run_in_bf16

    check_device(policy)
    rows = plan_modules(
        model.named_modules(),
        policy,
        tokens=tokens,
        tp=tp,
        etp=etp,
        topk=topk,
        names=names,
        classes=te_classes(),
        execution=execution,
    )
    modules = dict(model.named_modules())
    for r in rows:
        if not r["fp8"]:
            m = modules[r["name"]]
            _bf16_weights(m)
            run_in_bf16(m)
    return rows
