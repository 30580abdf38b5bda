"""Adaptive FP8 for Megatron-core: the seed's build-time callback, and a hook that gives upstream
Megatron-core one.

LoongForge registers ``selective_fp8_init_decision(config, te_cls, ub_name, init_kwargs)`` with
its Megatron fork, which calls it once per TE module at construction; a module it answers
``False`` for is built and run in BF16 inside the FP8 region. Upstream Megatron-core has no such
callback, so :func:`enable` wraps the ``__init__`` of Megatron's TE wrapper classes:

    import adaptive_fp8.megatron as af8
    plan = af8.enable(config)          # before the model is built
    model = GPTModel(config, ...)      # every TE linear decided as it is built
    print(plan)                        # what was decided, module by module

Upstream Megatron also has a per-module precision config of its own
(``--te-precision-config-file``, ``TransformerConfig.quant_recipe``): :func:`te_precision_config`
returns that file's content for a plan, and :func:`apply_te_precision_config` sets it on a
config. Both paths launch in the cheaper FP8 region that is still correct (the engine's rule:
no global FP8 region unless a routed expert runs FP8), so a plan with no FP8 module is the BF16
model.

The decision itself is the Rust engine's (``adaptive_fp8.Policy.decide``), so it is identical
to ``fp8sel decide`` / ``fp8sel explain``. Importing this module does not import torch; only
:func:`enable` and :func:`apply_te_precision_config` import Megatron-core and Transformer Engine.
"""

from __future__ import annotations

import copy
import functools
import json
import os
import threading
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Optional

from . import Policy
from ._core import MissingRulesError
from ._core import plan_json as _plan_json
from ._megatron_config import (  # noqa: F401 (execution_of, load_policy, megatron_fields: API)
    _config_model,
    _layout_kwargs,
    _positive,
    _recipe_name,
    _said,
    _say_once,
    check_device,
    execution_of,
    load_policy,
    megatron_fields,
)
from .megatron_native import (  # noqa: F401 (re-exported: Megatron's native per-module config)
    NativePlan,
    _clear_fp8,
    _forced,
    apply_te_precision_config,
    native_export,
    te_precision_config,
)

#: Megatron-core minor versions the hook was tested with (the TE wrappers' ``__init__``
#: signatures it reads). Others are refused with a clear error; set
#: ``ADAPTIVE_FP8_ALLOW_UNTESTED_MEGATRON=1`` to try one anyway.
SUPPORTED_MEGATRON = ("0.19",)

#: The TE wrapper classes of ``megatron.core.extensions.transformer_engine`` the hook wraps.
WRAPPED_CLASSES = (
    "TELayerNormColumnParallelLinear",
    "TEColumnParallelLinear",
    "TERowParallelLinear",
    "TELinear",
    "TEColumnParallelGroupedLinear",
    "TERowParallelGroupedLinear",
)

_GROUPED = ("TEColumnParallelGroupedLinear", "TERowParallelGroupedLinear")


def selective_fp8_init_decision(
    config: Any, te_cls: Any, ub_name: Optional[str], init_kwargs: Optional[dict] = None
) -> bool:
    """FP8 (``True``) or BF16 (``False``) for one TE module, at build time.

    - ``config``: the Megatron ``TransformerConfig`` (or LoongForge's model config). Read:
      ``fp8_dynamic_policy_path``, ``fp8_dynamic_num_tokens`` (> 0 overrides the token count),
      ``cuda_graph_impl`` (graphed steps use a rule's ``min_tokens_graphed``),
      ``tensor_model_parallel_size``, ``expert_tensor_parallel_size`` (default: TP),
      ``context_parallel_size``, ``moe_router_topk``, ``seq_length``, ``micro_batch_size``,
      ``fp8_recipe`` (a warning when the policy was measured with another recipe and carries no
      per-module recipe plan, which would give each FP8 module its recipe itself).
    - ``te_cls``: the class (or its name), e.g. ``TERowParallelLinear``.
    - ``ub_name``: the module's ``tp_comm_buffer_name`` (qkv, proj, fc1, fc2, ...).
    - ``init_kwargs``: the module's constructor arguments; ``num_gemms`` (local experts) and
      ``is_expert`` are read from it. ``num_gemms`` is never defaulted.

    Where it cannot decide (no policy path, no token count, an expert without ``num_gemms`` or
    ``moe_router_topk``), the module runs BF16, which is never slower than BF16, and the reason is
    said once, not once per module.
    """
    return _decide(config, te_cls, ub_name, init_kwargs)[0]


