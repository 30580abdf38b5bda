"""The end-to-end judge: real Transformer Engine training steps, all-BF16 vs all-FP8 vs policies
vs a per-module oracle found by trying.

    python -m adaptive_fp8.bench.step_bench --model fixtures/models/qwen2_5_72b.yaml --tp 8 \\
        --tokens 2048,8192 --policy policies/qwen2_5_72b.json --json out.json --md out.md
    python -m adaptive_fp8.bench.step_bench --model fixtures/models/deepseek_v3.yaml --tp 8 \\
        --tokens 1024,4096 --execution eager,graphed --policy policies/deepseek_v3.json

From the model config, through the engine's plan (the same per-rank shapes and the same
decisions as `fp8sel explain` and `adaptive_fp8.megatron`), it builds `--layers` transformer
layers of one rank with TE: attention (GQA/MHA: qkv `LayerNormLinear`, `DotProductAttention`,
proj `Linear`; MLA: q/kv down and up projections, core attention with separate q/k and v head
sizes, proj) and an MLP (dense: fc1 `LayerNormLinear`, fc2 `Linear`; MoE: norm, router, top-k,
permutation with the token-count sync, `GroupedLinear` experts over the rank's local experts,
unpermutation, shared experts). `--component vit` builds a VLM's vision layers instead.
A step is `--grad-accum` micro-batches of forward + backward and one optimizer step (TE FusedAdam
with fp32 master weights, the same for every mode) on random bf16 activations, in the chosen
recipe. FP8 modules hold BF16 weights and quantize them in their forward, as Megatron trains by
default; `--fp8-param` gives them FP8 weights (Megatron's `--fp8-param-gather`), which FusedAdam
re-quantizes one by one after each step for every recipe but delayed scaling: a cost Megatron's
distributed optimizer batches.

Execution: `eager` runs the step as written; `graphed` captures each attention block and each
dense MLP block with TE's make_graphed_callables (forward and backward), as Megatron's
`--cuda-graph-impl transformer_engine` does. MoE blocks stay eager under `graphed`: a dropless
MoE syncs the token counts to the host, which a graph cannot capture (Megatron's graph scope
`attn` does the same).

Modes: `bf16`, `fp8`, one per `--policy` (`policy:<file>`, modules chosen by the plan), and
`oracle`: two greedy passes over the policy keys (groups that share one, as DeepSeek-V3's dense
and shared-expert fc2, switch together: no policy runs them apart), upward from all-BF16 and downward from
all-FP8, keeping a switch only when the step got faster beyond the noise (paired rounds, p90 of
the ratio < 1; a trial stops pairing once it cannot pass); the faster of the two results is the oracle. It is found by trying, not assumed,
but a greedy search can still miss a better set, so a policy can beat it (`--oracle none` skips
it). Groups whose dimensions are not multiples of 16 stay BF16 in every mode (TE cannot run them
in FP8). All modes are then timed interleaved (A B C A B C ...) for `--repeats` rounds of
`--steps` steps. Ratios to BF16 are paired within a round; their p10-p90 over rounds is the
noise band, and a band containing 1.0 is reported as a tie. Python's full garbage collections
inside timed rounds are noted; `--manual-gc` keeps the collector off there, as Megatron-LM's flag.

Scope: by default one rank's GEMMs (no TP/EP communication in the step); no rotary embedding or
MoE auxiliary loss (the same cost in every mode). With `--tp-comm`, under
`torchrun --nproc-per-node TP`, the TP modules are TE's `parallel_mode` modules over a real TP
group with sequence parallelism (Megatron's layout: qkv and fc1 gather their sequence shard, in
FP8 already quantized; proj and fc2 reduce-scatter), so the all-gathers and reduce-scatters are in
the step; every rank runs the same modes in the same order, each timing is the slowest rank's,
and rank 0 writes the results. It builds MHA/GQA attention and dense MLPs (MoE and MLA layers are
one-rank only):

    torchrun --nproc-per-node 2 -m adaptive_fp8.bench.step_bench --tp-comm --tp 2 \
        --model fixtures/models/qwen2_5_72b.yaml --tokens 2048,8192 --policy tp2_comm.json

`--trainer megatron` is the judge in the trainer itself (`adaptive_fp8.bench.megatron_step`): upstream
megatron-core's `GPTModel`, built once per mode (`bf16`, `fp8`, and each policy through the hook
and through Megatron's native per-module config; `--integration` picks one), each TE module's
precision checked against the plan and each FP8 module's cached FP8 weight looked at across one
more step (a stale one is noted: `adaptive_fp8.bench.fp8_weights`), steps timed interleaved (21
rounds by default), eager or in
Megatron's own CUDA graphs (`--execution graphed`: `cuda_graph_impl="local"`), with `--grad-accum`
micro-batches per step;
`--oracle greedy` adds the per-module oracle (`adaptive_fp8.bench.megatron_oracle`: each candidate
a GPTModel built through the hook), what `fp8sel gen-policy --backend step --step-trainer
megatron` runs:

    python -m adaptive_fp8.bench.step_bench --trainer megatron --model fixtures/models/llama3_2_1b.yaml \
        --layers 4 --tokens 256,1024 --policy policies/llama3_2_1b.json --regions both
    python -m adaptive_fp8.bench.step_bench --trainer megatron --execution eager,graphed --grad-accum 4 \
        --model fixtures/models/llama3_2_1b.yaml --layers 4 --tokens 2048 --policy policies/llama3_2_1b.json
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import sys
from pathlib import Path

from adaptive_fp8._common import emit, megatron_tp_environment
from adaptive_fp8.bench import collector
from adaptive_fp8.bench.step_common import OOM_FIX, default_repeats, failed_row, fastest_reference, is_oom, key, mode_stats, policy_mode_name, quantile, recipe_flags, recipe_options, results_document, search_oracle, search_units, selection, te_recipe_name, verdict, weights_flag  # noqa: F401
from adaptive_fp8.bench.recipe_names import RECIPES
from adaptive_fp8.bench.settle import DEFAULT_S, Once, round_of
from adaptive_fp8.bench.settle import add_flag as settle_flag
from adaptive_fp8.bench.step_spec import IMAGE_TOKENS, Spec, StepBenchError, image_notes, built_groups, composition, decisions, group_keys, tp_comm_layout

__all__ = ["StepBenchError", "main", "run", "search_oracle", "summarize", "verdict"]

EXECUTIONS = ("eager", "graphed")


def summarize(tokens: int, modes: dict[str, dict[str, bool]], times: dict[str, list[float]], trials: list[dict]) -> dict:
    """One token count's table row per mode; `times[key]` are the interleaved rounds."""
    base = times[key(modes["bf16"])]
    best = min(statistics.median(base), statistics.median(times[key(modes["fp8"])]))
    by_mode = {m: times[key(fp8)] for m, fp8 in modes.items()}
    ref = fastest_reference(by_mode)
    row = {"tokens": tokens, "modes": {}, "oracle_trials": trials}
    for m, fp8 in modes.items():
        groups = [g for g, on in fp8.items() if on]
        row["modes"][m] = mode_stats(by_mode[m], base, best, groups, baseline=m == "bf16", fastest=(ref, by_mode[ref]))
    return row


