"""A stand-in for `python -m adaptive_fp8.bench.step_bench` in the `gen-policy --backend step` test (no
torch, no GPU): it writes results in the real format for a dense model at the given TP, from a
step-time model in which FP8 pays from 4096 tokens eager (FAKE_STEP_EAGER_FROM) and from 1024
graphed, and proj never eager; it fails where --tokens is FAKE_STEP_FAIL_TOKENS. A count in
FAKE_STEP_OOM_TOKENS runs out of memory (an error row, as the real one writes) when the run has
other counts too, and alone as well with FAKE_STEP_OOM_ALONE. With
FAKE_STEP_SECONDS it takes that long per count and saves the results so far after each (as the
real one does: a temp file renamed over). It records its command line beside the results
(`<json>.argv`)."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time


GROUPS = ["qkv", "proj", "fc1", "fc2"]


def stat(groups: list[str], r: float) -> dict:
    """One mode's figures in the real format: `r` x BF16, a band of +-0.02."""
    return {"fp8_groups": groups, "ms_median": 10.0 * r, "ms_p10": 9.8 * r, "ms_p90": 10.2 * r,
            "vs_bf16_median": r, "vs_bf16_p10": r - 0.02, "vs_bf16_p90": r + 0.02,
            "verdict_vs_bf16": "-" if not groups else ("faster" if r < 0.98 else "slower" if r > 1.02 else "tie"),
            "vs_best_of_bf16_fp8": r}


def header(a, tp: int, complete: bool) -> dict:
    return {"format": "adaptive-fp8-step-results", "version": 1, "model": a.model, "model_name": "llama3_2_1b",
            "component": "llm", "trainer": a.trainer or "te", "recipe": "Float8BlockScaling", "fp8_recipe": a.recipe or "blockwise",
            "device": "stand-in", "te_version": "stand-in", "tp": tp, "layers": int(a.layers or 2), "steps": 5,
            "repeats": 7, "execution": a.execution, "grad_accum": int(a.grad_accum or 1), "complete": complete}


def record_argv(a) -> None:
    with open(a.json + ".argv", "w") as f:
        f.write(" ".join(sys.argv[1:]))


def main() -> int:
    ap = argparse.ArgumentParser()
    for flag in ("--model", "--config-root", "--tp", "--ep", "--etp", "--tokens", "--execution",
                 "--grad-accum", "--trainer", "--layers", "--dense-layers", "--oracle", "--recipe", "--fp8-format", "--amax-history-len", "--amax-compute-algo", "--json", "--policy"):
        ap.add_argument(flag)
    ap.add_argument("--manual-gc", action="store_true")
    a = ap.parse_args()
    if a.oracle == "none" and a.policy:
        return judge(a)
    if a.tokens == os.environ.get("FAKE_STEP_FAIL_TOKENS"):
        print(f"stand-in step_bench: failing at {a.tokens} as asked", file=sys.stderr)
        return 1
    if a.oracle != "greedy":
        print("stand-in step_bench: the thresholds need --oracle greedy", file=sys.stderr)
        return 2
    tp = int(a.tp)
    keys = {g: {"key": {"kind": k, "ub_name": g, "tp": tp}, "scale": 1}
            for g, k in zip(GROUPS, ("layernorm_column", "row", "layernorm_column", "row"))}
    rows = []
    seconds = float(os.environ.get("FAKE_STEP_SECONDS", "0"))

    def save(complete: bool) -> None:
        out = dict(header(a, tp, complete), group_keys=keys, results=rows)
        record_argv(a)
        with open(a.json + ".tmp", "w") as f:
            json.dump(out, f)
        os.replace(a.json + ".tmp", a.json)

    for execution in a.execution.split(","):
        for t in (int(x) for x in a.tokens.split(",")):
            time.sleep(seconds)
            start = int(os.environ.get("FAKE_STEP_EAGER_FROM", "4096")) if execution == "eager" else 1024
            groups = [g for g in keys if t >= start and not (g == "proj" and execution == "eager")]
            alone = len(a.tokens.split(",")) * len(a.execution.split(",")) == 1
            if str(t) in os.environ.get("FAKE_STEP_OOM_TOKENS", "").split(",") and (
                    not alone or os.environ.get("FAKE_STEP_OOM_ALONE")):
                rows.append({"tokens": t, "execution": execution,
                             "error": "OutOfMemoryError: CUDA out of memory. Tried to allocate 924.00 MiB."})
                continue
            modes = {"bf16": stat([], 1.0), "fp8": stat(list(keys), 0.95), "oracle": stat(groups, 0.95 if groups else 1.0)}
            rows.append({"tokens": t, "execution": execution, "modes": modes, "verdict": {"fp8_groups": groups, "by": "oracle"}})
            if seconds:
                save(False)
    save(True)
    print("tables go to stdout, which gen-policy discards")
    print(f"stand-in step_bench: tp {tp}", file=sys.stderr)
    return 0


def judge(a) -> int:
    """The Megatron judge of a policy (`--oracle none --policy P`): per count, BF16, all-FP8 and
    the policy through the hook and the native config, its FP8 groups read from the policy's
    dense rules; 3% faster than BF16 where it runs FP8, 20% slower at FAKE_JUDGE_SLOW."""
    with open(a.policy) as f:
        rules = json.load(f)["rules"]
    tp, name = int(a.tp), os.path.basename(a.policy)
    rows = []
    for execution in a.execution.split(","):
        field = "min_tokens_graphed" if execution == "graphed" else "min_tokens"
        for t in (int(x) for x in a.tokens.split(",")):
            on = [ub for kind in rules.values() if isinstance(kind, dict) for ub, rs in kind.items()
                  if any(r.get("tp") == tp and r.get(field, r["min_tokens"]) <= t for r in rs)]
            r = 1.2 if str(t) == os.environ.get("FAKE_JUDGE_SLOW") else (0.97 if on else 1.0)
            rows.append({"tokens": t, "execution": execution, "modes": {"bf16": stat([], 1.0), "fp8": stat(GROUPS, 0.9),
                                                                        f"hook:{name}": stat(on, r), f"native:{name}": stat(on, r)}})
    record_argv(a)
    with open(a.json, "w") as f:
        json.dump(dict(header(a, tp, True), results=rows), f)
    print(f"stand-in step_bench: judged {name}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
