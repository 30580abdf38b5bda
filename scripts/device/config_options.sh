#!/usr/bin/env bash
# The model config's FP8 options reach TE (on any GPU with TE, after ../shared/tools/te-device's
# install; carries devcarry/ and .te/mc): Llama-3.2-1B's fixture with a trainer's FP8 fields,
#   tw: `fp8: hybrid`, `fp8_recipe: tensorwise`  -> Float8CurrentScaling(fp8_format=HYBRID)
#   dl: `fp8: e4m3` alone (Megatron's default recipe, delayed, and its amax defaults)
#       -> DelayedScaling(amax_compute_algo=most_recent, amax_history_len=1, fp8_format=E4M3)
# each made by the plain `fp8sel gen-policy --model CONFIG --tp 1` (the step model; two counts,
# eager, to keep it short), the recipe its inputs document records checked against the expected
# one; then each policy judged in upstream GPTModel with its config's recipe (hook and Megatron's
# own per-module config, 7 rounds; each FP8 module's recipe class and format checked) and the
# tensorwise one's te-precision-config written.
# ROWS=dl (or tw) makes and judges that config alone. $OUT/config_options.tar.gz; the last lines are a table (row, rc, seconds, recipe, verdict).
set -uo pipefail
OUT=${OUT:-/tmp/out}
W=/tmp/co
mkdir -p "$W" "$OUT"
. scripts/device/te_env.sh
te_env "$W" > /dev/null
base=$(cat fixtures/models/llama3_2_1b.yaml)
printf '%s\nfp8: hybrid\nfp8_recipe: tensorwise\n' "$base" > "$W/tw.yaml"
printf '%s\nfp8: e4m3\n' "$base" > "$W/dl.yaml"
declare -A want=(
  [tw]="Float8CurrentScaling(fp8_format=HYBRID)"
  [dl]="DelayedScaling(amax_compute_algo=most_recent, amax_history_len=1, fp8_format=E4M3)"
)
rows=()
for m in ${ROWS:-tw dl}; do
  t0=$SECONDS
  timeout 200 "$FP8SEL" gen-policy --model "$W/$m.yaml" --tp 1 --tokens 1024,2048 --execution eager \
    --out "$W/$m" > "$W/gen_$m.log" 2>&1
  rc=$?
  doc=$(ls "$W/$m"/reports/*_inputs_step.json 2>/dev/null | head -1)
  got=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['recipe'])" "$doc" 2>/dev/null)
  ok=differs; [ "$got" = "${want[$m]}" ] && ok=as-configured
  rows+=("| gen $m | $rc | $((SECONDS - t0)) | $got | $ok |")
  head -1 "$W/gen_$m.log" | cut -c1-200
done
# The judge (GPTModel, through the hook and Megatron's native config) of each policy with the
# recipe its config trains: the judge's modules must run the recipe class and format asked for.
declare -A jflags=(
  [tw]="--recipe tensorwise --fp8-format hybrid"
  [dl]="--recipe delayed --fp8-format e4m3 --amax-history-len 1 --amax-compute-algo most_recent"
)
for m in ${ROWS:-tw dl}; do
  t0=$SECONDS
  # shellcheck disable=SC2086
  timeout 200 python3 -m adaptive_fp8.bench.step_bench --trainer megatron --model "$W/$m.yaml" ${jflags[$m]} \
    --policy "$W/$m/llama3_2_1b.json" --tokens 6144 --execution eager --layers 2 --repeats 7 \
    --json "$W/judge_$m.json" --md "$W/judge_$m.md" > "$W/judge_$m.log" 2>&1
  rc=$?
  got=$(grep -m1 -o 'TE modules FP8 ([^)]*)' "$W/judge_$m.log")
  rows+=("| judge $m (GPTModel) | $rc | $((SECONDS - t0)) | $got | see judge_$m.md |")
done
if [ -z "${ROWS:-}" ]; then  # the tensorwise config's native file, and the blockwise-hybrid probe
  pol=$W/tw/llama3_2_1b.json
  "$FP8SEL" te-precision-config --model "$W/tw.yaml" --policy "$pol" --seq-length 8192 \
    --output "$W/te_precision_tw.yaml" > "$W/te_config_tw.log" 2>&1
  rows+=("| te-precision-config tw | $? | - | $(grep -m1 -o 'fp8_format: [a-z0-9]*' "$W/te_precision_tw.yaml") | - |")
  # TE 2.20.2's Float8BlockScaling takes fp8_format HYBRID (its docstring: E4M3 or HYBRID), which
  # fp8sel measures in E4M3 only: does a blockwise te.Linear train in it on this GPU (E5M2
  # gradients), and how far is its output from BF16's?
  timeout 120 python3 - > "$W/blockwise_hybrid.log" 2>&1 <<'PY'
import torch, transformer_engine.pytorch as te
from transformer_engine.common.recipe import Float8BlockScaling, Format
torch.manual_seed(0)
lin = te.Linear(2048, 2048, bias=False, params_dtype=torch.bfloat16).cuda()
x = torch.randn(4096, 2048, device="cuda", dtype=torch.bfloat16, requires_grad=True)
ref = lin(x)
ref.float().pow(2).mean().backward()
gref = x.grad.clone(); x.grad = None
with te.autocast(enabled=True, recipe=Float8BlockScaling(fp8_format=Format.HYBRID)):
    y = lin(x)
y.float().pow(2).mean().backward()
rel = lambda a, b: float((a.float() - b.float()).norm() / b.float().norm())
print(f"blockwise hybrid: forward rel err {rel(y, ref):.4f}, input grad rel err {rel(x.grad, gref):.4f}")
PY
  rows+=("| blockwise hybrid te.Linear | $? | - | $(tail -1 "$W/blockwise_hybrid.log" | cut -c1-120) | - |")
fi
tar -C /tmp --exclude='*.svg' -czf "$OUT/config_options.tar.gz" co
for m in tw dl; do [ -f "$W/judge_$m.md" ] && grep "^| eager" "$W/judge_$m.md" | cut -c1-200; done
echo "| row | rc | s | recipe | verdict |"
echo "|---|---:|---:|---|---|"
printf '%s\n' "${rows[@]}"
