#!/usr/bin/env bash
# Issue 15 on the H200: the per-tensor recipes (tensorwise, delayed), in device calls that each
# fit one call. Carry devcarry/ (fp8sel, the gpu test binary, anchors/).
#   bash scripts/device/recipes.sh test    # GPU tests + bench-kernels with the _scaled_mm anchors
#   RECIPE=delayed bash scripts/device/recipes.sh sweep   # the shipped layouts' sweeps in one recipe
# Results go to $OUT (a tarball plus the logs); the last lines are the summary table.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
B=${B:-./devcarry/fp8sel}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv,noheader | tee "$OUT/gpu.txt"
t() { awk -v a="$(date +%s.%N)" -v b="$1" 'BEGIN{printf "%.1f", a-b}'; }
case "${1:-test}" in
test)
  t0=$(date +%s.%N)
  timeout 300 ./devcarry/gpu --ignored --test-threads=1 --nocapture > "$OUT/gpu_tests.txt" 2>&1
  echo "gpu tests rc=$? $(t "$t0")s"
  grep -E "^test |test result" "$OUT/gpu_tests.txt"
  t0=$(date +%s.%N)
  timeout 280 "$B" bench-kernels --search "${SEARCH:-heuristic}" --candidates 32 \
    --anchors devcarry/anchors/h200_gemm_ceiling.json --json "$OUT/kernels.json" > "$OUT/kernels.txt" 2>&1
  echo "bench-kernels rc=$? $(t "$t0")s"
  grep -E "tensorwise|target|copy|cast" "$OUT/kernels.txt" | grep -v tuning
  ;;
sweep)
  # The shipped layouts and grids, per recipe (RECIPE=tensorwise|delayed): Qwen2.5-72B TP 1-8
  # (powers of two, as sweeps.sh a), DeepSeek-V3 (TP,EP) = (1,8) (2,16) (4,32) (8,64) with two
  # points per doubling (as sweeps.sh c). Reports straight into $OUT/<recipe>/ so a run cut short
  # keeps what finished.
  r=${RECIPE:-tensorwise}
  mkdir -p "$OUT/$r"
  run() {
    local name=$1; shift
    local t0=$(date +%s.%N)
    timeout 280 "$B" bench --recipe "$r" --warmup 5 --iters 10 --quiet "$@" --report "$OUT/$r/$name.json" > "$OUT/$r/$name.txt" 2>&1
    echo "$r $name rc=$? $(tail -n 1 "$OUT/$r/$name.txt") $(t "$t0")s"
  }
  for tp in ${QWEN_TPS-1 2 4 8}; do run qwen2_5_72b_tp$tp --model fixtures/models/qwen2_5_72b.yaml --tp $tp; done
  for te in ${DS_LAYOUTS-1:8 2:16 4:32 8:64}; do
    tp=${te%:*}; ep=${te#*:}
    run deepseek_v3_tp${tp}_ep$ep --model fixtures/models/deepseek_v3.yaml --tp $tp --ep $ep --etp 1 --points-per-doubling 2
  done
  rm -f "$OUT/$r"/*.txt
  tar czf "$OUT/${r}_${TAG:-all}.tar.gz" -C "$OUT" "$r" && rm -rf "${OUT:?}/$r"
  ;;
esac