def _decide(
    config: Any, te_cls: Any, ub_name: Optional[str], init_kwargs: Optional[dict]
) -> tuple[bool, str, Optional[str]]:
    """The decision, its reason, and the recipe an FP8 module runs under the policy's
    per-module recipe plan (``None``: the trainer's)."""
    init_kwargs = dict(init_kwargs or {})
    name = te_cls if isinstance(te_cls, str) else getattr(te_cls, "__name__", str(te_cls))
    policy = load_policy(config)
    if policy is None:
        _say_once(
            "config has no fp8_dynamic_policy_path: every TE module runs BF16 "
            "(set it to a policy made by `fp8sel merge-policy`)"
        )
        return False, "no policy: BF16", None
    tp = _positive(getattr(config, "tensor_model_parallel_size", 1)) or 1
    etp = _positive(getattr(config, "expert_tensor_parallel_size", None)) or tp
    cp = _positive(getattr(config, "context_parallel_size", 1)) or 1
    num_tokens = _positive(getattr(config, "fp8_dynamic_num_tokens", None))
    seq_length = _positive(getattr(config, "seq_length", None))
    mbs = _positive(getattr(config, "micro_batch_size", None)) or 1
    if num_tokens is None and seq_length is None:
        _say_once(
            "config has neither fp8_dynamic_num_tokens nor seq_length: every TE module runs "
            "BF16 (set one of them on the config before building the model)"
        )
        return False, "no token count: BF16", None
    is_expert = bool(init_kwargs.get("is_expert", False))
    grouped = name in _GROUPED
    num_gemms = _positive(init_kwargs.get("num_gemms"))
    topk = _positive(getattr(config, "moe_router_topk", None))
    if (grouped or is_expert) and (num_gemms is None or topk is None):
        missing = "num_gemms" if num_gemms is None else "moe_router_topk"
        _say_once(
            f"expert modules ({name}) have no {missing}: they run BF16 "
            "(num_gemms comes from the module's constructor, moe_router_topk from the config)"
        )
        return False, f"expert without {missing}: BF16", None
    try:
        d = policy.decide(
            name,
            ub_name=ub_name,
            tp=tp,
            etp=etp,
            num_gemms=num_gemms,
            topk=topk,
            seq_length=seq_length,
            micro_batch_size=mbs,
            cp=cp,
            num_tokens=num_tokens,
            expert=is_expert,
            execution=execution_of(config),
        )
    except ValueError as e:
        _say_once(f"{name} (ub_name={ub_name!r}) cannot be decided: {e}; it runs BF16")
        return False, f"cannot be decided ({e}): BF16", None
    if d.estimated:
        _say_once(
            f"the policy {policy.origin} is an ESTIMATE from the cost model, not a measurement"
        )
    _check_recipe(config, policy)
    check_device(policy)
    return d.fp8, d.reason, d.recipe


def _check_recipe(config: Any, policy: Policy) -> None:
    """Warns (once) when the trainer's ``config.fp8_recipe`` is not the recipe the policy was
    measured with (crossovers differ per recipe), unless the policy's recipe plan gives each FP8
    module its recipe."""
    recipe = getattr(config, "fp8_recipe", None)
    if not recipe:
        return
    try:
        w = policy.recipe_warning(str(recipe))
    except ValueError as e:
        _say_once(f"config.fp8_recipe: {e}")
        return
    if w:
        _say_once(f"{policy.origin}: {w}")


