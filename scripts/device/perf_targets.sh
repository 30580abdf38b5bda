#!/usr/bin/env bash
# Issue 4's performance targets, in one device call: the GPU tests (every kernel and GEMM checked
# against host references), then `fp8sel bench-kernels` (exhaustive cuBLASLt search on the
# anchor shapes; cast bandwidth against the 4 GiB copy and a same-size copy).
# Needs devcarry/fp8sel and devcarry/gpu_tests (cargo test --release -p fp8-bench --test gpu
# --no-run; copy target/release/deps/gpu-*). Writes under $OUT.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu --format=csv,noheader | tee "$OUT/gpu.txt"
timeout 120 ./devcarry/gpu_tests --ignored --test-threads=1 --nocapture > "$OUT/gpu_tests.txt" 2>&1
echo "gpu tests rc=$?"
grep -E "^test |^test result|TB/s" "$OUT/gpu_tests.txt"
t0=$(date +%s)
FP8SEL_DEBUG_AUTOTUNE=1 timeout ${KERNELS_TIMEOUT:-300} ./devcarry/fp8sel bench-kernels ${BK_ARGS:-} --json "$OUT/kernels.json" > "$OUT/kernels.txt" 2> "$OUT/autotune.txt"
echo "bench-kernels rc=$? in $(( $(date +%s) - t0 )) s"
sed -i 's/, ms \[.*//' "$OUT/autotune.txt"
grep -v "^    tuning" "$OUT/kernels.txt" | grep -v "GEMM M="
