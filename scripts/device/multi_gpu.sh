#!/usr/bin/env bash
# Issue: sweeps across several GPUs. On a 2-GPU machine: the Qwen2.5-72B sweep (TP 1, 2, 4, 8)
# on one GPU, on two GPUs with --devices 0,1, and as two processes with torchrun-style
# variables set by hand; wall times, then the three policies compared.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
B=${B:-./target/release/fp8sel}
OUT=${OUT:-/tmp/out}
R=$(mktemp -d)
nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader
COMMON="--model fixtures/models/qwen2_5_72b.yaml --warmup 5 --iters 10 --quiet"
now() { date +%s.%N; }
took() { awk -v a="$(now)" -v b="$1" 'BEGIN{printf "%.1f", a-b}'; }
t=$(now); for tp in 1 2 4 8; do "$B" bench $COMMON --tp $tp --report "$R/one_tp$tp.json" > /dev/null; done; echo "1 GPU:              $(took $t) s"
t=$(now); for tp in 1 2 4 8; do "$B" bench $COMMON --tp $tp --devices 0,1 --report "$R/two_tp$tp.json" > /dev/null; done; echo "2 GPUs (--devices): $(took $t) s"
t=$(now)
for tp in 1 2 4 8; do
  RANK=0 WORLD_SIZE=2 LOCAL_RANK=0 "$B" bench $COMMON --tp $tp --report "$R/ranks_tp$tp.json" > /dev/null 2>&1 &
  RANK=1 WORLD_SIZE=2 LOCAL_RANK=1 "$B" bench $COMMON --tp $tp --report "$R/ranks_tp$tp.json" > /dev/null 2>&1 &
  wait
done
echo "2 processes (RANK): $(took $t) s"
"$B" merge-policy --reports "$R"/one_tp*.json --output "$R/policy_one.json" > "$R/merge_one.txt"
"$B" merge-policy --reports "$R"/two_tp*.json --output "$R/policy_two.json" > "$R/merge_two.txt"
"$B" merge-policy --reports "$R"/ranks_tp*.rank*.json --output "$R/policy_ranks.json" > "$R/merge_ranks.txt"
for f in one two ranks; do echo "== $f"; grep -E "min_tokens|no rule" "$R/merge_$f.txt"; done
tar czf "$OUT/multi_gpu.tar.gz" -C "$R" .
