"""The Transformer Engine measurement worker behind `fp8sel bench --backend te`.

`fp8sel` starts `python -m adaptive_fp8.bench.te_worker` and talks to it in JSON lines on stdin and
stdout: `{"op": "hello"}` answers the device and the versions; `{"op": "measure", "point": ...,
"opt": ...}` answers one report point (the `fp8sel-report` point schema) for a module at one
token count. Each point is timed as TE users run it: `te.LayerNormLinear`, `te.Linear` or
`te.GroupedLinear` at the per-rank shape, BF16 and FP8 (in the request's recipe: blockwise,
tensorwise, delayed or mxfp8, see `recipe_spec`; FP8 params unless told otherwise), forward then backward, optionally with the forward recomputed in the backward
(`torch.utils.checkpoint`, the reference tool's default).

Two figures per precision:
- `total_ms` (and fwd/bwd): the eager step, CUDA events around each synchronized iteration,
  host time included, as the reference tool times it;
- `gpu_total_ms`: the GPU's busy time per step from the profiler, kernels of all streams merged
  as wall-clock intervals (two overlapping kernels count once).

Before anything is timed, each precision's output is checked against a float32 reference of the
same module's (dequantized) weights: a point that misses the bound is reported `failed`.
Importing this module does not import torch until a request arrives.
"""

from __future__ import annotations

import json
import math
import sys
import traceback
from typing import Any

from adaptive_fp8._common import stat as _stat
from adaptive_fp8._common import time_fwd_bwd
from adaptive_fp8.amax_eps import apply_amax_epsilons
from adaptive_fp8.bench.recipe_names import RECIPE_CLASSES

#: Relative Frobenius error bounds of the checks.
BF16_TOL = 2e-2
FP8_TOL = 1.5e-1


def recipe_spec(opt: dict) -> tuple[str, dict]:
    """The TE recipe class name and its keyword arguments for a request's options.

    `fp8_format` is "e4m3" or "hybrid" (passed as the name of TE's `Format` member); delayed
    scaling also takes `amax_history_len` and `amax_compute_algo`. Pure: no TE import.
    """
    name = str(opt.get("recipe", "blockwise")).lower()
    if name not in RECIPE_CLASSES:
        raise ValueError(
            f"unknown FP8 recipe {name!r}: use blockwise, tensorwise (alias current), delayed, mxfp8 or nvfp4"
        )
    cls = RECIPE_CLASSES[name]
    kw: dict = {}
    fmt = str(opt.get("fp8_format", "hybrid" if name == "delayed" else "e4m3")).upper()
    if fmt not in ("E4M3", "HYBRID"):
        raise ValueError(f"unknown FP8 format {fmt!r}: use e4m3 or hybrid")
    if name in ("tensorwise", "current", "delayed"):
        kw["fp8_format"] = fmt
    elif fmt != "E4M3":
        raise ValueError(f"fp8sel measures TE's {cls} in E4M3 only; got fp8_format {fmt.lower()}")
    if name == "delayed":
        kw["amax_history_len"] = int(opt.get("amax_history_len", 1024))
        kw["amax_compute_algo"] = str(opt.get("amax_compute_algo", "max"))
        if kw["amax_compute_algo"] not in ("max", "most_recent"):
            raise ValueError(f"unknown amax_compute_algo {kw['amax_compute_algo']!r}: use max or most_recent")
    return cls, kw


def make_recipe(opt: dict, environ: dict | None = None):
    """The TE recipe object for a request (imports TE), with the seed's epsilon guard applied
    from `environ` (default: the process's environment)."""
    import os

    from transformer_engine.common import recipe as r

    cls, kw = recipe_spec(opt)
    if "fp8_format" in kw:
        kw["fp8_format"] = getattr(r.Format, kw["fp8_format"])
    return apply_amax_epsilons(getattr(r, cls)(**kw), dict(os.environ) if environ is None else environ)


def _round_up(x: int, m: int) -> int:
    return (x + m - 1) // m * m


