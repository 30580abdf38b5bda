"""The six rows made twice on 2026-12-06 by the same release fp8sel (28facd2, BF16 weights): the
landed run (06:50 UTC, one H200 machine, ../<row>/) against a second run on another H200 machine
(08:00 UTC, ./<row>/). Prints each key's thresholds, then each run's own noise line. Run here:
python3 compare.py > compare.md"""
import json
import re

ROWS = [("llama3_2_1b_tp1", "llama3_2_1b"), ("llama3_2_1b_tp2", "llama3_2_1b"),
        ("qwen3_vl_235b_a22b_vit_tp1", "qwen3_vl_235b_a22b.vit"), ("qwen3_vl_235b_a22b_vit_tp2", "qwen3_vl_235b_a22b.vit"),
        ("qwen3_vl_235b_a22b_vit_tp4", "qwen3_vl_235b_a22b.vit"), ("qwen2_5_72b_tp8", "qwen2_5_72b")]
NEVER = 2**53


def rules(path):
    out = {}
    for kind, v in json.load(open(path))["rules"].items():
        for ub, rs in (v.items() if isinstance(v, dict) else [("", v)]):
            for r in rs:
                out[kind + ("." + ub if ub else "")] = (r["min_tokens"], r.get("min_tokens_graphed", r["min_tokens"]))
    return out


def fmt(t):
    return "never" if t >= NEVER else str(t)


def noise(path):
    text = open(path).read()
    m = re.search(r"held-out step\(s\) the model was within ([\d.]+)% of the step \(worst; median ([\d.]+)%\)", text)
    out = "held-out worst {}%, median {}%".format(*m.groups()) if m else "-"
    m = re.search(r"the same step timed twice differed by ([\d.]+)% \(median\), up to ([\d.]+)%", text)
    return out + ("; the same step twice: median {}%, up to {}%".format(*m.groups()) if m else "")


print("| row | key | eager: landed / again | graphed: landed / again |\n|---|---|---:|---:|")
for row, pol in ROWS:
    a, b = rules(f"../{row}/{pol}.json"), rules(f"{row}/{pol}.json")
    for k in sorted(set(a) | set(b)):
        x, y = a.get(k, (NEVER, NEVER)), b.get(k, (NEVER, NEVER))
        print(f"| {row} | {k} | {fmt(x[0])} / {fmt(y[0])} | {fmt(x[1])} / {fmt(y[1])} |")
print("\n| row | landed run | again |\n|---|---|---|")
for row, _ in ROWS:
    print(f"| {row} | {noise(f'../{row}/gen.log')} | {noise(f'{row}/gen.log')} |")
