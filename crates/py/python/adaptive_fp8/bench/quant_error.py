"""What FP8 does to one GEMM operand under a TE recipe: the quantize-dequantize round trip,
emulated in torch from the recipe's documented rules, and its error against the BF16 tensor.

The rules (TE 2.20's recipes, as Megatron's ``--fp8-recipe`` selects them):

- ``blockwise`` (``Float8BlockScaling``): E4M3 for every operand; inputs and output gradients in
  1 x 128 tiles along the GEMM's inner dimension, weights in 128 x 128 blocks; each tile's scale
  is ``fp8_max / amax`` rounded down to a power of two.
- ``tensorwise`` / ``current`` (``Float8CurrentScaling``): one scale per tensor, ``fp8_max /
  amax``; E4M3 forward, output gradients E5M2 with ``--fp8-format hybrid``.
- ``mxfp8`` (``MXFP8BlockScaling``): 1 x 32 blocks along the inner dimension with a
  power-of-two (E8M0) scale ``2^(floor(log2 amax) - emax)``; values past the format's largest
  magnitude saturate.
- ``delayed`` (``DelayedScaling``): one scale per tensor from an amax history; emulated with the
  current tensor's amax (the history's best case), and named so in the report.
- ``nvfp4`` (``NVFP4BlockScaling``): FP4 E2M1 values (0, 0.5, 1, 1.5, 2, 3, 4, 6) in 1 x 16
  blocks along the inner dimension, weights in 16 x 16 blocks; each block's scale
  ``amax / 6`` stored in E4M3 under a per-tensor FP32 scale ``448 * 6 / amax``. Emulated with
  round-to-nearest everywhere: TE rounds the output gradients stochastically and applies a
  random Hadamard transform before the wgrad GEMM, which this does not, so the gradients' error
  here is the deterministic rounding's, not the training's.

``amax_epsilon`` (the seed's ``FP8_QUANT_*_AMAX_EPS``) floors every amax before the scale.
Imports torch only inside the functions that take tensors.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from adaptive_fp8.bench.recipe_names import RECIPES

#: The operands of one GEMM the report names, in its order.
OPERANDS = ("input", "weight", "grad_output")

#: Largest magnitude and the largest power-of-two exponent of each FP8 format.
FORMATS = {"e4m3": (448.0, 8), "e5m2": (57344.0, 15), "e2m1": (6.0, 2)}

#: E2M1's non-negative values, and the midpoints between neighbours (round to nearest).
E2M1_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
E2M1_MIDPOINTS = (0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0)


@dataclass(frozen=True)
class OperandRule:
    """How one operand is quantized: its format, its block (rows, cols) or None for one scale per
    tensor, the scale's rounding (``fp32``, ``pow2``, ``e8m0``, or ``nvfp4``'s two levels) and the
    amax floor."""

    fmt: str
    block: Optional[tuple[int, int]]
    scale: str
    amax_epsilon: float = 0.0


def recipe_rules(recipe: str, fp8_format: str = "e4m3", epsilons: Optional[dict[str, float]] = None) -> dict[str, OperandRule]:
    """The rule of each operand under ``recipe``; ``epsilons`` maps the recipe's ``QParams`` field
    names (``fp8_quant_fwd_inp``...) to their ``amax_epsilon`` (see ``adaptive_fp8.amax_eps.amax_epsilons``)."""
    if recipe not in RECIPES:
        raise ValueError(f"recipe {recipe!r}: expected one of {', '.join(RECIPES)}")
    if fp8_format not in ("e4m3", "hybrid"):
        raise ValueError(f"fp8 format {fp8_format!r}: expected e4m3 or hybrid")
    eps = epsilons or {}
    e_in, e_w, e_g = (eps.get(f, 0.0) for f in ("fp8_quant_fwd_inp", "fp8_quant_fwd_weight", "fp8_quant_bwd_grad"))
    grad_fmt = "e5m2" if fp8_format == "hybrid" else "e4m3"
    if recipe == "blockwise":
        return {
            "input": OperandRule("e4m3", (1, 128), "pow2", e_in),
            "weight": OperandRule("e4m3", (128, 128), "pow2", e_w),
            "grad_output": OperandRule(grad_fmt, (1, 128), "pow2", e_g),
        }
    if recipe == "nvfp4":
        return {
            "input": OperandRule("e2m1", (1, 16), "nvfp4"),
            "weight": OperandRule("e2m1", (16, 16), "nvfp4"),
            "grad_output": OperandRule("e2m1", (1, 16), "nvfp4"),
        }
    if recipe == "mxfp8":
        return {
            "input": OperandRule("e4m3", (1, 32), "e8m0"),
            "weight": OperandRule("e4m3", (1, 32), "e8m0"),
            "grad_output": OperandRule(grad_fmt, (1, 32), "e8m0"),
        }
    # Per-tensor: current scaling, and delayed scaling emulated with the current amax.
    return {
        "input": OperandRule("e4m3", None, "fp32", e_in),
        "weight": OperandRule("e4m3", None, "fp32", e_w),
        "grad_output": OperandRule(grad_fmt, None, "fp32", e_g),
    }


@dataclass
class ErrorSums:
    """Sums over the tensors of one (module, operand): enough to give the relative RMS error and
    the shares over all of them, whatever their sizes."""

    err2: float = 0.0
    ref2: float = 0.0
    underflow: int = 0
    nonzero: int = 0
    saturated: int = 0
    elements: int = 0
    nonfinite: int = 0
    tensors: int = 0

    def add(self, other: "ErrorSums") -> None:
        for f in self.__dataclass_fields__:
            setattr(self, f, getattr(self, f) + getattr(other, f))

    def summary(self) -> dict:
        """The report's operand entry."""
        rel = (self.err2 / self.ref2) ** 0.5 if self.ref2 > 0 else 0.0
        return {
            "rel_rms": rel,
            "underflow": self.underflow / self.nonzero if self.nonzero else 0.0,
            "saturated": self.saturated / self.elements if self.elements else 0.0,
            "elements": self.elements,
            "tensors": self.tensors,
            "nonfinite": self.nonfinite,
        }


