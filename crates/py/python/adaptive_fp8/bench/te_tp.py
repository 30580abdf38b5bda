"""Tensor-parallel TE modules with real communication, timed against the one-GPU per-rank mode.

    torchrun --nproc-per-node 2 -m adaptive_fp8.bench.te_tp --model fixtures/models/qwen2_5_72b.yaml \\
        --tokens 1024,2048,4096,8192,16384 --json tp2.json --md tp2.md

The one-GPU mode of `fp8sel bench --backend te` times each module at one rank's shape with no
communication. A Megatron trainer with sequence parallelism runs the same modules as TE's
`parallel_mode="column"` / `"row"` modules over a TP group: a column module all-gathers its
input (sequence-parallel shards) before its GEMM, a row module reduce-scatters its output; in
FP8, TE gathers the input already quantized, so FP8 also shrinks the all-gather. This tool
times, on every rank of the torchrun group (TP = world size), each dense module of the model
(qkv, proj, fc1, fc2 of the language model; the plan's per-rank shapes) both ways and in both
precisions, eager forward + backward with CUDA events, the slowest rank's median:

- `tp`: the TE module with `tp_group`, `sequence_parallel=True`, fed its sequence shard;
- `local`: the per-rank module alone (what the one-GPU mode times).

It prints, per module, the FP8 speedup in each way and the token count from which FP8 wins
(the crossover), so the effect of communication on the decision is read off directly. With
`--report FILE` it also writes the TP times as an fp8sel report (`provenance.tp_comm`), which
`fp8sel merge-policy --trainer eager` turns into a policy whose TP > 1 rules have the
communication in them (merge refuses to mix it with one-rank reports of TP > 1 layouts; TP 1
reports, which have no communication, merge with it). Before
timing, each precision's output is checked against the BF16 module of the same weights.
Expert (grouped) modules are not covered: their communication is an all-to-all, not TP.
"""

from __future__ import annotations

import argparse
import os
import sys
import json
from dataclasses import dataclass

from adaptive_fp8._common import emit, megatron_tp_environment, stat, te_api, time_fwd_bwd, write_atomic
from adaptive_fp8.bench.recipe_names import RECIPES  # te_tp runs every recipe but MXFP8 (Blackwell only)

DENSE = ("qkv", "proj", "fc1", "fc2")
FP8_TOL = 1.5e-1


class TpError(ValueError):
    """A model or layout this tool cannot run; the message says which."""


@dataclass(frozen=True)
class TpModule:
    """One dense module at TP: full (unsplit) features, and its per-rank shape."""

    group: str
    kind: str  # layernorm_column | column | row
    full_in: int
    full_out: int
    local_in: int
    local_out: int


def tp_modules(rows: list[dict], tp: int) -> list[TpModule]:
    """The language model's dense modules from the plan at this TP (pure)."""
    out = []
    for r in rows:
        if r["component"] != "llm" or r["ub_name"] not in DENSE or ".experts." in r["name"] or "shared_experts" in r["name"]:
            continue
        kind = r["module_kind"]
        if kind not in ("layernorm_column", "column", "row"):
            continue
        if kind == "row":
            full_in, full_out = r["in_features"] * tp, r["out_features"]
        else:
            full_in, full_out = r["in_features"], r["out_features"] * tp
        out.append(TpModule(r["ub_name"], kind, full_in, full_out, r["in_features"], r["out_features"]))
    if not out:
        raise TpError("the plan has no dense qkv/proj/fc1/fc2 modules in the language model")
    return out


