"""The convergence check: does the adaptive plan train as well as BF16? Trains a few layers of a
model's megatron-core ``GPTModel`` from one seed on the synthetic corpus
(``adaptive_fp8.bench.corpus``: generated, no download, a loss floor a perfect model reaches) in BF16,
all-FP8 and the policy's plan, with the same initial weights and batches in each.

    python -m adaptive_fp8.bench.convergence --model fixtures/models/llama3_2_1b.yaml --layers 4 \\
        --seq-length 1024 --micro-batch-size 8 --steps 300 --policy policies/llama3_2_1b.json \\
        --out conv/

Writes into ``--out``: ``convergence.json`` (every step's loss and gradient norm, the held-out
evaluations, NaN/Inf steps, the final-loss gaps), ``convergence.md`` (the table, also on stdout)
and ``curves.svg`` (the training losses, and each mode's gap to BF16). The final loss of a mode
is its loss on held-out batches (an independent corpus stream) after the last step; the check
passes when the plan's gap to BF16 is no larger than all-FP8's (or within the run-to-run band
of it: a second BF16 run, ``bf16-repeat``, shows how far two runs of one program drift apart)
and no step was NaN or Inf. A plan that is all BF16 or all FP8 is
named: the comparison then says nothing new. Needs a CUDA device, Transformer Engine and
megatron-core; the summary and the plot are pure.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
from pathlib import Path
from typing import Any, Optional

from adaptive_fp8.bench.gpt_train import MODES, add_model_args, check_model_args

COLORS = {"bf16": "#1f77b4", "bf16-repeat": "#9ecae1", "fp8": "#d62728", "adaptive": "#2ca02c"}


# -- pure half ----------------------------------------------------------------------------------


#: The report's format and version (fp8_report::convergence reads it; docs/schemas/ holds its
#: schema).
FORMAT, VERSION = "adaptive-fp8-convergence", 1


def document(out: dict) -> str:
    """The report as JSON text, a non-finite loss or gap as ``null`` (a diverged run is what the
    report must still carry)."""
    from adaptive_fp8._common import finite_json

    return finite_json(out)


def smooth(xs: list[float], width: int) -> list[float]:
    """Trailing moving average over finite values (a NaN step does not poison the curve)."""
    out, window = [], []
    for x in xs:
        if math.isfinite(x):
            window.append(x)
        if len(window) > width:
            window.pop(0)
        out.append(sum(window) / len(window) if window else float("nan"))
    return out


def tail_noise(losses: list[float], frac: float = 0.1) -> float:
    """The standard error of the mean training loss over the last ``frac`` of steps: how far two
    runs' final losses differ by step-to-step noise alone."""
    tail = [x for x in losses[-max(2, int(len(losses) * frac)) :] if math.isfinite(x)]
    return statistics.stdev(tail) / math.sqrt(len(tail)) if len(tail) > 1 else 0.0


def summarize(runs: dict[str, dict], plan_fp8: Optional[list[str]], plan_all: Optional[list[str]]) -> dict:
    """Gaps to BF16 and the verdict from each mode's ``losses``, ``final_eval`` and
    ``nonfinite_steps``. The band two runs of one program differ by is the larger of the BF16
    repeat's gap (kernels with atomics, MoE routing ties: identical runs drift apart) and the BF16
    run's tail noise."""
    base = runs["bf16"]["final_eval"]
    gaps = {m: r["final_eval"] - base for m, r in runs.items()}
    noise = tail_noise(runs["bf16"]["losses"])
    band = max(noise, abs(gaps.get("bf16-repeat", 0.0)))
    bad = {m: r["nonfinite_steps"] for m, r in runs.items() if r["nonfinite_steps"]}
    out: dict = {"final_eval": {m: r["final_eval"] for m, r in runs.items()}, "gap_to_bf16": gaps,
                 "bf16_tail_noise": noise, "band": band, "nonfinite": bad}
    if "adaptive" in gaps and "fp8" in gaps:
        ok = gaps["adaptive"] <= gaps["fp8"] + band and not bad and math.isfinite(gaps["adaptive"])
        out["verdict"] = "pass" if ok else "fail"
        tie = abs(gaps["adaptive"] - gaps["fp8"]) <= band
        out["verdict_text"] = (
            f"adaptive gap {gaps['adaptive']:+.4f} vs all-FP8 {gaps['fp8']:+.4f}, band {band:.4f}"
            + (" (a tie)" if tie else "")
            + (f"; NaN/Inf steps: {bad}" if bad else "; no NaN/Inf")
        )
    if plan_fp8 is not None and plan_all is not None:
        if not plan_fp8:
            out["plan_note"] = "the plan is all BF16: the adaptive run is a second BF16 run"
        elif set(plan_fp8) >= set(plan_all):
            out["plan_note"] = "the plan is all FP8: the adaptive run is a second all-FP8 run"
    return out


