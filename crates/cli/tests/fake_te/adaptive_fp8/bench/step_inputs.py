"""A stand-in for `python -m adaptive_fp8.bench.step_inputs` in the step-model tests (no torch, no
GPU): it writes documents in the real format for a dense model at the given TP from a made-up
step whose times follow known rules (one segment; the wall time is the larger of host and GPU
time). Eager, FP8 pays for fc1 and fc2 once the step is GPU-bound; graphed, the captured groups'
host time is gone and FP8 pays earlier; proj is slower in FP8 everywhere. With
FAKE_STEP_PLAN_SLOW=<count> the check measures the model's plan at that count 20% slower than BF16.
With FAKE_STEP_PLAN_BEHIND=<count> it measures all-FP8 there 10% faster than BF16 and the plan as
fast as BF16 (a plan behind all-FP8). With FAKE_STEP_UNHIDDEN=<share> every step the check times
between 4096 and 16384 tokens (the calibrated counts of the default sweep excluded) leaves that
share of the smaller of its host and GPU times unhidden (an overlap the calibration did not see);
with FAKE_STEP_UNHIDDEN_GROWTH=<g> that share moves by g (to no less than 0) each time a check
times the count again; with FAKE_STEP_PLAN_NOISE=<x> a check's plan rows spread by +-2x over their
rounds (a band no plan wins or loses beyond). With FAKE_STEP_CHECK_COLD=<count> the first check that times that count
measures every mode there 30% slower (a cold start); timed again, it runs as the rules say. With
FAKE_STEP_UNSETTLED=<run> (inputs, check or recheck) that run's document records settling that
stopped at its bound with the steps still getting faster (the real worker's `settled`); every
other document records a flat one. With FAKE_STEP_NO_FIT=<tp,...> every whole step at those TPs runs
out of memory (a failed row each, as the real worker writes for layers that do not fit the GPU);
the module groups alone are timed.
Under --recipe tensorwise fc1 and fc2 pay more in FP8 and qkv less (TENSORWISE).
It records its command line in <json>.argv (the format has no field for it); with --serve it then
runs each check asked on stdin, as the real worker does, and records each check's argv (the
served command line with that check's --check and --json) the same way."""

from __future__ import annotations

import argparse
import json
import os
import sys

#: Llama-3.2-1B's per-rank GEMM shapes at TP 1 (in, out); column modules split out, row ones in.
SHAPES = {"qkv": (2048, 3072), "proj": (2048, 2048), "fc1": (2048, 16384), "fc2": (8192, 2048)}
GROUPS = {  # group: (kind, (gpu a, b), (fp8 a, b), host, fp8 host)
    "qkv": ("layernorm_column", (0.02, 0.10), (0.04, 0.07), 0.05, 0.09),
    "proj": ("row", (0.02, 0.05), (0.05, 0.05), 0.04, 0.08),
    "fc1": ("layernorm_column", (0.03, 0.40), (0.06, 0.24), 0.05, 0.09),
    "fc2": ("row", (0.03, 0.20), (0.05, 0.12), 0.04, 0.08),
}
HOST_REST = {"eager": 6.0, "graphed": 0.3}
ROUNDS = 5


#: Under --recipe tensorwise, the FP8 GPU slope of each group times this: fc1 and fc2 faster than
#: blockwise, qkv slower (so a per-module choice mixes the two).
TENSORWISE = {"qkv": 1.3, "proj": 1.0, "fc1": 0.75, "fc2": 0.75}
RECIPE = ["blockwise"]
#: How many times a check timed each (execution, count) in this process (FAKE_STEP_UNHIDDEN_GROWTH).
TIMED: dict = {}


def gpu(g: str, fp8: bool, t: int, tp: int) -> float:
    a, b = GROUPS[g][2] if fp8 else GROUPS[g][1]
    if fp8 and RECIPE[0] == "tensorwise":
        b *= TENSORWISE[g]
    return a + b * t / 1000.0 / tp


def host(g: str, fp8: bool) -> float:
    return GROUPS[g][4] if fp8 else GROUPS[g][3]


def truth(execution: str, on: set[str], t: int, tp: int, layers: int) -> tuple[float, float, float]:
    x = t / 1000.0 / tp
    g = 0.3 + 0.2 * x + 0.01 * x * x + layers * sum(gpu(n, n in on, t, tp) for n in GROUPS)
    h = HOST_REST[execution] + (0 if execution == "graphed" else layers * sum(host(n, n in on) for n in GROUPS))
    if on:
        g += 0.05
        h += 0.2
    return max(h, g), h, g


def main() -> int:
    ap = argparse.ArgumentParser()
    for flag in ("--model", "--config-root", "--tp", "--ep", "--etp", "--tokens", "--execution", "--grad-accum",
                 "--layers", "--dense-layers", "--recipe", "--fp8-format", "--amax-history-len", "--amax-compute-algo",
                 "--json", "--check"):
        ap.add_argument(flag)
    ap.add_argument("--serve", action="store_true")
    ap.add_argument("--manual-gc", action="store_true")
    ap.add_argument("--component", default="llm")
    ap.add_argument("--image-tokens", type=int)
    a = ap.parse_args()
    argv = sys.argv[1:]
    while True:
        with open(a.json + ".argv", "w") as f:
            f.write(" ".join(argv + (["--check", a.check] if a.check else [])) + f" pid={os.getpid()}")
        one(a)
        if not a.serve:
            return 0
        print(f"step_inputs: done {a.json}", flush=True)
        line = sys.stdin.readline()
        if not line.strip():
            return 0
        asked = json.loads(line)
        a.check, a.json = asked["check"], asked["json"]
        argv = [x for i, x in enumerate(argv) if argv[i - 1] != "--json" and x != "--json"] + ["--json", a.json]


