"""The step model's inputs, measured on this GPU with Transformer Engine (what `fp8sel gen-policy
--backend step` runs per layout; the model itself, the choice and the thresholds are fp8sel's).

    python -m adaptive_fp8.bench.step_inputs --model my_model.yaml --tp 1 \\
        --tokens 1024,2048,4096,8192,16384 --calibrate 1024,2048,4096,16384 --execution eager,graphed \\
        --json inputs.json
    python -m adaptive_fp8.bench.step_inputs --model my_model.yaml --tp 1 --check plans.json \\
        --json check.json

Measure (the default): at every `--tokens` count, each module group of the step
(`adaptive_fp8.bench.step_spec`) alone, BF16 and FP8 in interleaved rounds: its host time and its
GPU time per training step (forward, backward, optimizer step), measured apart
(`adaptive_fp8.bench.step_probe`). At each `--calibrate` count and execution, the whole step
(`adaptive_fp8.bench.step_layers`, `--layers` layers of one rank) in all-BF16 and all-FP8: its
wall time per step (back-to-back steps, as in training: `--steps`, fewer for long steps so a
round lasts about ROUND_MS, each row says how many; `--rounds` rounds, more for a count whose rounds
would last under COUNT_MS: `adaptive_fp8.bench.rounds`), its GPU time (its kernels
under the profiler) and its host time (the same step's wall time at 128 x TP tokens, where the
host bounds it). Those few real steps fix what every plan shares: attention, norms, router, permutation,
optimizer, syncs. Python's full garbage collections that run inside timed rounds are noted
(`adaptive_fp8.bench.collector`); `--manual-gc` keeps the collector off there.

Check (`--check PLANS`): at each count and execution the plans file names, all-BF16, all-FP8 and
each plan (`fp8_groups`) timed as whole steps in interleaved rounds: what the model predicted,
measured. A plan that is all-BF16 or all-FP8 is that step, timed once (its row has the same
rounds).

Serve (`--serve`, what fp8sel runs): after the first document, the process stays up for the
layout's checks, so TE's import and the CUDA start are paid once. Each document written is
announced on stdout (`step_inputs: done PATH`); each stdin line `{"check": PLANS, "json": PATH}`
then runs one more check; end of input ends the process.

The output (`--json`) is one typed document, format `adaptive-fp8-step-inputs` version 1, read by
fp8sel (`fp8_report::step_inputs`, which refuses unknown fields); it is rewritten after each
count, so a run stopped at a time limit keeps what it finished.

The caching allocator runs with expandable segments unless PYTORCH_CUDA_ALLOC_CONF says
otherwise, as the Megatron judge's (`step_bench.prefer_expandable_segments`): each count builds,
captures and frees every mode's step in one process.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys

from adaptive_fp8._common import emit
from adaptive_fp8.bench import collector
from adaptive_fp8.bench.phases import Phases
from adaptive_fp8.bench.recipe_names import RECIPES
from adaptive_fp8.bench.rounds import COUNT_MS, MAX_ROUNDS_FACTOR, MIN_ROUND_STEPS, ROUND_MS, count_rounds, round_steps  # noqa: F401
from adaptive_fp8.bench.settle import Once, round_of
from adaptive_fp8.bench.settle import add_flag as settle_flag
from adaptive_fp8.bench.step_common import host_cpu, is_oom, recipe_fields, recipe_flags, recipe_options, weights_flag
from adaptive_fp8.bench.step_spec import IMAGE_TOKENS, StepBenchError, image_notes, built_groups, composition, group_keys

FORMAT = "adaptive-fp8-step-inputs"
VERSION = 1
PLANS_FORMAT = "adaptive-fp8-step-plans"
EXECUTIONS = ("eager", "graphed")
#: Groups of blocks a graphed step captures (attention and dense MLPs); MoE blocks stay eager.
MOE_GROUPS = ("experts.fc1", "experts.fc2", "shared.fc1", "shared.fc2")


def instances(group: str, kinds: list[str]) -> int:
    """How many modules of ``group`` a step of these layer types runs."""
    if group in ("fc1", "fc2"):
        return kinds.count("dense")
    if group in MOE_GROUPS:
        return kinds.count("moe")
    return len(kinds)


def group_rows(spec, kinds: list[str], keys: dict[str, dict]) -> list[dict]:
    """The document's `groups`: each built group's key, token scale, instances, per-rank GEMM
    shape, whether a graphed step captures it, and whether TE can run it in FP8 (dimensions
    multiples of 16)."""
    capable = spec.fp8_capable()
    return [
        {"group": g, "key": keys[g]["key"], "scale": keys[g]["scale"], "instances": instances(g, kinds), "in_features": spec.modules[g].in_features,
         "out_features": spec.modules[g].out_features, "graphed": g not in MOE_GROUPS, "fp8_capable": capable[g]}
        for g in built_groups(spec, kinds)
        if g in keys
    ]


def read_plans(path: str) -> list[dict]:
    """The plans file of `--check`: ``{"format": "adaptive-fp8-step-plans", "plans": [{"execution",
    "tokens", "fp8_groups"}]}``; a bad file is refused with its field named."""
    try:
        with open(path) as f:
            doc = json.load(f)
    except (OSError, ValueError) as e:
        raise StepBenchError(f"{path}: cannot read the plans file: {e}") from None
    if not isinstance(doc, dict) or doc.get("format") != PLANS_FORMAT:
        raise StepBenchError(f"{path}: format: expected {PLANS_FORMAT!r} (a file fp8sel wrote)")
    plans = doc.get("plans")
    if not isinstance(plans, list) or not plans:
        raise StepBenchError(f"{path}: plans: expected a non-empty list")
    for i, p in enumerate(plans):
        ok = isinstance(p, dict) and p.get("execution") in EXECUTIONS and isinstance(p.get("tokens"), int) and p["tokens"] > 0
        if not ok or not isinstance(p.get("fp8_groups"), list) or not all(isinstance(g, str) for g in p["fp8_groups"]):
            raise StepBenchError(f"{path}: plans[{i}]: expected {{execution: eager|graphed, tokens: positive integer, fp8_groups: [group names]}}")
    return plans


def header(args, model_name: str, groups: list[dict], kinds: list[str], device: str, te_version: str, recipe: str) -> dict:
    return {
        "format": FORMAT,
        "version": VERSION,
        "model": args.model,
        "model_name": model_name,
        "component": args.component,
        "recipe": recipe,
        "fp8_recipe": args.recipe,
        **recipe_fields(args),
        "fp8_param": bool(getattr(args, "fp8_param", False)),
        "device": device,
        "host": host_cpu(),
        "te_version": te_version,
        "tp": args.tp,
        "ep": args.ep,
        "etp": args.etp,
        "layers": args.layers,
        "layer_types": kinds,
        "grad_accum": args.grad_accum,
        "steps": args.steps,
        "rounds": args.rounds,
        "manual_gc": bool(getattr(args, "manual_gc", False)),
        "settle_s": float(getattr(args, "settle", 0.0)),
        "settled": None,
        "groups": groups,
        "modules": [],
        "step_times": [],
        "failed": [],
        "notes": image_notes(args),
        "complete": False,
    }


def run(args, log=print, te=None, device: str = "cuda", progress=None) -> dict:
    """Every count (measure) or every plan (check); `progress(doc)` after each count. Each log
    line starts with the seconds since the start, so a run's time can be read by phase."""
    import time

    import adaptive_fp8 as af8
    from adaptive_fp8.bench import step_probe
    from adaptive_fp8.bench.step_bench import spec_at, step_keys
    from adaptive_fp8.bench.step_common import te_recipe_name
    from adaptive_fp8.bench.step_layers import Bench

    start, say = time.perf_counter(), log

    def log(*a, **k):
        say(f"[{time.perf_counter() - start:6.1f} s]", *a, **k)

    bench = Bench(args, te, device)
    sleeper = step_probe.Sleeper(bench.torch, device)
    plans = read_plans(args.check) if args.check else []
    counts = sorted({p["tokens"] for p in plans}) if plans else args.tokens
    doc = None
    tiny: dict = {}
    hosts: dict = {}
    first = Once(args.settle)  # untimed rounds before the run's first timed ones

    def host_of(execution: str, name: str, fp8: dict) -> float:
        """The host ms of a mode's step: its wall time at HOST_TOKENS x TP tokens, once."""
        if (execution, name) not in hosts:
            small, _ = spec_at(af8, args, HOST_TOKENS * args.tp)
            kinds_small = composition(small, args.layers, args.dense_layers)
            step = bench.step_fn(small, bench.build(small, kinds_small, fp8), execution)
            bench.check(step, name)
            hosts[(execution, name)] = _med([bench.time_ms(step) for _ in range(3)])
            bench.free()
        return hosts[(execution, name)]

    for tokens in counts:
        spec, kw = spec_at(af8, args, tokens)
        kinds = composition(spec, args.layers, args.dense_layers)
        if doc is None:
            name, keys = step_keys(af8, args, spec, kinds, kw)
            dev = bench.torch.cuda.get_device_name() if device == "cuda" else device
            tev = getattr(__import__("transformer_engine"), "__version__", "?") if device == "cuda" else "stand-in"
            doc = header(args, name, group_rows(spec, kinds, keys), kinds, dev, tev, te_recipe_name(args))
        groups = [g["group"] for g in doc["groups"]]
        capable = {g["group"]: g["fp8_capable"] for g in doc["groups"]}
        if not plans:
            for g in groups:
                doc["modules"].append(_module(bench, sleeper, spec, g, capable[g], tokens, args, log, tiny))
                bench.free()
        for execution in args.execution:
            modes = _modes_at(plans, execution, tokens, groups, capable) if plans else (
                [("bf16", []), ("fp8", [g for g in groups if capable[g]])] if tokens in args.calibrate else [])
            if not modes:
                continue
            timed = [functools.partial(_steps, bench, sleeper, spec, kinds, groups, ms, execution, tokens, args, log,
                                       None if plans else host_of, doc["notes"], first) for ms in [modes, *split_modes(modes)]]
            _count(bench, doc, execution, tokens, log, timed[0], timed[1:])
            doc["settled"] = doc["settled"] or first.record()
            bench.free(collect=True)
        if progress:
            progress(doc)
    doc["complete"] = True
    return doc


