"""Measure what an eager trainer's host pays per TE module step, on this machine.

    python -m adaptive_fp8.bench.probe_host --out host.json [--recipe blockwise] [--steps 30]

For each module kind (`te.LayerNormLinear`, `te.Linear` as column, row and duplicated,
`te.GroupedLinear` for the two grouped kinds) it times the eager forward + backward of a module
so small that the GPU finishes long before the host has launched the next kernels (64 tokens,
1024 x 1024), in BF16 and in FP8 (the chosen recipe, FP8 params): that step time is the host's
cost. Grouped kinds are measured with 1, 2, 4 and 8 local experts and fitted as
``base + per_expert x (experts - 1)``. The result is a host profile that
``fp8sel merge-policy --host-profile host.json`` (and ``gen-policy``) applies as
``max(gpu time, host time)`` per module: the cost an eager step pays when the host, not the GPU,
is the bottleneck.

Host times depend on the CPU, Python, torch and TE versions: measure on the machine that trains.
Without CUDA (or TE) the command prints ``skipped: ...`` and exits 0 without writing a file.
Importing this module never imports torch.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from typing import Iterable, Optional

from adaptive_fp8.bench.recipe_names import RECIPES

FORMAT = "adaptive-fp8-host-profile"

#: Module kinds and how each is built.
KINDS = ("layernorm_column", "column", "row", "duplicated", "column_grouped", "row_grouped")
GROUPED = ("column_grouped", "row_grouped")
EXPERTS = (1, 2, 4, 8)


class ProbeError(RuntimeError):
    """Why a probe cannot run here."""


def fit_per_expert(points: Iterable[tuple[int, float]]) -> tuple[float, float]:
    """Least-squares ``(base, per_expert)`` of host ms against local experts: the time at one
    expert and the slope per added expert, both clamped at 0 (noise must not make a negative
    cost)."""
    pts = [(float(e), float(t)) for e, t in points]
    if not pts:
        raise ValueError("no points to fit")
    if len(pts) == 1:
        return max(pts[0][1], 0.0), 0.0
    mx = sum(e for e, _ in pts) / len(pts)
    my = sum(t for _, t in pts) / len(pts)
    sxx = sum((e - mx) ** 2 for e, _ in pts)
    slope = 0.0 if sxx == 0 else sum((e - mx) * (t - my) for e, t in pts) / sxx
    slope = max(slope, 0.0)
    base = my - slope * (mx - 1.0)
    return max(base, 0.0), slope


def profile(measured: dict, device: str = "", te_version: str = "", recipe: str = "") -> dict:
    """The profile document from measurements.

    ``measured[kind][precision]`` is the median step ms for dense kinds, or a list of
    ``(experts, median ms)`` for grouped kinds; precision is ``"bf16"`` or ``"fp8"``.
    """
    kinds = {}
    for kind, by_prec in sorted(measured.items()):
        if kind not in KINDS:
            raise ValueError(f"unknown module kind {kind!r} (one of {', '.join(KINDS)})")
        entry = {}
        for prec in ("bf16", "fp8"):
            v = by_prec[prec]
            if kind in GROUPED:
                base, slope = fit_per_expert(v)
                entry[f"{prec}_ms"] = round(base, 4)
                entry[f"{prec}_per_expert_ms"] = round(slope, 4)
            else:
                entry[f"{prec}_ms"] = round(float(v), 4)
        for k, x in entry.items():
            if not (x == x and 0.0 <= x <= 1000.0):
                raise ValueError(f"{kind}.{k} = {x}: host times are between 0 and 1000 ms")
        kinds[kind] = entry
    if not kinds:
        raise ValueError("no kinds measured")
    return {"format": FORMAT, "version": 1, "device": device, "te_version": te_version, "recipe": recipe, "kinds": kinds}


def write_atomic(path: str, doc: dict) -> None:
    """Writes ``doc`` as JSON to ``path`` through a temp file in the same folder: never half a
    file."""
    d = os.path.dirname(os.path.abspath(path)) or "."
    fd, tmp = tempfile.mkstemp(prefix=".probe_host.", dir=d)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(doc, f, indent=2, sort_keys=True)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def table(doc: dict) -> str:
    """A short table of a profile."""
    lines = [f"host profile ({doc.get('device') or 'unknown device'}, TE {doc.get('te_version') or '?'}, {doc.get('recipe') or '?'})",
             f"{'kind':18} {'bf16 ms':>8} {'fp8 ms':>8} {'+bf16/expert':>13} {'+fp8/expert':>12}"]
    for kind, e in doc["kinds"].items():
        lines.append(
            f"{kind:18} {e['bf16_ms']:8.3f} {e['fp8_ms']:8.3f} "
            f"{e.get('bf16_per_expert_ms', 0.0):13.3f} {e.get('fp8_per_expert_ms', 0.0):12.3f}"
        )
    return "\n".join(lines)


class Probe:
    """The torch/TE half; imported only when a probe runs."""

    def __init__(self, recipe: str, steps: int, warmup: int) -> None:
        try:
            import torch
            import transformer_engine
            import transformer_engine.pytorch as te
        except ImportError as e:
            raise ProbeError(f"skipped: no Transformer Engine ({e})") from None
        if not torch.cuda.is_available():
            raise ProbeError("skipped: no CUDA device (torch.cuda.is_available() is False)")
        from adaptive_fp8._common import te_api
        from adaptive_fp8.bench.te_worker import make_recipe

        self.torch, self.te, self.steps, self.warmup = torch, te, steps, warmup
        self.te_version = transformer_engine.__version__
        self.recipe_name = recipe
        self.recipe = make_recipe({"recipe": recipe})
        self.model_init, self.autocast, self.recipe_kw = te_api(te)

    def step_ms(self, kind: str, experts: int, fp8: bool, tokens: int = 64, width: int = 1024) -> float:
        """Median eager fwd+bwd ms of a tiny module: the host's cost of one module step."""
        torch, te = self.torch, self.te
        kw = dict(bias=False, params_dtype=torch.bfloat16, device="cuda")
        with self.model_init(enabled=fp8, recipe=self.recipe):
            if kind in GROUPED:
                m = te.GroupedLinear(experts, width, width, **kw)
            elif kind == "layernorm_column":
                m = te.LayerNormLinear(width, width, normalization="RMSNorm", **kw)
            else:
                m = te.Linear(width, width, **kw)
        rows = tokens * experts
        x = torch.randn(rows, width, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        dy = torch.randn(rows, width, device="cuda", dtype=torch.bfloat16)
        splits = [tokens] * experts

        def once():
            with self.autocast(enabled=fp8, **{self.recipe_kw: self.recipe}):
                y = m(x, splits) if kind in GROUPED else m(x)
            y.backward(dy)

        for _ in range(self.warmup):
            once()
        torch.cuda.synchronize()
        times = []
        for _ in range(self.steps):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            once()
            b.record()
            torch.cuda.synchronize()
            times.append(a.elapsed_time(b))
        if not all(t == t and t > 0 for t in times):
            raise ProbeError(f"{kind}: non-positive or NaN step times {times}")
        return statistics.median(times)

    def run(self, progress=print) -> dict:
        measured: dict = {}
        for kind in KINDS:
            by = {}
            for prec, fp8 in (("bf16", False), ("fp8", True)):
                if kind in GROUPED:
                    by[prec] = [(e, self.step_ms(kind, e, fp8)) for e in EXPERTS]
                else:
                    by[prec] = self.step_ms(kind, 1, fp8)
                progress(f"  {kind:18} {prec}: {by[prec] if kind not in GROUPED else [round(t, 3) for _, t in by[prec]]}")
            measured[kind] = by
        return profile(measured, self.torch.cuda.get_device_name(), self.te_version, self.recipe_name)


def parser() -> argparse.ArgumentParser:
    head, _, rest = (__doc__ or "").partition("\n\n")
    ap = argparse.ArgumentParser(prog="python -m adaptive_fp8.bench.probe_host", description=head, epilog=rest, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="where to write the host profile (JSON)")
    ap.add_argument("--recipe", default="blockwise", choices=list(RECIPES), help="the FP8 recipe the trainer runs (default blockwise)")
    ap.add_argument("--steps", type=int, default=30, help="timed steps per figure (default 30)")
    ap.add_argument("--warmup", type=int, default=5, help="untimed steps first (default 5)")
    return ap


def main(argv: Optional[list[str]] = None) -> int:
    args = parser().parse_args(argv)
    if args.steps < 1 or args.warmup < 0:
        print("error: --steps must be at least 1 and --warmup at least 0", file=sys.stderr)
        return 2
    try:
        probe = Probe(args.recipe, args.steps, args.warmup)
    except ProbeError as e:
        print(str(e))
        return 0
    print(f"probe_host: timing {len(KINDS)} module kinds in BF16 and FP8 ({args.recipe}), {args.steps} steps each...", file=sys.stderr)
    doc = probe.run(progress=lambda s: print(s, file=sys.stderr))
    write_atomic(args.out, doc)
    print(table(doc))
    print(f"wrote {args.out}; use it with: fp8sel merge-policy --host-profile {args.out} --reports ... (or gen-policy --host-profile)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
