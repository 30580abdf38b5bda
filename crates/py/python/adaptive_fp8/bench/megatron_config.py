"""The Megatron judge's pure half: mode names, the ``TransformerConfig`` arguments of each model
(layers, graphs, the TP group), the plan's module groups, the comparisons of what each model
built with ``fp8sel explain``'s plan, and the summary of one count's timings. Tested on the CPU;
imports neither torch nor Megatron."""

from __future__ import annotations

import re
import statistics
from typing import Optional

from adaptive_fp8.bench.step_spec import StepBenchError
from adaptive_fp8.megatron import WRAPPED_CLASSES


#: TE wrapper classes of megatron.core.extensions.transformer_engine whose precision is planned:
#: the ones the hook wraps.
TE_CLASSES = WRAPPED_CLASSES


def plan_name(module_path: str) -> str:
    """The plan's name of a module path: the layer index dropped
    (``decoder.layers.3.mlp.linear_fc1`` -> ``decoder.layers.mlp.linear_fc1``)."""
    return re.sub(r"layers\.\d+\.", "layers.", module_path, count=1)


#: The integrations that apply a policy in the Megatron judge, each its own model: the hook
#: (``adaptive_fp8.megatron.enable``) and upstream's ``--te-precision-config-file``.
INTEGRATIONS = ("hook", "native")


def mode_names(policies: list[str], both_regions: bool, policy_names: list[str],
               integrations: tuple[str, ...] = INTEGRATIONS) -> list[tuple[str, str, Optional[str], str]]:
    """``(name, integration, policy, region)`` for every mode, in timing order; each policy
    through each of ``integrations``."""
    out = [("bf16", "bf16", None, "-"), ("fp8", "fp8", None, "-")]
    for p, pname in zip(policies, policy_names):
        label = pname.split(":", 1)[1]
        for integ in integrations:
            regions = ["auto", "fp8", "bf16"] if both_regions else ["auto"]
            for r in regions:
                suffix = "" if r == "auto" else f"@{r}"
                out.append((f"{integ}:{label}{suffix}", integ, p, r))
    return out


def mode_plan(doc: dict, mode: str) -> list[dict]:
    """The modules a mode's model should run as planned, from the plan document ``doc``: the
    native config writes every module BF16 where the engine says so (``native_bf16_because``:
    graphed FP8 modules beside BF16 routed experts), the hook runs the plan as it is."""
    if mode.startswith("native") and doc.get("native_bf16_because"):
        return [dict(m, use_fp8=False) for m in doc["modules"]]
    return doc["modules"]


def same_as_auto(resolved: dict, integ: str, policy: Optional[str], region: str) -> str:
    """Why a forced-region mode (``@fp8``, ``@bf16``) is not built, or ``""``: the automatic mode
    of the same integration and policy (``resolved``: ``(integration, policy)`` to the region it
    ran in, at this count and execution) is that model already; a second copy would only double
    the memory (and time the same model twice)."""
    auto = resolved.get((integ, policy))
    if region in ("fp8", "bf16") and auto == region:
        return f"the same model as {integ}'s automatic region ({region}), timed under its name"
    return ""


def dense_layers(arch: dict, layers: int, asked: Optional[int]) -> int:
    """How many of the judge's ``layers`` have a dense MLP (first, as in DeepSeek-V3): ``asked``
    (``--dense-layers``), else the model's share, rounded, as the TE-block steps build them
    (``step_spec.composition``: a 2-layer step of DeepSeek-V3, 3 dense of 61, is two MoE
    layers); every layer in a dense model."""
    moe = arch.get("moe")
    if not moe:
        if asked not in (None, layers):
            raise StepBenchError("the model has no MoE layers: --dense-layers must equal --layers or be left out")
        return layers
    dense = moe.get("dense_layers", 0)
    if asked is None:
        return round(layers * dense / arch["num_layers"]) if arch.get("num_layers") else 0
    if not 0 <= asked <= layers:
        raise StepBenchError(f"--dense-layers {asked} must be between 0 and --layers {layers}")
    if asked and not dense:
        raise StepBenchError("the model has no dense MLP layers: leave --dense-layers out")
    return asked