@dataclass
class Plan:
    """What :func:`enable` decided, one row per TE module, in build order."""

    rows: list[dict] = field(default_factory=list)
    #: The FP8 region the model runs in: ``"fp8"`` (``config.fp8`` kept; BF16 modules leave
    #: it) or ``"bf16"`` (``config.fp8`` cleared before the build; FP8 modules enter it).
    region: str = "fp8"
    #: What :func:`enable` changed on the config, and why, in words.
    notes: list[str] = field(default_factory=list)

    @property
    def fp8_modules(self) -> int:
        return sum(1 for r in self.rows if r["fp8"])

    def __len__(self) -> int:
        return len(self.rows)

    def __str__(self) -> str:
        lines = [
            f"adaptive_fp8: {self.fp8_modules} of {len(self.rows)} TE modules run FP8 "
            f"(region {self.region})"
        ]
        lines += [f"  note: {n}" for n in self.notes]
        for r in self.rows:
            g = f" num_gemms={r['num_gemms']}" if r["num_gemms"] else ""
            low = "fp4" if r.get("recipe") == "nvfp4" else "fp8"  # NVFP4 is Megatron's FP4 recipe
            prec = "bf16" if not r["fp8"] else f"{low} {r['recipe']}" if r.get("recipe") else "fp8 "
            lines.append(
                f"  {prec} {r['te_class']} ub_name={r['ub_name']}{g}: "
                f"{r['reason']}"
            )
        return "\n".join(lines)


_active: dict[str, Any] = {}
_originals: dict[type, Any] = {}
_building = threading.local()


def _check_version() -> None:
    import megatron.core as mc

    version = getattr(mc, "__version__", "unknown")
    supported = any(version == v or version.startswith(v + ".") for v in SUPPORTED_MEGATRON)
    if not supported and os.environ.get("ADAPTIVE_FP8_ALLOW_UNTESTED_MEGATRON") != "1":
        raise RuntimeError(
            f"adaptive_fp8.megatron: megatron-core {version} is not a tested version "
            f"({', '.join(v + '.x' for v in SUPPORTED_MEGATRON)}): the hook reads the TE "
            "wrappers' constructor arguments, which change between releases. Fix: use a tested "
            "version, or set ADAPTIVE_FP8_ALLOW_UNTESTED_MEGATRON=1 and compare enable()'s plan "
            "with `fp8sel explain`."
        )


def _te_contexts():
    import transformer_engine.pytorch as te

    from adaptive_fp8._common import te_api

    model_init, autocast, _ = te_api(te)
    return model_init, autocast


def run_in_bf16(module: Any, autocast: Any = None) -> None:
    """Runs a built TE module's forward (and so its backward) with FP8 off, inside an FP8 region.
    Marks it ``_selective_fp8_disabled``, as the seed does. ``autocast`` is TE's FP8 context
    (default: the installed TE's)."""
    if autocast is None:
        _, autocast = _te_contexts()
    forward = module.forward

    @functools.wraps(forward)
    def bf16_forward(*args: Any, **kwargs: Any) -> Any:
        with autocast(enabled=False):
            return forward(*args, **kwargs)

    module.forward = bf16_forward
    module._selective_fp8_disabled = True


def run_in_fp8(module: Any, fp8_context: Any, cache_weights: bool = False) -> None:
    """Runs a built TE module's forward in FP8 outside any FP8 region: ``fp8_context()`` is a
    fresh TE autocast with the trainer's recipe (and amax group), entered per call.

    Megatron re-arms a module's FP8 weight cache each step (``set_is_first_microbatch``) only
    while ``config.fp8`` is set, and the BF16 region clears it: left alone, a cached module
    would run every later step on its first step's FP8 weights. With ``cache_weights`` (eager
    steps) the module re-arms its own cache on its first forward after each optimizer step
    (:func:`_optimizer_steps`, any ``torch.optim.Optimizer``), so it quantizes its weights once
    per step, as under Megatron's own FP8, in any training loop. Otherwise (graphed steps,
    whose replays skip this Python) the cache is turned off (``disable_parameter_transpose_cache``,
    read by Megatron's TE wrappers each forward) and the weights are quantized each forward,
    once per micro-batch."""
    forward = module.forward
    steps = _optimizer_steps() if cache_weights else None
    if steps is None:
        module.disable_parameter_transpose_cache = True
    armed_at = [-1]

    @functools.wraps(forward)
    def fp8_forward(*args: Any, **kwargs: Any) -> Any:
        if steps is not None and armed_at[0] != steps[0]:
            module.is_first_microbatch = True  # the optimizer may have changed the weights
            armed_at[0] = steps[0]
        with fp8_context():
            return forward(*args, **kwargs)

    module.forward = fp8_forward
    module._selective_fp8_enabled = True


