"""Megatron's own per-module precision config (``--te-precision-config-file``,
``TransformerConfig.quant_recipe``) for a plan: :func:`te_precision_config` returns the file's
content, :func:`apply_te_precision_config` sets it on a config. The launch region is the
engine's (no global FP8 region unless a routed expert runs FP8 or CUDA-graphed steps run an FP8
module). Imports neither torch nor Megatron until :func:`apply_te_precision_config` runs."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any, Optional

from ._core import te_precision_config_json as _native_json
from ._megatron_config import (
    _config_model,
    _fp8_format,
    _layout_kwargs,
    _recipe_name,
    _say_once,
    check_device,
    load_policy,
)


def te_precision_config(
    model: Any,
    policy: Any = None,
    *,
    recipe: str = "blockwise",
    fp8_format: str = "e4m3",
    **plan_kw: Any,
) -> dict:
    """The content of Megatron's ``--te-precision-config-file`` for one layout and token count:
    ``{"configs": {...}, "matchers": {...}}``, what ``fp8sel te-precision-config`` writes as
    YAML, for ``RecipeConfig.from_config_dict``. ``model`` is a config file or a dict of
    Megatron fields (:func:`megatron_fields`); ``plan_kw`` are :func:`adaptive_fp8.plan`'s
    layout and token arguments. Imports neither torch nor Megatron. Delayed scaling raises
    :class:`adaptive_fp8.PlanError` (Megatron's per-module config refuses it; use
    :func:`enable`)."""
    return native_export(model, policy, recipe=recipe, fp8_format=fp8_format, **plan_kw)["config"]


def native_export(model: Any, policy: Any = None, **kw: Any) -> dict:
    """:func:`te_precision_config` with everything ``fp8sel te-precision-config`` says:
    ``{"config", "yaml", "region", "fp8_instances", "launch", "bf16_groups", "warnings"}``."""
    if model is not None and not isinstance(model, dict):
        model = os.fspath(model)
    out = json.loads(_native_json(model, policy, **kw))
    # Megatron reads the matchers as an ordered mapping (the first match wins).
    out["config"]["matchers"] = {
        m.pop("name"): {k: m[k] for k in ("type", "pattern", "config", "enabled")}
        for m in out["config"]["matchers"]
    }
    return out


@dataclass
class NativePlan:
    """What :func:`apply_te_precision_config` set: the region and the matchers' content."""

    region: str
    fp8_instances: int
    config: dict
    notes: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        lines = [
            f"adaptive_fp8: native per-module config, {self.fp8_instances} FP8 module instances "
            f"(region {self.region})"
        ]
        lines += [f"  note: {n}" for n in self.notes]
        for name, m in self.config["matchers"].items():
            lines.append(f"  {m['config']:4} {m['pattern']}  ({name})")
        return "\n".join(lines)


def _clear_fp8(config: Any, why: str) -> list[str]:
    """Runs the model outside any FP8 region: Megatron then builds BF16 weights, pads no expert
    tokens and opens no FP8 context per layer."""
    was = _fp8_format(config) if getattr(config, "fp8", None) else None
    config.fp8 = None
    if getattr(config, "fp8_param", False):
        config.fp8_param = False
    return [f"config.fp8 cleared (was {was}): {why}"] if was else []


def _forced(region: str, predicted: str, fp8_instances: Optional[int], why: Optional[str] = None) -> str:
    """The region asked for, refused where it would be wrong (``why``: the engine's reason the
    plan needs the FP8 region)."""
    if region == "auto":
        return predicted
    if region not in ("fp8", "bf16"):
        raise ValueError(f"region {region!r}: use auto, fp8 or bf16")
    if region == "bf16" and predicted == "fp8" and fp8_instances:
        raise ValueError(f"region bf16: this plan needs the global FP8 region: {why or 'the engine says so'}; "
                         f"fix: region auto or fp8")
    return region


#: What :func:`apply_te_precision_config` does with ``config.fp8_param`` where the FP8 region holds
#: a BF16 module: ``"keep"`` it (a warning: those modules dequantize FP8 weights every forward) or
#: ``"clear"`` it, as ``fp8sel te-precision-config``'s launch line has it (a note says so).
FP8_WEIGHTS = ("keep", "clear")