def _blocked(torch: Any, x: Any, block: tuple[int, int]) -> tuple[Any, tuple[int, int]]:
    """``x`` (2-D) zero-padded to whole blocks and viewed as (R, br, C, bc)."""
    br, bc = block
    rows, cols = x.shape
    pr, pc = -rows % br, -cols % bc
    if pr or pc:
        x = torch.nn.functional.pad(x, (0, pc, 0, pr))
    return x.view(x.shape[0] // br, br, x.shape[1] // bc, bc), (rows, cols)


def _scale(torch: Any, amax: Any, rule: OperandRule) -> Any:
    fmax, emax = FORMATS[rule.fmt]
    amax = torch.clamp(amax, min=rule.amax_epsilon) if rule.amax_epsilon > 0 else amax
    # An all-zero block keeps scale 1: its values are exact whatever the scale.
    safe = torch.where(amax > 0, amax, torch.ones_like(amax))
    if rule.scale == "e8m0":
        return torch.exp2(emax - torch.floor(torch.log2(safe)))
    s = fmax / safe
    if rule.scale == "pow2":
        s = torch.exp2(torch.floor(torch.log2(s)))
    return torch.where(amax > 0, s, torch.ones_like(s))


def _e2m1(torch: Any, v: Any) -> Any:
    """``v`` (already within +-6) rounded to the nearest E2M1 value."""
    mids = torch.tensor(E2M1_MIDPOINTS, dtype=v.dtype, device=v.device)
    vals = torch.tensor(E2M1_VALUES, dtype=v.dtype, device=v.device)
    return torch.sign(v) * vals[torch.bucketize(v.abs(), mids)]


def _nvfp4(torch: Any, xb: Any, global_amax: Any) -> tuple[Any, Any]:
    """NVFP4's two-level scaling of blocked ``xb`` (R, br, C, bc): ``(dequantized, codes)``."""
    fmax, e4 = FORMATS["e2m1"][0], FORMATS["e4m3"][0]
    s_enc = torch.where(global_amax > 0, (e4 * fmax) / global_amax, torch.ones_like(global_amax))
    bamax = xb.abs().amax(dim=(1, 3), keepdim=True)
    # The block's decode scale as stored: E4M3, in the per-tensor scale's units.
    stored = (bamax / fmax * s_enc).clamp(max=e4).to(torch.float8_e4m3fn).float()
    scale = stored / s_enc
    safe = torch.where(scale > 0, scale, torch.ones_like(scale))
    codes = _e2m1(torch, (xb / safe).clamp(-fmax, fmax))
    return codes * safe, codes


def round_trip(x: Any, rule: OperandRule) -> tuple[Any, Any]:
    """``(dequantized, codes)``: ``x`` (any shape, the GEMM's inner dimension last) through FP8
    (or FP4) and back, in float32, and the low-precision values themselves (before the scale is
    undone)."""
    import torch

    fmax, _ = FORMATS[rule.fmt]
    if rule.scale == "nvfp4":
        x2 = x.detach().float().reshape(-1, x.shape[-1]) if x.dim() > 1 else x.detach().float().reshape(1, -1)
        xb, (rows, cols) = _blocked(torch, x2, rule.block or (1, 16))
        q, codes = _nvfp4(torch, xb, x2.abs().max())

        def unblock4(t: Any) -> Any:
            return t.reshape(t.shape[0] * t.shape[1], t.shape[2] * t.shape[3])[:rows, :cols].reshape(x.shape)

        return unblock4(q), unblock4(codes)
    dtype = torch.float8_e4m3fn if rule.fmt == "e4m3" else torch.float8_e5m2
    x2 = x.detach().float().reshape(-1, x.shape[-1]) if x.dim() > 1 else x.detach().float().reshape(1, -1)
    if rule.block is None:
        amax = x2.abs().max()
        s = _scale(torch, amax, rule)
        codes = (x2 * s).clamp(-fmax, fmax).to(dtype).float()
        return (codes / s).reshape(x.shape), codes.reshape(x.shape)
    xb, (rows, cols) = _blocked(torch, x2, rule.block)
    amax = xb.abs().amax(dim=(1, 3), keepdim=True)
    s = _scale(torch, amax, rule)
    codes = (xb * s).clamp(-fmax, fmax).to(dtype).float()

    def unblock(t: Any) -> Any:
        return t.reshape(t.shape[0] * t.shape[1], t.shape[2] * t.shape[3])[:rows, :cols].reshape(x.shape)

    return unblock(codes / s), unblock(codes)


def error_sums(x: Any, rule: OperandRule) -> ErrorSums:
    """The round trip's error sums for one tensor. Non-finite elements are counted and left out
    (a NaN gradient is the trainer's problem, not the format's)."""
    import torch

    ref = x.detach().float()
    finite = torch.isfinite(ref)
    nonfinite = int((~finite).sum())
    if nonfinite:
        ref = torch.where(finite, ref, torch.zeros_like(ref))
    q, codes = round_trip(ref, rule)
    fmax, _ = FORMATS[rule.fmt]
    nz = ref != 0
    return ErrorSums(
        err2=float(((q - ref) ** 2).sum()),
        ref2=float((ref**2).sum()),
        underflow=int((nz & (q == 0)).sum()),
        nonzero=int(nz.sum()),
        saturated=int((codes.abs() >= fmax).sum()),
        elements=ref.numel(),
        nonfinite=nonfinite,
        tensors=1,
    )