def config_kwargs(arch: dict, layers: int, dense_layers: int, vocab: int) -> dict:
    """``TransformerConfig`` keyword arguments for ``layers`` layers of the plan's architecture
    (``dense_layers`` of them with a dense MLP first, as DeepSeek-V3 has). Gated DeltaNet
    layers are refused: building them needs kernels this judge does not set up."""
    if arch.get("linear_attention"):
        raise StepBenchError(
            "the model has Gated DeltaNet layers (Qwen3-Next, Qwen3.5): the Megatron judge builds "
            "full-attention layers only; judge it in a trainer with the gated_delta_net variant"
        )
    kw = dict(
        num_layers=layers,
        hidden_size=arch["hidden_size"],
        ffn_hidden_size=arch["ffn_hidden_size"],
        num_attention_heads=arch["num_attention_heads"],
        num_query_groups=arch["num_query_groups"],
        kv_channels=arch["head_dim"],
        gated_linear_unit=arch["gated_mlp"],
        normalization="RMSNorm" if arch["norm"] == "RmsNorm" else "LayerNorm",
        add_bias_linear=False,
        bf16=True,
        hidden_dropout=0.0,
        attention_dropout=0.0,
    )
    if arch.get("attention_output_gate"):
        kw["attention_output_gate"] = True  # the QKV projection's width, as the plan has it
    moe = arch.get("moe")
    if moe:
        kw.update(
            num_moe_experts=moe["num_experts"],
            moe_ffn_hidden_size=moe["moe_ffn_hidden_size"],
            moe_router_topk=moe["router_topk"],
            moe_grouped_gemm=True,
            moe_token_dispatcher_type="alltoall",
            moe_router_load_balancing_type="none",
            moe_layer_freq=[0] * dense_layers + [1] * (layers - dense_layers),
        )
        if moe.get("shared_expert_ffn_hidden_size"):
            kw["moe_shared_expert_intermediate_size"] = moe["shared_expert_ffn_hidden_size"]
    mla = arch.get("mla")
    if mla:
        kw.update(
            multi_latent_attention=True,
            q_lora_rank=mla["q_lora_rank"],
            kv_lora_rank=mla["kv_lora_rank"],
            qk_head_dim=mla["qk_head_dim"],
            qk_pos_emb_head_dim=mla["qk_pos_emb_head_dim"],
            v_head_dim=mla["v_head_dim"],
            # DeepSeek-V3's q_a/kv_a layernorms: Megatron then builds the up projections as
            # TELayerNormColumnParallelLinear, the class (and policy kind) the plan has. Without
            # it they are TEColumnParallelLinear, a kind the policy has no rule for.
            qk_layernorm=True,
        )
    kw["_vocab"] = vocab
    return kw


def graph_kwargs(kw: dict, execution: str) -> dict:
    """The ``TransformerConfig`` CUDA-graph fields for an execution: none for ``eager``; for
    ``graphed``, Megatron's local graphs over the whole layer, or, where the layers are MoE
    (``kw`` has experts), the MoE scope Megatron supports for dropless training."""
    if execution == "eager":
        return {}
    if execution != "graphed":
        raise StepBenchError(f"execution {execution!r}: expected eager or graphed")
    modules = ["moe_router", "moe_preprocess"] if kw.get("num_moe_experts") else []
    return {"cuda_graph_impl": "local", "cuda_graph_modules": modules}


def compare_formats(ran: dict[str, str], fp8_format: str, plan_modules: list[dict] | None = None) -> list[str]:
    """FP8 module paths whose recipe ran another FP8 format than the one asked for (``e4m3`` or
    ``hybrid``: the TE blocks' and the inputs'), from ``ran`` (each module's ``fp8_format`` name as
    TE kept it). The judge's steps must run the recipe the policy was measured with (pure). With
    ``plan_modules``, a module the plan gives a recipe of its own (a per-module recipe plan) is
    left out: the run's format is the trainer's recipe's."""
    want = fp8_format.upper()
    own = {m["name"] for m in plan_modules or [] if m.get("recipe")}
    return [f"{path}: ran fp8_format {f}, the run asks for {want}" for path, f in sorted(ran.items())
            if f != want and plan_name(path) not in own]