def _count(bench, doc: dict, execution: str, tokens: int, log, time_it, split=()) -> None:
    """One count's step rows into `doc`. A failure (a capture, a kernel) is a failed row, not a
    crash; one that ran out of memory is timed once more after what the counts before it left
    is collected, and then, where `split` gives fewer modes at a time (`split_modes`), so."""
    for again in (False, True):
        rows, error = _attempt(time_it)
        if error is None:
            doc["step_times"].extend(rows)
            return
        bench.free(collect=True)
        if not again and is_oom(error):
            log(f"  tokens {tokens} {execution}: out of memory; collected, timing it again", file=sys.stderr)
            continue
        if is_oom(error) and split:
            log(f"  tokens {tokens} {execution}: out of memory again; timing its modes in {len(split)} groups", file=sys.stderr)
            return _count_split(bench, doc, execution, tokens, log, split)
        return _failed(doc, execution, tokens, error, log)


def _attempt(time_it) -> tuple[list | None, str | None]:
    """`time_it()`'s rows, or the text of its failure. Only the text leaves: the exception's
    traceback holds the frames that built the steps (their models, CUDA graphs and private memory
    pools), so freeing memory while it is alive frees nothing (the H200's DeepSeek-V3 TP 1 check
    kept 29 GiB of graph pools through both retries)."""
    try:
        return time_it(), None
    except StepBenchError:
        raise
    except Exception as e:  # noqa: BLE001 - any failure of one count is that count's failed row
        return None, f"{type(e).__name__}: {e}"


