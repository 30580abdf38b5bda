"""Where Megatron's native per-module config and the hook differ with the same FP8 modules (the
H200's DeepSeek-V3 TP 1 EP 16 graphed 7168 and 8192: native 1.03 x all-FP8, the hook 1.01; dense
models graphed at 1536-4608 tokens: the hook 0.1-0.6 ms a step slower on both GPUs, until
``--weights`` found native's FP8 weights stale in the BF16 region: graphed plans now launch it in
the FP8 region, docs/device-logs/h100/graphed_weights/). After the TE install, from the repository
root:

    python3 scripts/device/native_gap.py --tokens 7168 --execution graphed
    python3 scripts/device/native_gap.py --tokens 1536 --execution graphed --native-first \
        --policy P.json -- --model train.sh --tp 1 --layers 2

The arguments after ``--`` are the step benchmark's model and layout (default: DeepSeek-V3 at
TP 1, EP 16, two layers, one dense); ``--native-first`` builds the native model first, to tell
an integration's cost from the order in which the models were built; ``--weights`` looks for FP8
weights a step left stale (the judge's look); ``--native-no-cache`` adds a native model whose FP8
modules quantize their weights every forward.

Builds the judge's hook and native models of the shipped policy (megatron_step's own build and
step), checks their FP8 modules agree, times them interleaved (wall), then runs each under torch's
profiler: the kernels' total GPU ms per step by kernel name and the host's (CPU) ops per step.
Prints the kernels whose time differs most, then a short table. Writes nothing but stdout.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections import Counter


#: The step benchmark's model and layout when none is given after ``--``.
DEEPSEEK_V3 = ["--model", "fixtures/models/deepseek_v3.yaml", "--tp", "1", "--ep", "16", "--layers", "2",
               "--dense-layers", "1"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokens", type=int, default=7168)
    ap.add_argument("--execution", default="graphed", choices=["eager", "graphed"])
    ap.add_argument("--policy", default="policies/deepseek_v3.json")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--keep-region", action="store_true",
                    help="native's FP8 config with override_quantized_autocast false (an FP8 module inside the FP8 region runs in it)")
    ap.add_argument("--native-first", action="store_true",
                    help="build (and time, and profile) the native model before the hook's")
    ap.add_argument("--native-no-cache", action="store_true",
                    help="also a native model built with Megatron's disable_parameter_transpose_cache (its FP8 "
                         "modules quantize their weights every forward, as the hook's graphed ones do)")
    ap.add_argument("--weights", action="store_true",
                    help="first check each FP8 module's cached FP8 weight is quantized again after an optimizer step")
    a, model_args = ap.parse_known_args()
    if model_args[:1] == ["--"]:
        model_args = model_args[1:]
    own = [x for x in model_args if x in ("--tokens", "--execution", "--policy", "--rounds")]
    if own:
        ap.error(f"{own[0]} goes before `--` (it is this script's own argument)")
    if a.keep_region:
        from adaptive_fp8 import megatron_native as mn

        export = mn.native_export

        def keep(*x, **k):
            out = export(*x, **k)
            for c in out["config"]["configs"].values():
                if c.get("training_recipe", {}).get("fp8_quantization_recipe"):
                    c["training_recipe"]["override_quantized_autocast"] = False
            return out

        mn.native_export = keep

    import torch
    from torch.profiler import ProfilerActivity, profile

    from adaptive_fp8.bench import megatron_step as ms
    from adaptive_fp8.bench import step_bench

    model_args = model_args or DEEPSEEK_V3
    args = step_bench.parser().parse_args([
        "--trainer", "megatron", *model_args, "--tokens", str(a.tokens), "--execution", a.execution,
        "--policy", a.policy])
    from adaptive_fp8.bench.step_common import default_repeats

    default_repeats(args)
    judge = ms.Judge(args)
    _, kw, _ = ms._model_kwargs(judge, args, a.tokens, [])
    steps, models = {}, {}
    builds = {"hook": ("hook", kw), "native": ("native", kw)}
    if a.native_first:
        builds = {k: builds[k] for k in ("native", "hook")}
    if a.native_no_cache:
        builds["native-no-cache"] = ("native", dict(kw, disable_parameter_transpose_cache=True))
    for name, (integ, kw_) in builds.items():
        model, region = judge.build(kw_, integ, a.policy, "auto", "blockwise", a.tokens, a.execution)
        step = judge.step_fn(model, a.tokens, args.vocab, 1, a.execution)
        step()
        steps[name], models[name] = step, model
        print(f"{name}: region {region}", file=sys.stderr)
    if a.execution == "graphed":
        judge.capture_graphs()
    for integ, step in steps.items():
        for _ in range(3):
            step()
        step.losses.clear()
    fp8 = {i: sorted(p for p, on in judge.precisions(m).items() if on) for i, m in models.items()}
    print("FP8 modules: " + ", ".join(f"{i} {len(f)}" for i, f in fp8.items())
          + f"; the same: {all(f == fp8['hook'] for f in fp8.values())}")
    if a.weights:
        for i in steps:
            print(f"{i}: FP8 weights: {judge.fp8_weight_freshness(models[i], steps[i])}")
    walls = {i: [] for i in steps}
    for _ in range(a.rounds):
        for i, step in steps.items():
            walls[i].append(judge.time_ms(step, 5))
    kern, ops, total, nk = {}, {}, {}, {}
    for i, step in steps.items():
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(3):
                step()
            torch.cuda.synchronize()
        step.losses.clear()
        k, o, n = Counter(), Counter(), 0
        for e in prof.events():
            dur = (e.time_range.end - e.time_range.start) / 1e3 / 3
            if str(getattr(e, "device_type", "")).endswith("CUDA"):
                k[e.name[:90]] += dur
                n += 1
            else:
                o[e.name[:60]] += 1 / 3
        kern[i], ops[i], total[i], nk[i] = k, o, sum(k.values()), n / 3
    diff = Counter({n: kern["native"][n] - kern["hook"][n] for n in set(kern["native"]) | set(kern["hook"])})
    print("kernels, native - hook (ms per step):")
    for n, d in sorted(diff.items(), key=lambda x: -abs(x[1]))[:15]:
        print(f"  {d:+8.3f}  hook {kern['hook'][n]:8.3f}  {n}")
    odiff = Counter({n: ops["native"][n] - ops["hook"][n] for n in set(ops["native"]) | set(ops["hook"])})
    print("host ops, native - hook (calls per step):")
    for n, d in sorted(odiff.items(), key=lambda x: -abs(x[1]))[:12]:
        print(f"  {d:+8.1f}  hook {ops['hook'][n]:7.1f}  {n}")
    print(f"\n| {a.execution} {a.tokens} | wall ms p50 | kernel ms per step (sum) | kernels per step | host ops per step |")
    print("|---|---:|---:|---:|---:|")
    for i in steps:
        print(f"| {i} | {statistics.median(walls[i]):.3f} | {total[i]:.3f} | "
              f"{nk[i]:.0f} | {round(sum(ops[i].values()))} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
