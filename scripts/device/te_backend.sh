#!/usr/bin/env bash
# One device call after the TE install (../shared/tools/te-device): `fp8sel bench --backend te`
# with the real worker (python -m adaptive_fp8.bench.te_worker). Needs devcarry/fp8sel and the
# adaptive_fp8 wheel in devcarry/. Prints a short table last; reports under $OUT.
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
export PYTHONPATH=/root/te/site:${PYTHONPATH:-} PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --upgrade --target /root/te/site devcarry/adaptive_fp8-*.whl \
  || python3 -m zipfile -e devcarry/adaptive_fp8-*.whl /root/te/site
B=./devcarry/fp8sel
run() { local name=$1; shift; local t0=$(date +%s)
  timeout 400 "$B" bench --backend te --quiet "$@" --report "$OUT/$name.json" > "$OUT/$name.txt" 2>&1
  echo "$name rc=$? $(( $(date +%s) - t0 )) s: $(tail -n 1 "$OUT/$name.txt")"; }
# The whole Qwen2.5-72B sweep, TP 1, 2, 4 and 8 (the issue's target: under 5 minutes).
for tp in 1 2 4 8; do run te_qwen2_5_72b_tp$tp --model fixtures/models/qwen2_5_72b.yaml --tp $tp; done
run te_qwen_tp8_recompute --model fixtures/models/qwen2_5_72b.yaml --tp 8 --recompute --shape-sweep 2048x1,8192x1
run te_ds_experts --model fixtures/models/deepseek_v3.yaml --tp 8 --ep 64 --etp 1 --modules experts --shape-sweep 1024x1,4096x1
python3 - "$OUT" <<'PY'
import json, sys, glob, os
for f in sorted(glob.glob(sys.argv[1] + "/te_*.json")):
    r = json.load(open(f)); pts = r["points"]
    print(f"== {os.path.basename(f)}: TE {r['provenance'].get('te_version')}, recompute {r['provenance']['recompute']}, "
          f"{sum(p['status']=='ok' for p in pts)} ok / {len(pts)}")
    for p in pts[:40]:
        if p["status"] != "ok":
            print(f"  {p['module'][-28:]:28} {p['tokens']:>6} {p['status']}: {p.get('reason','')[:90]}"); continue
        b, f8 = p["bf16"], p["fp8"]
        print(f"  {p['module'][-28:]:28} {p.get('split_mode') or '':8} {p['tokens']:>6}  eager {b['total_ms']['median']:7.3f}/{f8['total_ms']['median']:7.3f} = {p['speedup']:.3f}"
              f"  gpu {b['gpu_total_ms']['median']:7.3f}/{f8['gpu_total_ms']['median']:7.3f} = {b['gpu_total_ms']['median']/f8['gpu_total_ms']['median']:.3f}"
              f"  err {p['errors'].get('fp8_fprop', 0):.3f}")
PY
