"""What the Megatron integrations read from a ``TransformerConfig``: the policy it names, its
layout and token fields, its execution and recipe, the model it builds (as the engine's config
dict), and the warnings said once. Imports neither torch nor Megatron."""

from __future__ import annotations

import functools
import os
import sys
import threading
import warnings
from pathlib import Path
from typing import Any, Optional

from . import Policy


_said: set[str] = set()


_said_lock = threading.Lock()


def _say_once(message: str) -> None:
    """Warn once per distinct message: a 94-layer model must not print 600 identical lines."""
    with _said_lock:
        if message in _said:
            return
        _said.add(message)
    warnings.warn(f"adaptive_fp8: {message}", stacklevel=3)


def this_gpu() -> Optional[str]:
    """The name of the trainer's current GPU (``torch.cuda.get_device_name()``) where the trainer
    has imported torch and started CUDA, else ``None``: never imports torch, never starts CUDA."""
    torch = sys.modules.get("torch")
    cuda = getattr(torch, "cuda", None)
    try:
        if cuda is None or not cuda.is_initialized():
            return None
        return str(cuda.get_device_name())
    except Exception:  # a broken or partial torch: say nothing rather than fail the build
        return None


def check_device(policy: Policy) -> None:
    """Warns (once) when the trainer's GPU is not the one the policy was measured on: where FP8
    starts to pay differs per GPU."""
    gpu = this_gpu()
    w = policy.device_warning(gpu) if gpu else None
    if w:
        _say_once(f"{policy.origin}: {w}")


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


#: Megatron's ``cuda_graph_impl`` values that capture the step (``none``, its default, is eager).
_GRAPHED_IMPLS = ("local", "transformer_engine", "full_iteration")


def execution_of(config: Any) -> str:
    """``graphed`` when Megatron captures the step in CUDA graphs (``config.cuda_graph_impl`` in
    local / transformer_engine / full_iteration, or the deprecated ``enable_cuda_graph`` /
    ``external_cuda_graph``), else ``eager``: the execution a rule's threshold is chosen by."""
    impl = getattr(config, "cuda_graph_impl", None)
    impl = str(getattr(impl, "value", impl) or "none")
    deprecated = getattr(config, "enable_cuda_graph", False) or getattr(config, "external_cuda_graph", False)
    return "graphed" if impl in _GRAPHED_IMPLS or deprecated else "eager"


def _recipe_name(config: Any) -> Optional[str]:
    r = getattr(config, "fp8_recipe", None)
    return None if r is None else str(getattr(r, "value", r))


def _fp8_format(config: Any) -> str:
    f = getattr(config, "fp8", None)
    return str(getattr(f, "value", f) or "e4m3")


#: TransformerConfig fields the engine reads to list a GPTModel's TE modules (the same names in
#: Megatron YAML configs).
_MODEL_FIELDS = (
    "num_layers", "hidden_size", "num_attention_heads", "ffn_hidden_size", "num_query_groups",
    "kv_channels", "gated_linear_unit", "normalization", "multi_latent_attention", "q_lora_rank",
    "kv_lora_rank", "qk_head_dim", "qk_pos_emb_head_dim", "v_head_dim", "num_moe_experts",
    "moe_ffn_hidden_size", "moe_router_topk", "moe_shared_expert_intermediate_size",
    "moe_layer_freq", "mtp_num_layers", "experimental_attention_variant", "attention_output_gate",
)


#: Gated DeltaNet's fields: every TransformerConfig has defaults for them, which Megatron reads
#: only under ``experimental_attention_variant="gated_delta_net"``; so are they passed.
_GDN_FIELDS = (
    "linear_attention_freq", "linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim",
    "linear_value_head_dim",
)


def megatron_fields(config: Any, name: Optional[str] = None) -> dict:
    """The model a ``TransformerConfig`` builds, as the config dict :func:`adaptive_fp8.plan`
    and :func:`te_precision_config` take (Megatron's field names). ``name`` is the model's name
    for the policy's model check (default: ``config.fp8_dynamic_model_name``, else none, and
    the check is skipped: a TransformerConfig does not say which model it is)."""
    out: dict = {}
    variant = getattr(config, "experimental_attention_variant", None)
    gdn = str(getattr(variant, "value", variant)) == "gated_delta_net"
    for f in _MODEL_FIELDS + (_GDN_FIELDS if gdn else ()):
        v = getattr(config, f, None)
        if v is None or (f == "multi_latent_attention" and not v):
            continue
        if f in ("moe_layer_freq", "linear_attention_freq") and not isinstance(v, (int, list)):
            v = list(v)
        if f == "experimental_attention_variant":
            v = str(getattr(v, "value", v))
        out[f] = v
    name = name or getattr(config, "fp8_dynamic_model_name", None)
    if name:
        out["name"] = str(name)
    return out


def _layout_kwargs(config: Any) -> dict:
    """The plan's layout and token arguments from the config fields :func:`enable` reads."""
    tp = _positive(getattr(config, "tensor_model_parallel_size", 1)) or 1
    kw = dict(
        tp=tp,
        ep=_positive(getattr(config, "expert_model_parallel_size", 1)) or 1,
        etp=_positive(getattr(config, "expert_tensor_parallel_size", None)) or tp,
        cp=_positive(getattr(config, "context_parallel_size", 1)) or 1,
        seq_length=_positive(getattr(config, "seq_length", None)),
        micro_batch_size=_positive(getattr(config, "micro_batch_size", None)) or 1,
        num_tokens=_positive(getattr(config, "fp8_dynamic_num_tokens", None)),
        topk=_positive(getattr(config, "moe_router_topk", None)),
        no_sequence_parallel=tp > 1 and not getattr(config, "sequence_parallel", True),
        execution=execution_of(config),
    )
    return {k: v for k, v in kw.items() if v is not None}


def _config_model(config: Any, policy: Policy) -> dict:
    models = policy.models
    return megatron_fields(config, name=models[0] if len(models) == 1 else None)
