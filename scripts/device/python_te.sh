#!/usr/bin/env bash
# One device call after the TE install (../shared/tools/te-device, calls 1-5):
#   1. the Rust GPU tests and a Qwen2.5-72B TP 8 sweep with the release binary (the measurement
#      code was reorganized into cuda/measure/: every point must still pass its checks, and the
#      speedups must match the committed H200 report within run-to-run noise);
#   2. scripts/device/python_te.py: adaptive_fp8 with real TE and megatron-core.
# Needs in devcarry/: fp8sel, gpu_tests (cargo test --release -p fp8-bench --test gpu --no-run),
# the adaptive_fp8 wheel (maturin build --release) and mc/megatron_core-0.19.2-*.whl.
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export PYTHONPATH=/root/te/site:${PYTHONPATH:-} PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --target /root/te/site devcarry/mc/*.whl
# The wheel is abi3 for CPython >= 3.10; unpack it directly if pip dislikes the platform tag.
python3 -m pip install -q --no-index --no-deps --target /root/te/site devcarry/adaptive_fp8-*.whl \
  || python3 -m zipfile -e devcarry/adaptive_fp8-*.whl /root/te/site
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"

timeout 180 ./devcarry/gpu_tests --ignored --test-threads=1 --nocapture > "$OUT/gpu_tests.txt" 2>&1
echo "gpu_tests rc=$?"
timeout 240 ./devcarry/fp8sel bench --model fixtures/models/qwen2_5_72b.yaml --tp 8 --quiet \
  --report "$OUT/qwen2_5_72b_tp8.json" > "$OUT/sweep.txt" 2>&1
echo "sweep rc=$?"
python3 - "$OUT/qwen2_5_72b_tp8.json" reports/h200/qwen2_5_72b_tp8.json <<'PY' | tee "$OUT/sweep_compare.txt"
import json, statistics, sys
new, old = (json.load(open(p)) for p in sys.argv[1:3])
key = lambda p: (p["module"], p.get("split_mode"), p["tokens"])
o = {key(p): p for p in old["points"]}
st = [p["status"] for p in new["points"]]
print(f"points {len(st)}: ok {st.count('ok')}, failed {st.count('failed')}, skipped {st.count('skipped')}")
d = [p["speedup"] / o[key(p)]["speedup"] - 1 for p in new["points"] if p.get("speedup") and o.get(key(p), {}).get("speedup")]
print(f"speedup vs committed report: {len(d)} points, median {statistics.median(d):+.3f}, "
      f"largest |diff| {max(map(abs, d)):.3f}")
PY
timeout 420 python3 scripts/device/python_te.py > "$OUT/python_te.txt" 2>&1
echo "python_te rc=$?"
grep -E "^test result" "$OUT/gpu_tests.txt"
tail -n 3 "$OUT/sweep.txt"
grep -E "^(PASS|FAIL)" "$OUT/python_te.txt" | cut -c1-150
tail -n 2 "$OUT/python_te.txt"
