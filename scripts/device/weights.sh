#!/usr/bin/env bash
# How FP8 modules hold their weights, in the step (on any GPU with TE, after
# ../shared/tools/te-device's install; carries devcarry/ and .te/mc):
#   te:   the TE blocks (step_bench --trainer te, Llama-3.2-1B, 2 layers, 4096 eager, 7 rounds) with
#         today's default, BF16 weights in the FP8 modules: the step runs, checked and finite;
#   bf16w: the Megatron judge (GPTModel, Qwen2.5-72B, 1 layer, 3072 eager, hook, 7 rounds) with
#         today's default: all-FP8 and the policy's same four groups both hold BF16 weights;
#   fp8w: the same with --fp8-param (FP8 weights, TE FusedAdam re-quantizing each one): all-FP8
#         slower than the policy's same groups by the re-quantization.
# BOUND_J and BOUND_TE bound each run (seconds; 110 and 60). $OUT/weights.tar.gz; the last lines are a table (row, rc, seconds).
set -uo pipefail
OUT=${OUT:-/tmp/out}
W=/tmp/wt
mkdir -p "$W" "$OUT"
. scripts/device/te_env.sh
te_env "$W" > /dev/null
rows=()
run() {  # name, bound (s), step_bench arguments
  local n=$1 bound=$2 t0=$SECONDS
  shift 2
  timeout "$bound" python3 -m adaptive_fp8.bench.step_bench "$@" --json "$W/$n.json" --md "$W/$n.md" > "$W/$n.log" 2>&1
  rows+=("| $n | $? | $((SECONDS - t0)) |")
  tail -6 "$W/$n.md" 2>/dev/null
  tar czf "$OUT/weights.tar.gz" -C "$W" .  # after each row: a call cut short keeps what ran
}
J=(--trainer megatron --model fixtures/models/qwen2_5_72b.yaml --policy policies/qwen2_5_72b.json --tokens 3072
   --execution eager --layers 1 --repeats 7 --integration hook)
run bf16w "${BOUND_J:-110}" "${J[@]}"
run fp8w "${BOUND_J:-110}" "${J[@]}" --fp8-param
run te "${BOUND_TE:-60}" --model fixtures/models/llama3_2_1b.yaml --tokens 4096 --execution eager --layers 2 --repeats 7 --oracle none
echo "| row | rc | s |"
echo "|---|---:|---:|"
printf '%s\n' "${rows[@]}"
