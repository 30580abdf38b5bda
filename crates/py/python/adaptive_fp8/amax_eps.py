"""The seed's epsilon guard on upstream Transformer Engine: LoongForge's own TE build reads
``FP8_QUANT_FWD_INP_AMAX_EPS``, ``FP8_QUANT_FWD_WEIGHT_AMAX_EPS`` and
``FP8_QUANT_BWD_GRAD_AMAX_EPS``; upstream TE 2.x reads none of them, and carries the same knob
as the ``amax_epsilon`` of each ``QParams`` of ``Float8BlockScaling`` and
``Float8CurrentScaling``. Every recipe this package builds (the Megatron hook's, the
measurement tools') goes through :func:`apply_amax_epsilons`. Imports neither torch nor TE."""

from __future__ import annotations

import math
import sys
from typing import Any

#: The seed's epsilon guard (`FP8_QUANT_*_AMAX_EPS`, environment variables of the reference's own
#: TE build) and the `QParams` of upstream TE's Float8BlockScaling / Float8CurrentScaling whose
#: `amax_epsilon` each one sets.
AMAX_EPS_VARS = {
    "FP8_QUANT_FWD_INP_AMAX_EPS": "fp8_quant_fwd_inp",
    "FP8_QUANT_FWD_WEIGHT_AMAX_EPS": "fp8_quant_fwd_weight",
    "FP8_QUANT_BWD_GRAD_AMAX_EPS": "fp8_quant_bwd_grad",
}

_said_eps: set[str] = set()


def amax_epsilons(environ: dict) -> dict[str, float]:
    """The recipe fields the seed's variables set in `environ`, and their values (pure). A value
    that is not a non-negative number is an error naming the variable."""
    out: dict[str, float] = {}
    for var, field in AMAX_EPS_VARS.items():
        raw = environ.get(var)
        if raw is None or raw == "":
            continue
        try:
            v = float(raw)
        except ValueError:
            v = -1.0
        if not (v >= 0.0 and math.isfinite(v)):
            raise ValueError(f"{var}={raw!r}: not a non-negative number; fix: set it like the seed does, e.g. {var}=1e-12")
        out[field] = v
    return out


def apply_amax_epsilons(recipe: Any, environ: dict, say=None) -> Any:
    """Sets the seed's `FP8_QUANT_*_AMAX_EPS` as `amax_epsilon` on the recipe's quantizer
    parameters (upstream TE reads no such variable; its recipes carry the same knob), and says so
    once per setting. A recipe without those parameters (delayed scaling, MXFP8) is left alone,
    with a note."""
    import dataclasses

    eps = amax_epsilons(environ)
    if not eps:
        return recipe
    say = say or (lambda m: print(m, file=sys.stderr))
    name = type(recipe).__name__
    missing = [f for f in eps if not hasattr(recipe, f)]
    if missing:
        msg = f"adaptive_fp8: {name} has no {', '.join(missing)}: the FP8_QUANT_*_AMAX_EPS variables do not apply to it"
    else:
        for field, v in eps.items():
            setattr(recipe, field, dataclasses.replace(getattr(recipe, field), amax_epsilon=v))
        msg = f"adaptive_fp8: {name}: " + ", ".join(f"{f}.amax_epsilon={v:g}" for f, v in eps.items()) + " (from FP8_QUANT_*_AMAX_EPS)"
    if msg not in _said_eps:
        _said_eps.add(msg)
        say(msg)
    return recipe
