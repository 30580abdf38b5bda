#!/usr/bin/env bash
# Issue 15's TE side, in the device call after the TE install (../shared/tools/te-device): the TE
# backend (`fp8sel bench --backend te`, worker `python -m adaptive_fp8.bench.te_worker`) in every recipe
# the H200 runs, on Qwen2.5-72B TP 8 and DeepSeek-V3's experts. Needs
# devcarry/{fp8sel, adaptive_fp8 wheel, anchors/}. Reports and logs as one tarball in $OUT.
set -uo pipefail
OUT=${OUT:-/tmp/out}
R=$(mktemp -d)
export PYTHONPATH=/root/te/site:${PYTHONPATH:-} PYTHONUNBUFFERED=1
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
python3 -m pip install -q --no-index --no-deps --upgrade --target /root/te/site devcarry/adaptive_fp8-*.whl \
  || python3 -m zipfile -e devcarry/adaptive_fp8-*.whl /root/te/site
B=./devcarry/fp8sel
run() { local name=$1; shift; local t0=$(date +%s)
  timeout 200 "$B" bench --backend te --quiet "$@" --report "$R/$name.json" > "$R/$name.txt" 2>&1
  echo "$name rc=$? $(( $(date +%s) - t0 )) s: $(tail -n 1 "$R/$name.txt")"; }
for r in blockwise tensorwise delayed; do
  run te_${r}_qwen2_5_72b_tp8 --recipe $r --model fixtures/models/qwen2_5_72b.yaml --tp 8
  run te_${r}_deepseek_v3_experts --recipe $r --model fixtures/models/deepseek_v3.yaml --tp 8 --ep 64 --etp 1 --modules experts --shape-sweep 1024x1,4096x1,16384x1
done
tar czf "$OUT/te_recipes.tar.gz" -C "$R" .
python3 - "$R" <<'PY'
import json, sys, glob, os
for f in sorted(glob.glob(sys.argv[1] + "/te_*.json")):
    r = json.load(open(f)); pts = r["points"]
    ok = [p for p in pts if p["status"] == "ok"]
    print(f"== {os.path.basename(f)}: {r['provenance']['recipe']}, TE {r['provenance'].get('te_version')}, {len(ok)} ok / {len(pts)}")
    for p in pts:
        if p["status"] != "ok":
            print(f"  {p['module'][-24:]:24} {p['tokens']:>6} {p['status']}: {p.get('reason','')[:100]}"); continue
        if p["tokens"] not in (1024, 4096, 16384): continue
        b, f8 = p["bf16"], p["fp8"]
        print(f"  {p['module'][-24:]:24} {p.get('split_mode') or '':8} {p['tokens']:>6} eager {p['speedup']:.3f}"
              f" gpu {b['gpu_total_ms']['median']/f8['gpu_total_ms']['median']:.3f} err {p['errors'].get('fp8_fprop', 0):.3f}")
PY
