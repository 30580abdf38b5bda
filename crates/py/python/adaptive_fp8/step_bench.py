"""The end-to-end judge: real Transformer Engine training steps, all-BF16 vs all-FP8 vs policies
vs a per-module oracle found by trying.

    python -m adaptive_fp8.step_bench --model fixtures/models/qwen2_5_72b.yaml --tp 8 \\
        --tokens 2048,8192 --policy policies/qwen2_5_72b.json --json out.json --md out.md

From the model config, through the engine's plan (the same per-rank shapes and the same
decisions as `fp8sel explain` and `adaptive_fp8.megatron`), it builds `--layers` transformer
layers with TE at one rank's shapes: attention (qkv `LayerNormLinear`, TE
`DotProductAttention`, proj `Linear`) and a gated MLP (fc1 `LayerNormLinear`, fc2 `Linear`).
A step is forward + backward + optimizer step (TE FusedAdam with fp32 master weights, the same
for every mode) on random bf16 activations, Float8BlockScaling recipe.

Modes: `bf16`, `fp8`, one per `--policy` (`policy:<file>`, modules chosen by the plan), and
`oracle`: two greedy passes over the module groups (qkv, proj, fc1, fc2), upward from all-BF16
and downward from all-FP8, keeping a switch only when the step got faster beyond the noise
(paired rounds, p90 of the ratio < 1); the faster of the two results is the oracle. It is found
by trying, not assumed, but a greedy search can still miss a better set, so a policy can beat it.
All modes are then timed interleaved (A B C A B C ...) for `--repeats` rounds of `--steps`
steps. Ratios to BF16 are paired within a round; their p10-p90 over rounds is the noise band,
and a band containing 1.0 is reported as a tie.

Scope: dense attention + MLP layers of one rank (no TP/EP communication in the step), eager
execution. MoE and MLA models are refused with that reason.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

GROUPS = ("qkv", "proj", "fc1", "fc2")


class StepBenchError(ValueError):
    """A model or option this benchmark cannot run; the message says which and why."""


def quantile(values: list[float], q: float) -> float:
    """Nearest-rank quantile (what the rest of the toolkit reports as p10/p90)."""
    if not values:
        raise StepBenchError("no timings to summarize")
    s = sorted(values)
    return s[min(len(s) - 1, round(q * (len(s) - 1)))]


def verdict(ratios: list[float]) -> str:
    """`faster`/`slower` only when the whole p10-p90 band of paired ratios is on one side of 1."""
    lo, hi = quantile(ratios, 0.1), quantile(ratios, 0.9)
    if hi < 1.0:
        return "faster"
    if lo > 1.0:
        return "slower"
    return "tie"


def _decoder_rows(rows: list[dict]) -> list[dict]:
    """The plan's rows of the language model's decoder layers (no ViT, no MTP layers)."""
    return [r for r in rows if r["component"] == "llm" and not r["name"].startswith("mtp.")]


@dataclass(frozen=True)
class Layout:
    """One rank's dense layer, from the plan."""

    hidden: int
    qkv_out: int
    proj_in: int
    fc1_out: int
    fc2_in: int
    heads: int
    groups: int
    head_dim: int
    gemm_rows: int

    @staticmethod
    def from_plan(rows: list[dict], head_dim: int, model: str) -> "Layout":
        by = {}
        for r in _decoder_rows(rows):
            if r["module_kind"] in ("column_grouped", "row_grouped") or "experts" in r["name"]:
                raise StepBenchError(f"{model}: MoE layers are not in the step benchmark yet (dense models only)")
            if r["ub_name"] not in GROUPS:
                raise StepBenchError(
                    f"{model}: module {r['name']} ({r['ub_name']}) is not a dense attention/MLP module; "
                    "MLA and other layouts are not in the step benchmark yet"
                )
            by[r["ub_name"]] = r
        missing = [g for g in GROUPS if g not in by]
        if missing:
            raise StepBenchError(f"{model}: the plan has no {', '.join(missing)} modules")
        q, p, f1, f2 = (by[g] for g in GROUPS)
        if head_dim <= 0 or p["in_features"] % head_dim or q["out_features"] % head_dim:
            raise StepBenchError(
                f"{model}: --head-dim {head_dim} does not divide proj in_features {p['in_features']} and qkv "
                f"out_features {q['out_features']}; pass the model's kv_channels as --head-dim"
            )
        heads = p["in_features"] // head_dim
        rest = q["out_features"] // head_dim - heads
        if rest <= 0 or rest % 2 or heads % (rest // 2):
            raise StepBenchError(
                f"{model}: qkv out_features {q['out_features']} is not (heads + 2*groups) * {head_dim} with "
                f"{heads} heads; pass the model's kv_channels as --head-dim"
            )
        if f1["out_features"] != 2 * f2["in_features"]:
            raise StepBenchError(f"{model}: fc1 is not a gated MLP (out {f1['out_features']} != 2 * fc2 in {f2['in_features']})")
        return Layout(
            hidden=q["in_features"],
            qkv_out=q["out_features"],
            proj_in=p["in_features"],
            fc1_out=f1["out_features"],
            fc2_in=f2["in_features"],
            heads=heads,
            groups=rest // 2,
            head_dim=head_dim,
            gemm_rows=q["gemm_rows"],
        )


def fp8_groups(rows: list[dict]) -> dict[str, bool]:
    """The plan's decision per module group (all layers of a dense model decide alike)."""
    return {r["ub_name"]: bool(r["use_fp8"]) for r in _decoder_rows(rows) if r["ub_name"] in GROUPS}


def key(fp8: dict[str, bool]) -> str:
    return "".join("8" if fp8[g] else "b" for g in GROUPS)


def summarize(tokens: int, modes: dict[str, dict[str, bool]], times: dict[str, list[float]], trials: list[dict]) -> dict:
    """One token count's table row per mode; `times[key]` are the interleaved rounds."""
    base = times[key(modes["bf16"])]
    best = min(statistics.median(base), statistics.median(times[key(modes["fp8"])]))
    row = {"tokens": tokens, "modes": {}, "oracle_trials": trials}
    for m, fp8 in modes.items():
        ts = times[key(fp8)]
        paired = [t / b for t, b in zip(ts, base)]
        row["modes"][m] = {
            "fp8_groups": [g for g in GROUPS if fp8[g]],
            "ms_median": statistics.median(ts),
            "ms_p10": quantile(ts, 0.1),
            "ms_p90": quantile(ts, 0.9),
            "vs_bf16_median": statistics.median(paired),
            "vs_bf16_p10": quantile(paired, 0.1),
            "vs_bf16_p90": quantile(paired, 0.9),
            "verdict_vs_bf16": verdict(paired) if m != "bf16" else "-",
            "vs_best_of_bf16_fp8": statistics.median(ts) / best,
        }
    return row


def search_oracle(pair, repeats: int, say=lambda trial: None, release=lambda mode: None) -> tuple[dict[str, bool], list[dict]]:
    """The per-module oracle, found by trying: `pair(a, b)` times modes a and b back to back once
    and returns ms(a) / ms(b).

    Two greedy passes, because a group can pay only together with others (a shared cast or
    optimizer cost) or lose only in company: upward from all-BF16 (switch a group to FP8 and keep
    it when the step is faster beyond the noise) and downward from all-FP8 (switch a group back to
    BF16 and keep that when faster beyond the noise). When the passes disagree, their results are
    compared head to head and the faster wins; a tie keeps the upward one (fewer FP8 groups).
    `release(mode)` is told of each mode the search no longer needs, so memory stays bounded.
    """
    trials: list[dict] = []

    def trial(search: str, group: str, cand: dict, cur: dict) -> bool:
        ratios = [pair(cand, cur) for _ in range(repeats)]
        t = {
            "search": search,
            "group": group,
            "ratio_median": statistics.median(ratios),
            "ratio_p10": quantile(ratios, 0.1),
            "ratio_p90": quantile(ratios, 0.9),
            "kept": verdict(ratios) == "faster",
        }
        trials.append(t)
        say(t)
        release(cur if t["kept"] else cand)
        return t["kept"]

    up = dict.fromkeys(GROUPS, False)
    for g in GROUPS:
        cand = dict(up, **{g: True})
        if trial("up", g, cand, up):
            up = cand
    down = dict.fromkeys(GROUPS, True)
    for g in GROUPS:
        cand = dict(down, **{g: False})
        if trial("down", g, cand, down):
            down = cand
    if key(up) == key(down):
        return up, trials
    return (down if trial("final", key(down) + " vs " + key(up), down, up) else up), trials


def markdown(out: dict) -> str:
    lines = [
        f"Step benchmark: {out['model']}, TP {out['tp']} (one rank's GEMMs, no communication), {out['layers']} layers, "
        f"{out['execution']}, {out['steps']} steps x {out['repeats']} interleaved rounds, {out['device']}, TE {out['te_version']}",
        "",
        "| tokens | mode | FP8 groups | ms/step p50 (p10-p90) | / BF16 p50 (p10-p90) | verdict | / min(BF16, FP8) |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in out["results"]:
        for m, r in row["modes"].items():
            lines.append(
                f"| {row['tokens']} | {m} | {','.join(r['fp8_groups']) or '-'} "
                f"| {r['ms_median']:.3f} ({r['ms_p10']:.3f}-{r['ms_p90']:.3f}) "
                f"| {r['vs_bf16_median']:.3f} ({r['vs_bf16_p10']:.3f}-{r['vs_bf16_p90']:.3f}) "
                f"| {r['verdict_vs_bf16']} | {r['vs_best_of_bf16_fp8']:.3f} |"
            )
    return "\n".join(lines) + "\n"


class Bench:
    """The torch/TE half; imported only when a benchmark runs."""

    def __init__(self, args) -> None:
        import inspect

        import torch
        import transformer_engine.pytorch as te

        from adaptive_fp8.te_worker import make_recipe

        if not torch.cuda.is_available():
            raise StepBenchError("skipped: no CUDA device (torch.cuda.is_available() is False)")
        self.torch, self.te, self.args = torch, te, args
        self.recipe = make_recipe(recipe_options(args))
        self.model_init = getattr(te, "quantized_model_init", None) or te.fp8_model_init
        self.autocast = getattr(te, "autocast", None) or te.fp8_autocast
        self.recipe_kw = "recipe" if "recipe" in inspect.signature(self.autocast).parameters else "fp8_recipe"

    def build(self, L: Layout, fp8: dict[str, bool]):
        torch, te = self.torch, self.te
        from adaptive_fp8.megatron import run_in_bf16

        kw = dict(bias=False, params_dtype=torch.bfloat16, device="cuda")

        def make(group, ctor):
            with self.model_init(enabled=fp8[group], recipe=self.recipe):
                m = ctor()
            if not fp8[group]:
                run_in_bf16(m)
            return m

        layers = torch.nn.ModuleList()
        for _ in range(self.args.layers):
            layer = torch.nn.Module()
            layer.qkv = make("qkv", lambda: te.LayerNormLinear(L.hidden, L.qkv_out, normalization="RMSNorm", **kw))
            layer.attn = te.DotProductAttention(L.heads, L.head_dim, num_gqa_groups=L.groups, attn_mask_type="causal", qkv_format="sbhd")
            layer.proj = make("proj", lambda: te.Linear(L.proj_in, L.hidden, **kw))
            layer.fc1 = make("fc1", lambda: te.LayerNormLinear(L.hidden, L.fc1_out, normalization="RMSNorm", **kw))
            layer.fc2 = make("fc2", lambda: te.Linear(L.fc2_in, L.hidden, **kw))
            layers.append(layer)
        return layers

    def step_fn(self, layers, L: Layout):
        torch = self.torch
        F = torch.nn.functional
        n, hd = L.gemm_rows, L.head_dim
        gen = torch.Generator(device="cuda").manual_seed(7)
        x0 = torch.randn(n, 1, L.hidden, device="cuda", dtype=torch.bfloat16, generator=gen)
        params = [p for p in layers.parameters() if p.requires_grad]
        # One optimizer for every mode (fp32 master weights, as Megatron keeps main params), so
        # a mode's time differs only by its GEMM precision.
        from transformer_engine.pytorch.optimizers import FusedAdam

        opt = FusedAdam(params, lr=1e-5, master_weights=True)
        losses = []

        def step():
            x = x0
            with self.autocast(enabled=True, **{self.recipe_kw: self.recipe}):
                for m in layers:
                    q, k, v = m.qkv(x).split([L.heads * hd, L.groups * hd, L.groups * hd], dim=-1)
                    a = m.attn(q.reshape(n, 1, L.heads, hd), k.reshape(n, 1, L.groups, hd), v.reshape(n, 1, L.groups, hd))
                    x = x + m.proj(a)
                    g, u = m.fc1(x).chunk(2, dim=-1)
                    x = x + m.fc2(F.silu(g) * u)
            loss = x.float().pow(2).mean()
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            losses.append(loss.detach())

        step.losses = losses
        return step

    def check(self, step, name: str) -> None:
        """Warm up and check the step computes something finite and non-trivial."""
        for _ in range(self.args.warmup):
            step()
        ls = [float(v) for v in step.losses[-self.args.warmup :]]
        step.losses.clear()
        if not all(v == v and 0 < v < float("inf") for v in ls):
            raise StepBenchError(f"mode {name}: warmup losses are not finite and positive: {ls}")

    def time_ms(self, step) -> float:
        """ms per step over `--steps` back-to-back steps (no sync between them, as in training)."""
        torch = self.torch
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        a.record()
        for _ in range(self.args.steps):
            step()
        b.record()
        torch.cuda.synchronize()
        step.losses.clear()
        return a.elapsed_time(b) / self.args.steps


def run(args, log=print) -> dict:
    import adaptive_fp8 as af8

    bench = Bench(args)
    torch = bench.torch
    results = []
    for tokens in args.tokens:
        kw = dict(tp=args.tp, seq_length=tokens, micro_batch_size=1, config_root=args.config_root)
        L = Layout.from_plan(af8.plan(args.model, None, **kw), args.head_dim, args.model)
        modes = {"bf16": {g: False for g in GROUPS}, "fp8": {g: True for g in GROUPS}}
        for p in args.policy:
            modes[f"policy:{Path(p).name}"] = fp8_groups(af8.plan(args.model, p, **kw))
        steps: dict = {}

        def ensure(fp8):
            k = key(fp8)
            if k not in steps:
                steps[k] = bench.step_fn(bench.build(L, fp8), L)
                bench.check(steps[k], k)
            return steps[k]

        def pair(a: dict[str, bool], b: dict[str, bool]) -> float:
            sa, sb = ensure(a), ensure(b)
            tb = bench.time_ms(sb)
            return bench.time_ms(sa) / tb

        def say(t: dict) -> None:
            log(f"  tokens {tokens}: oracle {t['search']} {t['group']}: {t['ratio_median']:.3f} ({'kept' if t['kept'] else 'not kept'})", file=sys.stderr)

        keep = {key(f) for f in modes.values()}

        def release(mode: dict[str, bool]) -> None:
            if key(mode) not in keep:
                steps.pop(key(mode), None)

        oracle, trials = search_oracle(pair, args.repeats, say, release)
        modes["oracle"] = oracle
        wanted = {key(f) for f in modes.values()}
        for k in [k for k in steps if k not in wanted]:
            del steps[k]
        torch.cuda.empty_cache()
        for f in modes.values():
            ensure(f)
        times = {k: [] for k in steps}
        for r in range(args.repeats):
            for k in steps:
                times[k].append(bench.time_ms(steps[k]))
        row = summarize(L.gemm_rows, modes, times, trials)
        results.append(row)
        log(f"  tokens {tokens}: " + ", ".join(f"{m} {v['vs_bf16_median']:.3f}" for m, v in row["modes"].items()), file=sys.stderr)
        steps.clear()
        torch.cuda.empty_cache()
    return {
        "model": args.model,
        "tp": args.tp,
        "layers": args.layers,
        "steps": args.steps,
        "repeats": args.repeats,
        "execution": "eager",
        "recipe": te_recipe_name(args),
        "device": torch.cuda.get_device_name(),
        "te_version": __import__("transformer_engine").__version__,
        "results": results,
    }


def recipe_options(args) -> dict:
    """The TE worker's recipe options from the command line (pure)."""
    opt = {"recipe": getattr(args, "recipe", "blockwise")}
    if getattr(args, "fp8_format", None):
        opt["fp8_format"] = args.fp8_format
    return opt


def te_recipe_name(args) -> str:
    """The TE recipe class the run used, with its keyword arguments (pure)."""
    from adaptive_fp8.te_worker import recipe_spec

    cls, kw = recipe_spec(recipe_options(args))
    return cls + ("(" + ", ".join(f"{k}={v}" for k, v in sorted(kw.items())) + ")" if kw else "")


def _positive(s: str) -> int:
    v = int(s)
    if v <= 0:
        raise argparse.ArgumentTypeError(f"{s} is not a positive integer")
    return v


def _tokens(s: str) -> list[int]:
    try:
        return [_positive(x) for x in s.split(",")]
    except (ValueError, argparse.ArgumentTypeError):
        raise argparse.ArgumentTypeError(f"--tokens {s!r}: expected comma-separated positive integers, e.g. 2048,8192") from None


def parser() -> argparse.ArgumentParser:
    head, rest = __doc__.split("\n\n", 1)
    ap = argparse.ArgumentParser(prog="python -m adaptive_fp8.step_bench", description=head, epilog=rest, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="model config (any form fp8sel reads)")
    ap.add_argument("--config-root", help="how far Hydra defaults may reach (as in fp8sel)")
    ap.add_argument("--tp", type=_positive, default=1, help="tensor-parallel size: the step runs one rank's shapes (default 1)")
    ap.add_argument("--tokens", type=_tokens, default=[2048, 8192], help="sequence lengths (micro-batch 1), comma-separated (default 2048,8192)")
    ap.add_argument("--layers", type=_positive, default=2, help="transformer layers per step (default 2)")
    ap.add_argument("--policy", action="append", default=[], help="a policy to compare; repeatable")
    ap.add_argument("--head-dim", type=_positive, default=128, help="the model's kv_channels (default 128)")
    ap.add_argument("--steps", type=_positive, default=10, help="steps per timed round (default 10)")
    ap.add_argument("--repeats", type=_positive, default=7, help="interleaved rounds per mode (default 7)")
    ap.add_argument("--warmup", type=_positive, default=3, help="untimed, checked steps per mode (default 3)")
    ap.add_argument(
        "--recipe",
        default="blockwise",
        choices=["blockwise", "tensorwise", "current", "delayed", "mxfp8"],
        help="the FP8 recipe, as Megatron's --fp8-recipe (default blockwise; compare a policy made for the same recipe)",
    )
    ap.add_argument("--fp8-format", choices=["e4m3", "hybrid"], help="FP8 format (default: the recipe's TE default)")
    ap.add_argument("--json", help="write the full results here")
    ap.add_argument("--md", help="write the markdown table here")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    for p in args.policy:
        import adaptive_fp8 as af8

        af8.Policy.load(p)  # a bad policy fails before any GPU work
    try:
        out = run(args)
    except StepBenchError as e:
        print(f"step_bench: {e}", file=sys.stderr)
        return 2
    except ImportError as e:
        print(f"step_bench: skipped: Transformer Engine / torch not importable ({e})", file=sys.stderr)
        return 2
    text = markdown(out)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1) + "\n")
    if args.md:
        Path(args.md).write_text(text)
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("NVTE_FLASH_ATTN", "1")
    sys.exit(main())
