#!/usr/bin/env bash
# Issue 26 on the H200: the measurement code after its move (measure/: one context, one recipe
# chosen once; perf/ and the cuBLASLt search split into named steps). No TE needed. Carry
# devcarry/ (release fp8sel, the gpu test binary: cargo test --release -p fp8-bench --test gpu
# --no-run). One call:
#   bash scripts/device/measure_refactor.sh
# Runs the GPU tests, bench-kernels, and fp8sel bench on four shipped layouts (blockwise dense,
# blockwise grouped experts, tensorwise, delayed), then compares each point's checks and
# speedup with the committed report of the same layout (reports/h200/): the same points must
# pass, at speedups within the run-to-run noise. Writes $OUT/measure_refactor.tar.gz.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
B=./devcarry/fp8sel
W=/tmp/mr
OUT=${OUT:-/tmp/out}
mkdir -p "$W" "$OUT"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$W/gpu.txt"
t0=$(date +%s)
timeout 200 ./devcarry/gpu --ignored --test-threads=1 --nocapture > "$W/gpu_tests.txt" 2>&1
echo "gpu tests rc=$? in $(( $(date +%s) - t0 )) s" | tee -a "$W/steps.txt"
t0=$(date +%s)
timeout 150 "$B" bench-kernels --json "$W/kernels.json" > "$W/kernels.txt" 2>&1
echo "bench-kernels rc=$? in $(( $(date +%s) - t0 )) s" | tee -a "$W/steps.txt"
bench() {  # name, committed report, args...
  local name=$1 ref=$2; shift 2
  local t0=$(date +%s)
  timeout 150 "$B" bench --quiet --warmup 5 --iters 10 "$@" --report "$W/$name.json" > "$W/$name.txt" 2>&1
  echo "bench $name rc=$? in $(( $(date +%s) - t0 )) s" | tee -a "$W/steps.txt"
  echo "$name $ref" >> "$W/pairs.txt"
}
bench llama3_2_1b_tp1 reports/h200/llama3_2_1b_tp1.json --model fixtures/models/llama3_2_1b.yaml --tp 1 --max-tokens 16384
bench deepseek_v3_tp8_ep64 reports/h200/deepseek_v3_tp8_ep64.json --model fixtures/models/deepseek_v3.yaml --tp 8 --ep 64 --etp 1 --max-tokens 8192
bench qwen2_5_72b_tp8_tensorwise reports/h200/tensorwise/qwen2_5_72b_tp8.json --model fixtures/models/qwen2_5_72b.yaml --tp 8 --recipe tensorwise --max-tokens 8192
bench qwen2_5_72b_tp8_delayed reports/h200/delayed/qwen2_5_72b_tp8.json --model fixtures/models/qwen2_5_72b.yaml --tp 8 --recipe delayed --max-tokens 8192
python3 scripts/device/compare_reports.py "$W/pairs.txt" "$W" > "$W/compare.md"
tar -C /tmp -czf "$OUT/measure_refactor.tar.gz" mr
cat "$W/steps.txt"
grep -E "^test |test result" "$W/gpu_tests.txt" | cut -c1-160
cat "$W/compare.md"
