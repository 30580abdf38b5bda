#!/usr/bin/env bash
# Megatron's native per-module config in CUDA-graphed steps (on any GPU with TE, after
# ../shared/tools/te-device's install; carries devcarry/ and .te/mc). The judge (GPTModel, 21
# rounds, graphed) with every mode's look for stale FP8 weights: bf16, fp8, the hook and native,
# native now in the FP8 region for graphed plans (megatron-core re-quantizes cached FP8 weights in
# its graphs only under config.fp8; in the BF16 region the judge found them stale).
#   llama: Llama-3.2-1B, 2 layers, 1536 and 4096 (fc1, fc2 FP8 graphed);
#   qwen72: Qwen2.5-72B, 1 layer, 1536 (qkv, proj, fc1, fc2 FP8 graphed);
#   nemo: own_model.sh's Mistral-NeMo-12B launch script and its H100 policy (devcarry/nemo/), 2
#         layers, 1536 and 3072;
#   qmoe: own_model.sh's Qwen1.5-MoE-A2.7B and its H100 policy (devcarry/qmoe/), 2 layers, 16384.
#   regions: Qwen2.5-72B, 1 layer, 1536, with --regions both (each integration also forced into
#         the other region; the forced mode its automatic one already is is not built twice);
#   dsv3: the shipped DeepSeek-V3 at TP 1 EP 16, one MoE layer, 3072 and 4096 (attention proj, and
#         at 4096 the shared expert's fc2, FP8 graphed; the routed experts BF16): native's FP8
#         region pads the BF16 experts' tokens, the hook's BF16 region does not. One run per
#         integration (three models of the layer fit an H100; four do not).
#   dsv3pad: dsv3's native run at 3072 with --moe-router-padding (Megatron's
#         --moe-router-padding-for-quantization: the router pads, the experts copy nothing).
# ROWS picks (default: llama qwen72).
# BOUND bounds each run (seconds; 240). $OUT/graphed_weights.tar.gz; the last lines are a table.
set -uo pipefail
OUT=${OUT:-/tmp/out}
W=/tmp/gw
mkdir -p "$W" "$OUT"
. scripts/device/te_env.sh
te_env "$W" > /dev/null
rows=()
run() {  # name, step_bench arguments
  local n=$1 t0=$SECONDS
  shift
  timeout "${BOUND:-240}" python3 -m adaptive_fp8.bench.step_bench --trainer megatron --execution graphed \
    --repeats 21 "$@" --json "$W/$n.json" --md "$W/$n.md" > "$W/$n.log" 2>&1
  rows+=("| $n | $? | $((SECONDS - t0)) |")
  grep -h "FP8 weights" "$W/$n.log" | cut -c1-200
  tail -8 "$W/$n.md" 2>/dev/null
  tar czf "$OUT/graphed_weights.tar.gz" -C "$W" .  # after each row: a call cut short keeps what ran
}
for r in ${ROWS:-llama qwen72}; do
  case $r in
  llama) run llama --model fixtures/models/llama3_2_1b.yaml --policy policies/llama3_2_1b.json --tokens 1536,4096 --layers 2 ;;
  qwen72) run qwen72 --model fixtures/models/qwen2_5_72b.yaml --policy policies/qwen2_5_72b.json --tokens 1536 --layers 1 ;;
  # own_model.sh's Mistral-NeMo-12B launch script and its H100 policy, carried in devcarry/nemo/.
  nemo) run nemo --model devcarry/nemo/train.sh --policy devcarry/nemo/Mistral-NeMo-12B.json --tokens 1536,3072 --layers 2 ;;
  # own_model.sh's Qwen1.5-MoE-A2.7B config and its H100 policy (devcarry/qmoe/): dense FP8,
  # experts BF16 at 16384 graphed, so native's FP8 region pads the BF16 experts' tokens.
  qmoe) run qmoe --model devcarry/qmoe/config.json --policy devcarry/qmoe/Qwen1.5-MoE-A2.7B.json --tokens 16384 --layers 2 ;;
  regions) run regions --model fixtures/models/qwen2_5_72b.yaml --policy policies/qwen2_5_72b.json --tokens 1536 --layers 1 --regions both ;;
  dsv3) for i in native hook; do
      run "dsv3_$i" --model fixtures/models/deepseek_v3.yaml --policy policies/deepseek_v3.json --tp 1 --ep 16 --layers 1 --tokens 3072,4096 --integration "$i"
    done ;;
  dsv3pad) run dsv3_native_pad --model fixtures/models/deepseek_v3.yaml --policy policies/deepseek_v3.json --tp 1 --ep 16 --layers 1 --tokens 3072 --integration native --moe-router-padding ;;
  *) echo "row $r: use llama, qwen72, nemo, qmoe, regions, dsv3 or dsv3pad" >&2; exit 2 ;;
  esac
done
echo "| row | rc | s |"
echo "|---|---:|---:|"
printf '%s\n' "${rows[@]}"