_steps_taken: Optional[list[int]] = None


def _optimizer_steps() -> list[int]:
    """A one-element list counting the optimizer steps of this process (every
    ``torch.optim.Optimizer``'s ``step``, through torch's global step hook, registered once):
    the FP8 modules of the BF16 region re-arm their weight cache when it moves."""
    global _steps_taken
    if _steps_taken is None:
        from torch.optim.optimizer import register_optimizer_step_post_hook

        counter = [0]

        def count(optimizer: Any, args: Any, kwargs: Any) -> None:
            counter[0] += 1

        register_optimizer_step_post_hook(count)
        _steps_taken = counter
    return _steps_taken


class _Prediction(NamedTuple):
    """The region :func:`enable` runs the model in, how many module instances run FP8 (None:
    unknown), why, and whether a forced BF16 region would be wrong (``needed``) rather than only
    slower."""

    region: str
    fp8_instances: Optional[int]
    why: str
    needed: bool = True


def _predict_region(config: Any, policy: Optional[Policy], allow_missing: bool = False) -> _Prediction:
    """The region :func:`enable` runs the model in, from the plan of the model the config
    builds. FP8 routed experts and CUDA-graphed FP8 modules of a model without experts keep the
    global region (the latter for speed only); delayed scaling keeps it whenever a module runs
    FP8 (its amax bookkeeping is per region); a config the engine cannot read keeps it too, as
    before."""
    if policy is None:
        return _Prediction("bf16", 0, "no policy: every module runs BF16")
    try:
        p = json.loads(
            _plan_json(
                _config_model(config, policy),
                policy,
                allow_missing=allow_missing,
                **_layout_kwargs(config),
            )
        )
    except MissingRulesError:
        raise
    except ValueError as e:
        return _Prediction("fp8", None, f"the model could not be planned from the config ({e})")
    for w in p["warnings"]:
        if w.startswith("warning: "):
            _say_once(w[len("warning: "):])
    fp8 = sum(m["layers"] for m in p["modules"] if m["use_fp8"] and m["component"] == "llm")
    if fp8 == 0:
        return _Prediction("bf16", 0, "no module runs FP8: this is the BF16 model")
    if p.get("fp8_region_need") == "routed_experts":
        return _Prediction("fp8", fp8, "routed experts run FP8 (Megatron pads their tokens only under config.fp8)")
    if p.get("fp8_region_need") == "graphed_weights" and not (p["architecture"].get("llm") or {}).get("moe"):
        # Megatron's graphs re-arm the FP8 weight cache once a step (their skip flag) only under
        # config.fp8: the hook leaves the cache to them, as the native config does (measured on
        # the H100: the BF16 region's own re-quantization cost up to 2% of a dense graphed step).
        # An MoE model keeps the BF16 region, where its BF16 experts are not padded for FP8.
        return _Prediction("fp8", fp8, "CUDA-graphed steps: Megatron's graphs re-arm the FP8 modules' "
                           "weight cache each step only under config.fp8", needed=False)
    if _recipe_name(config) == "delayed":
        return _Prediction("fp8", fp8, "delayed scaling keeps one FP8 region (its amax history is per region)")
    return _Prediction("bf16", fp8, "FP8 modules are dense: they enter FP8 themselves")


def _fp8_context_factory(config: Any, recipe_name: Optional[str] = None) -> Any:
    """A callable that opens the trainer's FP8 autocast (Megatron's recipe and amax group), read
    from the config while ``config.fp8`` is still set; with ``recipe_name``, that recipe's
    (``config`` is then a copy whose ``fp8_recipe`` is set to it)."""
    if recipe_name is not None:
        config.fp8_recipe = recipe_name
    import transformer_engine.pytorch as te
    from megatron.core import parallel_state
    from megatron.core.fp8_utils import get_fp8_recipe

    from adaptive_fp8._common import te_api

    import inspect

    _, autocast, recipe_kw = te_api(te)
    # TE 2.8 renamed fp8_autocast's fp8_group to autocast's amax_reduction_group.
    params = inspect.signature(autocast).parameters
    group_kw = "amax_reduction_group" if "amax_reduction_group" in params else "fp8_group"
    from adaptive_fp8.amax_eps import apply_amax_epsilons

    if recipe_name == "nvfp4":
        # Megatron builds FP4 recipes from its FP4 fields (--fp4-format e2m1 --fp4-recipe nvfp4).
        from megatron.core.fp4_utils import get_fp4_recipe

        config.fp4, config.fp4_recipe = "e2m1", "nvfp4"
        recipe = get_fp4_recipe(config)
    else:
        recipe = apply_amax_epsilons(get_fp8_recipe(config), dict(os.environ))
    group = None
    if parallel_state.model_parallel_is_initialized():
        group = parallel_state.get_amax_reduction_group(
            with_context_parallel=True, tp_only_amax_red=getattr(config, "tp_only_amax_red", False)
        )
    return lambda: autocast(enabled=True, **{recipe_kw: recipe, group_kw: group})


