import json, sys
# The thresholds of one layout's policy made twice on one H100: FP8 weights (regen_shipped/), BF16 weights (regen_bf16w/).
def rules(p):
    out = {}
    for kind, v in json.load(open(p))["rules"].items():
        for ub, rs in (v.items() if isinstance(v, dict) else [("", v)]):
            for r in rs:
                out[f"{kind}{'.' + ub if ub else ''}"] = (r["min_tokens"], r.get("min_tokens_graphed", r["min_tokens"]))
    return out
fmt = lambda t: "never" if t >= 2**53 else str(t)
print("| layout | key | eager: FP8 weights / BF16 weights | graphed: FP8 weights / BF16 weights |\n|---|---|---:|---:|")
for row, pol in [("llama3_2_1b_tp1", "llama3_2_1b"), ("llama3_2_1b_tp2", "llama3_2_1b"), ("deepseek_v3_tp8_ep64", "deepseek_v3")]:
    a, b = rules(f"regen_shipped/{row}/{pol}.json"), rules(f"regen_bf16w/{row}/{pol}.json")
    for k in sorted(set(a) | set(b)):
        x, y = a.get(k, (2**53,) * 2), b.get(k, (2**53,) * 2)
        print(f"| {row} | {k} | {fmt(x[0])} / {fmt(y[0])} | {fmt(x[1])} / {fmt(y[1])} |")
