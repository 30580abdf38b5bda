#!/usr/bin/env bash
# Issue 46's noise question on the H200: how much of a host-bound step's round-to-round spread is
# Python's garbage collector? The same judges with and without --manual-gc (the collector off
# while steps are timed, as Megatron-LM's flag), alternating processes A B A B so drift between
# them falls on both, 21 rounds each, eager, no oracle:
#   te   Llama-3.2-1B TP 2 and Qwen2.5-72B TP 8 in the TE blocks (the step model's own step), 2048
#        and 4096 tokens: the host-bound rows whose model error is largest (docs/RESULTS.md);
#   mc   Llama-3.2-1B TP 1 in upstream GPTModel (--trainer megatron), 2048 and 4096.
# Each run's notes say where full collections ran inside timed rounds. After the TE install
# (../shared/tools/te-device), carrying devcarry/ and .te/mc:
#   bash scripts/device/gc_noise.sh [te|mc|all]   # default all; a queue as depth.sh (BUDGET, 570 s)
# Writes $OUT/gc_noise.tar.gz (commit under docs/device-logs/gc_noise/) and prints a table last:
# per case, count and collector, BF16's median ms and its p10-p90 width, all-FP8 / BF16 (paired,
# p10-p90) and the full collections noted inside timed rounds.
set -uo pipefail
which=${1:-all}
OUT=${OUT:-/tmp/out}
W=/tmp/gc_noise
T0=$(date +%s)
mkdir -p "$W" "$OUT"
. scripts/device/te_env.sh
te_env "$W" > /dev/null
left() { echo $(( ${BUDGET:-570} - ($(date +%s) - T0) )); }
cases=()
[ "$which" = mc ] || cases+=("te:llama3_2_1b:2" "te:qwen2_5_72b:8")
[ "$which" = te ] || cases+=("megatron:llama3_2_1b:1")
for pass in 1 2; do
  for c in "${cases[@]}"; do
    IFS=: read -r trainer m tp <<< "$c"
    for gc in auto manual; do
      tag=${trainer}_${m}_tp${tp}_${gc}_$pass
      [ -s "$W/$tag.json" ] && continue  # done in an earlier call on this machine
      [ "$(left)" -lt 90 ] && { echo "$tag: next call ($(left) s left)" | tee -a "$W/steps.txt"; continue; }
      t1=$(date +%s)
      timeout $(( $(left) - 5 )) python3 -m adaptive_fp8.bench.step_bench --trainer "$trainer" \
        --model "fixtures/models/$m.yaml" --tp "$tp" --tokens 2048,4096 --execution eager --layers 2 \
        --repeats 21 --oracle none $([ $gc = manual ] && echo --manual-gc) \
        --json "$W/$tag.json" --md "$W/$tag.md" > "$W/$tag.log" 2>&1
      echo "$tag rc=$? in $(( $(date +%s) - t1 )) s" | tee -a "$W/steps.txt"
      tar -C /tmp -czf "$OUT/gc_noise.tar.gz" gc_noise
    done
  done
done
tar -C /tmp -czf "$OUT/gc_noise.tar.gz" gc_noise
python3 - "$W" <<'PY'
import glob, json, os, re, sys
print("| case | tokens | collector | pass | BF16 ms p50 (p10-p90 width) | all-FP8 / BF16 p50 (p10-p90) | full collections in timed rounds |")
print("|---|---:|---|---:|---|---|---:|")
for f in sorted(glob.glob(os.path.join(sys.argv[1], "*.json"))):
    d = json.load(open(f))
    case, gc, npass = re.match(r"(.*)_(auto|manual)_(\d)\.json", os.path.basename(f)).groups()
    for r in d["results"]:
        if "modes" not in r:
            continue
        b, x = r["modes"]["bf16"], r["modes"].get("fp8", {})
        width = (b["ms_p90"] - b["ms_p10"]) / b["ms_median"] * 100
        full = sum(int(m.group(1)) for n in d.get("notes", []) if n.startswith(f"eager at {r['tokens']}:")
                   for m in [re.search(r"ran (\d+) full", n)] if m)
        fp8 = f"{x['vs_bf16_median']:.3f} ({x['vs_bf16_p10']:.3f}-{x['vs_bf16_p90']:.3f})" if x else "-"
        print(f"| {case} | {r['tokens']} | {gc} | {npass} | {b['ms_median']:.3f} ({width:.1f}%) | {fp8} | {full} |")
PY