def _wrap(cls: type, plan: Plan) -> None:
    original = _originals.setdefault(cls, cls.__init__)
    model_init, _ = _te_contexts()

    @functools.wraps(original)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        # The wrappers call each other's __init__ through super(): decide once, in the
        # outermost call, for the object's own class.
        depth = getattr(_building, "depth", 0)
        if depth > 0:
            original(self, *args, **kwargs)
            return
        _building.depth = depth + 1
        try:
            name = type(self).__name__
            known = next(
                (c.__name__ for c in type(self).__mro__ if c.__name__ in WRAPPED_CLASSES), name
            )
            num_gemms = kwargs.get("num_gemms")
            if num_gemms is None and known in _GROUPED and args:
                num_gemms = args[0]
            ub = kwargs.get("tp_comm_buffer_name")
            is_expert = bool(kwargs.get("is_expert", False))
            fp8, reason, recipe = _decide(
                _active["config"], known, ub, {"num_gemms": num_gemms, "is_expert": is_expert}
            )
            expert = is_expert or known in _GROUPED
            _build(self, original, args, kwargs, fp8, expert, model_init, recipe)
            plan.rows.append(
                {
                    "te_class": known,
                    "ub_name": ub,
                    "num_gemms": _positive(num_gemms),
                    "is_expert": is_expert,
                    "fp8": fp8,
                    "recipe": recipe,
                    "reason": reason,
                }
            )
        finally:
            _building.depth = depth

    cls.__init__ = __init__


def _context_for(recipe: Optional[str]) -> Any:
    """The FP8 context of ``recipe`` (a per-module plan's; ``None``: the trainer's), made once
    per recipe."""
    if recipe is None or recipe == _active.get("recipe"):
        return _active.get("fp8_context")
    made = _active.setdefault("contexts", {})
    if recipe not in made:
        if _active["region"] == "fp8" and getattr(_active["config"], "fp8_param", False):
            raise RuntimeError(
                f"adaptive_fp8.megatron: the policy runs some modules {recipe} while the trainer's "
                f"recipe is {_active.get('recipe')} and fp8_param (FP8 weights) is on: a module's "
                "FP8 weights are built in the trainer's recipe. Fix: train without "
                "--fp8-param-gather, or use a policy without a per-module recipe plan"
            )
        made[recipe] = _fp8_context_factory(copy.copy(_active["fp8_config"]), recipe)
    return made[recipe]


def _nest(module: Any, fp8_context: Any) -> None:
    """Runs a module's forward in its own recipe's context inside the FP8 region (Megatron keeps
    re-arming its weight cache there)."""
    forward = module.forward

    @functools.wraps(forward)
    def own_recipe_forward(*args: Any, **kwargs: Any) -> Any:
        with fp8_context():
            return forward(*args, **kwargs)

    module.forward = own_recipe_forward
    module._selective_fp8_enabled = True


