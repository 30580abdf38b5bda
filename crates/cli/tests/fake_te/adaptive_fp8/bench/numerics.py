"""A stand-in for `python -m adaptive_fp8.bench.numerics` in the per-module recipe tests (no torch,
no GPU): it writes a report in the real format for Llama-3.2-1B's four module groups, each at
E4M3's usual error (0.027), and with FAKE_NUMERICS_OVER=<ub_name>:<recipe> that module at 0.09
under that recipe. FAKE_NUMERICS_FAIL=1 writes nothing and exits 1. It records its command
line in <out>.argv."""

from __future__ import annotations

import argparse
import json
import os
import sys

KINDS = {"qkv": "layernorm_column", "proj": "row", "fc1": "layernorm_column", "fc2": "row"}
PATHS = {"qkv": "self_attention.linear_qkv", "proj": "self_attention.linear_proj", "fc1": "mlp.linear_fc1", "fc2": "mlp.linear_fc2"}


def main() -> int:
    ap = argparse.ArgumentParser()
    for flag in ("--model", "--config-root", "--recipe", "--layers", "--dense-layers", "--seq-length", "--steps", "--ep", "--out"):
        ap.add_argument(flag)
    a = ap.parse_args()
    with open(a.out + ".argv", "w") as f:
        f.write(" ".join(sys.argv[1:]))
    if os.environ.get("FAKE_NUMERICS_FAIL") == "1":
        print("stand-in numerics: failing as asked", file=sys.stderr)
        return 1
    over = os.environ.get("FAKE_NUMERICS_OVER", ":").split(":")

    def module(ub: str) -> dict:
        e = 0.09 if over == [ub, a.recipe] else 0.027
        return {"component": "llm", "name": f"decoder.layers.{PATHS[ub]}", "key": {"kind": KINDS[ub], "ub_name": ub, "tp": 1},
                "operands": {op: {"rel_rms": e, "underflow": 0.0, "saturated": 0.0} for op in ("input", "weight", "grad_output")}}

    doc = {"format": "fp8sel-numerics", "version": 1, "model": a.model, "recipe": a.recipe, "modules": [module(ub) for ub in KINDS]}
    with open(a.out + ".tmp", "w") as f:
        json.dump(doc, f)
    os.replace(a.out + ".tmp", a.out)
    print(f"stand-in numerics: {a.recipe}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
