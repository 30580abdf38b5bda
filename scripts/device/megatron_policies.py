"""Policies with chosen decisions for the Megatron judge's integration checks (not measured:
they exist to put known module groups in FP8). For a model and layout, writes into DIR:

- all_bf16.json: every module's rule present, its threshold above any token count;
- attn_fp8.json: attention projections FP8 from 1 token, everything else BF16 (dense FP8 only:
  the BF16 launch region applies);
- mlp_fp8.json: the MLP (dense fc1/fc2, routed and shared experts) FP8, attention BF16 (with
  routed experts FP8, the FP8 launch region applies).

    python3 scripts/device/megatron_policies.py MODEL DIR --tp 1 [--ep 16]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import adaptive_fp8 as af8

NEVER = 1 << 30


def rules(rows: list[dict], tp: int, etp: int, fp8) -> dict:
    out: dict = {}
    for r in rows:
        if r["component"] != "llm":
            continue
        t = 1 if fp8(r["name"]) else NEVER
        kind = r["module_kind"]
        if kind.endswith("_grouped"):
            out.setdefault(kind, []).append({"etp": etp, "num_gemms": r["num_gemms"], "min_tokens": t})
        else:
            out.setdefault(kind, {}).setdefault(r["ub_name"], []).append({"tp": tp, "min_tokens": t})
    # One rule per key: shared experts share (kind, ub_name, tp) with dense modules; FP8 wins.
    for kind, v in out.items():
        if isinstance(v, dict):
            for ub, rs in v.items():
                v[ub] = [min(rs, key=lambda x: x["min_tokens"])]
        else:
            uniq = {}
            for x in v:
                k = (x["etp"], x["num_gemms"])
                uniq[k] = min(uniq.get(k, x), x, key=lambda y: y["min_tokens"])
            out[kind] = list(uniq.values())
    return {"version": 1, "speedup_threshold": 1.0, "rules": out}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("dir")
    ap.add_argument("--tp", type=int, default=1)
    ap.add_argument("--ep", type=int, default=1)
    a = ap.parse_args()
    rows = af8.plan(a.model, None, tp=a.tp, ep=a.ep, etp=a.tp, seq_length=4096)
    d = Path(a.dir)
    d.mkdir(parents=True, exist_ok=True)
    sel = {
        "all_bf16": lambda n: False,
        "attn_fp8": lambda n: ".self_attention." in n,
        "mlp_fp8": lambda n: ".mlp." in n,
    }
    for name, f in sel.items():
        (d / f"{name}.json").write_text(json.dumps(rules(rows, a.tp, a.tp, f), indent=1) + "\n")
        print(d / f"{name}.json")


if __name__ == "__main__":
    main()
