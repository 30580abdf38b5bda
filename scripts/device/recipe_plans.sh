#!/usr/bin/env bash
# Per-module recipes on the H200 (issue 48), for two dense models: Llama-3.1-8B (written here
# from public dimensions, in no fixture of the repository) and Llama-3.2-1B (a fixture). After
# the TE install (../shared/tools/te-device), call a phase again, back to back, until it prints
# every row done: each row has its own time bound and runs only where it fits what is left of
# the call (BUDGET seconds, default 560); rows done in an earlier call on the same machine are
# skipped, and so are measurements (inputs, numerics) committed under
# docs/device-logs/recipe_plans/<M>/: the policies are made again from them, then judged.
#   bash scripts/device/recipe_plans.sh M   # M = L8 or L1:
#     1. the step model's inputs in blockwise and in tensorwise (4096, 8192, 16384 tokens)
#     2. each recipe's numerics (the probe's quantization error per module)
#     3. the three policies by fp8sel merge-policy: blockwise, tensorwise (its rules run under a
#        tensorwise base) and the mixed plan (blockwise base, the bound from the numerics)
#     4. the Megatron judge: the three in upstream GPTModel, interleaved with BF16 and all-FP8
#        blockwise, eager then graphed, 21 rounds
#   bash scripts/device/recipe_plans.sh gen M   # the user's one command instead of rows 1-3:
#     fp8sel gen-policy --recipes blockwise,tensorwise (both recipes measured and checked, both
#     probed), the single-recipe policies re-fitted from its reports by merge-policy, then row 4
#   bash scripts/device/recipe_plans.sh mix [L1]   # where the committed plans run two recipes at once:
#     Llama-3.1-8B eager 16384 (proj blockwise, the rest tensorwise) and gen_L1's Llama-3.2-1B
#     eager 7168 (fc1 tensorwise, fc2 blockwise), judged beside their single-recipe policies;
#     then the convergence check of gen_L1's plan at 7 x 1024 tokens (both recipes training)
#   bash scripts/device/recipe_plans.sh fp4   # Llama-3.2-1B's numerics probe in mxfp8 and nvfp4
#     (emulated: the probe's round trip needs no Blackwell GPU), beside L1's blockwise/tensorwise
#   bash scripts/device/recipe_plans.sh converge   # Llama-3.2-1B's loss curves: BF16 (twice),
#     all-FP8 blockwise and the mixed plan of the L1 phase (this machine's, else the committed one)
# Carries devcarry/ (fp8sel, the wheel) and .te/mc. Writes $OUT/recipes_<phase>.tar.gz; prints a
# table last.
set -uo pipefail
phase=${1:?L8, L1, gen M, mix, fp4 or converge}
if [ "$phase" = gen ]; then m=${2:?gen L8 or gen L1}; phase=gen_$m; fi
OUT=${OUT:-/tmp/out}
W=/tmp/rc/$phase
T0=$(date +%s)
mkdir -p "$W" "$OUT"
. scripts/device/te_env.sh
te_env "$W" > /dev/null
L8=/tmp/rc/Llama-3.1-8B/config.json
mkdir -p "$(dirname $L8)"
cp scripts/device/configs/Llama-3.1-8B/config.json "$L8"
config() { [ "$1" = L1 ] && echo fixtures/models/llama3_2_1b.yaml || echo "$L8"; }
left() { echo $(( ${BUDGET:-560} - ($(date +%s) - T0) )); }
queued() {  # name, seconds, command...: runs unless done here or committed; waits where it won't fit
  local name=$1 t=$2; shift 2
  [ -e "$W/$name.done" ] && return
  case $name in inputs_*|numerics_*)
    [ -e "docs/device-logs/recipe_plans/$phase/$name.json" ] && { cp docs/device-logs/recipe_plans/$phase/$name.* "$W/"; touch "$W/$name.done"; return; } ;;
  esac
  [ "$(left)" -lt "$t" ] && { echo "$name: next call (needs $t s, $(left) s left)" | tee -a "$W/steps.txt"; return; }
  local t1=$(date +%s)
  if declare -F "$1" > /dev/null; then "$@"; else timeout "$t" "$@"; fi > "$W/$name.log" 2>&1
  local rc=$?
  echo "$name rc=$rc in $(( $(date +%s) - t1 )) s" | tee -a "$W/steps.txt"
  grep -E "Error|error:|Traceback|differ from fp8sel" "$W/$name.log" | sort | uniq -c | head -5 | cut -c1-240
  # A failed row runs again in the next call.
  [ $rc -eq 0 ] && touch "$W/$name.done"
  # What ran so far comes back even where the call is stopped by its device-time limit.
  tar -C /tmp/rc -czf "$OUT/recipes_$phase.tar.gz" "$phase"
}
policies() {  # the three policies of $phase from its inputs and numerics
  local m=$phase
  "$FP8SEL" merge-policy --step-model "$W/inputs_blockwise.json" --output "$W/blockwise.json" || return 1
  "$FP8SEL" merge-policy --step-model "$W/inputs_tensorwise.json" --output "$W/tensorwise.json" || return 1
  # The tensorwise policy as one the hook runs under tensorwise beside a blockwise trainer.
  python3 - "$W/tensorwise.json" <<'PY' || return 1
import json, sys
p = json.load(open(sys.argv[1])); p["recipes"] = {"base": "tensorwise", "keys": []}
json.dump(p, open(sys.argv[1], "w"), indent=1)
PY
  "$FP8SEL" merge-policy --step-model "$W/inputs_blockwise.json" "$W/inputs_tensorwise.json" \
    --numerics "$W/numerics_blockwise.json" "$W/numerics_tensorwise.json" --output "$W/mixed.json" || return 1
  for e in eager graphed; do
    for p in blockwise tensorwise mixed; do
      "$FP8SEL" explain --model "$(config $m)" --policy "$W/$p.json" --tp 1 --seq-length 8192 --execution $e \
        | sed "s/^/$e $p: /" | head -12
    done
  done
}
judge() {  # row 4: the three policies of $m in upstream GPTModel, eager then graphed
  for e in eager graphed; do
    [ -e "$W/policies.done" ] && queued "judge_$e" 150 python3 -m adaptive_fp8.bench.step_bench --trainer megatron \
      --model "$(config $m)" --policy "$W/blockwise.json" --policy "$W/tensorwise.json" --policy "$W/mixed.json" \
      --tokens 8192 --execution "$e" --layers 2 --repeats 21 --no-fp8-param \
      --json "$W/judge_$e.json" --md "$W/judge_$e.md"
  done
}
case $phase in
L8|L1)
  m=$phase
  for r in blockwise tensorwise; do
    queued "inputs_$r" 150 python3 -m adaptive_fp8.bench.step_inputs --model "$(config $m)" --tp 1 \
      --tokens 4096,8192,16384 --recipe "$r" --json "$W/inputs_$r.json"
  done
  for r in blockwise tensorwise; do
    queued "numerics_$r" 75 python3 -m adaptive_fp8.bench.numerics --model "$(config $m)" --layers 2 \
      --seq-length 4096 --steps 2 --recipe "$r" --out "$W/numerics_$r.json"
  done
  [ -e "$W/numerics_tensorwise.done" ] && queued policies 20 policies
  judge
  ;;