def _count_split(bench, doc: dict, execution: str, tokens: int, log, split) -> None:
    """The count's modes group by group (fewer models alive at once); every group's rows or a
    failed row, and a note that the groups' rounds were not interleaved with each other."""
    rows = []
    for time_it in split:
        got, error = _attempt(time_it)
        bench.free(collect=True)
        if error is not None:
            return _failed(doc, execution, tokens, error, log)
        rows.extend(got)
    doc["step_times"].extend(rows)
    doc["notes"].append(f"{execution} at {tokens}: ran out of memory with every mode built; timed in {len(split)} groups "
                        "(all-BF16 with the plans, then all-FP8), each group's rounds interleaved, the groups' not")


def _failed(doc: dict, execution: str, tokens: int, error: str, log) -> None:
    """A count that could not be timed: said, and a failed row of the document."""
    log(f"  tokens {tokens} {execution}: {error}", file=sys.stderr)
    doc["failed"].append({"execution": execution, "tokens": tokens, "error": error[:240]})


def split_modes(modes: list[tuple[str, list[str]]]) -> list[list[tuple[str, list[str]]]]:
    """A check count's modes in groups of fewer built steps, for a count that ran out of memory
    with all of them: all-BF16 with the plans (the comparison the guard reads), then all-FP8
    alone; none where there are only two modes (the measurement's BF16 and FP8)."""
    if len(modes) <= 2:
        return []
    return [[modes[0], *modes[2:]], [modes[1]]]