def _path(xs: list[float], ys: list[float], sx, sy) -> str:
    pts = [f"{sx(x):.1f},{sy(y):.1f}" for x, y in zip(xs, ys) if math.isfinite(y)]
    return " ".join(pts)


def svg(runs: dict[str, dict], title: str, width: int = 720, panel: int = 240) -> str:
    """Two panels: smoothed training loss per mode, and each mode's smoothed gap to BF16."""
    w = max(5, len(runs["bf16"]["losses"]) // 30)
    curves = {m: smooth(r["losses"], w) for m, r in runs.items()}
    steps = list(range(1, len(curves["bf16"]) + 1))
    gaps = {m: [a - b for a, b in zip(c, curves["bf16"])] for m, c in curves.items() if m != "bf16"}
    left, right, top = 70, 20, 30
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{2 * panel + 70}" font-family="sans-serif" font-size="11">',
             f'<text x="{left}" y="18" font-size="13">{title}</text>']

    def panel_at(y0: int, series: dict[str, list[float]], label: str) -> None:
        vals = [v for s in series.values() for v in s if math.isfinite(v)] or [0.0]
        lo, hi = min(vals), max(vals)
        if hi - lo < 1e-9:
            lo, hi = lo - 1, hi + 1
        sx = lambda x: left + (x - 1) / max(1, len(steps) - 1) * (width - left - right)  # noqa: E731
        sy = lambda y: y0 + panel - 20 - (y - lo) / (hi - lo) * (panel - 30)  # noqa: E731
        parts.append(f'<rect x="{left}" y="{y0}" width="{width - left - right}" height="{panel - 20}" fill="none" stroke="#999"/>')
        parts.append(f'<text x="8" y="{y0 + 12}">{label}</text>')
        for v in (lo, (lo + hi) / 2, hi):
            parts.append(f'<text x="{left - 4}" y="{sy(v) + 4:.1f}" text-anchor="end">{v:.3g}</text>')
        for m, s in series.items():
            parts.append(f'<polyline fill="none" stroke="{COLORS.get(m, "#555")}" stroke-width="1.5" points="{_path(steps, s, sx, sy)}"/>')

    panel_at(top, curves, "loss")
    panel_at(top + panel, gaps, "gap to BF16")
    for i, m in enumerate(runs):
        x = left + 10 + i * 110
        parts.append(f'<line x1="{x}" y1="{2 * panel + 55}" x2="{x + 20}" y2="{2 * panel + 55}" stroke="{COLORS.get(m, "#555")}" stroke-width="2"/>')
        parts.append(f'<text x="{x + 25}" y="{2 * panel + 59}">{m}</text>')
    parts.append(f'<text x="{width - right}" y="{2 * panel + 59}" text-anchor="end">step (moving average of {w})</text>')
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def markdown(out: dict) -> str:
    s = out["summary"]
    lines = [f"# Convergence: {out['model']}, {out['settings']['steps']} steps, recipe {out['recipe']}", "",
             f"Plan's FP8 groups: {', '.join(out['plan_fp8']) or 'none'}", "",
             "| mode | final held-out loss | gap to BF16 | NaN/Inf steps |", "|---|---:|---:|---:|"]
    for m, v in s["final_eval"].items():
        lines.append(f"| {m} | {v:.4f} | {s['gap_to_bf16'][m]:+.4f} | {out['runs'][m]['nonfinite_steps']} |")
    lines += ["", f"Corpus loss floor: {out['corpus_floor']:.4f}; run-to-run band {s['band']:.4f} (BF16 tail noise {s['bf16_tail_noise']:.4f})."]
    if "verdict" in s:
        lines.append(f"Verdict: **{s['verdict']}**: {s['verdict_text']}.")
    if "plan_note" in s:
        lines.append(f"Note: {s['plan_note']}.")
    return "\n".join(lines) + "\n"


