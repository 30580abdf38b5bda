#!/usr/bin/env bash
# First-light validation on the GPU machine: correctness of every kernel/GEMM on small sweeps of
# each module family, then the kernel microbenchmarks. Run from the repo root with the release
# binary carried in target/release/fp8sel. Writes under $OUT.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
B=./target/release/fp8sel
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv
run() { echo "== $*"; timeout 240 "$B" "$@" 2>&1 | tail -40; echo "rc=${PIPESTATUS[0]}"; }
run bench --model fixtures/models/qwen2_5_72b.yaml --tp 8 --max-tokens 2048 --warmup 2 --iters 3 --quiet --report "$OUT/v_qwen_tp8.json"
run bench --model fixtures/models/deepseek_v3.yaml --tp 8 --ep 32 --etp 1 --max-tokens 1024 --warmup 2 --iters 3 --quiet --report "$OUT/v_ds.json"
run bench --model fixtures/models/qwen3_vl_235b_a22b.yaml --component vit --tp 1 --max-tokens 1024 --warmup 2 --iters 3 --quiet --report "$OUT/v_vit.json"
run bench-kernels --json "$OUT/kernels.json"