def _settled(a) -> dict:
    """What settling took in this run: flat, or at FAKE_STEP_UNSETTLED's run still faster."""
    run = "inputs" if not a.check else ("recheck" if "_recheck" in a.json else "check")
    flat = os.environ.get("FAKE_STEP_UNSETTLED") != run
    return {"at": "eager at 1024", "rounds": 6 if flat else 40, "seconds": 1.2 if flat else 12.1,
            "first_ms": 30.0, "last_ms": 20.0 if flat else 24.0, "flat": flat}


def one(a) -> None:
    tp, layers = int(a.tp), int(a.layers)
    RECIPE[0] = a.recipe
    executions = a.execution.split(",")
    tokens = sorted(int(x) for x in a.tokens.split(","))
    doc = {
        "format": "adaptive-fp8-step-inputs", "version": 1, "model": a.model, "model_name": "llama3_2_1b",
        "component": a.component, "recipe": "Float8BlockScaling()", "fp8_recipe": a.recipe, "device": "stand-in",
        **({"fp8_format": a.fp8_format} if a.fp8_format else {}),
        **({"amax_history_len": int(a.amax_history_len), "amax_compute_algo": a.amax_compute_algo} if a.amax_history_len else {}),
        "te_version": "stand-in", "tp": tp, "ep": int(a.ep), "etp": int(a.etp), "layers": layers,
        "layer_types": ["dense"] * layers, "grad_accum": int(a.grad_accum), "steps": 5, "rounds": ROUNDS,
        "groups": [{"group": g, "key": {"kind": k[0], "ub_name": g, "tp": tp}, "scale": 1, "instances": layers,
                    "in_features": SHAPES[g][0] // (tp if k[0] == "row" else 1), "out_features": SHAPES[g][1] // (1 if k[0] == "row" else tp),
                    "graphed": True, "fp8_capable": True} for g, k in GROUPS.items()],
        "modules": [], "step_times": [], "failed": [], "notes": [], "complete": True,
        "settle_s": 12.0, "settled": _settled(a), "fp8_param": False, "host": "Stand-in CPU, 16 CPUs",
    }
    jitter = [1.0 + 0.001 * (i - 2) for i in range(ROUNDS)]

    def step(execution: str, t: int, mode: str, on: list[str]) -> dict:
        w, h, g = truth(execution, set(on), t, tp, layers)
        if mode == "plan" and str(t) == os.environ.get("FAKE_STEP_PLAN_SLOW"):
            w = truth(execution, set(), t, tp, layers)[0] * 1.2
        if str(t) == os.environ.get("FAKE_STEP_PLAN_BEHIND") and mode != "bf16":
            w = truth(execution, set(), t, tp, layers)[0] * (0.9 if mode == "fp8" else 1.0)
        if a.check and str(t) == os.environ.get("FAKE_STEP_CHECK_COLD") and not TIMED.get((execution, t)):
            w *= 1.3
        if a.check and 4096 < t < 16384:
            grown = float(os.environ.get("FAKE_STEP_UNHIDDEN_GROWTH", "0")) * TIMED.get((execution, t), 0)
            w += max(0.0, float(os.environ.get("FAKE_STEP_UNHIDDEN", "0")) + grown) * min(h, g)
        rounds = [w * j for j in jitter]
        if mode == "plan" and a.check and os.environ.get("FAKE_STEP_PLAN_NOISE"):
            x = float(os.environ["FAKE_STEP_PLAN_NOISE"])
            rounds = [w * (1.0 + x * (2 - i)) for i in range(ROUNDS)]
        return {"execution": execution, "tokens": t, "mode": mode, "fp8_groups": on, "wall_ms": rounds,
                "host_ms": None if mode == "plan" else h, "gpu_ms": None if mode == "plan" else g}

    if a.check:
        with open(a.check) as f:
            plans = json.load(f)["plans"]
        # The whole step moved between the inputs and the check (a host-bound step does).
        drift = float(os.environ.get("FAKE_STEP_CHECK_DRIFT", "1"))
        jitter[:] = [j * drift for j in jitter]
        for execution, t in sorted({(p["execution"], p["tokens"]) for p in plans}):
            doc["step_times"] += [step(execution, t, "bf16", []), step(execution, t, "fp8", list(GROUPS))]
            doc["step_times"] += [step(execution, t, "plan", p["fp8_groups"]) for p in plans if (p["execution"], p["tokens"]) == (execution, t)]
            TIMED[(execution, t)] = TIMED.get((execution, t), 0) + 1
    else:
        for t in tokens:
            for g in GROUPS:
                doc["modules"].append({"tokens": t, "group": g, **{p: {"host_ms": [host(g, p == "fp8") * j for j in jitter],
                                                                       "gpu_ms": [gpu(g, p == "fp8", t, tp) * j for j in jitter]} for p in ("bf16", "fp8")}})
        calibrate = sorted({tokens[0], tokens[min(1, len(tokens) - 1)], tokens[len(tokens) // 2], tokens[-1]})  # as the real default
        for execution in executions:
            for t in calibrate:
                if str(tp) in os.environ.get("FAKE_STEP_NO_FIT", "").split(","):
                    doc["failed"].append({"execution": execution, "tokens": t,
                                          "error": "OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 GiB."})
                    continue
                doc["step_times"] += [step(execution, t, "bf16", []), step(execution, t, "fp8", list(GROUPS))]
    with open(a.json + ".tmp", "w") as f:
        json.dump(doc, f)
    os.replace(a.json + ".tmp", a.json)
    print(f"stand-in step_inputs: tp {tp}{' check' if a.check else ''}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
