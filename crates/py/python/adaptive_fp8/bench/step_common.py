"""What the step judges share (pure): the summary statistics and verdict of paired timings,
mode names, the recipe options from the command line, the greedy oracle search. ``step_bench`` (the TE blocks),
``megatron_step`` (upstream GPTModel), ``step_layers`` and ``te_tp`` import it; it imports none
of them, so none of them imports another back."""

from __future__ import annotations

import json
import os
import statistics
from pathlib import Path

from adaptive_fp8._common import quantile as _quantile
from adaptive_fp8.bench.step_spec import StepBenchError


def host_cpu() -> str | None:
    """The host's CPU and its logical CPU count, as a step document's `host` carries it
    (`AMD EPYC 9654 96-Core Processor, 192 CPUs`): eager thresholds of host-bound layouts move
    with it. None where /proc/cpuinfo names no model (not Linux)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            name = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), None)
    except OSError:
        name = None
    return f"{' '.join(name.split())}, {os.cpu_count()} CPUs" if name else None


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


REFERENCES = ("bf16", "fp8", "oracle")


def fastest_reference(times: dict[str, list[float]]) -> str:
    """Of BF16, all-FP8 and (where the row searched one) the oracle, the mode with the smallest
    median: the minimum a policy is judged against."""
    return min((m for m in REFERENCES if m in times), key=lambda m: statistics.median(times[m]))


def mode_stats(ts: list[float], base: list[float], best: float, fp8_groups: list[str], baseline: bool, fastest: tuple[str, list[float]] | None = None) -> dict:
    """One mode's table fields: its rounds `ts` against the BF16 rounds `base` (paired by round)
    and against `best`, the better of the BF16 and all-FP8 medians; `baseline` is the BF16 mode
    itself, which gets no verdict. With `fastest` (a reference mode's name and rounds, from
    :func:`fastest_reference`), also against that mode paired by round: the band of the ratio to
    the minimum, which unpaired medians of host-bound rounds cannot give."""

    paired = [t / b for t, b in zip(ts, base)]
    stats = {
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
    if fastest is not None:
        name, ref = fastest
        vs = [t / r for t, r in zip(ts, ref)]
        stats.update(vs_min_of=name, vs_min_median=statistics.median(vs), vs_min_p10=quantile(vs, 0.1), vs_min_p90=quantile(vs, 0.9))
    return stats


def policy_mode_name(path: str, all_paths: list[str]) -> str:
    """`policy:<file name>`, with its folder when another policy has the same name
    (policies/qwen2_5_72b.json and policies/tensorwise/qwen2_5_72b.json are different policies)."""
    name = Path(path).name
    if sum(Path(q).name == name for q in all_paths) > 1:
        name = f"{Path(path).parent.name}/{name}"
    return f"policy:{name}"


def default_repeats(args) -> None:
    """The defaults that depend on the trainer: `--repeats` 7 for the TE blocks, 21 for the
    Megatron judge (short host-bound steps); `--oracle` greedy for the TE blocks, none for the
    Megatron judge (each of its candidates is a model build). The Megatron oracle's trials
    stay at 7 paired timings (`--oracle-repeats`): each is two model builds, 7 is what its
    H200 runs used (50-75 s per count and execution), and the search re-times its final set."""
    megatron = getattr(args, "trainer", "te") == "megatron"
    if args.repeats is None:
        args.repeats = 21 if megatron else 7
    if megatron and getattr(args, "oracle_repeats", 0) is None:
        args.oracle_repeats = 7
    if getattr(args, "oracle", "") is None:
        args.oracle = "none" if megatron else "greedy"


def recipe_flags(ap) -> None:
    """The recipe's options, as Megatron's flags name them: --fp8-format, and delayed scaling's
    --fp8-amax-history-len and --fp8-amax-compute-algo (each also without its `fp8-`)."""
    ap.add_argument("--fp8-format", choices=["e4m3", "hybrid"], help="FP8 format, as Megatron's --fp8-format (default: the recipe's TE default)")
    ap.add_argument("--amax-history-len", "--fp8-amax-history-len", type=int, metavar="N", help="delayed scaling: steps of amax history (default 1024, TE's)")
    ap.add_argument("--amax-compute-algo", "--fp8-amax-compute-algo", choices=["max", "most_recent"], help="delayed scaling: max or most_recent (default max, TE's)")


def weights_flag(ap) -> None:
    """How the FP8 modules hold their weights, as Megatron's --fp8-param-gather says: BF16 by
    default (Megatron's default, and how a policy's FP8 groups run in the BF16 launch region)."""
    import argparse

    ap.add_argument(
        "--fp8-param", "--fp8-param-gather", dest="fp8_param", action=argparse.BooleanOptionalAction, default=False,
        help="FP8 modules hold FP8 weights (Megatron's --fp8-param-gather). The step's optimizer is TE's FusedAdam: for "
        "current scaling, blockwise and MXFP8 it re-quantizes each FP8 weight alone from its FP32 master after every "
        "step, which Megatron's distributed optimizer does in batches; so FP8 weights here cost more than in Megatron "
        "(default: BF16 weights, each FP8 module quantizing its weight in its forward, as Megatron trains by default)",
    )


def recipe_options(args) -> dict:
    """The TE worker's recipe options from the command line (pure). The amax options belong to
    delayed scaling: given with another recipe, refused (StepBenchError)."""
    recipe = getattr(args, "recipe", "blockwise")
    opt = {"recipe": recipe}
    if getattr(args, "fp8_format", None):
        opt["fp8_format"] = args.fp8_format
    for k in ("amax_history_len", "amax_compute_algo"):
        v = getattr(args, k, None)
        if v is None:
            continue
        if recipe != "delayed":
            raise StepBenchError(f"--{k.replace('_', '-')}: the {recipe} recipe keeps no amax history; fix: drop it, or --recipe delayed")
        opt[k] = v
    return opt


def recipe_fields(args) -> dict:
    """The recipe's options as a document records them (pure): `fp8_format` (e4m3 or hybrid), and
    for delayed scaling `amax_history_len` and `amax_compute_algo`."""
    from adaptive_fp8.bench.te_worker import recipe_spec

    _, kw = recipe_spec(recipe_options(args))
    out = {"fp8_format": str(kw.get("fp8_format", "E4M3")).lower()}
    for k in ("amax_history_len", "amax_compute_algo"):
        if k in kw:
            out[k] = kw[k]
    return out


def te_recipe_name(args) -> str:
    """The TE recipe class the run used, with its keyword arguments (pure)."""
    from adaptive_fp8.bench.te_worker import recipe_spec

    cls, kw = recipe_spec(recipe_options(args))
    return cls + ("(" + ", ".join(f"{k}={v}" for k, v in sorted(kw.items())) + ")" if kw else "")


def key(fp8: dict[str, bool]) -> str:
    """A mode's name: its FP8 groups, in the spec's order (`-` for none)."""
    return "+".join(g for g, on in fp8.items() if on) or "-"


def search_units(group_keys: dict[str, dict], fp8_groups: list[str]) -> dict[str, list[str]]:
    """The oracle's search units: each policy key the all-FP8 model builds FP8 (``fp8_groups``,
    in their order), named by its groups joined with ``+``. Groups that share a key (DeepSeek-V3's
    dense and shared-expert fc2) are one unit, because no policy can run them apart; a group
    without a key in ``group_keys`` is a unit of its own."""
    by_key: dict[str, list[str]] = {}
    for g in fp8_groups:
        k = group_keys.get(g, {}).get("key")
        by_key.setdefault(json.dumps(k, sort_keys=True) if k is not None else "group:" + g, []).append(g)
    return {"+".join(gs): gs for gs in by_key.values()}


def selection(units: dict[str, list[str]], chosen: dict[str, bool]) -> frozenset[str]:
    """The groups a unit selection runs FP8."""
    return frozenset(g for u, on in chosen.items() if on for g in units[u])


def faster_beyond_noise(ratio, repeats: int) -> tuple[list[float], bool]:
    """Up to ``repeats`` paired ratios from ``ratio()`` and whether all of them give the verdict
    `faster` (p90 < 1). Stops as soon as the ratios at or above 1 are more than the p90 can
    pass over: the remaining pairs could not make it `faster`, so the answer is the full run's,
    at a fraction of its time where a candidate is a tie or slower (most of an oracle's trials)."""
    # p90 < 1 holds while the ratios >= 1 fit above the p90's rank (quantile's own rank rule).
    allowed = repeats - 1 - quantile(list(range(repeats)), 0.9)
    ratios: list[float] = []
    while len(ratios) < repeats:
        ratios.append(ratio())
        if sum(r >= 1.0 for r in ratios) > allowed:
            return ratios, False
    return ratios, verdict(ratios) == "faster"


def search_oracle(pair, repeats: int, groups: list[str], say=lambda trial: None, release=lambda mode: None) -> tuple[dict[str, bool], list[dict]]:
    """The per-module oracle over `groups`, found by trying: `pair(a, b)` times modes a and b back
    to back once and returns ms(a) / ms(b).

    Two greedy passes, because a group can pay only together with others (a shared cast or
    optimizer cost) or lose only in company: upward from all-BF16 (switch a group to FP8 and keep
    it when the step is faster beyond the noise) and downward from all-FP8 (switch a group back to
    BF16 and keep that when faster beyond the noise). When the passes disagree, their results are
    compared head to head and the faster wins; a tie keeps the upward one (fewer FP8 groups).
    A trial stops pairing once it can no longer be `faster` (:func:`faster_beyond_noise`; its
    ``pairs`` says how many ran). `release(mode)` is told of each mode the search no longer needs, so memory stays bounded.
    """
    trials: list[dict] = []

    def trial(search: str, group: str, cand: dict, cur: dict) -> bool:
        ratios, kept = faster_beyond_noise(lambda: pair(cand, cur), repeats)
        t = {
            "search": search,
            "group": group,
            "pairs": len(ratios),
            "ratio_median": statistics.median(ratios),
            "ratio_p10": quantile(ratios, 0.1),
            "ratio_p90": quantile(ratios, 0.9),
            "kept": kept,
        }
        trials.append(t)
        say(t)
        release(cur if t["kept"] else cand)
        return t["kept"]

    up = dict.fromkeys(groups, False)
    for g in groups:
        cand = dict(up, **{g: True})
        if trial("up", g, cand, up):
            up = cand
    down = dict.fromkeys(groups, True)
    for g in groups:
        cand = dict(down, **{g: False})
        if trial("down", g, cand, down):
            down = cand
    if key(up) == key(down):
        return up, trials
    return (down if trial("final", key(down) + " vs " + key(up), down, up) else up), trials


# -- the results document (fp8_report::step_results, docs/schemas/adaptive-fp8-step-results.v1) --

STEP_RESULTS_FORMAT = "adaptive-fp8-step-results"
STEP_RESULTS_VERSION = 1


def row_verdict(row: dict, te_blocks: bool) -> dict | None:
    """A timed row's verdict as measured: the oracle's FP8 groups, unless the row's own
    interleaved rounds measured all-BF16 or all-FP8 faster than the oracle beyond the noise (the
    oracle's ``vs_min_of`` names that reference and its whole p10-p90 band against it is above
    1), or a policy faster than every reference beyond the noise (its band below 1): then that
    mode's groups, ``by`` naming it. The search decides each trial on a few early-stopped pairs
    and keeps the fewer-FP8 side of a tie, so the rounds, more of them and interleaved, can
    measure better. Only where every mode is built from its groups alone (``te_blocks``: the
    TE blocks); in the Megatron judge ``fp8`` is Megatron's global FP8, another program. ``None``
    where the row has no oracle."""
    modes = row.get("modes") or {}
    oracle = modes.get("oracle")
    if oracle is None or "error" in row:
        return None
    if te_blocks:
        ahead = [(m["vs_min_median"], name) for name, m in modes.items()
                 if name.startswith("policy:") and m.get("vs_min_p90", 1.0) < 1.0 and "vs_min_median" in m]
        if ahead:
            name = min(ahead)[1]
            return {"fp8_groups": sorted(modes[name]["fp8_groups"]), "by": name}
        ref = oracle.get("vs_min_of")
        if ref in ("bf16", "fp8") and ref in modes and oracle.get("vs_min_p10", 1.0) > 1.0:
            return {"fp8_groups": sorted(modes[ref]["fp8_groups"]), "by": ref}
    return {"fp8_groups": sorted(oracle["fp8_groups"]), "by": "oracle"}


def results_document(header: dict, rows: list[dict], te_blocks: bool) -> dict:
    """The step benchmark's results as ``fp8_report::step_results`` reads them: the format and
    version, the header, and each timed row with its verdict where it has one."""
    out = []
    for r in rows:
        v = row_verdict(r, te_blocks)
        out.append(dict(r, verdict=v) if v is not None else dict(r))
    return {"format": STEP_RESULTS_FORMAT, "version": STEP_RESULTS_VERSION, **header, "results": out}


def is_oom(e) -> bool:
    """An out-of-memory failure: torch's OutOfMemoryError, or its message (a failed row's error)."""
    text = e if isinstance(e, str) else f"{type(e).__name__}: {e}"
    return "OutOfMemory" in text or "out of memory" in text.lower()


#: What frees memory in the TE-blocks judge, said with a count that ran out of it.
OOM_FIX = ("fix: fewer --layers, or fewer --tokens or --execution per run (every mode's model, and its "
           "CUDA graphs, stay alive for the interleaved rounds)")


def failed_row(tokens: int, execution: str, e: BaseException, oom_fix: str = OOM_FIX) -> dict:
    """A count whose build, capture or kernels failed, as its result row; one that ran out of GPU
    memory also says what frees memory (``oom_fix``: the judge's own)."""
    error = f"{type(e).__name__}: {str(e)[:300]}"
    if is_oom(e):
        error += f"; {oom_fix}"
    return {"tokens": tokens, "execution": execution, "error": error}