def _modes_at(plans: list[dict], execution: str, tokens: int, groups: list[str], capable: dict) -> list[tuple[str, list[str]]]:
    asked = [p for p in plans if p["execution"] == execution and p["tokens"] == tokens]
    if not asked:
        return []
    out = [("bf16", []), ("fp8", [g for g in groups if capable[g]])]
    for p in asked:
        unknown = sorted(set(p["fp8_groups"]) - set(groups))
        if unknown:
            raise StepBenchError(f"plans: {execution} at {tokens}: groups {', '.join(unknown)} are not in this step ({', '.join(groups)})")
        out.append(("plan", [g for g in groups if g in p["fp8_groups"] and capable[g]]))
    return out


def _module(bench, sleeper, spec, group: str, capable: bool, tokens: int, args, log, tiny: dict) -> dict:
    """One group alone at one count: BF16 and FP8 in interleaved rounds (ms per step)."""
    from adaptive_fp8.bench.step_probe import gpu_and_host, module_work

    precisions = (False, True) if capable else (False,)
    works = {on: module_work(bench, spec, group, on) for on in precisions}
    for w in works.values():
        w()  # warm-up: kernels chosen, caches filled
        if not w.finite():
            raise StepBenchError(f"{group} at {tokens}: the module's output is not finite")
    times = {on: {"host_ms": [], "gpu_ms": []} for on in precisions}
    hold = 5.0
    for _ in range(args.rounds):
        for on, w in works.items():
            gpu, host, hold = gpu_and_host(sleeper, w, hold)
            times[on]["gpu_ms"].append(gpu)
            times[on]["host_ms"].append(host)
    for on in precisions:
        if any(h is None for h in times[on]["host_ms"]):
            times[on]["host_ms"] = _tiny_host(bench, sleeper, spec, group, on, args, tiny)
    row = {"tokens": tokens, "group": group, "bf16": times[False], "fp8": times.get(True)}
    log(f"  tokens {tokens} {group}: gpu {_med(times[False]['gpu_ms']):.3f} ms bf16" + (f", {_med(times[True]['gpu_ms']):.3f} fp8" if capable else "")
        + f"; host {_med(times[False]['host_ms']):.3f}" + (f", {_med(times[True]['host_ms']):.3f}" if capable else ""), file=sys.stderr)
    return row


#: Rows of a module (per expert for grouped ones) at which the host bounds its step.
TINY_ROWS = 64


def _tiny_host(bench, sleeper, spec, group: str, on: bool, args, tiny: dict) -> list[float]:
    """The module's host ms per step where the host could not stay ahead of a hold: its wall
    time at a few rows, where the GPU finishes first (once per group and precision)."""
    from adaptive_fp8.bench.step_probe import module_work

    if (group, on) not in tiny:
        rows = 16 if group in ("experts.fc1", "experts.fc2") else TINY_ROWS
        w = module_work(bench, spec, group, on, rows=rows)
        w()
        tiny[(group, on)] = [sleeper.wall(w, 8) for _ in range(args.rounds)]
    return list(tiny[(group, on)])