def to_report(out: dict, plans: dict[int, dict], model_config: str, recipe: str, device: dict) -> dict:
    """An `fp8sel-report` of the TP-with-communication times, which `fp8sel merge-policy` reads
    (pure). `plans` maps each token count to the engine's plan at this TP (the per-rank shapes,
    TE classes and layer counts); `provenance.tp_comm` marks it, so it never merges with one-rank
    reports of TP > 1 layouts. Only points measured `ok` are written as ok; the rest keep their
    status and reason."""
    points = []
    model = None
    for r in out["results"]:
        plan = plans[r["tokens"]]
        model = plan.get("model", model)
        row = next(
            m
            for m in plan["modules"]
            if m["component"] == "llm" and m["ub_name"] == r["group"] and ".experts." not in m["name"] and "shared_experts" not in m["name"]
        )
        pt = {
            "component": "llm",
            "module": row["name"],
            "te_class": row["te_class"],
            "module_kind": row["module_kind"],
            "ub_name": row["ub_name"],
            "tp": out["tp"],
            "etp": 1,
            "num_gemms": 1,
            "tokens": r["tokens"],
            "gemm_rows": row["gemm_rows"],
            "padded_rows": row["gemm_rows"],
            "instances": row["layers"],
            "in_features": row["in_features"],
            "out_features": row["out_features"],
            "status": r["status"] if r["status"] in ("ok", "failed", "skipped") else "skipped",
        }
        if r["status"] == "ok":
            zero = {"median": 0.0, "p10": 0.0, "p90": 0.0}
            for prec in ("bf16", "fp8"):
                pt[prec] = dict(r["tp"][prec], cast_ms=zero, launches=0)
            pt["speedup"] = r["tp"]["bf16"]["total_ms"]["median"] / r["tp"]["fp8"]["total_ms"]["median"]
            pt["errors"] = {"fp8_fprop": r["tp"]["fp8_error"]}
        else:
            pt["reason"] = r.get("reason", r["status"])
        points.append(pt)
    return {
        "format": "fp8sel-report",
        "report_version": 1,
        "estimated": False,
        "provenance": {
            "tool_version": "adaptive_fp8.bench.te_tp",
            "device": device,
            "recipe": recipe,
            "scale_mode": "pow2",
            "fp8_param": True,
            "fp8_pad": 16,
            "warmup": out["warmup"],
            "iters": out["iters"],
            "timing": "te-eager",
            "model": model or "",
            "model_config": model_config,
            "parallel": {"tp": out["tp"], "ep": 1, "etp": 1, "cp": 1},
            "expert_split": "",
            "te_version": out["te_version"],
            "recompute": False,
            "tp_comm": True,
        },
        "points": points,
    }


def crossover(points: list[tuple[int, float]], threshold: float = 1.0) -> int | None:
    """The smallest token count from which FP8's speedup stays >= threshold at every larger count
    measured (pure); None when FP8 never wins to the end."""
    pts = sorted(points)
    best = None
    for tokens, s in reversed(pts):
        if s >= threshold:
            best = tokens
        else:
            break
    return best


def summarize(results: list[dict]) -> list[dict]:
    """Per module: crossover with and without communication (pure)."""
    out = []
    for g in dict.fromkeys(r["group"] for r in results):
        rs = [r for r in results if r["group"] == g and r.get("status") == "ok"]
        out.append(
            {
                "group": g,
                "crossover_tp": crossover([(r["tokens"], r["tp"]["speedup"]) for r in rs]),
                "crossover_local": crossover([(r["tokens"], r["local"]["speedup"]) for r in rs]),
            }
        )
    return out


