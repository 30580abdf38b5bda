#!/usr/bin/env bash
# `fp8sel gen-policy --backend step` with the real worker on the H200 (issue 23): after the TE
# install (../shared/tools/te-device), one call. Needs in devcarry/: fp8sel (release) and the
# adaptive_fp8 wheel. Writes $OUT/step_backend.tar.gz: the worker's results, the policy, the log.
set -uo pipefail
OUT=${OUT:-/tmp/out}
W=/tmp/sbk
mkdir -p "$W" "$OUT"
export PYTHONPATH=/root/te/site:${PYTHONPATH:-} PYTHONUNBUFFERED=1 NVTE_FLASH_ATTN=1
python3 -m pip install -q --no-index --no-deps --upgrade --target /root/te/site devcarry/adaptive_fp8-*.whl \
  || python3 -m zipfile -e devcarry/adaptive_fp8-*.whl /root/te/site
cp -r crates/py/python/adaptive_fp8/. /root/te/site/adaptive_fp8/
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$W/gpu.txt"
t0=$(date +%s)
timeout 300 ./devcarry/fp8sel gen-policy --backend step --model fixtures/models/llama3_2_1b.yaml --tp 1 \
  --tokens 1024,4096 --layers 2 --python python3 --out "$W/out" > "$W/gen_policy.log" 2>&1
echo "gen-policy rc=$? in $(( $(date +%s) - t0 )) s" | tee -a "$W/gen_policy.log"
tail -n 5 "$W/gen_policy.log"
python3 - "$W/out/llama3_2_1b.json" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))
for kind, v in p["rules"].items():
    for ub, rs in v.items():
        for r in rs:
            print(kind, ub, "tp", r["tp"], "min_tokens", r["min_tokens"], "graphed", r.get("min_tokens_graphed"))
print("measured BF16:", p["provenance"].get("measured_bf16_keys"))
print("verdicts:", json.dumps(p["provenance"]["step"]["verdicts"])[:600])
PY
tar -C /tmp -czf "$OUT/step_backend.tar.gz" sbk