def precision_kwargs(args, mode: str, recipe: str) -> dict:
    """The TransformerConfig fields of a mode's precision (pure): none for BF16; Megatron's FP4
    fields for nvfp4; else `fp8` (the format the TE blocks run: --fp8-format, else the recipe's
    TE default), `fp8_recipe`, `fp8_param`, and delayed scaling's amax options."""
    if mode == "bf16":
        return {}
    fp8_param = bool(getattr(args, "fp8_param", False))
    if recipe == "nvfp4":
        # Megatron's FP4 fields (--fp4-format e2m1 --fp4-recipe nvfp4), not its FP8 ones.
        return {"fp4": "e2m1", "fp4_recipe": "nvfp4", "fp4_param": fp8_param}
    from adaptive_fp8.bench.step_common import recipe_fields

    rf = recipe_fields(args)
    kw = {"fp8": rf["fp8_format"], "fp8_recipe": recipe, "fp8_param": fp8_param}
    if "amax_history_len" in rf:
        kw.update(fp8_amax_history_len=rf["amax_history_len"], fp8_amax_compute_algo=rf["amax_compute_algo"])
    return kw


def parallel_kwargs(tp: int, etp: Optional[int] = None) -> dict:
    """The ``TransformerConfig`` fields of a TP group of ``tp`` ranks (the torchrun world), as
    Megatron's training runs one: sequence parallelism on (Megatron's MoE layers require it with
    TP), and the expert tensor-parallel size where one is given. Nothing at TP 1."""
    if tp <= 1:
        return {}
    kw: dict = {"tensor_model_parallel_size": tp, "sequence_parallel": True}
    if etp is not None:
        kw["expert_tensor_parallel_size"] = etp
    return kw


def expert_tp(rows: list[dict]) -> Optional[int]:
    """The expert tensor-parallel size the plan's routed experts have (the config's
    ``expert_tensor_parallel_size``, else ``--etp``, else TP), or ``None`` without experts."""
    return next((int(r["key"]["etp"]) for r in rows if r.get("key") and "etp" in r["key"]), None)


def group_names(rows: list[dict]) -> dict[str, str]:
    """Each plan name's module group (``decoder.layers.mlp.linear_fc1`` -> ``fc1``): the names
    the step results and the step merge use."""
    from adaptive_fp8.bench.step_spec import component_rows, group_of

    return {r["name"]: group_of(r) for r in component_rows(rows, "llm")}


def unbuilt_mlps(plan_modules: list[dict], kw: dict) -> set[str]:
    """The planned MLP groups that the judge's layers (``kw``'s ``moe_layer_freq``) do not hold: an
    MoE model's dense MLP where every built layer is an MoE layer (``--dense-layers 0``, the
    default), its experts and shared experts where every built layer is dense."""
    freq = kw.get("moe_layer_freq")
    if not isinstance(freq, list):
        return set()
    names = {m["name"] for m in plan_modules if m["component"] == "llm" and m["name"].startswith("decoder.")}
    moe = {n for n in names if ".mlp.experts." in n or ".mlp.shared_experts." in n}
    dense = {n for n in names if ".mlp." in n} - moe
    return (dense if 0 not in freq else set()) | (moe if 1 not in freq else set())


def compare_precisions(seen: dict[str, bool], plan_modules: list[dict], unbuilt: set[str] = frozenset()) -> list[str]:
    """Module paths whose precision in the step differs from the plan's, in words; also every
    TE module the plan does not know and every planned group the model did not build (but
    ``unbuilt``: the groups its layers do not hold, :func:`unbuilt_mlps`)."""
    want = {m["name"]: bool(m["use_fp8"]) for m in plan_modules if m["component"] == "llm"}
    bad = []
    built = set()
    for path, fp8 in sorted(seen.items()):
        name = plan_name(path)
        built.add(name)
        if name not in want:
            bad.append(f"{path}: not in the plan")
        elif want[name] != fp8:
            bad.append(f"{path}: ran {'FP8' if fp8 else 'BF16'}, the plan says {'FP8' if want[name] else 'BF16'}")
    for name in sorted(set(want) - built - set(unbuilt)):
        if not name.startswith("mtp."):
            bad.append(f"{name}: planned, not built")
    return bad