def _steps(bench, sleeper, spec, kinds, groups, modes, execution: str, tokens: int, args, log, host_of=None, notes=None,
           settle=None) -> list[dict]:
    """Whole steps of each mode, interleaved: wall ms per step; where ``host_of`` is given (the
    calibration), also each mode's GPU ms (its kernels under the profiler) and host ms
    (``host_of(execution, name, fp8)``: the step at a small count). A plan with the FP8 groups
    of a mode before it (all-BF16 or all-FP8) is that same step: built and timed once, its rows
    the same rounds. ``settle`` (a :class:`adaptive_fp8.bench.settle.Once`) runs untimed rounds
    before the run's first timed ones."""
    built, warm = [], []
    clock = Phases(bench)
    for name, on in modes:
        twin = next((b for b in built if set(b[1]) == set(on)), None)
        if twin is not None:
            built.append((name, on, twin[2], twin[3]))
            continue
        fp8 = {g: g in on for g in groups}
        with clock("build"):
            step = bench.step_fn(spec, bench.build(spec, kinds, fp8), execution)
        with clock("warm-up"):
            warm.append(bench.check(step, name))
        built.append((name, on, step, []))
    n = round_steps(min(warm), args.steps)
    timed = list({id(b[3]): b for b in built}.values())
    reps = count_rounds(n * sum(warm), args.rounds)
    if settle is not None:
        with clock("settle"):
            settle(round_of(bench.time_ms, [b[2] for b in timed], n), f"{execution} at {tokens}")
    with clock("rounds"), bench.collector.rounds(f"{execution} at {tokens}", notes):
        for _ in range(reps):
            for _name, _on, step, walls in timed:
                walls.append(bench.time_ms(step, n))
    out = []
    for name, on, step, walls in built:
        row = {"execution": execution, "tokens": tokens, "mode": name, "fp8_groups": on, "wall_ms": list(walls), "steps": n, "host_ms": None, "gpu_ms": None}
        if host_of is not None:
            with clock("profile"):
                gpu = sleeper.kernels(step, 2)
                step.losses.clear()
                if gpu < 0.5 * _med(walls) and execution == "graphed":
                    notes.append(f"{execution} {name} at {tokens}: the profiler saw {gpu:.3f} of {_med(walls):.3f} ms of kernels (graph kernels not traced); GPU time is the wall time")
                    gpu = _med(walls)
                row.update(gpu_ms=gpu, host_ms=host_of(execution, name, {g: g in on for g in groups}))
        out.append(row)
    log(f"  tokens {tokens} {execution}: " + ", ".join(f"{r['mode']} {_med(r['wall_ms']):.3f} ms" + (f" (host {r['host_ms']:.3f}, gpu {r['gpu_ms']:.3f})" if r["gpu_ms"] else "") for r in out)
        + f"; {clock}", file=sys.stderr)
    return out


#: Tokens (times TP) of the small step whose wall time is the host's time.
HOST_TOKENS = 128