def deterministic_setup(env) -> list[str]:
    """What Megatron's ``--deterministic-mode`` asks of the environment, set in ``env`` before
    CUDA starts (cuBLAS reads its workspace setting once; TE refuses a non-deterministic
    attention under ``deterministic_mode``). Returns the notes for the report."""
    env["NVTE_ALLOW_NONDETERMINISTIC_ALGO"] = "0"
    env.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    return ["deterministic kernels (deterministic_mode, NVTE_ALLOW_NONDETERMINISTIC_ALGO=0, torch deterministic algorithms)"]


# -- torch half ---------------------------------------------------------------------------------


def run(args: Any, log=print) -> dict:
    import adaptive_fp8 as af8
    from adaptive_fp8.bench.corpus import Corpus
    from adaptive_fp8.bench.gpt_train import GptTrainer, Schedule, model_kwargs, token_batches
    from adaptive_fp8.bench.megatron_step import plan_name
    from adaptive_fp8.bench.recipe_names import recipe_counts

    kw, plan, notes = model_kwargs(af8, args)
    if args.deterministic:
        notes.extend(deterministic_setup(os.environ))
        kw["deterministic_mode"] = True
    trainer = GptTrainer(args, kw)
    if args.deterministic:
        # warn_only: an op with no deterministic kernel warns on stderr instead of stopping the run
        trainer.torch.use_deterministic_algorithms(True, warn_only=True)
    corpus = Corpus(seed=args.seed, vocab=args.vocab)
    log(f"convergence: generating {args.steps} x {args.micro_batch_size} sequences of {args.seq_length} tokens", file=sys.stderr)
    train = list(token_batches(corpus, args.seq_length, args.micro_batch_size, args.steps, stream=0))
    held = list(token_batches(corpus, args.seq_length, args.micro_batch_size, args.eval_batches, stream=1))
    sched = Schedule(args.lr, args.steps, args.warmup_steps)
    runs: dict[str, dict] = {}
    all_groups: list[str] = []
    for mode in args.modes:
        model, p = trainer.build(mode, args.policy, args.seed)
        if p is not None:
            log(f"convergence: plan: {p.fp8_modules} of {len(p)} TE modules FP8, {p.region} region", file=sys.stderr)
        opt = trainer.optimizer(model)
        losses, norms, evals = [], [], []
        fp8_groups: list[str] = []
        recipes: dict[str, list[str]] = {}
        for i, b in enumerate(train):
            loss, gn = trainer.train_step(model, opt, b, sched.at(i))
            losses.append(loss)
            norms.append(gn)
            if i == 0:
                # What each TE module ran in (TE's module.fp8, set per call), not what was asked.
                seen = trainer.judge.precisions(model)
                fp8_groups = sorted({plan_name(n) for n, on in seen.items() if on})
                all_groups = sorted({plan_name(n) for n in seen})
                log(f"  {mode}: FP8 groups in the step: {', '.join(fp8_groups) or 'none'}", file=sys.stderr)
                by_module = trainer.judge.recipes(model)
                ran = {}
                for n, r in by_module.items():
                    ran.setdefault(plan_name(n), set()).add(r)
                if ran:
                    log(f"  {mode}: recipes in the step: " + "; ".join(f"{g} {'/'.join(sorted(r))}" for g, r in sorted(ran.items())), file=sys.stderr)
                recipes = {g: sorted(r) for g, r in sorted(ran.items())}
                if p is not None:
                    want, got = recipe_counts(p.rows, by_module, args.recipe)
                    if want != got:
                        notes.append(f"{mode}: FP8 modules by recipe planned {want}, ran {got}: not every module ran under its policy's recipe")
                        log(f"  {mode}: recipes planned {want}, ran {got}", file=sys.stderr)
            if (i + 1) % args.eval_every == 0 or i + 1 == len(train):
                evals.append([i + 1, trainer.eval_loss(model, held)])
                log(f"  {mode} step {i + 1}/{len(train)}: loss {loss:.4f}, held-out {evals[-1][1]:.4f}", file=sys.stderr)
        bad = sum(1 for x, g in zip(losses, norms) if not (math.isfinite(x) and math.isfinite(g)))
        runs[mode] = {"losses": losses, "grad_norms": norms, "evals": evals, "final_eval": evals[-1][1], "nonfinite_steps": bad, "fp8_groups": fp8_groups,
                      "recipes": recipes}
        del model, opt
        trainer.torch.cuda.empty_cache()
    import megatron.core as mc
    import transformer_engine

    out = {
        "format": FORMAT, "version": VERSION, "model": plan["model"], "recipe": args.recipe, "policy": args.policy, "notes": notes,
        "plan_fp8": runs.get("adaptive", {}).get("fp8_groups", []), "groups": all_groups,
        "corpus_floor": corpus.entropy_floor(),
        "settings": {k: getattr(args, k) for k in ("layers", "seq_length", "micro_batch_size", "steps", "warmup_steps", "lr", "seed", "vocab", "ep", "eval_batches", "deterministic")},
        "device": trainer.torch.cuda.get_device_name(), "te_version": transformer_engine.__version__,
        "megatron_core_version": getattr(mc, "__version__", "?"), "runs": runs,
    }
    out["summary"] = summarize(runs, out["plan_fp8"] if "adaptive" in runs else None, all_groups if "adaptive" in runs else None)
    return out