gen_*)
  G=$W/gen
  queued gen 560 "$FP8SEL" gen-policy --model "$(config $m)" --tp 1 --tokens 4096,8192,16384 \
    --recipes blockwise,tensorwise --out "$G"
  single() {  # the single-recipe policies from the same measurements
    local name; name=$(basename "$(ls "$G"/*.json | head -1)" .json)
    cp "$G/$name.json" "$W/mixed.json"
    shopt -s nullglob
    # The check's rounds in order (check, recheck, recheck2, ...: a glob alone sorts recheck2 first).
    local bc=("$G"/reports/*_etp1_check_step.json "$G"/reports/*_etp1_recheck_step.json "$G"/reports/*_etp1_recheck[0-9]_step.json)
    local tc=("$G"/reports/*_tensorwise_check_step.json "$G"/reports/*_tensorwise_recheck_step.json "$G"/reports/*_tensorwise_recheck[0-9]_step.json)
    "$FP8SEL" merge-policy --step-model "$G"/reports/*_etp1_inputs_step.json ${bc[@]:+--step-check "${bc[@]}"} \
      --output "$W/blockwise.json" &&
    "$FP8SEL" merge-policy --step-model "$G"/reports/*_tensorwise_inputs_step.json ${tc[@]:+--step-check "${tc[@]}"} \
      --output "$W/tensorwise.json" &&
    python3 - "$W/tensorwise.json" <<'PY'
import json, sys
p = json.load(open(sys.argv[1])); p["recipes"] = {"base": "tensorwise", "keys": []}
json.dump(p, open(sys.argv[1], "w"), indent=1)
PY
  }
  [ -e "$W/gen.done" ] && queued policies 30 single
  judge
  ;;
fp4)
  for r in mxfp8 nvfp4; do
    queued "numerics_$r" 45 python3 -m adaptive_fp8.bench.numerics --model "$(config L1)" --layers 2 \
      --seq-length 4096 --steps 2 --recipe "$r" --out "$W/numerics_$r.json"
  done
  for r in mxfp8 nvfp4; do
    [ -f "$W/numerics_$r.json" ] && python3 -c 'import json, sys
d = json.load(open(sys.argv[1]))
for m in d["modules"]:
    print(d["recipe"], m["name"].split(".")[-1], {k: round(v["rel_rms"], 4) for k, v in m["operands"].items()})' "$W/numerics_$r.json"
  done
  ;;
mix)
  D=docs/device-logs/recipe_plans
  judge_at() {  # name, model, policies' folder, tokens
    queued "$1" 240 python3 -m adaptive_fp8.bench.step_bench --trainer megatron --model "$(config "$2")" \
      --policy "$D/$3/blockwise.json" --policy "$D/$3/tensorwise.json" --policy "$D/$3/mixed.json" \
      --tokens "$4" --execution eager --layers 2 --repeats 21 --no-fp8-param --json "$W/$1.json" --md "$W/$1.md"
  }
  # `mix L1` leaves out Llama-3.1-8B (189 s on the H200).
  [ "${2:-}" = L1 ] || judge_at judge_L8_16384 L8 L8 16384
  judge_at judge_L1_7168 L1 gen_L1 7168
  queued converge_mix 300 python3 -m adaptive_fp8.bench.convergence --model "$(config L1)" --layers 4 --seq-length 1024 \
    --micro-batch-size 7 --steps 300 --lr 6e-4 --policy "$D/gen_L1/mixed.json" --out "$W/converge_mix"
  cat "$W/converge_mix/convergence.md" 2>/dev/null | head -30
  for f in "$W"/judge_L*.md; do [ -f "$f" ] && { echo "== $f"; cut -c1-200 "$f" | head -14; }; done
  ;;
converge)
  # The mixed plan made by this machine's L1 phase, else the committed one; the settings of the
  # dense convergence check in docs/RESULTS.md (numerics/num6/conv_l1).
  pol=/tmp/rc/L1/mixed.json
  [ -e "$pol" ] || pol=docs/device-logs/recipe_plans/L1/mixed.json
  cp "$pol" "$W/mixed.json"
  queued converge 300 python3 -m adaptive_fp8.bench.convergence --model "$(config L1)" --layers 4 --seq-length 1024 \
    --micro-batch-size 8 --steps 300 --lr 6e-4 --policy "$W/mixed.json" --out "$W/converge_L1_mixed"
  cat "$W/converge_L1_mixed/convergence.md" 2>/dev/null | head -30
  ;;
esac
tar -C /tmp/rc -czf "$OUT/recipes_$phase.tar.gz" "$phase"
echo "== $phase ($(left) s of the budget left)"; cat "$W/steps.txt" 2>/dev/null
for f in "$W"/policies.log "$W"/judge_*.md; do [ -f "$f" ] && { echo "== $f"; cut -c1-200 "$f" | head -40; }; done
