#!/usr/bin/env bash
# Issue 25 on the H200: the numerics probe and the convergence check, after the TE install
# (../shared/tools/te-device, parts a-g). One call; carry devcarry/adaptive_fp8-*.whl and .te/mc.
#   bash scripts/device/numerics.sh
# Writes $OUT/numerics.tar.gz (reports, tables, curves, logs).
#   crosscheck: the probe's FP8 round trip against TE's own quantizers on random data;
#   numerics:   Llama-3.2-1B dims (2 layers, 4096 tokens; blockwise and tensorwise) and
#               Qwen3-30B-A3B dims (EP 16: one rank's 8 experts, 2 layers, 4096 tokens);
#   convergence: 300 steps from one seed in BF16 (twice: the run-to-run band), all-FP8 and the
#               shipped default policy's plan:
#               Llama-3.2-1B dims, 4 layers, 1024 x 8 tokens (plan: dense fc1 FP8, BF16 region);
#               Qwen3-30B-A3B dims at EP 16, 4 layers, 1024 x 4 tokens with the Qwen3-VL LLM
#               policy (plan: routed-expert fc1 FP8, FP8 region).
#   bash scripts/device/numerics.sh moe
#   the MoE convergence check alone where the model learns within 300 steps: Qwen3-30B-A3B dims
#   at EP 4 (one rank's 32 experts, top-8), 2 layers, 1024 x 8 tokens, lr 1e-3 (plan: qkv, proj
#   and routed-expert fc1 FP8), deterministic kernels (the default of the check).
set -uo pipefail
phase=${1:-all}
OUT=${OUT:-/tmp/out}
W=/tmp/num
mkdir -p "$W" "$OUT"
. scripts/device/te_env.sh
te_env "$W"

step() {  # name, timeout, command...
  local name=$1 t=$2; shift 2
  local t0=$(date +%s)
  timeout "$t" "$@" > "$W/$name.out" 2> "$W/$name.log"
  echo "$name rc=$? in $(( $(date +%s) - t0 )) s" | tee -a "$W/steps.txt"
  grep -E "Error|error|Traceback" "$W/$name.log" | head -5
}
L1=fixtures/models/llama3_2_1b.yaml
Q3=examples/models/qwen3_30b_a3b.json
if [ "$phase" = moe ]; then
  step conv_q3_ep4 420 python3 -m adaptive_fp8.bench.convergence --model $Q3 --ep 4 --layers 2 --seq-length 1024 --micro-batch-size 8 \
    --steps 300 --lr 1e-3 --policy policies/qwen3_vl_235b_a22b.llm.json --out "$W/conv_q3_ep4"
  tar -C /tmp -czf "$OUT/numerics.tar.gz" num
  cat "$W/steps.txt"; grep -E "step (50|150|300)/" "$W/conv_q3_ep4.log"
  cat "$W/conv_q3_ep4/convergence.md" 2>/dev/null || tail -8 "$W/conv_q3_ep4.log"
  exit 0
fi
step crosscheck 120 python3 scripts/device/quant_crosscheck.py
step num_l1_blockwise 200 python3 -m adaptive_fp8.bench.numerics --model $L1 --layers 2 --seq-length 4096 --steps 4 \
  --recipe blockwise --out "$W/num_l1_blockwise.json" --md "$W/num_l1_blockwise.md"
step num_l1_tensorwise 200 python3 -m adaptive_fp8.bench.numerics --model $L1 --layers 2 --seq-length 4096 --steps 4 \
  --recipe tensorwise --out "$W/num_l1_tensorwise.json" --md "$W/num_l1_tensorwise.md"
step num_q3_blockwise 200 python3 -m adaptive_fp8.bench.numerics --model $Q3 --ep 16 --layers 2 --seq-length 4096 --steps 4 \
  --recipe blockwise --out "$W/num_q3_blockwise.json" --md "$W/num_q3_blockwise.md"
step conv_l1 420 python3 -m adaptive_fp8.bench.convergence --model $L1 --layers 4 --seq-length 1024 --micro-batch-size 8 \
  --steps 300 --lr 6e-4 --policy policies/llama3_2_1b.json --out "$W/conv_l1"
step conv_q3 420 python3 -m adaptive_fp8.bench.convergence --model $Q3 --ep 16 --layers 4 --seq-length 1024 --micro-batch-size 4 \
  --steps 300 --lr 6e-4 --policy policies/qwen3_vl_235b_a22b.llm.json --out "$W/conv_q3"
tar -C /tmp -czf "$OUT/numerics.tar.gz" num
cat "$W/steps.txt"
cat "$W/crosscheck.out"
for f in "$W"/num_*.md; do echo "== $f"; head -16 "$f"; done
for d in conv_l1 conv_q3; do echo "== $d"; cat "$W/$d/convergence.md" 2>/dev/null || tail -5 "$W/$d.log"; done
