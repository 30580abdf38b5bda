"""Adaptive (selective) FP8 for Transformer Engine trainers.

The engine behind ``fp8sel``, from Python: load a policy, decide a module, plan a whole model.
The trainer side of LoongForge's adaptive FP8 lives in two submodules that import torch and
Transformer Engine only when you import them:

- ``adaptive_fp8.megatron``: ``selective_fp8_init_decision`` and ``enable(config)`` for
  Megatron-core's TE layers;
- ``adaptive_fp8.te``: ``apply(model, policy, ...)`` for plain TE models.

Importing ``adaptive_fp8`` itself never imports torch.
"""

from __future__ import annotations

import json
import os
from typing import Any, Union

from ._core import ConfigError, Decision, PlanError, Policy, PolicyError, __version__
from ._core import plan_json as _plan_json

__all__ = [
    "ConfigError",
    "Decision",
    "PlanError",
    "Policy",
    "PolicyError",
    "__version__",
    "check",
    "plan",
    "plan_summary",
]

PolicyLike = Union[Policy, str, "os.PathLike[str]", None]


ModelLike = Union[str, "os.PathLike[str]", dict]


def _plan(model_config: ModelLike, policy: PolicyLike, kw: dict) -> dict:
    model = model_config if isinstance(model_config, dict) else os.fspath(model_config)
    return json.loads(_plan_json(model, policy, **kw))


def plan(
    model_config: ModelLike,
    policy: PolicyLike = None,
    **kw: Any,
) -> list[dict]:
    """Every TE module of a model with its decision: the rows of ``fp8sel explain --json``.

    ``model_config`` is a config file, or a dict of Megatron config fields
    (``adaptive_fp8.megatron.megatron_fields(config)`` makes one from a ``TransformerConfig``).
    Keyword arguments are the layout and tokens (``tp``, ``ep``, ``etp``, ``cp``,
    ``seq_length``, ``micro_batch_size``, ``num_tokens``, ``vit_num_tokens``, ``topk``,
    ``no_sequence_parallel``), ``execution`` (``"eager"``, the default, or ``"graphed"``: which
    threshold of a rule applies), ``vit_policy`` for a VLM, ``root`` (what relative
    ``fp8_dynamic_policy_path`` values resolve against) and ``config_root`` (how far Hydra
    ``defaults`` may reach). Unset values come from the config, as in ``fp8sel explain``.
    """
    return _plan(model_config, policy, kw)["modules"]


def plan_summary(
    model_config: ModelLike,
    policy: PolicyLike = None,
    **kw: Any,
) -> dict:
    """The summary of :func:`plan`: FP8 share of modules and FLOPs, tokens, missing rules."""
    return _plan(model_config, policy, kw)["summary"]


def check(
    model_config: ModelLike,
    policy: PolicyLike = None,
    **kw: Any,
) -> list[dict]:
    """The rules the policy lacks for this layout (``fp8sel check``): one dict per missing key,
    with its component, the key and the modules that fall back to BF16 because of it. Empty when
    the policy covers every module. A component without any policy is reported as a missing
    key ``{"component": ..., "key": None, "modules": [...]}``."""
    p = _plan(model_config, policy, kw)
    missing = list(p["summary"]["missing_rules"])
    for role in p["summary"]["components_without_policy"]:
        modules = [m["name"] for m in p["modules"] if m["component"] == role]
        missing.append({"component": role, "key": None, "modules": modules})
    return missing
