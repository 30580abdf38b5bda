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
import warnings
from typing import Any, Union

from ._core import (
    ConfigError,
    Decision,
    MissingRulesError,
    PlanError,
    Policy,
    PolicyError,
    __version__,
)
from ._core import plan_json as _plan_json

__all__ = [
    "AdaptiveFp8Warning",
    "CheckResult",
    "ConfigError",
    "Decision",
    "MissingRulesError",
    "PlanError",
    "PlanRows",
    "Policy",
    "PolicyError",
    "__version__",
    "check",
    "plan",
    "plan_summary",
]


class AdaptiveFp8Warning(UserWarning):
    """What a plan says the user must hear: a policy made for another model, an estimate, eager
    thresholds from GPU time alone, a default that changes decisions."""


class PlanRows(list):
    """:func:`plan`'s rows (one dict per module group), with the plan's ``warnings`` (the lines
    ``fp8sel explain`` prints on stderr) and its ``summary``."""

    warnings: list[str]
    summary: dict

    def __init__(self, rows: list[dict], warnings: list[str], summary: dict) -> None:
        super().__init__(rows)
        self.warnings = warnings
        self.summary = summary


class CheckResult(list):
    """:func:`check`'s missing keys (one dict each), with ``other_model`` (why the policy belongs
    to another model, one sentence per component), ``warnings`` and ``ok`` (what ``fp8sel
    check`` exits 0 on)."""

    warnings: list[str]
    other_model: list[str]

    def __init__(self, missing: list[dict], warnings: list[str], other_model: list[str]) -> None:
        super().__init__(missing)
        self.warnings = warnings
        self.other_model = other_model

    @property
    def ok(self) -> bool:
        return not self and not self.other_model


def _warn(lines: list[str]) -> None:
    for w in lines:
        if w.startswith("warning: "):
            warnings.warn(w[len("warning: "):], AdaptiveFp8Warning, stacklevel=3)

PolicyLike = Union[Policy, str, "os.PathLike[str]", None]


ModelLike = Union[str, "os.PathLike[str]", dict]


def _plan(model_config: ModelLike, policy: PolicyLike, kw: dict) -> dict:
    model = model_config if isinstance(model_config, dict) else os.fspath(model_config)
    # The package's own tools plan a model's structure without a policy: gaps are theirs to
    # read, not to refuse; the public calls say which they want.
    return json.loads(_plan_json(model, policy, **{"allow_missing": True, **kw}))


def plan(
    model_config: ModelLike,
    policy: PolicyLike = None,
    *,
    allow_missing: bool = False,
    **kw: Any,
) -> PlanRows:
    """Every TE module of a model with its decision: the rows of ``fp8sel explain --json``.

    ``model_config`` is a config file, or a dict of Megatron config fields
    (``adaptive_fp8.megatron.megatron_fields(config)`` makes one from a ``TransformerConfig``).
    Keyword arguments are the layout and tokens (``tp``, ``ep``, ``etp``, ``cp``,
    ``seq_length``, ``micro_batch_size``, ``num_tokens``, ``vit_num_tokens``, ``topk``,
    ``no_sequence_parallel``), ``execution`` (``"eager"``, the default, or ``"graphed"``: which
    threshold of a rule applies), ``vit_policy`` for a VLM, ``root`` (what relative
    ``fp8_dynamic_policy_path`` values resolve against) and ``config_root`` (how far Hydra
    ``defaults`` may reach). Unset values come from the config, as in ``fp8sel explain``.

    A module whose key has no rule at this layout raises :class:`MissingRulesError`, naming the
    keys and the command that makes a policy for the layout; ``allow_missing=True`` plans them
    BF16. The plan's warnings are emitted as :class:`AdaptiveFp8Warning` and kept on the result.
    """
    p = _plan(model_config, policy, dict(kw, allow_missing=allow_missing))
    _warn(p["warnings"])
    return PlanRows(p["modules"], p["warnings"], p["summary"])


def plan_summary(
    model_config: ModelLike,
    policy: PolicyLike = None,
    **kw: Any,
) -> dict:
    """The summary of :func:`plan`: FP8 share of modules and FLOPs, tokens, missing rules
    (listed, not refused)."""
    return _plan(model_config, policy, dict(kw, allow_missing=True))["summary"]


def check(
    model_config: ModelLike,
    policy: PolicyLike = None,
    **kw: Any,
) -> CheckResult:
    """The rules the policy lacks for this layout (``fp8sel check``): one dict per missing key,
    with its component, the key and the modules that fall back to BF16 because of it. Empty when
    the policy covers every module. A component without any policy is reported as a missing
    key ``{"component": ..., "key": None, "modules": [...]}``. ``other_model`` says where the
    policy was made for another model (other per-rank shapes); ``ok`` is what ``fp8sel check``
    exits 0 on. The plan's warnings are emitted as :class:`AdaptiveFp8Warning` and kept on the
    result."""
    p = _plan(model_config, policy, dict(kw, allow_missing=True))
    missing = list(p["summary"]["missing_rules"])
    for role in p["summary"]["components_without_policy"]:
        modules = [m["name"] for m in p["modules"] if m["component"] == role]
        missing.append({"component": role, "key": None, "modules": modules})
    _warn(p["warnings"])
    return CheckResult(missing, p["warnings"], p["summary"]["other_model"])
