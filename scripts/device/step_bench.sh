#!/usr/bin/env bash
# One device call after the TE install (../shared/tools/te-device): the step benchmark
# (python -m adaptive_fp8.bench.step_bench), real TE training steps per mode. Needs the adaptive_fp8
# wheel in devcarry/ and the TE-derived policies in devcarry/pol/ (fp8sel merge-policy
# --trainer eager|graphed over reports/h200/te/te_qwen2_5_72b_tp*.json).
# Results under $OUT/step_bench/; prints the tables last.
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT/step_bench"
export PYTHONPATH=/root/te/site:${PYTHONPATH:-} PYTHONUNBUFFERED=1 NVTE_FLASH_ATTN=1
python3 -m pip install -q --no-index --no-deps --upgrade --target /root/te/site devcarry/adaptive_fp8-*.whl \
  || python3 -m zipfile -e devcarry/adaptive_fp8-*.whl /root/te/site
S=$OUT/step_bench
sb() { local name=$1; shift; local t0=$(date +%s)
  timeout 200 python3 -m adaptive_fp8.bench.step_bench "$@" --json "$S/$name.json" --md "$S/$name.md" > "$S/$name.log" 2>&1
  echo "$name rc=$? $(( $(date +%s) - t0 )) s"; }
Q=fixtures/models/qwen2_5_72b.yaml
QP="--policy policies/qwen2_5_72b.json --policy devcarry/pol/qwen2_5_72b_te_eager.json --policy devcarry/pol/qwen2_5_72b_te_graphed.json"
sb qwen72b_tp8 --model $Q --tp 8 --layers 2 --tokens 1024,4096,16384 $QP
sb qwen72b_tp2 --model $Q --tp 2 --layers 1 --tokens 1024,4096 $QP
sb llama1b_tp1 --model fixtures/models/llama3_2_1b.yaml --tp 1 --head-dim 64 --layers 4 --tokens 1024,4096,16384 --policy policies/llama3_2_1b.json
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$S/gpu.txt"
for f in "$S"/*.log; do echo "== $f"; tail -n 4 "$f" | grep -v '^|' ; done
cat "$S"/*.md