def _med(v: list[float]) -> float:
    s = sorted(v)
    return s[len(s) // 2]


def _counts(s: str) -> list[int]:
    try:
        out = [int(x) for x in s.split(",")]
    except ValueError:
        out = []
    if not out or any(v <= 0 for v in out):
        raise argparse.ArgumentTypeError(f"{s!r}: expected comma-separated positive integers, e.g. 1024,4096")
    return out


def _executions(s: str) -> list[str]:
    out = [x.strip() for x in s.split(",") if x.strip()]
    if not out or any(x not in EXECUTIONS for x in out):
        raise argparse.ArgumentTypeError(f"--execution {s!r}: expected eager, graphed or eager,graphed")
    return out


def parser() -> argparse.ArgumentParser:
    head, rest = __doc__.split("\n\n", 1)
    ap = argparse.ArgumentParser(prog="python -m adaptive_fp8.bench.step_inputs", description=head, epilog=rest, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="model config (any form fp8sel reads)")
    ap.add_argument("--config-root", help="how far Hydra defaults may reach (as in fp8sel)")
    ap.add_argument("--tp", type=int, default=1, help="tensor-parallel size: one rank's shapes (default 1)")
    ap.add_argument("--component", choices=["llm", "vit"], default="llm", help="whose layers the steps build: the language model (default) or a VLM's vision encoder (vit: its counts are image tokens)")
    ap.add_argument("--image-tokens", type=int, default=IMAGE_TOKENS, help=f"vit: tokens of one image; attention runs per image (default {IMAGE_TOKENS}: 512 x 512 at patch 16)")
    ap.add_argument("--ep", type=int, help="expert-parallel size (default: the config's)")
    ap.add_argument("--etp", type=int, help="expert tensor-parallel size (default: the config's, else --tp)")
    ap.add_argument("--tokens", type=_counts, default=[1024, 2048, 4096, 8192, 16384], help="counts whose modules are measured (sequence length at micro-batch 1)")
    ap.add_argument("--calibrate", type=_counts, default=[], help="of --tokens, where whole steps are timed in all-BF16 and all-FP8 (default: the smallest, second-smallest, middle and largest)")
    ap.add_argument("--check", help="time whole steps of the plans in this file (fp8sel writes it) instead of measuring")
    ap.add_argument("--execution", type=_executions, default=["eager", "graphed"], help="eager, graphed, or eager,graphed (default both)")
    ap.add_argument("--layers", type=int, default=2, help="transformer layers per step (default 2)")
    ap.add_argument("--dense-layers", type=int, help="of --layers, how many have a dense MLP in an MoE model (default: the model's share)")
    ap.add_argument("--grad-accum", type=int, default=1, help="micro-batches per optimizer step (default 1)")
    ap.add_argument("--steps", type=int, default=5, help=f"most back-to-back steps per timed round of whole steps; a count whose fastest mode takes longer than {ROUND_MS:.0f} ms / STEPS gets fewer, at least {MIN_ROUND_STEPS} (default 5)")
    ap.add_argument("--rounds", type=int, default=7, help=f"interleaved rounds (default 7); a count of whole steps whose rounds would last under {COUNT_MS / 1e3:g} s gets more, up to {MAX_ROUNDS_FACTOR} x (21)")
    ap.add_argument("--warmup", type=int, default=2, help="untimed, checked steps per whole-step mode (default 2)")
    ap.add_argument("--recipe", default="blockwise", choices=list(RECIPES), help="the FP8 recipe, as Megatron's --fp8-recipe (default blockwise)")
    recipe_flags(ap)
    weights_flag(ap)
    collector.add_flag(ap)
    settle_flag(ap)
    ap.add_argument("--json", required=True, help="write the document here")
    ap.add_argument("--serve", action="store_true", help="then run each check asked on stdin (one JSON line: check, json) in this process")
    return ap


def default_calibration(tokens: list[int]) -> list[int]:
    """The smallest, second-smallest, middle and largest count (fewer where fewer are given).

    The second-smallest calibrates where short steps cross from host- to GPU-bound: on the H200,
    nine counts 1024-16384 all calibrated in four layouts (`step_model.sh calibrate-all`), the
    model refitted from 1024, 4096, 16384 put 32 of 64 held-out steps within 3%, with 2048 added
    42 of 64 (docs/RESULTS.md).
    """
    s = sorted(set(tokens))
    return sorted({s[0], s[min(1, len(s) - 1)], s[len(s) // 2], s[-1]})


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    for name in ("tp", "layers", "grad_accum", "steps", "rounds", "warmup"):
        if getattr(args, name) <= 0:
            print(f"step_inputs: --{name.replace('_', '-')} must be positive", file=sys.stderr)
            return 2
    try:
        recipe_fields(args)  # the recipe's options, refused here before TE loads
    except (StepBenchError, ValueError) as e:
        print(f"step_inputs: {e}", file=sys.stderr)
        return 2
    args.calibrate = args.calibrate or default_calibration(args.tokens)
    outside = sorted(set(args.calibrate) - set(args.tokens))
    if outside and not args.check:
        print(f"step_inputs: --calibrate {','.join(map(str, outside))} not in --tokens; fix: calibrate at measured counts", file=sys.stderr)
        return 2
    args.tp_comm = False
    from adaptive_fp8.bench.step_bench import prefer_expandable_segments

    prefer_expandable_segments()  # before torch loads (in `_one`)
    while True:
        code = _one(args)
        if code or not args.serve:
            return code
        print(f"step_inputs: done {args.json}", flush=True)
        asked = _asked(sys.stdin.readline())
        if asked is None:
            return 0
        if isinstance(asked, str):
            print(f"step_inputs: --serve: {asked}", file=sys.stderr)
            return 2
        args.check, args.json = asked
        _release()


def _asked(line: str) -> tuple[str, str] | str | None:
    """One stdin line of `--serve`: (plans, json), None at the end of input, else the error."""
    if not line.strip():
        return None
    try:
        d = json.loads(line)
    except ValueError as e:
        return f"a line that is not JSON ({e}); expected {{\"check\": PLANS, \"json\": PATH}}"
    if not isinstance(d, dict) or set(d) != {"check", "json"} or not all(isinstance(v, str) and v for v in d.values()):
        return f"expected {{\"check\": PLANS, \"json\": PATH}}, got {line.strip()[:120]}"
    return d["check"], d["json"]


#: Set in a served worker started afresh for a check (so it is done once).
FRESH = "ADAPTIVE_FP8_STEP_INPUTS_FRESH"
#: In that worker: the document of the counts timed before it started, to keep.
KEPT = "ADAPTIVE_FP8_STEP_INPUTS_KEPT"


def _release() -> None:
    """What the last document left on the GPU, freed before the next."""
    import gc

    gc.collect()
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        torch.cuda.empty_cache()


def _fresh(args, out: dict, oom: list[dict]) -> None:
    """The counts of this check that ran out of memory again, alone, in a fresh interpreter in this
    process (exec: the same pid and pipes); what the other counts measured is kept (`KEPT`), not
    timed twice."""
    where = {(f["execution"], f["tokens"]) for f in oom}
    print(f"step_inputs: {len(where)} count(s) of the check ran out of memory in the worker that measured before it; "
          "timing them again in a fresh interpreter", file=sys.stderr, flush=True)
    plans = [p for p in read_plans(args.check) if (p["execution"], p["tokens"]) in where]
    again, kept = f"{args.json}.oom-plans.json", f"{args.json}.kept.json"
    with open(again, "w") as f:
        json.dump({"format": PLANS_FORMAT, "plans": plans}, f)
    with open(kept, "w") as f:
        json.dump({**out, "failed": [r for r in out["failed"] if r not in oom]}, f)
    argv, skip = [], False
    for a in sys.argv[1:]:
        if skip:
            skip = False
        elif a in ("--json", "--check"):
            skip = True
        else:
            argv.append(a)
    sys.stdout.flush()
    os.environ[FRESH], os.environ[KEPT] = "1", kept
    os.execv(sys.executable, [sys.executable, "-m", "adaptive_fp8.bench.step_inputs", *argv, "--check", again, "--json", args.json])


def _with_kept(out: dict, before: dict | None) -> dict:
    """`out` (the counts timed afresh) after the rows `before` kept from the worker that ran out
    of memory; `out` itself where nothing was kept."""
    if before is None:
        return out
    again = sorted({(r["execution"], r["tokens"]) for r in out["step_times"]})
    notes = [n for n in out.get("notes", []) if n not in before.get("notes", [])]
    if again:
        notes.append(", ".join(f"{e} at {t}" for e, t in again) + ": ran out of memory after the other counts; timed again in a fresh interpreter")
    return {**out, "step_times": before["step_times"] + out["step_times"], "failed": before["failed"] + out["failed"],
            "notes": before.get("notes", []) + notes}


def _kept() -> dict | None:
    """The document `_fresh` kept for this worker, once (its scratch files removed)."""
    kept = os.environ.pop(KEPT, None)
    if not kept:
        return None
    with open(kept) as f:
        before = json.load(f)
    os.remove(kept)
    return before


def _one(args) -> int:
    """One document: the measurements, or the check of `args.check`."""
    before = _kept()
    try:
        out = run(args, progress=lambda d: emit(_with_kept(d, before), "", args.json, None, quiet=True))
    except StepBenchError as e:
        print(f"step_inputs: {e}", file=sys.stderr)
        return 2
    except ImportError as e:
        print(f"step_inputs: skipped: Transformer Engine / torch not importable ({e})", file=sys.stderr)
        return 2
    oom = [f for f in out["failed"] if is_oom(f["error"])]
    if args.serve and args.check and oom and not os.environ.get(FRESH):
        _fresh(args, out, oom)
    if before is not None:
        os.remove(args.check)
        out = _with_kept(out, before)
    emit(out, "", args.json, None, quiet=True)
    print(f"step_inputs: wrote {args.json}: {len(out['modules'])} module rows, {len(out['step_times'])} step rows, {len(out['failed'])} failed", file=sys.stderr)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("NVTE_FLASH_ATTN", "1")
    sys.exit(main())