def _build(
    module: Any,
    original: Any,
    args: tuple,
    kwargs: dict,
    fp8: bool,
    expert: bool,
    model_init: Any,
    recipe: Optional[str] = None,
) -> None:
    """Builds one decided module for the plan's region. In the FP8 region a BF16 module gets
    BF16 weights and leaves FP8 per call; in the BF16 region a BF16 module is left as Megatron
    builds it (no cost) and an FP8 one enters FP8 per call. Under a per-module recipe plan an
    FP8 module of another recipe than the trainer's runs its own recipe's context per call."""
    other = fp8 and recipe is not None and recipe != _active.get("recipe")
    if _active["region"] == "fp8":
        if fp8:
            original(module, *args, **kwargs)
            if other:
                _nest(module, _context_for(recipe))
        else:
            with model_init(enabled=False):
                original(module, *args, **kwargs)
            run_in_bf16(module)
        return
    original(module, *args, **kwargs)
    if fp8 and _active.get("fp8_context") is not None:
        if expert:
            raise RuntimeError(
                "adaptive_fp8.megatron: a routed expert was decided FP8 after enable() ran the "
                "model in the BF16 region (its plan from the config had no FP8 expert); Megatron "
                "pads expert tokens for FP8 only under config.fp8. Fix: set every field of the "
                "model on the config before enable() (num_moe_experts, moe_router_topk, the layout)"
            )
        run_in_fp8(module, _context_for(recipe), cache_weights=_active.get("cache_weights", False))


def enable(config: Any, region: str = "auto", allow_missing: bool = False) -> Plan:
    """Gives Megatron-core the seed's callback: every TE linear module built after this call is
    decided by :func:`selective_fp8_init_decision` with ``config``. Returns the :class:`Plan`,
    filled in as the model is built, for the launcher to log. Calling it again replaces the
    config; :func:`disable` undoes it.

    The region is the cheaper correct one (:attr:`Plan.region`): when no module of the model the
    config describes runs FP8, ``config.fp8`` is cleared and the model is Megatron's BF16 model;
    when only dense modules run FP8, ``config.fp8`` is cleared too and those modules enter FP8
    themselves; when a routed expert runs FP8 (or delayed scaling is on), the global FP8 region
    stays and each BF16 module is built without FP8 weights and runs with FP8 off. ``region``
    forces ``"fp8"`` or ``"bf16"`` (to measure both; a BF16 region with FP8 experts is
    refused).

    A module of the model with no rule at the config's layout raises
    :class:`adaptive_fp8.MissingRulesError` before anything is wrapped, naming the keys and the
    command that makes a policy for the layout; ``allow_missing=True`` builds those BF16."""
    _check_version()
    from megatron.core.extensions import transformer_engine as mte

    missing = [c for c in WRAPPED_CLASSES if not hasattr(mte, c)]
    if missing or not getattr(mte, "HAVE_TE", True):
        raise RuntimeError(
            "adaptive_fp8.megatron: megatron.core.extensions.transformer_engine lacks "
            f"{', '.join(missing) or 'Transformer Engine'}; fix: install transformer_engine"
        )
    policy = load_policy(config)  # a broken policy fails here, before any module is built
    disable()
    plan = Plan()
    pred = _predict_region(config, policy, allow_missing)
    predicted, fp8_instances, why = pred.region, pred.fp8_instances, pred.why
    if region == "auto":
        region = predicted
    elif region == "bf16" and not pred.needed:
        pass  # a graphed dense model's FP8 modules quantize their weights every forward there
    else:
        region = _forced(region, predicted, fp8_instances, why)
    if region != predicted:
        why = f"region {region} asked for"
    if not getattr(config, "fp8", None):
        region, why = "bf16", "config.fp8 is not set: no FP8 region to leave"
    # The trainer's recipe and a copy of the config with FP8 on, for a per-module recipe
    # plan's other recipes (read before the BF16 region clears config.fp8).
    _active["recipe"] = str(getattr(config, "fp8_recipe", None) or "")
    _active["fp8_config"] = copy.copy(config)
    if region == "bf16":
        plan.region = "bf16"
        _active["fp8_context"] = (
            _fp8_context_factory(config) if getattr(config, "fp8", None) else None
        )
        plan.notes = _clear_fp8(config, why) or [why]
        # Graphed replays skip the forward's Python, where a module re-arms its weight cache.
        _active["cache_weights"] = execution_of(config) == "eager"
    else:
        plan.notes = [f"global FP8 region kept: {why}"]
    _active["config"] = config
    _active["plan"] = plan
    _active["region"] = plan.region
    for c in WRAPPED_CLASSES:
        _wrap(getattr(mte, c), plan)
    return plan


def disable() -> None:
    """Restores the TE wrappers' own ``__init__``."""
    for cls, original in _originals.items():
        cls.__init__ = original
    _originals.clear()
    _active.clear()