def gpu_busy_ms(torch, step) -> float:
    """The GPU's busy time of one call of `step`, in ms: the union of all its kernels' intervals
    (every stream) from the profiler, two overlapping kernels counted once."""
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        step()
        torch.cuda.synchronize()
    spans = sorted(
        (e.start_ns(), e.start_ns() + e.duration_ns())
        for e in prof.profiler.kineto_results.events()
        if e.device_type() == torch.autograd.DeviceType.CUDA and e.duration_ns() > 0
    )
    busy, end = 0, None
    for s, t in spans:
        if end is None or s > end:
            busy += t - s
            end = t
        elif t > end:
            busy += t - end
            end = t
    return busy / 1e6


class Worker:
    def __init__(self) -> None:
        import torch
        import transformer_engine
        import transformer_engine.pytorch as te
        self.torch, self.te = torch, te
        self.te_version = transformer_engine.__version__
        self.recipe = make_recipe({})
        self._recipes: dict = {}
        from adaptive_fp8._common import te_api

        self.model_init, self.autocast, self.recipe_kw = te_api(te)

    def hello(self) -> dict:
        torch = self.torch
        p = torch.cuda.get_device_properties(0)
        return {
            "name": torch.cuda.get_device_name(0),
            "compute_capability": f"{p.major}.{p.minor}",
            "driver": "",
            "cublaslt": "",
            "nvrtc": "",
            "sm_count": p.multi_processor_count,
            "te_version": self.te_version,
            "torch_version": torch.__version__,
        }

    # -- one precision of one point ------------------------------------------------------------

    def _module(self, kind: str, k: int, n: int, gemms: int, norm: str | None, fp8: bool, fp8_param: bool):
        te, torch = self.te, self.torch
        kw = dict(bias=False, params_dtype=torch.bfloat16, device="cuda")
        with self.model_init(enabled=fp8 and fp8_param, recipe=self.recipe):
            if kind in ("column_grouped", "row_grouped"):
                return te.GroupedLinear(gemms, k, n, **kw)
            if kind == "layernorm_column":
                return te.LayerNormLinear(
                    k, n, normalization="RMSNorm" if norm != "LayerNorm" else "LayerNorm", **kw
                )
            return te.Linear(k, n, **kw)

    def _reference(self, m, x, splits, kind, norm):
        """float32 output of `m` on `x` from its own (dequantized) weights."""
        torch = self.torch
        F = torch.nn.functional
        try:
            from transformer_engine.pytorch.tensor import QuantizedTensor
        except ImportError:  # older TE layouts
            QuantizedTensor = ()  # noqa: N806
        deq = lambda w: (w.dequantize() if isinstance(w, QuantizedTensor) else w).float()  # noqa: E731
        xf = x.float()
        if kind == "layernorm_column":
            g = m.layer_norm_weight.float()
            if norm == "LayerNorm":
                xf = F.layer_norm(xf, (xf.shape[-1],), g, m.layer_norm_bias.float(), m.eps)
            else:
                xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + m.eps) * g
        if kind in ("column_grouped", "row_grouped"):
            outs, at = [], 0
            for i, r in enumerate(splits):
                outs.append(F.linear(xf[at : at + r], deq(getattr(m, f"weight{i}"))))
                at += r
            return torch.cat(outs)
        return F.linear(xf, deq(m.weight))

    def _use_recipe(self, opt: dict) -> None:
        key = repr(recipe_spec(opt))
        if key not in self._recipes:
            self._recipes[key] = make_recipe(opt)
        self.recipe = self._recipes[key]

    def _precision(self, pt: dict, opt: dict, fp8: bool) -> dict:
        torch = self.torch
        self._use_recipe(opt)
        kind = pt["module_kind"]
        k, n, gemms = pt["in_features"], pt["out_features"], pt["num_gemms"]
        grouped = kind in ("column_grouped", "row_grouped")
        pad = opt.get("pad", 16)
        splits = [_round_up(r, pad) for r in pt["splits"]] if fp8 else list(pt["splits"])
        rows = sum(splits)
        m = self._module(kind, k, n, gemms, pt.get("norm"), fp8, opt.get("fp8_param", True))
        gen = torch.Generator(device="cuda").manual_seed(1234)
        x = torch.randn(rows, k, device="cuda", dtype=torch.bfloat16, generator=gen).requires_grad_()
        dy = torch.randn(rows, n, device="cuda", dtype=torch.bfloat16, generator=gen)
        ctx = lambda: self.autocast(enabled=fp8, **{self.recipe_kw: self.recipe})  # noqa: E731

        def fwd(inp):
            with ctx():
                return m(inp, splits) if grouped else m(inp)

        def forward():
            if opt.get("recompute", True):
                return torch.utils.checkpoint.checkpoint(fwd, x, use_reentrant=False)
            return fwd(x)

        # Check first.
        y = forward()
        ref = self._reference(m, x.detach(), splits, kind, pt.get("norm"))
        err = float((y.detach().float() - ref).norm() / ref.norm().clamp_min(1e-30))
        y.backward(dy)
        torch.cuda.synchronize()
        bound = FP8_TOL if fp8 else BF16_TOL
        name = "fp8" if fp8 else "bf16"
        if not math.isfinite(err) or err > bound:
            raise CheckFailed(f"{name} fprop: relative error {err:.3e} above {bound:.0e}", name, err)
        # Time: eager steps with CUDA events, each synchronized (host time included).
        for _ in range(opt.get("warmup", 10)):
            forward().backward(dy)
        torch.cuda.synchronize()
        fw, bw, tot = time_fwd_bwd(torch, forward, dy, max(1, opt.get("iters", 10)))
        gpu = self._gpu_ms(lambda: forward().backward(dy), max(1, opt.get("iters", 10)))
        timing = {
            "fwd_ms": _stat(fw),
            "bwd_ms": _stat(bw),
            "total_ms": _stat(tot),
            "cast_ms": {"median": 0.0, "p10": 0.0, "p90": 0.0},
            "launches": 0,
            "gpu_total_ms": _stat(gpu),
        }
        del m, x, dy, y
        return {"timing": timing, "error": err, "padded_rows": rows}

    def _gpu_ms(self, step, iters: int) -> list[float]:
        """Per step: the union of all kernels' intervals (every stream), in ms."""
        return [gpu_busy_ms(self.torch, step) for _ in range(iters)]

    def measure(self, pt: dict, opt: dict) -> dict:
        torch = self.torch
        k, n = pt["in_features"], pt["out_features"]
        point = dict(pt["report_point"])
        point.setdefault("errors", {})
        if opt.get("fp8", True) and (k % 16 or n % 16):
            point["status"] = "skipped"
            point["reason"] = f"FP8 needs in/out features that are multiples of 16 ({k} x {n}); TE asserts the same"
            return point
        try:
            for name, on, fp8 in (("bf16", opt.get("bf16", True), False), ("fp8", opt.get("fp8", True), True)):
                if not on:
                    continue
                r = self._precision(pt, opt, fp8)
                point[name] = r["timing"]
                point["errors"][f"{name}_fprop"] = r["error"]
                if fp8:
                    point["padded_rows"] = r["padded_rows"]
            if point.get("bf16") and point.get("fp8"):
                point["speedup"] = point["bf16"]["total_ms"]["median"] / point["fp8"]["total_ms"]["median"]
            point["status"] = "ok"
        except CheckFailed as e:
            point["status"] = "failed"
            point["reason"] = str(e)
            point["errors"][f"{e.precision}_fprop"] = e.error
            point.pop("bf16", None), point.pop("fp8", None)
        except torch.cuda.OutOfMemoryError as e:
            point["status"] = "skipped"
            point["reason"] = f"out of memory: {e}"
            point.pop("bf16", None), point.pop("fp8", None)
        finally:
            torch.cuda.empty_cache()
        return point


class CheckFailed(Exception):
    def __init__(self, message: str, precision: str, error: float) -> None:
        super().__init__(message)
        self.precision, self.error = precision, error


def main() -> int:
    worker = None
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            req = json.loads(line)
            if worker is None:
                worker = Worker()
            if req.get("op") == "hello":
                resp: Any = {"ok": True, "device": worker.hello()}
            elif req.get("op") == "measure":
                resp = {"ok": True, "point": worker.measure(req["point"], req.get("opt", {}))}
            else:
                resp = {"ok": False, "error": f"unknown op {req.get('op')!r}"}
        except Exception as e:  # the error goes back to fp8sel, which reports the point skipped
            resp = {"ok": False, "error": f"{type(e).__name__}: {e}", "trace": traceback.format_exc()}
        sys.stdout.write(json.dumps(resp) + "\n")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