def _weights(out: dict) -> str:
    """How the FP8 modes held their weights: FP8 (`--fp8-param`), BF16, or unrecorded (the TE
    blocks' results before the field, which held FP8 weights)."""
    p = out.get("fp8_param")
    return "FP8 weights (--fp8-param)" if p or (p is None and out.get("trainer") != "megatron") else "BF16 weights"


def markdown(out: dict) -> str:
    if out.get("trainer") == "megatron":
        scope = f"megatron-core {out.get('megatron_core_version', '?')} GPTModel, one model per mode, TE modules checked against the plan"
    elif out.get("tp_comm"):
        scope = f"a TP group of {out['tp']} GPUs, sequence parallel, communication in the step"
    else:
        scope = "one rank's GEMMs, no communication"
    lines = [
        f"Step benchmark: {out['model']} ({out.get('component', 'llm')}), TP {out['tp']} ({scope}), "
        f"layers {','.join(out.get('layer_types', [])) or out['layers']}, {out.get('grad_accum', 1)} micro-batch(es) per step, "
        f"{out['steps']} steps x {out['repeats']} interleaved rounds, "
        f"{out['recipe']}, {_weights(out)}, {out['device']}, TE {out['te_version']}",
        "",
        "| execution | tokens | mode | FP8 groups | ms/step p50 (p10-p90) | / BF16 p50 (p10-p90) | verdict | / min(BF16, FP8, oracle) p50 (p10-p90) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in out["results"]:
        if "error" in row:
            lines.append(f"| {row['execution']} | {row['tokens']} | - | - | - | - | error: {row['error']} | - |")
            continue
        first: dict[tuple, str] = {}
        for m, r in row["modes"].items():
            # TE blocks: modes with the same FP8 groups are one program, built and timed once
            # (`_one`): the later ones say whose rows they are, so no reader takes them for another
            # timing. Megatron builds one model per mode: the same groups, timed apart (their gap
            # is the builds' and the integrations', not a precision's).
            same = first.setdefault(tuple(sorted(r["fp8_groups"])), m)
            alike = "its FP8 groups, its own model, timed apart" if out.get("trainer") == "megatron" else "the same program, timed once"
            shown = m if same == m else f"{m} (= {same}: {alike})"
            lines.append(
                f"| {row.get('execution', out.get('execution', 'eager'))} | {row['tokens']} | {shown} | {','.join(r['fp8_groups']) or '-'} "
                f"| {r['ms_median']:.3f} ({r['ms_p10']:.3f}-{r['ms_p90']:.3f}) "
                f"| {r['vs_bf16_median']:.3f} ({r['vs_bf16_p10']:.3f}-{r['vs_bf16_p90']:.3f}) "
                f"| {r['verdict_vs_bf16']} | {_vs_min(r)} |"
            )
    return "\n".join(lines) + "\n"


def _vs_min(r: dict) -> str:
    """Against the fastest reference mode, paired by round, where the row has it (results
    before the pairing have the unpaired ratio to the better of BF16 and all-FP8 only)."""
    if "vs_min_median" not in r:
        return f"{r['vs_best_of_bf16_fp8']:.3f}"
    return f"{r['vs_min_median']:.3f} ({r['vs_min_p10']:.3f}-{r['vs_min_p90']:.3f}) of {r['vs_min_of']}"


def spec_at(af8, args, tokens: int) -> tuple[Spec, dict]:
    """The step's shapes at ``tokens`` under the command line's layout, and the layout's keyword
    arguments for the engine's plan (what a policy mode decides with)."""
    kw = dict(tp=args.tp, seq_length=tokens, micro_batch_size=1, config_root=args.config_root)
    if args.ep:
        kw["ep"] = args.ep
    if args.etp:
        kw["etp"] = args.etp
    if args.component == "vit":
        kw["vit_num_tokens"] = tokens
    p = af8._plan(args.model, None, kw)
    arch = p.get("architecture", {}).get(args.component)
    spec = Spec.from_plan(p["modules"], arch, args.model, args.component)
    if args.component == "vit":
        if args.image_tokens < 1:
            raise StepBenchError(f"--image-tokens {args.image_tokens}: give a positive count (tokens of one image)")
        spec = dataclasses.replace(spec, image_tokens=args.image_tokens)
    return spec, kw


def step_keys(af8, args, spec: Spec, kinds: list[str], kw: dict) -> tuple[str, dict[str, dict]]:
    """The model's name and the policy key of each group the step builds (its ``group_keys``)."""
    planned = af8._plan(args.model, None, kw)
    arch = planned.get("architecture", {}).get(args.component)
    return planned.get("model", ""), group_keys(planned["modules"], args.component, arch, built_groups(spec, kinds))


def modes_for(af8, args, spec: Spec, kinds: list[str], kw: dict) -> tuple[list[str], dict[str, dict[str, bool]], list[str]]:
    """The groups the step contains, the fixed modes (bf16, fp8, each policy) and notes."""
    groups = built_groups(spec, kinds)
    capable = spec.fp8_capable()
    notes = [f"{g} stays BF16 in every mode: {spec.modules[g].in_features} x {spec.modules[g].out_features} is not a multiple of 16" for g in groups if not capable[g]]
    modes = {"bf16": dict.fromkeys(groups, False), "fp8": {g: capable[g] for g in groups}}
    for p in args.policy:
        pol_kw = dict(kw)
        if args.component == "vit":
            pol_kw["vit_policy"] = p
            planned = af8._plan(args.model, None, pol_kw)
        else:
            planned = af8._plan(args.model, p, pol_kw)
        d = decisions(planned["modules"], args.component)
        modes[policy_mode_name(p, args.policy)] = {g: bool(d.get(g)) and capable[g] for g in groups}
        missing = [m for m in planned["summary"]["missing_rules"] if m.get("component") == args.component]
        if missing:
            keys = ", ".join(_key_text(m.get("key")) for m in missing)
            notes.append(f"policy {Path(p).name} has no rule for {keys} under this layout: those modules run BF16 (see fp8sel check)")
    return groups, modes, notes


def _key_text(k) -> str:
    if not isinstance(k, dict):
        return str(k)
    rest = " ".join(f"{n}={v}" for n, v in sorted(k.items()) if n != "kind")
    return f"{k.get('kind', '?')} {rest}".strip()


def run(args, log=print, te=None, device: str = "cuda", progress=None) -> dict:
    """Every token count and execution; `progress(out)` gets the results so far (marked
    `"complete": false`) after each one, so a run cut short by a time limit keeps what it did."""
    import adaptive_fp8 as af8
    from adaptive_fp8.bench.step_layers import Bench

    default_repeats(args)
    bench = Bench(args, te, device)
    if bench.rank:
        # Every rank runs the same cases; rank 0 speaks and writes.
        log, progress = (lambda *a, **k: None), None
    results: list[dict] = []
    kinds: list[str] = []
    notes: list[str] = image_notes(args)
    keys: dict[str, dict] = {}

    def snapshot(complete: bool) -> dict:
        header = {
            "model": args.model,
            "trainer": "te",
            "model_name": model_name,
            "component": args.component,
            **({"ep": args.ep} if args.ep else {}),
            **({"etp": args.etp} if args.etp else {}),
            "group_keys": keys,
            "tp": args.tp,
            "tp_comm": bool(getattr(args, "tp_comm", False)),
            "cuda_device_max_connections": os.environ.get("CUDA_DEVICE_MAX_CONNECTIONS", ""),
            "layers": args.layers,
            "layer_types": kinds,
            "steps": args.steps,
            "grad_accum": args.grad_accum,
            "repeats": args.repeats,
            "manual_gc": bool(getattr(args, "manual_gc", False)),
            "settle_s": float(getattr(args, "settle", DEFAULT_S)),
            "settled": first.record(),
            "oracle_repeats": args.oracle_repeats or args.repeats,
            "execution": ",".join(args.execution),
            "fp8_param": bool(getattr(args, "fp8_param", False)),
            "recipe": te_recipe_name(args),
            "fp8_recipe": getattr(args, "recipe", "blockwise"),
            "device": bench.torch.cuda.get_device_name() if device == "cuda" else device,
            "te_version": getattr(__import__("transformer_engine"), "__version__", "?") if device == "cuda" else "stand-in",
            "notes": notes,
            "complete": complete,
        }
        return results_document(header, results, te_blocks=True)

    model_name = ""
    first = Once(getattr(args, "settle", DEFAULT_S))  # untimed rounds before the run's first timed ones
    for tokens in args.tokens:
        spec, kw = spec_at(af8, args, tokens)
        kinds = composition(spec, args.layers, args.dense_layers)
        if not keys:
            model_name, built_keys = step_keys(af8, args, spec, kinds, kw)
            keys.update(built_keys)
        if getattr(args, "tp_comm", False):
            tp_comm_layout(spec, kinds, args.tp, bench.world)
        for execution in args.execution:
            # A policy decides by the execution: a rule's min_tokens_graphed for graphed steps.
            groups, modes, count_notes = modes_for(af8, args, spec, kinds, dict(kw, execution=execution))
            for n in count_notes:
                log(f"  note: {n}", file=sys.stderr)
            notes.extend(n for n in count_notes if n not in notes)
            searchable = [g for g in groups if modes["fp8"][g]]
            try:
                results.append(_one(bench, args, spec, kinds, modes, search_units(keys, searchable), execution, log, notes, first))
            except StepBenchError:
                raise
            except Exception as e:  # a capture or kernel failure is a result row, not a crash
                if bench.group is not None:
                    raise  # ...except in a TP group, where the other ranks would wait forever
                log(f"  tokens {spec.tokens} {execution}: {type(e).__name__}: {e}", file=sys.stderr)
                results.append(failed_row(spec.tokens, execution, e))
            bench.free(collect=True)
            if progress:
                progress(snapshot(False))
    bench.close()
    return snapshot(True)


def _one(bench, args, spec: Spec, kinds: list[str], modes: dict, units: dict[str, list[str]], execution: str, log, notes: list[str],
         settle=None) -> dict:
    """One count and execution: every mode timed in interleaved rounds, after the oracle's search
    over ``units`` (policy keys: groups one key shares are searched together, as a policy runs
    them); a note where Python's full collections ran inside the rounds. ``settle`` (a
    :class:`adaptive_fp8.bench.settle.Once`) runs untimed rounds before the first timed ones."""
    steps: dict = {}
    where = f"{execution} at {spec.tokens}"

    def settled(fp8s) -> None:
        if settle is not None and not settle.done:
            settle(round_of(bench.time_ms, [ensure(f) for f in fp8s], args.steps), where)

    def ensure(fp8):
        k = key(fp8)
        if k not in steps:
            steps[k] = bench.step_fn(spec, bench.build(spec, kinds, fp8), execution)
            bench.check(steps[k], k)
        return steps[k]

    def pair(a: dict[str, bool], b: dict[str, bool]) -> float:
        sa, sb = ensure(a), ensure(b)
        tb = bench.time_ms(sb)
        return bench.time_ms(sa) / tb

    def say(t: dict) -> None:
        log(f"  tokens {spec.tokens} {execution}: oracle {t['search']} {t['group']}: {t['ratio_median']:.3f} ({'kept' if t['kept'] else 'not kept'})", file=sys.stderr)

    keep = {key(f) for f in modes.values()}

    def release(mode: dict[str, bool]) -> None:
        if key(mode) not in keep:
            steps.pop(key(mode), None)

    modes = dict(modes)
    trials: list[dict] = []
    if args.oracle == "greedy":
        full = {g: False for g in modes["bf16"]}

        def widen(chosen):
            on = selection(units, chosen)
            return {g: g in on for g in full}

        settled([modes["bf16"]])
        found, trials = search_oracle(lambda a, b: pair(widen(a), widen(b)), args.oracle_repeats or args.repeats, list(units), say, lambda m: release(widen(m)))
        modes["oracle"] = widen(found)
    wanted = {key(f) for f in modes.values()}
    for k in [k for k in steps if k not in wanted]:
        del steps[k]
    bench.free(collect=True)
    for f in modes.values():
        ensure(f)
    settled(list(modes.values()))
    times = {k: [] for k in steps}
    with bench.collector.rounds(where, notes):
        for _ in range(args.repeats):
            for k in steps:
                times[k].append(bench.time_ms(steps[k]))
    row = summarize(spec.tokens, modes, times, trials)
    row["execution"] = execution
    log(f"  tokens {spec.tokens} {execution}: " + ", ".join(f"{m} {v['vs_bf16_median']:.3f}" for m, v in row["modes"].items()), file=sys.stderr)
    steps.clear()
    return row


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


def _executions(s: str) -> list[str]:
    out = [x.strip() for x in s.split(",") if x.strip()]
    bad = [x for x in out if x not in EXECUTIONS]
    if bad or not out:
        raise argparse.ArgumentTypeError(f"--execution {s!r}: expected eager, graphed or eager,graphed")
    return out


def header_args(root: Path, header: dict, *extra: str) -> argparse.Namespace:
    """The command line a results file's header records (model under ``root``, TP, EP, ETP,
    layers, component), with ``extra`` arguments: what reads an earlier run back rebuilds its
    layout from this."""
    argv = ["--model", str(root / header["model"]), "--tp", str(header.get("tp", 1)), "--layers", str(header["layers"]),
            "--component", header.get("component", "llm"), *extra]
    for k in ("ep", "etp"):
        if header.get(k):
            argv += [f"--{k}", str(header[k])]
    return parser().parse_args(argv)


def parser() -> argparse.ArgumentParser:
    head, rest = __doc__.split("\n\n", 1)
    ap = argparse.ArgumentParser(prog="python -m adaptive_fp8.bench.step_bench", description=head, epilog=rest, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="model config (any form fp8sel reads)")
    ap.add_argument("--config-root", help="how far Hydra defaults may reach (as in fp8sel)")
    ap.add_argument("--component", choices=["llm", "vit"], default="llm", help="which component's layers to build (a VLM's vision encoder: vit)")
    ap.add_argument("--tp", type=_positive, default=1, help="tensor-parallel size: the step runs one rank's shapes (default 1)")
    ap.add_argument("--image-tokens", type=_positive, default=IMAGE_TOKENS, help=f"vit: tokens of one image; attention runs per image (default {IMAGE_TOKENS}: 512 x 512 at patch 16)")
    ap.add_argument(
        "--tp-comm",
        action="store_true",
        help="run over a real TP group under torchrun --nproc-per-node TP (sequence parallel; the communication is in the step); "
        "MHA/GQA + dense MLP models",
    )
    ap.add_argument("--ep", type=_positive, help="expert-parallel size (default: the config's); sets the rank's local experts "
                    "(megatron: at least max(2, top-k) of them, else refused: one GPU builds one rank alone)")
    ap.add_argument("--etp", type=_positive, help="expert tensor-parallel size (default: the config's, else --tp, as Megatron)")
    ap.add_argument("--tokens", type=_tokens, default=[2048, 8192], help="sequence lengths (micro-batch 1; vit: image tokens), comma-separated (default 2048,8192)")
    ap.add_argument("--layers", type=_positive, default=2, help="transformer layers per step (default 2)")
    ap.add_argument("--dense-layers", type=int, help="of --layers, how many have a dense MLP in an MoE model, first (default: the model's share, rounded: a 2-layer step of DeepSeek-V3 is two MoE layers; with none, the dense MLP's groups are not built, nor checked against the plan)")
    ap.add_argument("--execution", type=_executions, default=["eager"], help="eager, graphed, or eager,graphed (default eager)")
    ap.add_argument("--policy", action="append", default=[], help="a policy to compare; repeatable (vit: the vision policy)")
    ap.add_argument("--oracle", choices=["greedy", "none"], help="search the per-module oracle (default greedy; none with --trainer megatron, where each candidate is a GPTModel build)")
    ap.add_argument("--oracle-repeats", type=_positive, help="paired timings per oracle trial (default --repeats; 7 with --trainer megatron, each trial two GPTModel builds)")
    ap.add_argument(
        "--grad-accum",
        type=_positive,
        default=1,
        help="micro-batches (forward + backward) per optimizer step, as Megatron's global / micro batch (default 1); "
        "the optimizer's cost, which re-quantizes FP8 parameters, is paid once per step",
    )
    ap.add_argument("--steps", type=_positive, default=10, help="steps per timed round (default 10)")
    ap.add_argument("--repeats", type=_positive, help="interleaved rounds per mode (default 7; 21 with --trainer megatron, whose steps are short and host-bound)")
    ap.add_argument("--warmup", type=_positive, default=3, help="untimed, checked steps per mode (default 3)")
    collector.add_flag(ap)
    settle_flag(ap)
    ap.add_argument(
        "--recipe",
        default="blockwise",
        choices=list(RECIPES),
        help="the FP8 recipe, as Megatron's --fp8-recipe (default blockwise; compare a policy made for the same recipe)",
    )
    recipe_flags(ap)
    ap.add_argument(
        "--trainer",
        choices=["te", "megatron"],
        default="te",
        help="te: the toolkit's TE blocks (fast; the oracle; --tp-comm). megatron: upstream "
        "megatron-core GPTModel with each integration (bf16, fp8, hook:<policy>, native:<policy>), "
        "one model per mode; graphed is Megatron's local CUDA graphs (cuda_graph_impl=local) (default te)",
    )
    ap.add_argument("--regions", choices=["auto", "both"], default="auto", help="megatron: also time each integration in the FP8 and the BF16 launch region (default auto: the engine's choice)")
    ap.add_argument("--integration", choices=["both", "hook", "native"], default="both",
                    help="megatron: which integration applies each --policy, each its own GPTModel: the hook, upstream's "
                    "--te-precision-config-file (native), or both, timed apart (default both; one saves a model's memory)")
    ap.add_argument("--vocab", type=_positive, default=8192, help="megatron: vocabulary size of the GPTModel (default 8192)")
    weights_flag(ap)
    ap.add_argument("--native-fp8-weights", choices=["clear", "keep"], default="clear",
                    help="megatron, native modes with FP8 weights where the FP8 region holds a BF16 module: clear them, as "
                    "fp8sel te-precision-config launches the model (default), or keep them (megatron-core then builds those "
                    "modules' weights in FP8 and dequantizes them every forward)")
    ap.add_argument("--moe-router-padding", action="store_true",
                    help="megatron: every MoE model in the FP8 region pads each expert's tokens to FP8's alignment in the router "
                    "(Megatron's --moe-router-padding-for-quantization; the padded tokens' probabilities are 0) instead of "
                    "copying them padded in the experts")
    ap.add_argument("--json", help="write the full results here")
    ap.add_argument("--md", help="write the markdown table here")
    return ap


ALLOC_CONF = "PYTORCH_CUDA_ALLOC_CONF"


def prefer_expandable_segments(environ=os.environ) -> str:
    """The Megatron judge builds, captures and frees a model per mode and oracle trial in one
    process; with the caching allocator's fixed segments the freed graph pools fragmented until
    Qwen2.5-72B's graphed oracle ran out of memory at 33 GB allocated, 105 GB reserved (H200).
    Expandable segments fixed it there. A setting the user made is kept. Before torch loads."""
    return environ.setdefault(ALLOC_CONF, "expandable_segments:True")


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    default_repeats(args)
    if args.trainer != "megatron" and args.integration != "both":
        print("step_bench: --integration chooses how the Megatron judge applies a policy; the TE blocks apply it one way; "
              "fix: drop --integration, or add --trainer megatron", file=sys.stderr)
        return 2
    if args.trainer == "megatron" and args.tp_comm:
        print("step_bench: --trainer megatron needs no --tp-comm: with --tp N under torchrun (one process per TP rank) its GPTModel is the TP group, sequence parallel; drop --tp-comm", file=sys.stderr)
        return 2
    import adaptive_fp8 as af8

    try:
        recipe_options(args)  # the recipe's options, refused before any GPU work
        for p in args.policy:
            af8.Policy.load(p)  # a bad policy fails before any GPU work
        # The model, layout and layer mix are checked before torch is imported.
        for t in args.tokens:
            spec, _ = spec_at(af8, args, t)
            kinds = composition(spec, args.layers, args.dense_layers)
            if args.tp_comm:
                world = os.environ.get("WORLD_SIZE")
                tp_comm_layout(spec, kinds, args.tp, int(world) if world else None)
    except (StepBenchError, ValueError) as e:
        print(f"step_bench: {e}", file=sys.stderr)
        return 2
    def partial(out: dict) -> None:
        # Quietly, atomically enough for a reader after a kill: the next write replaces it.
        emit(out, markdown(out), args.json, args.md, quiet=True)

    if args.tp_comm or (args.trainer == "megatron" and args.tp > 1):
        megatron_tp_environment()
    try:
        if args.trainer == "megatron":
            prefer_expandable_segments()
            from adaptive_fp8.bench import megatron_step

            out = megatron_step.run(args, progress=partial if (args.json or args.md) else None)
        else:
            out = run(args, progress=partial if (args.json or args.md) else None)
    except StepBenchError as e:
        print(f"step_bench: {e}", file=sys.stderr)
        return 2
    except ImportError as e:
        print(f"step_bench: skipped: Transformer Engine / torch / megatron-core not importable ({e})", file=sys.stderr)
        return 2
    if not out.get("tp_comm") or os.environ.get("RANK", "0") == "0":
        emit(out, markdown(out), args.json, args.md)
    if out.get("tp_comm"):
        # Skip the interpreter's teardown of NCCL communicators that CUDA graphs captured (it
        # hung on the H200); everything is written and flushed.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("NVTE_FLASH_ATTN", "1")
    sys.exit(main())
