#!/usr/bin/env bash
# The Megatron judge on the H200 (issue: upstream Megatron natively, an integration that costs
# nothing). After the TE install (../shared/tools/te-device, parts a-g), one call per phase:
#   bash scripts/device/megatron_judge.sh smoke|dense|overhead|moe
# Needs in devcarry/: the adaptive_fp8 wheel (maturin build --release) and
# .te/mc/megatron_core-0.19.2-*.whl (carry .te/mc). Writes $OUT/<phase>.tar.gz (JSON, markdown, logs).
#   smoke: one layer, two rounds: every mode builds, trains and matches `fp8sel explain`.
#   dense: integration overhead, Llama-3.2-1B dims (4 layers), 256 and 1024 tokens, the BF16 and
#          FP8 steps against all-BF16-by-policy and half-FP8 (attention) plans, hook and native,
#          each in both launch regions, 21 interleaved rounds; decisions on Llama-3-8B dims.
#   moe:   the same on Qwen3-30B-A3B dims at EP 16 (one rank's 8 experts, 2 layers), with the
#          experts-FP8 plan too; decisions on Mixtral-8x7B dims at EP 4.
set -uo pipefail
phase=${1:?smoke, dense, overhead or moe}
OUT=${OUT:-/tmp/out}
W=/tmp/mj/$phase
mkdir -p "$W" "$OUT"
. scripts/device/te_env.sh
te_env "$W"

pol() { python3 scripts/device/megatron_policies.py "$1" "$W/pol_$2" --tp 1 --ep "${3:-1}" > /dev/null; }
judge() {  # name, timeout, args...
  local name=$1 t=$2; shift 2
  timeout "$t" python3 -m adaptive_fp8.bench.step_bench --trainer megatron "$@" \
    --json "$W/$name.json" --md "$W/$name.md" > "$W/$name.log" 2>&1
  echo "$name rc=$?"
  grep -E "MISMATCH|Error|error" "$W/$name.log" | head -5
  grep -E "differ from fp8sel explain" "$W/$name.log" | awk '{print $3, $4, $5, $10, $11}' | sort | uniq -c | head -30
}
L1=fixtures/models/llama3_2_1b.yaml
L8=examples/models/llama3_8b.json
Q3=examples/models/qwen3_30b_a3b.json
MX=examples/models/mixtral_8x7b.json
case $phase in
smoke)
  pol $L1 l1; pol $Q3 q3 16
  judge l1 200 --model $L1 --layers 1 --tokens 256 --repeats 2 --steps 2 --warmup 2 --regions both \
    --policy "$W/pol_l1/attn_fp8.json" --policy policies/te/llama3_2_1b.json
  judge q3 200 --model $Q3 --ep 16 --layers 1 --tokens 256 --repeats 2 --steps 2 --warmup 2 --regions both \
    --policy "$W/pol_q3/attn_fp8.json" --policy "$W/pol_q3/mlp_fp8.json"
  ;;
dense)
  pol $L1 l1; pol $L8 l8
  judge l1_overhead 330 --model $L1 --layers 4 --tokens 256,1024 --repeats 21 --steps 10 --regions both \
    --policy "$W/pol_l1/all_bf16.json" --policy "$W/pol_l1/attn_fp8.json"
  judge l8_decisions 200 --model $L8 --layers 2 --tokens 1024,4096 --repeats 7 --steps 5 \
    --policy "$W/pol_l8/attn_fp8.json" --policy "$W/pol_l8/mlp_fp8.json"
  ;;
overhead)  # dense's overhead run alone (re-run after the FP8 weight-cache fix)
  pol $L1 l1
  judge l1_overhead 330 --model $L1 --layers 4 --tokens 256,1024 --repeats 21 --steps 10 --regions both \
    --policy "$W/pol_l1/all_bf16.json" --policy "$W/pol_l1/attn_fp8.json"
  ;;
moe)
  pol $Q3 q3 16; pol $MX mx 4
  judge q3_overhead 360 --model $Q3 --ep 16 --layers 2 --tokens 256,1024 --repeats 21 --steps 10 --regions both \
    --policy "$W/pol_q3/all_bf16.json" --policy "$W/pol_q3/attn_fp8.json" --policy "$W/pol_q3/mlp_fp8.json"
  judge mx_decisions 160 --model $MX --ep 4 --layers 1 --tokens 1024 --repeats 5 --steps 5 \
    --policy "$W/pol_mx/attn_fp8.json" --policy "$W/pol_mx/mlp_fp8.json"
  ;;
esac
tar -C /tmp/mj -czf "$OUT/$phase.tar.gz" "$phase"
for f in "$W"/*.md; do echo "== $f"; cut -c1-170 "$f" | head -40; done