def apply_te_precision_config(
    config: Any, region: str = "auto", allow_missing: bool = False, fp8_weights: str = "keep"
) -> NativePlan:
    """Sets ``config.quant_recipe`` (Megatron's per-module precision, what
    ``--te-precision-config-file`` loads) from the fields :func:`enable` reads:
    ``fp8_dynamic_policy_path``, the layout, ``seq_length`` x ``micro_batch_size`` or
    ``fp8_dynamic_num_tokens``, ``fp8_recipe`` and ``fp8``. Call it before the model is built.
    When the plan's launch region is BF16 (no routed expert in FP8, eager steps), ``config.fp8``
    is cleared: BF16 modules then cost nothing and FP8 modules enter FP8 themselves. The FP8
    region (``config.fp8`` must be set) holds routed experts in FP8 and every CUDA-graphed plan
    with an FP8 module (the engine's ``fp8_need``). ``region`` forces ``"fp8"`` or ``"bf16"``
    (to measure both; a BF16 region the plan needs FP8 for is refused).
    In the FP8 region with ``config.fp8_param``, Megatron builds the BF16 modules with FP8
    weights, which they dequantize every forward: a warning and a note say so (the hook has
    no such cost); ``fp8_weights="clear"`` clears ``config.fp8_param`` there instead, as
    ``fp8sel te-precision-config`` launches the model (a note says so). A module without a rule
    at the layout raises :class:`adaptive_fp8.MissingRulesError` unless ``allow_missing=True``."""
    from megatron.core.quantization.quant_config import RecipeConfig

    if fp8_weights not in FP8_WEIGHTS:
        raise ValueError(f"fp8_weights {fp8_weights!r}: use {' or '.join(FP8_WEIGHTS)}")

    policy = load_policy(config)
    if policy is None:
        raise ValueError(
            "adaptive_fp8: config has no fp8_dynamic_policy_path; fix: set it to a policy "
            "made by `fp8sel merge-policy`"
        )
    check_device(policy)
    out = native_export(
        _config_model(config, policy),
        policy,
        recipe=_recipe_name(config) or "blockwise",
        fp8_format=_fp8_format(config),
        allow_missing=allow_missing,
        **_layout_kwargs(config),
    )
    for w in out["warnings"]:
        _say_once(w)
    notes: list[str] = []
    out["region"] = _forced(region, out["region"], out["fp8_instances"], out.get("fp8_need_why"))
    if out["region"] == "fp8" and out["fp8_instances"] and not getattr(config, "fp8", None):
        why = out.get("fp8_need_why") or "the plan runs FP8 modules in the FP8 region"
        raise ValueError(
            f"adaptive_fp8: config.fp8 is unset, but the plan needs the global FP8 region: {why}; "
            f"fix: set config.fp8 (--fp8-format "
            f"{_fp8_format(config)} --fp8-recipe {_recipe_name(config) or 'blockwise'}), as "
            f"`fp8sel te-precision-config` prints"
        )
    if out["region"] == "bf16":
        why = (
            "no module runs FP8: this is the BF16 model"
            if out["fp8_instances"] == 0
            else "FP8 modules enter FP8 themselves (override_nonquantized_autocast)"
        )
        if out.get("bf16_because"):
            why = (f"the policy's {out['bf16_because_instances']} FP8 module instances are written BF16: "
                   f"{out['bf16_because_why']}")
            _say_once(why)
        notes = _clear_fp8(config, why)
    elif getattr(config, "fp8_param", False) and out["bf16_groups"] and fp8_weights == "clear":
        config.fp8_param = False
        notes = [
            f"config.fp8_param cleared: the FP8 region holds {len(out['bf16_groups'])} BF16 module "
            f"group(s) ({', '.join(out['bf16_groups'])}), which megatron-core would build with FP8 "
            f"weights; launched as fp8sel te-precision-config says (without --fp8-param-gather)"
        ]
    elif getattr(config, "fp8_param", False):
        notes = _fp8_weights_in_bf16_modules(out["bf16_groups"])
        for n in notes:
            _say_once(n)
    config.quant_recipe = RecipeConfig.from_config_dict(out["config"])
    return NativePlan(out["region"], out["fp8_instances"], out["config"], notes)


def _fp8_weights_in_bf16_modules(bf16: list[str]) -> list[str]:
    """What ``config.fp8_param`` costs the native config in the FP8 region: megatron-core 0.19
    names its modules only after building them (``GPTModel`` hands each its per-module config
    in ``finish_init``), so the config reaches every module's forward but not its construction,
    and under the layers' FP8 weight init every module is built with FP8 weights. A module the
    config runs BF16 then dequantizes its weights in every forward (TE warns "quantized weights
    without quantized compute"); NVIDIA/Megatron-LM#7376 names modules during construction.
    The hook builds BF16 modules with BF16 weights. ``bf16``: the export's BF16 groups."""
    if not bf16:
        return []
    return [
        f"config.fp8_param (--fp8-param-gather) with the native per-module config: megatron-core "
        f"builds every TE module's weights in FP8 before the config reaches it, so the "
        f"{len(bf16)} BF16 module group(s) ({', '.join(bf16)}) hold FP8 weights and dequantize "
        f"them in every forward; fix: decide the modules with adaptive_fp8.megatron.enable "
        f"(BF16 modules get BF16 weights), or train without fp8_param"
    ]
