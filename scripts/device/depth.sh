#!/usr/bin/env bash
# Issue 46's open question on the H200: does a step model fitted on 2-layer steps choose for a
# deeper model? Two standing misses say it may not (Llama-3.2-1B TP 1 at 4 layers: all-FP8 3.2-3.3%
# ahead of the file's plan, where the 2-layer check had the plan ahead: a fixed host part that a
# deeper step amortizes). This measures the same plans at several depths in one call, before any
# fix is designed: upstream GPTModel (the Megatron judge: BF16, all-FP8 blockwise, the shipped
# policy by the hook and natively), Llama-3.2-1B TP 1, --layers 2, 4 and 8, at 4096 and 8192
# tokens, eager then graphed, 21 interleaved rounds. After the TE install
# (../shared/tools/te-device), carrying devcarry/ and .te/mc:
#   bash scripts/device/depth.sh [MODEL]   # MODEL: a fixture name (default llama3_2_1b)
# A depth that does not fit what is left of the call (BUDGET, default 570 s) waits for the next
# call on the same machine, which skips the depths done.
# Writes $OUT/depth.tar.gz (commit under docs/device-logs/depth/) and prints a table last: per
# depth, each mode's step over BF16 (p10-p90) and over all-FP8 (the plan behind it: above 1).
set -uo pipefail
m=${1:-llama3_2_1b}
OUT=${OUT:-/tmp/out}
W=/tmp/depth
T0=$(date +%s)
mkdir -p "$W" "$OUT"
. scripts/device/te_env.sh
te_env "$W" > /dev/null
left() { echo $(( ${BUDGET:-570} - ($(date +%s) - T0) )); }
for ex in eager graphed; do
  for layers in 2 4 8; do
    tag=${m}_${ex}_L$layers
    # Done in an earlier call on this machine: call the script again until every depth is done.
    [ -s "$W/$tag.json" ] && continue
    # A deeper step costs more per round: 8 layers needs the most of what is left.
    [ "$(left)" -lt $(( 40 + 15 * layers )) ] && { echo "$tag: next call ($(left) s left)" | tee -a "$W/steps.txt"; continue; }
    t1=$(date +%s)
    timeout $(( $(left) - 5 )) python3 -m adaptive_fp8.bench.step_bench --trainer megatron \
      --model "fixtures/models/$m.yaml" --tp 1 --policy "policies/$m.json" --tokens 4096,8192 \
      --execution "$ex" --layers "$layers" --repeats 21 --json "$W/$tag.json" --md "$W/$tag.md" > "$W/$tag.log" 2>&1
    echo "$tag rc=$? in $(( $(date +%s) - t1 )) s" | tee -a "$W/steps.txt"
    tar -C /tmp -czf "$OUT/depth.tar.gz" depth
  done
done
tar -C /tmp -czf "$OUT/depth.tar.gz" depth
python3 - "$W" <<'PY'
import glob, json, os, sys
print("| execution | layers | tokens | mode | groups | / BF16 p50 (p10-p90) | / all-FP8 |")
print("|---|---:|---:|---|---|---|---|")
for f in sorted(glob.glob(os.path.join(sys.argv[1], "*_L*.json"))):
    d = json.load(open(f))
    for r in d["results"]:
        modes = r.get("modes", {})
        fp8 = modes.get("fp8", {}).get("vs_bf16_median")
        for name, v in modes.items():
            behind = "" if name in ("bf16", "fp8") or fp8 is None else f"{v['vs_bf16_median'] / fp8:.3f}"
            print(f"| {r['execution']} | {d['layers']} | {r['tokens']} | {name} | {','.join(v.get('fp8_groups') or []) or '-'} "
                  f"| {v['vs_bf16_median']:.3f} ({v['vs_bf16_p10']:.3f}-{v['vs_bf16_p90']:.3f}) | {behind} |")
PY
