"""What the step judges share (pure): the summary statistics and verdict of paired timings,
mode names, the recipe options from the command line. ``step_bench`` (the TE blocks),
``megatron_step`` (upstream GPTModel), ``step_layers`` and ``te_tp`` import it; it imports none
of them, so none of them imports another back."""

from __future__ import annotations

from pathlib import Path

from adaptive_fp8._common import quantile as _quantile
from adaptive_fp8.bench.step_spec import StepBenchError


def quantile(values: list[float], q: float) -> float:
    """Nearest-rank quantile (what the rest of the toolkit reports as p10/p90)."""
    if not values:
        raise StepBenchError("no timings to summarize")
    return _quantile(values, q)


def verdict(ratios: list[float]) -> str:
    """`faster`/`slower` only when the whole p10-p90 band of paired ratios is on one side of 1."""
    lo, hi = quantile(ratios, 0.1), quantile(ratios, 0.9)
    if hi < 1.0:
        return "faster"
    if lo > 1.0:
        return "slower"
    return "tie"


def mode_stats(ts: list[float], base: list[float], best: float, fp8_groups: list[str], baseline: bool) -> dict:
    """One mode's table fields: its rounds `ts` against the BF16 rounds `base` (paired by round)
    and against `best`, the better of the BF16 and all-FP8 medians; `baseline` is the BF16 mode
    itself, which gets no verdict."""
    import statistics

    paired = [t / b for t, b in zip(ts, base)]
    return {
        "fp8_groups": fp8_groups,
        "ms_median": statistics.median(ts),
        "ms_p10": quantile(ts, 0.1),
        "ms_p90": quantile(ts, 0.9),
        "vs_bf16_median": statistics.median(paired),
        "vs_bf16_p10": quantile(paired, 0.1),
        "vs_bf16_p90": quantile(paired, 0.9),
        "verdict_vs_bf16": "-" if baseline else verdict(paired),
        "vs_best_of_bf16_fp8": statistics.median(ts) / best,
    }


def policy_mode_name(path: str, all_paths: list[str]) -> str:
    """`policy:<file name>`, with its folder when another policy has the same name
    (policies/qwen2_5_72b.json and policies/tensorwise/qwen2_5_72b.json are different policies)."""
    name = Path(path).name
    if sum(Path(q).name == name for q in all_paths) > 1:
        name = f"{Path(path).parent.name}/{name}"
    return f"policy:{name}"


def default_repeats(args) -> None:
    """`--repeats` when not given: 7 for the TE blocks, 21 for the Megatron judge."""
    if args.repeats is None:
        args.repeats = 21 if getattr(args, "trainer", "te") == "megatron" else 7


def recipe_options(args) -> dict:
    """The TE worker's recipe options from the command line (pure)."""
    opt = {"recipe": getattr(args, "recipe", "blockwise")}
    if getattr(args, "fp8_format", None):
        opt["fp8_format"] = args.fp8_format
    return opt


def te_recipe_name(args) -> str:
    """The TE recipe class the run used, with its keyword arguments (pure)."""
    from adaptive_fp8.bench.te_worker import recipe_spec

    cls, kw = recipe_spec(recipe_options(args))
    return cls + ("(" + ", ".join(f"{k}={v}" for k, v in sorted(kw.items())) + ")" if kw else "")
