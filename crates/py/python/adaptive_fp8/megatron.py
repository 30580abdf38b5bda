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

The decision itself is the Rust engine's (``adaptive_fp8.Policy.decide``), so it is identical
to ``fp8sel decide`` / ``fp8sel explain``. Importing this module does not import torch; only
:func:`enable` imports Megatron-core and Transformer Engine.
"""

from __future__ import annotations

import functools
import os
import threading
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from . import Policy

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

_said: set[str] = set()
_said_lock = threading.Lock()


def _say_once(message: str) -> None:
    """Warn once per distinct message: a 94-layer model must not print 600 identical lines."""
    with _said_lock:
        if message in _said:
            return
        _said.add(message)
    warnings.warn(f"adaptive_fp8: {message}", stacklevel=3)


@functools.lru_cache(maxsize=16)
def _load(path: str, mtime_ns: int, size: int) -> Policy:
    del mtime_ns, size  # part of the cache key: a rewritten policy is read again
    return Policy.load(path)


def _policy_path(config: Any) -> Optional[Path]:
    raw = getattr(config, "fp8_dynamic_policy_path", None)
    if not raw:
        return None
    p = Path(os.fspath(raw))
    if p.is_absolute():
        return p
    root = (
        getattr(config, "fp8_dynamic_policy_root", None)
        or os.environ.get("ADAPTIVE_FP8_ROOT")
        or os.getcwd()
    )
    return Path(root) / p


def load_policy(config: Any) -> Optional[Policy]:
    """The policy ``config.fp8_dynamic_policy_path`` names (relative to
    ``config.fp8_dynamic_policy_root``, ``$ADAPTIVE_FP8_ROOT`` or the working directory), read
    once per file version. ``None`` when the config names none. A broken policy raises
    :class:`adaptive_fp8.PolicyError`: training with a policy that cannot be read is a mistake
    to stop at, not to warn about."""
    path = _policy_path(config)
    if path is None:
        return None
    st = path.stat()
    return _load(str(path), st.st_mtime_ns, st.st_size)


def _positive(value: Any) -> Optional[int]:
    try:
        v = int(value)
    except (TypeError, ValueError):
        return None
    return v if v > 0 else None


def selective_fp8_init_decision(
    config: Any, te_cls: Any, ub_name: Optional[str], init_kwargs: Optional[dict] = None
) -> bool:
    """FP8 (``True``) or BF16 (``False``) for one TE module, at build time.

    - ``config``: the Megatron ``TransformerConfig`` (or LoongForge's model config). Read:
      ``fp8_dynamic_policy_path``, ``fp8_dynamic_num_tokens`` (> 0 overrides the token count),
      ``tensor_model_parallel_size``, ``expert_tensor_parallel_size`` (default: TP),
      ``context_parallel_size``, ``moe_router_topk``, ``seq_length``, ``micro_batch_size``,
      ``fp8_recipe`` (a warning when the policy was measured with another recipe).
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
) -> tuple[bool, str]:
    """The decision and its reason."""
    init_kwargs = dict(init_kwargs or {})
    name = te_cls if isinstance(te_cls, str) else getattr(te_cls, "__name__", str(te_cls))
    policy = load_policy(config)
    if policy is None:
        _say_once(
            "config has no fp8_dynamic_policy_path: every TE module runs BF16 "
            "(set it to a policy made by `fp8sel merge-policy`)"
        )
        return False, "no policy: BF16"
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
        return False, "no token count: BF16"
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
        return False, f"expert without {missing}: BF16"
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
        )
    except ValueError as e:
        _say_once(f"{name} (ub_name={ub_name!r}) cannot be decided: {e}; it runs BF16")
        return False, f"cannot be decided ({e}): BF16"
    if d.estimated:
        _say_once(
            f"the policy {policy.origin} is an ESTIMATE from the cost model, not a measurement"
        )
    _check_recipe(config, policy)
    return d.fp8, d.reason


def _check_recipe(config: Any, policy: Policy) -> None:
    """Warns (once) when the trainer's ``config.fp8_recipe`` is not the recipe the policy was
    measured with: crossovers differ per recipe."""
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

    @property
    def fp8_modules(self) -> int:
        return sum(1 for r in self.rows if r["fp8"])

    def __len__(self) -> int:
        return len(self.rows)

    def __str__(self) -> str:
        lines = [f"adaptive_fp8: {self.fp8_modules} of {len(self.rows)} TE modules run FP8"]
        for r in self.rows:
            g = f" num_gemms={r['num_gemms']}" if r["num_gemms"] else ""
            lines.append(
                f"  {'fp8 ' if r['fp8'] else 'bf16'} {r['te_class']} ub_name={r['ub_name']}{g}: "
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
            fp8, reason = _decide(
                _active["config"],
                known,
                ub,
                {"num_gemms": num_gemms, "is_expert": kwargs.get("is_expert", False)},
            )
            if fp8:
                original(self, *args, **kwargs)
            else:
                with model_init(enabled=False):
                    original(self, *args, **kwargs)
                run_in_bf16(self)
            plan.rows.append(
                {
                    "te_class": known,
                    "ub_name": ub,
                    "num_gemms": _positive(num_gemms),
                    "is_expert": bool(kwargs.get("is_expert", False)),
                    "fp8": fp8,
                    "reason": reason,
                }
            )
        finally:
            _building.depth = depth

    cls.__init__ = __init__


def enable(config: Any) -> Plan:
    """Gives Megatron-core the seed's callback: every TE linear module built after this call is
    decided by :func:`selective_fp8_init_decision` with ``config``. A BF16 module is built under
    ``fp8_model_init(enabled=False)`` (no FP8 weights) and runs under
    ``fp8_autocast(enabled=False)``. Returns the :class:`Plan`, filled in as the model is
    built, for the launcher to log. Calling it again replaces the config; :func:`disable` undoes
    it."""
    _check_version()
    from megatron.core.extensions import transformer_engine as mte

    missing = [c for c in WRAPPED_CLASSES if not hasattr(mte, c)]
    if missing or not getattr(mte, "HAVE_TE", True):
        raise RuntimeError(
            "adaptive_fp8.megatron: megatron.core.extensions.transformer_engine lacks "
            f"{', '.join(missing) or 'Transformer Engine'}; fix: install transformer_engine"
        )
    load_policy(config)  # a broken policy fails here, before any module is built
    disable()
    plan = Plan()
    _active["config"] = config
    _active["plan"] = plan
    for c in WRAPPED_CLASSES:
        _wrap(getattr(mte, c), plan)
    return plan


def disable() -> None:
    """Restores the TE wrappers' own ``__init__``."""
    for cls, original in _originals.items():
        cls.__init__ = original
    _originals.clear()
    _active.clear()
