#!/usr/bin/env bash
# `fp8sel gen-policy --resume` with the real TE worker, on any GPU: Llama-3.1-8B's public
# dimensions at TP 1 on the default sweep, cut by --time-limit (LIMIT seconds, default 60: past
# the inputs, inside the check), then the same command with --resume, which must reuse the
# inputs (untouched: same checksum) and finish the check. After the TE install
# (../shared/tools/te-device), carrying devcarry/ and .te/mc:
#   bash scripts/device/resume_live.sh        # $OUT/resume_live.tar.gz: both logs, the reports, the policy
set -uo pipefail
OUT=${OUT:-/tmp/out}
W=/tmp/resume_live
mkdir -p "$W" "$OUT"
. scripts/device/te_env.sh
te_env "$W" > /dev/null
cp -r scripts/device/configs/Llama-3.1-8B "$W/"
cd "$W" || exit 1
inputs=reports/step/Llama-3.1-8B_tp1_ep1_etp1_inputs_step.json
t0=$SECONDS
timeout 240 "$FP8SEL" gen-policy --model Llama-3.1-8B/config.json --tp 1 --time-limit "${LIMIT:-60}" > cut.log 2>&1
echo "cut: rc=$? in $((SECONDS - t0)) s"
sum=$(sha256sum "$inputs" 2>/dev/null | cut -c1-16)
echo "inputs: ${sum:-none}; check rows at the cut: $(grep -o '"tokens"' reports/step/*_check_step.json 2>/dev/null | wc -l)"
t0=$SECONDS
timeout 300 "$FP8SEL" gen-policy --model Llama-3.1-8B/config.json --tp 1 --resume > resume.log 2>&1
echo "resume: rc=$? in $((SECONDS - t0)) s"
after=$(sha256sum "$inputs" 2>/dev/null | cut -c1-16)
[ -n "$sum" ] && [ "$sum" = "$after" ] && echo "inputs untouched" || echo "INPUTS CHANGED ($sum -> $after)"
grep -E "resum|modelled|note:|warning|error|Error|wrote policies" resume.log | cut -c1-220 | head -8
tar -czf "$OUT/resume_live.tar.gz" cut.log resume.log gpu.txt reports policies 2> /dev/null