def markdown(out: dict) -> str:
    lines = [
        f"TP {out['tp']} with communication (sequence parallel) vs one rank alone: {out['model']}, {out['recipe']}, "
        f"{out['device']} x {out['tp']}, TE {out['te_version']}; eager fwd+bwd ms, slowest rank's median",
        "",
        "| module | tokens | TP BF16 | TP FP8 | TP speedup | local BF16 | local FP8 | local speedup | comm share of TP BF16 |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in out["results"]:
        if r.get("status") != "ok":
            lines.append(f"| {r['group']} | {r['tokens']} | {r.get('status')}: {r.get('reason', '')} |||||||")
            continue
        t, loc = r["tp"], r["local"]
        share = 1 - loc["bf16_ms"] / t["bf16_ms"] if t["bf16_ms"] > 0 else 0.0
        lines.append(
            f"| {r['group']} | {r['tokens']} | {t['bf16_ms']:.3f} | {t['fp8_ms']:.3f} | {t['speedup']:.2f} "
            f"| {loc['bf16_ms']:.3f} | {loc['fp8_ms']:.3f} | {loc['speedup']:.2f} | {share:.0%} |"
        )
    lines += ["", "| module | FP8 from (TP, with communication) | FP8 from (one rank, no communication) |", "|---|---|---|"]
    for s in out["crossovers"]:
        lines.append(f"| {s['group']} | {s['crossover_tp'] or 'never'} | {s['crossover_local'] or 'never'} |")
    return "\n".join(lines) + "\n"


class Runner:
    """The torch/TE half, one per rank."""

    def __init__(self, args) -> None:
        import torch
        import torch.distributed as dist
        import transformer_engine.pytorch as te

        from adaptive_fp8.bench.te_worker import make_recipe

        from adaptive_fp8.bench.step_common import recipe_options

        if not torch.cuda.is_available():
            raise TpError("skipped: no CUDA device (torch.cuda.is_available() is False)")
        self.rank = int(os.environ.get("RANK", "0"))
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        dist.init_process_group("nccl")
        self.world = dist.get_world_size()
        self.group = dist.new_group(list(range(self.world)))
        self.torch, self.dist, self.te, self.args = torch, dist, te, args
        self.recipe = make_recipe(recipe_options(args))
        self.model_init, self.autocast, self.recipe_kw = te_api(te)

    def _build(self, m: TpModule, fp8: bool, tp: bool, norm: str):
        torch, te = self.torch, self.te
        torch.manual_seed(1234 + self.rank)
        kw = dict(bias=False, params_dtype=torch.bfloat16, device="cuda")
        if tp:
            kw.update(tp_group=self.group, tp_size=self.world, sequence_parallel=True, parallel_mode="row" if m.kind == "row" else "column")
            k, n = m.full_in, m.full_out
        else:
            k, n = m.local_in, m.local_out
        with self.model_init(enabled=fp8, recipe=self.recipe):
            if m.kind == "layernorm_column":
                return te.LayerNormLinear(k, n, normalization=norm, **kw)
            return te.Linear(k, n, **kw)

    def _input(self, m: TpModule, tokens: int, tp: bool):
        torch = self.torch
        gen = torch.Generator(device="cuda").manual_seed(99 + self.rank)
        rows = tokens // self.world if (tp and m.kind != "row") else tokens
        k = m.local_in if m.kind == "row" or not tp else m.full_in
        return torch.randn(rows, 1, k, device="cuda", dtype=torch.bfloat16, generator=gen).requires_grad_()

    def _time(self, mod, x, fp8: bool) -> dict:
        """fwd, bwd and total ms (median, p10, p90) over the iterations; each figure is the
        slowest rank's (the step waits for it)."""
        torch = self.torch

        def forward():
            with self.autocast(enabled=fp8, **{self.recipe_kw: self.recipe}):
                return mod(x)

        dy = torch.randn_like(forward())
        for _ in range(self.args.warmup):
            forward().backward(dy)

        def line_up():
            torch.cuda.synchronize()
            self.dist.barrier(group=self.group)

        fw, bw, tot = time_fwd_bwd(torch, forward, dy, self.args.iters, line_up)
        local = [stat(v) for v in (fw, bw, tot)]
        t = torch.tensor([x for st in local for x in (st["median"], st["p10"], st["p90"])], device="cuda")
        self.dist.all_reduce(t, op=self.dist.ReduceOp.MAX, group=self.group)
        v = t.tolist()
        names = ("fwd_ms", "bwd_ms", "total_ms")
        return {n: {"median": v[3 * i], "p10": v[3 * i + 1], "p90": v[3 * i + 2]} for i, n in enumerate(names)}

    def _same_weights(self, bf16, fp8) -> None:
        """Quantize the BF16 module's weights into the FP8 one, so the check compares precisions,
        not initializations."""
        src = dict(bf16.named_parameters())
        with self.torch.no_grad():
            for name, p in fp8.named_parameters():
                p.copy_(src[name])

    def _check(self, bf16, fp8, x) -> float:
        """FP8 output against the BF16 module of the same seed (same weights before quantizing)."""
        torch = self.torch
        with torch.no_grad():
            ref = bf16(x).float()
            with self.autocast(enabled=True, **{self.recipe_kw: self.recipe}):
                got = fp8(x).float()
        err = float((got - ref).norm() / ref.norm().clamp_min(1e-30))
        t = torch.tensor([err], device="cuda")
        self.dist.all_reduce(t, op=self.dist.ReduceOp.MAX, group=self.group)
        return float(t.item())

    def point(self, m: TpModule, tokens: int, norm: str) -> dict:
        r: dict = {"group": m.group, "kind": m.kind, "tokens": tokens}
        if tokens % self.world:
            return dict(r, status="skipped", reason=f"tokens not divisible by TP {self.world}")
        for way, tp in (("tp", True), ("local", False)):
            x = self._input(m, tokens, tp)
            b = self._build(m, False, tp, norm)
            f = self._build(m, True, tp, norm)
            self._same_weights(b, f)
            err = self._check(b, f, x)
            if not err <= FP8_TOL:
                return dict(r, status="failed", reason=f"{way} FP8 relative error {err:.3g} above {FP8_TOL}")
            tb, tf = self._time(b, x, False), self._time(f, x, True)
            bf, ff = tb["total_ms"]["median"], tf["total_ms"]["median"]
            r[way] = {"bf16_ms": bf, "fp8_ms": ff, "speedup": bf / ff, "fp8_error": err, "bf16": tb, "fp8": tf}
            del b, f, x
            self.torch.cuda.empty_cache()
        r["status"] = "ok"
        return r


def run(args) -> dict | None:
    import adaptive_fp8 as af8

    rn = Runner(args)
    results = []
    plans = {}
    for tokens in args.tokens:
        p = af8._plan(args.model, None, dict(tp=rn.world, seq_length=tokens, micro_batch_size=1, config_root=args.config_root))
        plans[tokens] = p
        arch = p["architecture"]["llm"]
        norm = "LayerNorm" if arch["norm"] == "LayerNorm" else "RMSNorm"
        for m in tp_modules(p["modules"], rn.world):
            r = rn.point(m, tokens, norm)
            results.append(r)
            if rn.rank == 0:
                print(f"  {m.group} {tokens}: " + (f"tp {r['tp']['speedup']:.2f} local {r['local']['speedup']:.2f}" if r["status"] == "ok" else r["status"]), file=sys.stderr, flush=True)
    rn.dist.barrier(group=rn.group)
    from adaptive_fp8.bench.step_common import te_recipe_name

    out = {
        "model": args.model,
        "tp": rn.world,
        "recipe": te_recipe_name(args),
        "device": rn.torch.cuda.get_device_name(),
        "te_version": __import__("transformer_engine").__version__,
        "warmup": args.warmup,
        "iters": args.iters,
        "cuda_device_max_connections": os.environ.get("CUDA_DEVICE_MAX_CONNECTIONS", ""),
        "results": results,
        "crossovers": summarize(results),
    }
    if args.report and rn.rank == 0:
        props = rn.torch.cuda.get_device_properties(0)
        device = {
            "name": out["device"],
            "compute_capability": f"{props.major}.{props.minor}",
            "driver": "",
            "cublaslt": "",
            "nvrtc": "",
            "sm_count": props.multi_processor_count,
        }
        from adaptive_fp8.bench.step_common import recipe_options

        recipe = {"current": "tensorwise"}.get(recipe_options(args)["recipe"], recipe_options(args)["recipe"])
        write_report(args.report, to_report(out, plans, args.model, recipe, device))
    rn.dist.destroy_process_group()
    return out if rn.rank == 0 else None


def write_report(path: str, report: dict) -> None:
    """Atomically: a reader never sees half a report."""
    write_atomic(path, json.dumps(report, indent=1) + "\n")


def parser() -> argparse.ArgumentParser:
    head, rest = __doc__.split("\n\n", 1)
    ap = argparse.ArgumentParser(prog="torchrun --nproc-per-node TP -m adaptive_fp8.bench.te_tp", description=head, epilog=rest, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="model config (any form fp8sel reads)")
    ap.add_argument("--config-root", help="how far Hydra defaults may reach (as in fp8sel)")
    ap.add_argument("--tokens", default="1024,2048,4096,8192,16384", help="sequence lengths (micro-batch 1), comma-separated")
    ap.add_argument("--warmup", type=int, default=5, help="untimed iterations per module and precision (default 5)")
    ap.add_argument("--iters", type=int, default=20, help="timed iterations; the median is kept (default 20)")
    ap.add_argument("--recipe", default="blockwise", choices=[r for r in RECIPES if r != "mxfp8"], help="the FP8 recipe (default blockwise)")
    ap.add_argument("--fp8-format", choices=["e4m3", "hybrid"], help="FP8 format (default: the recipe's TE default)")
    ap.add_argument("--json", help="write the results here (rank 0)")
    ap.add_argument(
        "--report",
        help="also write the TP-with-communication times as an fp8sel report (rank 0): "
        "fp8sel merge-policy --trainer eager --reports it for a policy with communication in its times",
    )
    ap.add_argument("--md", help="write the markdown tables here (rank 0)")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        args.tokens = [int(t) for t in args.tokens.split(",")]
        if any(t <= 0 for t in args.tokens):
            raise ValueError
    except ValueError:
        print(f"te_tp: --tokens {args.tokens!r}: expected comma-separated positive integers", file=sys.stderr)
        return 2
    if args.report and args.recipe == "delayed":
        print("te_tp: --report is for blockwise and tensorwise (a delayed report needs its amax options); drop --report or pick another recipe", file=sys.stderr)
        return 2
    if "WORLD_SIZE" not in os.environ:
        print("te_tp: run under torchrun: torchrun --nproc-per-node 2 -m adaptive_fp8.bench.te_tp --model ...", file=sys.stderr)
        return 2
    megatron_tp_environment()
    try:
        out = run(args)
    except TpError as e:
        print(f"te_tp: {e}", file=sys.stderr)
        return 2
    except ImportError as e:
        print(f"te_tp: skipped: Transformer Engine / torch not importable ({e})", file=sys.stderr)
        return 2
    if out is not None:
        emit(out, markdown(out), args.json, args.md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
