#!/usr/bin/env bash
# The measured H200 sweeps behind policies/ (issue 7), in two parts that each fit one device call.
#   bash scripts/device/sweeps.sh a   # Qwen2.5-72B TP1-8 (twice), Llama-3.2-1B TP1-2, Qwen3-VL ViT TP1-2
#   bash scripts/device/sweeps.sh b   # DeepSeek-V3 (TP,EP) = (1,8) (2,16) (4,32) (8,64); Qwen3-VL LLM (1,4) (2,8) (4,16)
#   bash scripts/device/sweeps.sh c   # the MoE policy sweeps of part b again, 2 points per doubling
# Every layout is swept twice: the policy sweep (256..32768 tokens, powers of two) and a held-out
# sweep at token counts that are not sweep points (1008, 2000, 3008, 6000, 12000), used only to
# validate the policies. Reports land in $OUT/h200_<part>.tar.gz. The kernel microbenchmarks are
# scripts/device/perf_targets.sh.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
B=${B:-./target/release/fp8sel}
OUT=${OUT:-/tmp/out}
R=$(mktemp -d)
HELD=1008x1,2000x1,3008x1,6000x1,12000x1
COMMON="--warmup 5 --iters 10 --quiet"
log() { echo "$(date +%T) $*" | tee -a "$R/log.txt"; }
bench() {
  local name=$1; shift
  local t0=$(date +%s.%N)
  timeout 280 "$B" bench $COMMON "$@" --report "$R/$name.json" > "$R/$name.txt" 2>&1
  local rc=$?
  log "$name rc=$rc $(tail -n 1 "$R/$name.txt") $(awk -v a="$(date +%s.%N)" -v b="$t0" "BEGIN{printf \"%.1f\", a-b}")s"
}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv,noheader | tee "$R/gpu.txt"
case "${1:-a}" in
a)
  t0=$(date +%s.%N)
  for tp in 1 2 4 8; do bench qwen2_5_72b_tp$tp --model fixtures/models/qwen2_5_72b.yaml --tp $tp; done
  log "qwen2_5_72b full sweep TP1,2,4,8: $(awk -v a="$(date +%s.%N)" -v b="$t0" "BEGIN{printf \"%.1f\", a-b}")s"
  # The same sweep again, for the stability comparison in docs/RESULTS.md.
  mkdir -p "$R/rerun"
  for tp in 1 2 4 8; do bench rerun/qwen2_5_72b_tp$tp --model fixtures/models/qwen2_5_72b.yaml --tp $tp; done
  for tp in 1 2 4 8; do bench heldout_qwen2_5_72b_tp$tp --model fixtures/models/qwen2_5_72b.yaml --tp $tp --shape-sweep $HELD; done
  for tp in 1 2; do
    bench llama3_2_1b_tp$tp --model fixtures/models/llama3_2_1b.yaml --tp $tp
    bench heldout_llama3_2_1b_tp$tp --model fixtures/models/llama3_2_1b.yaml --tp $tp --shape-sweep $HELD
    bench qwen3_vl_vit_tp$tp --model fixtures/models/qwen3_vl_235b_a22b.yaml --component vit --tp $tp
    bench heldout_qwen3_vl_vit_tp$tp --model fixtures/models/qwen3_vl_235b_a22b.yaml --component vit --tp $tp --shape-sweep $HELD
  done
  ;;
b)
  for te in 1:8 2:16 4:32 8:64; do
    tp=${te%:*}; ep=${te#*:}
    bench deepseek_v3_tp${tp}_ep$ep --model fixtures/models/deepseek_v3.yaml --tp $tp --ep $ep --etp 1
    bench heldout_deepseek_v3_tp${tp}_ep$ep --model fixtures/models/deepseek_v3.yaml --tp $tp --ep $ep --etp 1 --shape-sweep $HELD
  done
  for te in 1:4 2:8 4:16; do
    tp=${te%:*}; ep=${te#*:}
    bench qwen3_vl_llm_tp${tp}_ep$ep --model fixtures/models/qwen3_vl_235b_a22b.yaml --component llm --tp $tp --ep $ep --etp 1
    bench heldout_qwen3_vl_llm_tp${tp}_ep$ep --model fixtures/models/qwen3_vl_235b_a22b.yaml --component llm --tp $tp --ep $ep --etp 1 --shape-sweep $HELD
  done
  ;;
c)
  # The MoE policy sweeps again with two points per doubling (no held-out part: those reports
  # stay as they are). Reports go straight to $OUT so that a run cut short keeps what finished.
  for te in 1:8 2:16 4:32 8:64; do
    tp=${te%:*}; ep=${te#*:}
    R="$OUT" bench deepseek_v3_tp${tp}_ep$ep --model fixtures/models/deepseek_v3.yaml --tp $tp --ep $ep --etp 1 --points-per-doubling 2
  done
  for te in 1:4 2:8 4:16; do
    tp=${te%:*}; ep=${te#*:}
    R="$OUT" bench qwen3_vl_llm_tp${tp}_ep$ep --model fixtures/models/qwen3_vl_235b_a22b.yaml --component llm --tp $tp --ep $ep --etp 1 --points-per-doubling 2
  done
  rm -f "$OUT"/*.txt
  cat "$R/log.txt"
  exit 0
  ;;
esac
tar czf "$OUT/h200_${1:-a}.tar.gz" -C "$R" .
cat "$R/log.txt"
