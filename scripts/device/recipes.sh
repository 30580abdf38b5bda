#!/usr/bin/env bash
# Per-module recipes on the H200 (issue 48), for two dense models: Llama-3.2-1B (a fixture) and
# Llama-3.1-8B (written here from public dimensions, in no fixture of the repository). After the
# TE install (../shared/tools/te-device), one call per phase, back to back:
#   bash scripts/device/recipes.sh inputs  # step-model inputs in blockwise and tensorwise, and
#                                          # each recipe's numerics, then the three policies:
#                                          # blockwise, tensorwise (rules under a tensorwise
#                                          # base) and the mixed plan, by fp8sel merge-policy
#   bash scripts/device/recipes.sh judge   # the three in upstream GPTModel, interleaved with
#                                          # BF16 and all-FP8 blockwise, eager and graphed
# Carries devcarry/ (fp8sel, the wheel) and .te/mc. Writes $OUT/<phase>.tar.gz; prints a table.
set -uo pipefail
phase=${1:?inputs or judge}
OUT=${OUT:-/tmp/out}
W=/tmp/rc
mkdir -p "$W" "$OUT"
. scripts/device/te_env.sh
te_env "$W" > /dev/null
FP8SEL=$PWD/devcarry/fp8sel
chmod +x "$FP8SEL"
mkdir -p "$W/Llama-3.1-8B"
cat > "$W/Llama-3.1-8B/config.json" <<'JSON'
{"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
 "intermediate_size": 14336, "num_attention_heads": 32, "num_key_value_heads": 8,
 "num_hidden_layers": 32, "vocab_size": 128256, "hidden_act": "silu", "rms_norm_eps": 1e-05}
JSON
config() { [ "$1" = L1 ] && echo fixtures/models/llama3_2_1b.yaml || echo "$W/Llama-3.1-8B/config.json"; }
case $phase in
inputs)
  for m in L1 L8; do
    for r in blockwise tensorwise; do
      t0=$SECONDS
      timeout 150 python3 -m adaptive_fp8.bench.step_inputs --model "$(config $m)" --tp 1 \
        --tokens 4096,8192,16384 --recipe "$r" --json "$W/${m}_${r}_inputs.json" > "$W/${m}_${r}_inputs.log" 2>&1
      echo "inputs $m $r rc=$? $((SECONDS - t0)) s"
      t0=$SECONDS
      timeout 90 python3 -m adaptive_fp8.bench.numerics --model "$(config $m)" --layers 2 --seq-length 4096 \
        --steps 2 --recipe "$r" --out "$W/${m}_${r}_numerics.json" > "$W/${m}_${r}_numerics.log" 2>&1
      echo "numerics $m $r rc=$? $((SECONDS - t0)) s"
      tail -2 "$W/${m}_${r}_numerics.log" | cut -c1-200
    done
    "$FP8SEL" merge-policy --step-model "$W/${m}_blockwise_inputs.json" --output "$W/${m}_blockwise.json" > "$W/${m}_merge.log" 2>&1
    "$FP8SEL" merge-policy --step-model "$W/${m}_tensorwise_inputs.json" --output "$W/${m}_tensorwise.json" >> "$W/${m}_merge.log" 2>&1
    "$FP8SEL" merge-policy --step-model "$W/${m}_blockwise_inputs.json" "$W/${m}_tensorwise_inputs.json" \
      --numerics "$W/${m}_blockwise_numerics.json" "$W/${m}_tensorwise_numerics.json" \
      --output "$W/${m}_mixed.json" >> "$W/${m}_merge.log" 2>&1
    echo "merge $m rc=$?"; tail -4 "$W/${m}_merge.log" | cut -c1-240
    # The tensorwise policy as one the hook runs under tensorwise beside a blockwise trainer.
    python3 - "$W/${m}_tensorwise.json" <<'PY'
import json, sys
p = json.load(open(sys.argv[1])); p["recipes"] = {"base": "tensorwise", "keys": []}
json.dump(p, open(sys.argv[1], "w"), indent=1)
PY
    python3 - "$W" "$m" <<'PY'
import json, sys
w, m = sys.argv[1:]
for name in ("blockwise", "tensorwise", "mixed"):
    p = json.load(open(f"{w}/{m}_{name}.json"))
    print(f"  {m} {name}: rules {json.dumps(p['rules'], separators=(',', ':'))[:400]}")
    for k in p.get("recipes", {}).get("keys", []):
        st = lambda e: " ".join(f"{s['recipe']}@{s['from']}" for s in k[e])
        print(f"    {k['key']['ub_name']}: eager {st('eager')} | graphed {st('graphed')}")
for r in ("blockwise", "tensorwise"):
    try:
        d = json.load(open(f"{w}/{m}_{r}_numerics.json"))
        print(f"  numerics {r}: " + ", ".join(f"{x['key'].get('ub_name')} {max(o['rel_rms'] for o in x['operands'].values()):.4f}" for x in d["modules"]))
    except Exception as e:
        print(f"  numerics {r}: {e}")
PY
  done
  ;;
judge)
  for run in "L1 eager 4096,8192" "L1 graphed 8192" "L8 eager 4096,8192" "L8 graphed 4096"; do
    set -- $run
    m=$1 ex=$2 tokens=$3 tag=${1}_$2
    t0=$SECONDS
    timeout 170 python3 -m adaptive_fp8.bench.step_bench --trainer megatron --model "$(config $m)" \
      --policy "$W/${m}_blockwise.json" --policy "$W/${m}_tensorwise.json" --policy "$W/${m}_mixed.json" \
      --tokens "$tokens" --execution "$ex" --layers 2 --repeats 21 --no-fp8-param \
      --json "$W/judge_$tag.json" --md "$W/judge_$tag.md" > "$W/judge_$tag.log" 2>&1
    echo "judge $tag rc=$? $((SECONDS - t0)) s"
    grep -E "differ from fp8sel explain|Error|error" "$W/judge_$tag.log" | head -5 | cut -c1-240
    cp "$W/judge_$tag.md" "$W/judge_$tag.json" "$OUT/" 2>/dev/null
  done
  ;;
esac
tar -C /tmp -czf "$OUT/$phase.tar.gz" rc
for f in "$W"/judge_*.md; do [ -f "$f" ] && { echo "== $f"; cut -c1-220 "$f" | head -30; }; done
