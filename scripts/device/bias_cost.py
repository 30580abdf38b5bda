"""What a linear's bias costs in TE, BF16 against FP8 (device machine, inside TE).

The step model and the judge time every module without a bias (docs/POLICY.md), where a model may
have one: Qwen2's `add_qkv_bias`, Megatron-LM's default `add_bias_linear`. In TE 2.20.2 a BF16
module fuses its bias gradient into the GEMM's epilogue; the blockwise FP8 recipe computes it
apart (`grad_output_preprocess`), tensorwise fuses it into its cast. This script asks whether
that changes a decision: per shape and token count, each module alone, forward and backward,
without and with a bias, in BF16, blockwise FP8 and tensorwise FP8 (the recipes as the TE worker
makes them: `make_recipe`, E4M3), interleaved over rounds in a shuffled order; first a
correctness check of every variant against a float32 reference of its own weights (and bias).
Two times per step: eager (wall time of one forward+backward, the GPU synchronized before and
after: host time included) and GPU (`te_worker.gpu_busy_ms`: the union of its kernels'
intervals). Prints one table (the FP8/BF16 ratio without and with the bias, and what the bias
adds, by precision) and writes the medians and p10-p90 bands (`stat`) to
$OUT/bias_cost.json.

    . scripts/device/te_env.sh; te_env /tmp/bias   # TE's site and the package on the path
    python3 scripts/device/bias_cost.py [--rounds 15] [--tokens 1024,4096,16384]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time

from adaptive_fp8._common import stat
from adaptive_fp8.bench.te_worker import gpu_busy_ms, make_recipe

# (name, kind, in_features, out_features): Qwen2.5-72B's qkv at TP 1 and 8 (its only biased
# module), and a Llama-3-8B-sized layer as Megatron-LM builds it with `add_bias_linear`.
SHAPES = [
    ("qwen72_qkv_tp1", "layernorm_column", 8192, 10240),
    ("qwen72_qkv_tp8", "layernorm_column", 8192, 1280),
    ("8b_qkv", "layernorm_column", 4096, 6144),
    ("8b_proj", "row", 4096, 4096),
    ("8b_fc1", "layernorm_column", 4096, 28672),
    ("8b_fc2", "row", 14336, 4096),
]
PRECISIONS = ("bf16", "blockwise", "tensorwise")
TOL = {"bf16": 2e-2, "blockwise": 8e-2, "tensorwise": 8e-2}


def build(te, torch, kind: str, k: int, n: int, bias: bool):
    kw = dict(bias=bias, params_dtype=torch.bfloat16, device="cuda")
    m = te.LayerNormLinear(k, n, normalization="RMSNorm", **kw) if kind == "layernorm_column" else te.Linear(k, n, **kw)
    if bias:
        with torch.no_grad():
            m.bias.normal_(0, 0.5)
    return m


def reference(torch, m, x, kind: str):
    xf = x.float()
    if kind == "layernorm_column":
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + m.eps) * m.layer_norm_weight.float()
    b = m.bias.float() if getattr(m, "use_bias", False) else None
    return torch.nn.functional.linear(xf, m.weight.float(), b)


class Variant:
    """One module at one count in one precision, with or without a bias: built, checked, timed."""

    def __init__(self, te, torch, autocast, shape, tokens: int, prec: str, bias: bool):
        name, kind, k, n = shape
        self.key = (name, tokens, prec, bias)
        self.torch = torch
        self.m = build(te, torch, kind, k, n, bias)
        gen = torch.Generator(device="cuda").manual_seed(tokens + k + n)
        self.x = torch.randn(tokens, k, device="cuda", dtype=torch.bfloat16, generator=gen).requires_grad_()
        self.dy = torch.randn(tokens, n, device="cuda", dtype=torch.bfloat16, generator=gen)
        rec = None if prec == "bf16" else make_recipe({"recipe": prec})
        self.ctx = lambda: autocast(enabled=rec is not None, recipe=rec)  # noqa: E731
        with self.ctx():
            y = self.m(self.x)
        with torch.no_grad():
            ref = reference(torch, self.m, self.x.detach(), kind)
        err = float((y.detach().float() - ref).norm() / ref.norm())
        if not err < TOL[prec]:
            sys.exit(f"bias_cost: {self.key}: relative error {err:.3e} above {TOL[prec]:.0e}")
        y.backward(self.dy)
        if bias and not bool(torch.isfinite(self.m.bias.grad).all()):
            sys.exit(f"bias_cost: {self.key}: bias gradient not finite")
        self.err, self.eager, self.gpu = err, [], []
        for _ in range(5):
            self.step()
        torch.cuda.synchronize()

    def step(self) -> None:
        with self.ctx():
            y = self.m(self.x)
        y.backward(self.dy)

    def time(self) -> None:
        torch = self.torch
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        self.step()
        torch.cuda.synchronize()
        self.eager.append((time.perf_counter() - t0) * 1e3)
        self.gpu.append(gpu_busy_ms(torch, self.step))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--tokens", default="1024,4096,16384")
    a = ap.parse_args()
    import torch
    import transformer_engine
    import transformer_engine.pytorch as te

    autocast = getattr(te, "autocast", None) or te.fp8_autocast
    tokens = [int(t) for t in a.tokens.split(",")]
    out = {"gpu": torch.cuda.get_device_name(0), "te": transformer_engine.__version__, "rounds": a.rounds, "rows": []}
    print(f"bias_cost: {out['gpu']}, TE {out['te']}, {a.rounds} rounds", file=sys.stderr)
    rng = random.Random(0)
    for shape in SHAPES:
        for t in tokens:
            vs = [Variant(te, torch, autocast, shape, t, p, b) for p in PRECISIONS for b in (False, True)]
            for _ in range(a.rounds):
                rng.shuffle(vs)
                for v in vs:
                    v.time()
            for v in sorted(vs, key=lambda v: (v.key[2], v.key[3])):
                out["rows"].append({"shape": shape[0], "tokens": t, "precision": v.key[2], "bias": v.key[3],
                                    "rel_err": v.err, "eager_ms": stat(v.eager), "gpu_ms": stat(v.gpu)})
            del vs
            torch.cuda.empty_cache()
            print(f"bias_cost: {shape[0]} {t} done", file=sys.stderr)
    path = os.path.join(os.environ.get("OUT", "."), "bias_cost.json")
    with open(path + ".tmp", "w") as f:
        json.dump(out, f, indent=1)
    os.replace(path + ".tmp", path)
    table(out["rows"])


def table(rows: list[dict]) -> None:
    med = {(r["shape"], r["tokens"], r["precision"], r["bias"], c): r[c]["median"] for r in rows for c in ("eager_ms", "gpu_ms")}
    print("shape            tokens  time   bf16 ms  +bias us | blockwise/bf16 nobias bias  +bias us | tensorwise/bf16 nobias bias  +bias us")
    for (s, t) in dict.fromkeys((r["shape"], r["tokens"]) for r in rows):
        for c in ("eager_ms", "gpu_ms"):
            g = lambda p, b: med[(s, t, p, b, c)]  # noqa: E731
            cells = [f"{s:16} {t:6}  {c[:-3]:5} {g('bf16', False):8.3f} {1e3 * (g('bf16', True) - g('bf16', False)):8.1f}"]
            for p in ("blockwise", "tensorwise"):
                cells.append(f"{p:10} {g(p, False) / g('bf16', False):6.3f} {g(p, True) / g('bf16', True):6.3f} "
                             f"{1e3 * (g(p, True) - g(p, False)):8.1f}")
            print(" | ".join(cells))


if __name__ == "__main__":
    main()