def _modes(s: str) -> list[str]:
    out = [m.strip() for m in s.split(",") if m.strip()]
    if not out or any(m not in MODES for m in out) or out[0] != "bf16":
        raise argparse.ArgumentTypeError(f"--modes {s!r}: a list of {', '.join(MODES)} starting with bf16")
    return out


def parser() -> argparse.ArgumentParser:
    head, rest = __doc__.split("\n\n", 1)
    ap = argparse.ArgumentParser(prog="python -m adaptive_fp8.bench.convergence", description=head, epilog=rest, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_model_args(ap)
    ap.add_argument("--policy", required=True, help="the policy whose plan is the adaptive mode")
    ap.add_argument("--steps", type=int, default=300, help="training steps per mode (default 300)")
    ap.add_argument("--warmup-steps", type=int, default=30, help="learning-rate warm-up steps (default 30)")
    ap.add_argument("--eval-every", type=int, default=50, help="held-out evaluation interval in steps (default 50)")
    ap.add_argument("--eval-batches", type=int, default=8, help="held-out micro-batches per evaluation (default 8)")
    ap.add_argument("--modes", type=_modes, default=list(MODES), help="modes to train, bf16 first (default bf16,bf16-repeat,fp8,adaptive)")
    ap.add_argument("--out", required=True, help="directory for convergence.json, convergence.md and curves.svg")
    ap.add_argument("--no-deterministic", dest="deterministic", action="store_false",
                    help="allow non-deterministic kernels (faster; the BF16 repeat then measures their drift). "
                    "Default: deterministic, as Megatron's --deterministic-mode")
    return ap


def main(argv: Optional[list[str]] = None) -> int:
    from adaptive_fp8._common import write_atomic
    from adaptive_fp8.bench.step_spec import StepBenchError

    args = parser().parse_args(argv)
    bad = check_model_args(args)
    for name in ("steps", "warmup_steps", "eval_every", "eval_batches"):
        if not bad and getattr(args, name) < 1:
            bad = f"--{name.replace('_', '-')} {getattr(args, name)}: must be at least 1"
    if bad:
        print(f"convergence: {bad}", file=sys.stderr)
        return 2
    try:
        import adaptive_fp8 as af8

        af8.Policy.load(args.policy)  # a bad policy or config fails before any GPU work
        from adaptive_fp8.bench.gpt_train import plan_kwargs

        af8._plan(args.model, None, plan_kwargs(args))
        out = run(args)
    except (StepBenchError, ValueError) as e:
        print(f"convergence: {e}", file=sys.stderr)
        return 2
    except ImportError as e:
        print(f"convergence: skipped: Transformer Engine / torch / megatron-core not importable ({e})", file=sys.stderr)
        return 2
    d = Path(args.out)
    d.mkdir(parents=True, exist_ok=True)
    text = markdown(out)
    write_atomic(str(d / "convergence.json"), document(out))
    write_atomic(str(d / "convergence.md"), text)
    write_atomic(str(d / "curves.svg"), svg(out["runs"], f"{out['model']}: {args.layers} layers, {args.recipe}"))
    sys.stdout.write(text)
    return 0 if out["summary"].get("verdict", "pass") == "pass" else 1


if __name__ == "__main__":
    os.environ.setdefault("NVTE_FLASH_ATTN", "1")
    sys.exit(main())
