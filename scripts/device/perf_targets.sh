#!/usr/bin/env bash
# Issue 4's two open performance targets, in one device call:
#   1. the GPU tests with each 1x128 cast kernel variant (FP8SEL_CAST_KERNEL), so every variant
#      passes the per-point correctness checks, not only the microbenchmark's byte comparison;
#   2. `fp8sel bench-kernels` with exhaustive cuBLASLt search (default) on the anchor shapes, and
#      every cast variant's bandwidth (each compared byte for byte against the kernel in use).
# Needs devcarry/fp8sel and devcarry/gpu_tests (cargo test --release -p fp8-bench --test gpu
# --no-run; copy target/release/deps/gpu-*). Writes under $OUT.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu --format=csv,noheader | tee "$OUT/gpu.txt"
for k in ${CAST_KERNELS:-quant_1x128 quant_1x128_lean4 quant_1x128_lean3}; do
  echo "== gpu tests, cast kernel $k" | tee -a "$OUT/gpu_tests.txt"
  FP8SEL_CAST_KERNEL=$k timeout 120 ./devcarry/gpu_tests --test-threads=1 --nocapture >> "$OUT/gpu_tests.txt" 2>&1
  echo "rc=$?" | tee -a "$OUT/gpu_tests.txt"
  grep -E "^test result|TB/s" "$OUT/gpu_tests.txt" | tail -4
done
t0=$(date +%s)
FP8SEL_DEBUG_AUTOTUNE=1 timeout ${KERNELS_TIMEOUT:-420} ./devcarry/fp8sel bench-kernels ${BK_ARGS:-} --json "$OUT/kernels.json" > "$OUT/kernels.txt" 2> "$OUT/autotune.txt"
echo "bench-kernels rc=$? in $(( $(date +%s) - t0 )) s"
gzip -f "$OUT/autotune.txt"
grep -v "^    tuning" "$OUT/kernels.txt"