def compare_recipes(ran: dict[str, str], plan_modules: list[dict], trainer_recipe: str,
                    seen: dict[str, bool] | None = None) -> list[str]:
    """FP8 module paths whose TE recipe in the step (``fp8_meta["recipe"]``'s class) is not the
    one the plan gives them: the module's own under a per-module recipe plan, else the trainer's
    ``trainer_recipe``; the hook and Megatron's native config must both build each module so.
    With ``seen`` (each module's precision in the step), a module that ran FP8 with no recipe
    read back is named too: the check never passes for want of what it checks."""
    from adaptive_fp8.bench.recipe_names import RECIPE_CLASSES

    want = {m["name"]: m.get("recipe") for m in plan_modules if m["component"] == "llm" and m["use_fp8"]}
    bad = [f"{path}: ran FP8, no recipe read back (fp8_meta has none)"
           for path, on in sorted((seen or {}).items()) if on and path not in ran and plan_name(path) in want]
    for path, cls in sorted(ran.items()):
        name = plan_name(path)
        if name not in want:
            continue  # a precision mismatch, said by compare_precisions
        recipe = want[name] or trainer_recipe
        if RECIPE_CLASSES.get(recipe, recipe) != cls:
            bad.append(f"{path}: ran {cls}, the plan says {recipe} ({RECIPE_CLASSES.get(recipe, recipe)})")
    return bad


def compare_classes(seen: dict[str, str], plan_modules: list[dict]) -> list[str]:
    """Module paths whose TE class in the built model differs from the plan's: the judge would
    time a model the policy's rules were not written for (another kind, another rule)."""
    want = {m["name"]: m["te_class"] for m in plan_modules if m["component"] == "llm"}
    return [
        f"{path}: built as {cls}, the plan has {want[plan_name(path)]}"
        for path, cls in sorted(seen.items())
        if plan_name(path) in want and want[plan_name(path)] != cls
    ]


def summarize_modes(tokens: int, groups: dict[str, list[str]], times: dict[str, list[float]], execution: str = "eager") -> dict:
    """One token count's row: every mode against the BF16 mode's paired rounds and against the
    fastest of BF16, all-FP8 and the oracle (the same table fields as the TE-block judge)."""
    from adaptive_fp8.bench.step_common import fastest_reference, mode_stats

    base = times["bf16"]
    best = min(statistics.median(base), statistics.median(times["fp8"]))
    ref = fastest_reference(times)
    row: dict = {"tokens": tokens, "execution": execution, "modes": {}}
    for m, ts in times.items():
        row["modes"][m] = mode_stats(ts, base, best, groups[m], baseline=m == "bf16", fastest=(ref, times[ref]))
    return row


def one_rank_experts(kw: dict, ep: int) -> bool:
    """Shrinks an MoE model's ``TransformerConfig`` kwargs to one of ``ep`` EP ranks' experts (in
    place): what one GPU builds for a layout whose experts are spread over ``ep`` ranks. True when
    it did."""
    if not kw.get("num_moe_experts") or ep <= 1:
        return False
    kw["num_moe_experts"] //= ep
    return True


def one_rank_refusal(arch: dict, ep: int) -> Optional[str]:
    """Why one GPU cannot build one of ``ep`` EP ranks of the plan's architecture ``arch``, or
    None. Megatron builds an MoE layer from 2 experts up (one is a dense MLP to it: its MoE CUDA
    graphs refuse it) and routes each token to ``top-k`` distinct experts, so a rank alone needs
    ``max(2, top-k)`` of them; a real rank with fewer gets the other ranks' tokens through the
    all-to-all, which one GPU does not have (Mixtral's 8 experts at EP 8: one a rank)."""
    moe = arch.get("moe")
    if not moe or ep <= 1:
        return None
    experts, topk = moe["num_experts"], moe["router_topk"]
    need = max(2, topk)
    if experts // ep >= need:
        return None
    fits = max((d for d in range(1, experts // need + 1) if experts % d == 0), default=1)
    return (
        f"EP {ep} leaves each rank {experts // ep} of the model's {experts} experts; the judge builds one "
        f"rank alone on this GPU, and Megatron needs at least {need} there (2 for an MoE layer, top-k {topk} "
        f"for the router), so it cannot time this layout. fix: judge at EP {fits} or below, with a policy made "
        f"there (fp8sel gen-policy --ep {fits}); gen-policy's own check times EP {ep} in TE blocks"
    )
