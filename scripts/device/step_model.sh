#!/usr/bin/env bash
# The step model on the H200, for two models written here from public dimensions (in no fixture
# of the repository): a dense 8B-class model (Llama-3.1-8B) and a 64-expert MoE on one GPU
# (DeepSeek-V2-Lite's MoE dimensions with GQA attention, top-6, two shared experts). After the
# TE install (../shared/tools/te-device), one call per phase, back to back:
#   bash scripts/device/step_model.sh dense   # the plain `fp8sel gen-policy --model M --tp 1`
#   bash scripts/device/step_model.sh moe     # (on a GPU with TE: the step model), timed
#   bash scripts/device/step_model.sh cost    # both, back to back, with each phase's time
#   bash scripts/device/step_model.sh anchor  # the same with --check-anchor (the same step
#                                             # timed twice at the smallest calibrated count)
#   GEN_FLAGS="..." bash scripts/device/step_model.sh shipped M TP  # gen-policy flags added
#   bash scripts/device/step_model.sh judge   # the Megatron judge at counts no policy was made
#                                             # at, eager and graphed (the cost run's committed
#                                             # policies, docs/device-logs/step_model/cost/)
#   bash scripts/device/step_model.sh judge-anchor  # the anchor run's MoE policy, eager 18432
#   bash scripts/device/step_model.sh judge-calib4 [M...]  # the four-calibration cost run's
#                                             # policies: the MoE above its sweep (graphed 20480,
#                                             # eager 28672), Llama-3.1-8B where its plan is mixed
#                                             # (eager 3072,6144, graphed 3072,5120); M: both
#   bash scripts/device/step_model.sh refit   # the same judge of the policies re-fitted from the
#                                             # committed inputs under today's noise bar
#                                             # (devcarry/step_model/), Llama-3.2-1B's included
#   bash scripts/device/step_model.sh today [M...]  # the graphed judge (3072, 6144) of the
#                                             # policies today's fp8sel fits from the cost run's
#                                             # committed inputs and checks (merge-policy
#                                             # --step-model); M: Llama-3.1-8B, MoE-64x1408 (both)
#   bash scripts/device/step_model.sh shipped M TP  # a shipped model's step-model policy at TP
#                                             # (fixtures/models/M.yaml), its documents kept
#   bash scripts/device/step_model.sh profile # where the MoE's inputs spend their time: its
#                                             # step_inputs run under cProfile (no check)
#   bash scripts/device/step_model.sh hostbound  # where the model misses (held-out counts whose
#                                             # GPU time is under 1.5 x the host's: median error
#                                             # -5 to -10%): whole steps with host and GPU time at
#                                             # six counts from 1024 to 4096 in three host-bound
#                                             # layouts; which overlap form fits between 1024 and
#                                             # 4096 (scripts/device/hostbound.py)
#   bash scripts/device/step_model.sh calibrate-all M TP [EP]  # whole steps with host and GPU
#                                             # time at nine counts 1024-16384 (M: a fixture or
#                                             # Llama-3.1-8B, MoE-64x1408), then which counts to
#                                             # calibrate at, on the held-out ones
#                                             # (scripts/device/calibration_xv.py)
#   bash scripts/device/step_model.sh rounds-ab  # short steps' rounds: the whole-step
#                                             # calibrations of host-bound layouts (Llama-3.2-1B
#                                             # TP 1, Qwen2.5-72B TP 8 one rank) with --steps 5
#                                             # (rounds of 5 steps) and --steps 40 (rounds of
#                                             # about 200 ms), A B A B: each row's spread
#   bash scripts/device/step_model.sh affinity-ab  # the same two layouts at 1024 and 2048, the
#                                             # worker pinned to the GPU's CPUs (taskset) or
#                                             # not, A B A B (scripts/device/ab_moves.py)
# Carries devcarry/ (fp8sel, the wheel) and .te/mc. Writes $OUT/<phase>.tar.gz; prints a table.
set -uo pipefail
phase=${1:?dense, moe, cost, anchor, judge, judge-anchor, judge-calib4, refit, today, shipped, profile, hostbound, calibrate-all, rounds-ab or affinity-ab}
OUT=${OUT:-/tmp/out}
W=/tmp/sm
mkdir -p "$W" "$OUT"
. scripts/device/te_env.sh
te_env "$W" > /dev/null

# Both models from public dimensions (scripts/device/configs/, one copy for every script).
cp -r scripts/device/configs/Llama-3.1-8B scripts/device/configs/MoE-64x1408 "$W/"

gen() {  # name: the plain command, timed
  local m=$1
  cd "$W" || exit 1
  local t0=$SECONDS
  # shellcheck disable=SC2086  # GEN_FLAGS: gen-policy flags, split as given
  timeout 480 "$FP8SEL" gen-policy --model "$m/config.json" --tp 1 ${GEN_FLAGS:-} > "gen_$m.log" 2>&1
  echo "gen $m rc=$? $((SECONDS - t0)) s"
  grep -E "backend auto|modelled|disagree|slower than BF16|note:|warning|Error" "gen_$m.log" | cut -c1-240 | head -12
  cp "gen_$m.log" "$OUT/"
  python3 - "$m" <<'PY'
import json, sys
m = sys.argv[1]
p = json.load(open(f"policies/{m}.json"))
print("  rules:", json.dumps(p["rules"], separators=(",", ":"))[:1500])
print("  bf16 keys:", len(p["provenance"].get("measured_bf16_keys", [])))
for lm in p["provenance"]["step"]["model"]:
    held = [r for r in lm["check"] if not r["calibrated"]]
    print(f"  held-out rows {len(held)}, worst |error| {100 * lm['held_out_worst_error']:.1f}%, disagreements {len(lm['disagreements'])}, guarded {lm['guarded']}")
    for r in lm["check"]:
        print(f"   {r['execution']:7} {r['tokens']:6} {r['mode']:4} pred {r['predicted_ms']:8.3f} meas {r['measured_ms']:8.3f} err {100 * r['error']:+5.1f}% noise {100 * r['noise']:4.1f}% vs_bf16 {r['vs_bf16'][0]:.3f} ({r['vs_bf16'][1]:.3f}-{r['vs_bf16'][2]:.3f}){' cal' if r['calibrated'] else ''} {','.join(r['fp8_groups']) if r['mode'] == 'plan' else ''}")
PY
  cd - > /dev/null || exit 1
}
judge() {  # name, timeout, layers, execution, tokens
  local m=$1 t=$2 layers=$3 ex=$4 tokens=$5
  local tag=${m}_$ex cfg=$W/$m/config.json
  [ -e "$cfg" ] || cfg=fixtures/models/$m.yaml
  timeout "$t" python3 -m adaptive_fp8.bench.step_bench --trainer megatron --model "$cfg" \
    --policy "$W/policies/$m.json" --tokens "$tokens" --execution "$ex" --layers "$layers" \
    --repeats 21 --json "$W/judge_$tag.json" --md "$W/judge_$tag.md" > "$W/judge_$tag.log" 2>&1
  echo "judge $tag rc=$?"
  grep -E "differ from fp8sel explain|Error" "$W/judge_$tag.log" | head -5
  cp "$W/judge_$tag.md" "$W/judge_$tag.json" "$OUT/" 2>/dev/null  # back even if the call is cut
}
ab() {  # variant, pass, counts, then the variant's step_inputs flags; $PIN: a command before it
  local variant=$1 pass=$2 counts=$3 m name tp f
  shift 3
  for m in llama3_2_1b:1 qwen2_5_72b:8; do
    name=${m%%:*} tp=${m##*:} f=$W/ab_${m%%:*}_${variant}_p$pass
    # shellcheck disable=SC2086  # PIN: a command and its arguments, split as given
    timeout 150 ${PIN:-} python3 -m adaptive_fp8.bench.step_inputs --model "fixtures/models/$name.yaml" \
      --tp "$tp" --tokens "$counts" --calibrate "$counts" "$@" --json "$f.json" > "$f.log" 2>&1
    echo "ab $name $variant pass $pass rc=$?"
  done
}
phases() {  # log: each worker phase's own clock (its last "[ x s]" line before "wrote")
  awk '/^\[ *[0-9.]+ s\]/ {match($0, /[0-9.]+/); t=substr($0, RSTART, RLENGTH)} /step_inputs: wrote/ {n++; printf "%s%s %s s", (n>1?", ":""), (n==1?"inputs":(n==2?"check":(n==3?"recheck":"recheck" n-2))), t} END {print ""}' "$1"
}
case $phase in
cost|anchor)
  [ "$phase" = anchor ] && GEN_FLAGS="${GEN_FLAGS:-} --check-anchor"
  for m in Llama-3.1-8B MoE-64x1408; do
    gen "$m" | grep -E "^gen |held-out"
    echo "  phases: $(phases "$W/gen_$m.log")"
  done
  ;;
dense)
  gen Llama-3.1-8B
  ;;
moe)
  gen MoE-64x1408
  ;;
judge)
  # The cost run's policies as committed (docs/device-logs/step_model/cost/policies/).
  mkdir -p "$W/policies"
  cp docs/device-logs/step_model/cost/policies/*.json "$W/policies/"
  # Eager 3072 and Llama-3.1-8B's eager 6144 are committed (judge_cost/); the rest, graphed first.
  judge Llama-3.1-8B 150 2 graphed 3072,6144
  judge MoE-64x1408 150 2 graphed 3072,6144
  judge MoE-64x1408 120 2 eager 6144
  ;;
judge-anchor)
  # The anchor run's MoE policy (docs/device-logs/step_model/cost/anchor/policies/), eager FP8
  # from 16384 for qkv, proj and the shared expert: judged above its sweep.
  mkdir -p "$W/policies"
  cp docs/device-logs/step_model/cost/anchor/policies/MoE-64x1408.json "$W/policies/"
  judge MoE-64x1408 230 2 eager 18432
  ;;
judge-calib4)
  # docs/device-logs/step_model/cost/calib4/policies/: the MoE's eager BF16 to 27552, graphed
  # partly FP8; Llama-3.1-8B's four keys from 2432-6896 eager, 2432-5792 graphed, judged where
  # its plan is mixed (eager 3072: fc1; 6144: all but proj; graphed 3072: fc1, fc2; 5120: all
  # but proj).
  mkdir -p "$W/policies"
  shift
  [ $# -gt 0 ] || set -- MoE-64x1408 Llama-3.1-8B
  for m in "$@"; do
    cp "docs/device-logs/step_model/cost/calib4/policies/$m.json" "$W/policies/" || exit 1
    case $m in
      MoE-64x1408) judge "$m" 200 2 graphed 20480; judge "$m" 280 2 eager 28672 ;;
      Llama-3.1-8B) judge "$m" 150 2 eager 3072,6144; judge "$m" 150 2 graphed 3072,5120 ;;
    esac
  done
  ;;
refit)
  mkdir -p "$W/policies"
  cp devcarry/step_model/*.json "$W/policies/"
  judge Llama-3.1-8B 150 2 eager 3072,6144
  judge Llama-3.1-8B 120 2 graphed 3072
  judge llama3_2_1b 150 2 eager 3072,7168
  ;;
today)
  mkdir -p "$W/policies"
  R=docs/device-logs/step_model/cost/reports/step
  shift
  [ $# -gt 0 ] || set -- Llama-3.1-8B MoE-64x1408
  for m in "$@"; do
    "$FP8SEL" merge-policy --step-model "$R/${m}_tp1_ep1_etp1_inputs_step.json" \
      --step-check "$R/${m}_tp1_ep1_etp1_check_step.json" --output "$W/policies/$m.json" > /dev/null || exit 1
    judge "$m" 170 2 graphed 3072,6144
  done
  ;;
shipped)
  m=${2:?model} tp=${3:?tp}
  t0=$SECONDS
  # shellcheck disable=SC2086
  timeout 540 "$FP8SEL" gen-policy --model "fixtures/models/$m.yaml" --tp "$tp" --out "$W/shipped" \
    ${GEN_FLAGS:-} > "$W/gen_${m}_tp$tp.log" 2>&1
  echo "gen $m tp $tp rc=$? $((SECONDS - t0)) s"
  grep -E "modelled|disagree|slower than BF16|note:|Error" "$W/gen_${m}_tp$tp.log" | cut -c1-240 | head -12
  cp "$W/gen_${m}_tp$tp.log" "$OUT/"
  ;;
hostbound)
  # Every count calibrated (whole steps with the profiler's GPU time and the host probe's).
  for m in qwen2_5_72b:8:1 deepseek_v3:8:64 qwen3_vl_235b_a22b:4:16; do
    IFS=: read -r name tp ep <<< "$m"
    t0=$SECONDS
    timeout 180 python3 -m adaptive_fp8.bench.step_inputs --model "fixtures/models/$name.yaml" --tp "$tp" \
      --ep "$ep" --tokens 1024,1408,1664,2048,2688,4096 --calibrate 1024,1408,1664,2048,2688,4096 \
      --json "$W/hb_${name}_tp$tp.json" > "$W/hb_${name}_tp$tp.log" 2>&1
    echo "hostbound $name tp $tp rc=$? $((SECONDS - t0)) s"
  done
  python3 scripts/device/hostbound.py "$W"/hb_*.json | tee "$W/hostbound.txt"
  ;;
calibrate-all)
  m=${2:?model} tp=${3:?tp} ep=${4:-1}
  cfg=$W/$m/config.json
  [ -e "$cfg" ] || cfg=fixtures/models/$m.yaml
  all=1024,1408,2048,2688,4096,5760,8192,11648,16384
  t0=$SECONDS
  timeout 560 python3 -m adaptive_fp8.bench.step_inputs --model "$cfg" --tp "$tp" --ep "$ep" \
    --tokens "$all" --calibrate "$all" --json "$W/ca_${m}_tp$tp.json" > "$W/ca_${m}_tp$tp.log" 2>&1
  echo "calibrate-all $m tp $tp ep $ep rc=$? $((SECONDS - t0)) s"
  python3 scripts/device/calibration_xv.py --fp8sel "$FP8SEL" --work "$W/xv" --sweep 1024,2048,4096,8192,16384 \
    --candidates 1024,4096,16384 1024,2048,4096,16384 1024,2048,16384 1024,2048,4096,8192,16384 \
    -- "$W/ca_${m}_tp$tp.json" | tee "$W/ca_${m}_tp$tp.txt"
  ;;
rounds-ab)
  # Only the calibration's whole steps matter here: two counts, module groups at those counts.
  for pass in 1 2; do
    for steps in 5 40; do
      ab "s$steps" "$pass" 2048,4096 --steps "$steps"
    done
  done
  python3 scripts/device/ab_moves.py "$W" | tee "$W/rounds_ab.txt"
  ;;
affinity-ab)
  # The worker pinned to four of the GPU's own CPUs (the first of its PCI device's
  # local_cpulist: on a machine whose every CPU is local, pinning to all would change nothing)
  # against where the scheduler puts it: host-bound steps' calibrations, A B A B.
  command -v taskset > /dev/null || { echo "affinity-ab: no taskset on this machine" >&2; exit 1; }
  bus=$(nvidia-smi --query-gpu=pci.bus_id --format=csv,noheader | head -1 | tr 'A-F' 'a-f')
  cpus=$(python3 -c 'import sys
c = [i for p in open(sys.argv[1]).read().strip().split(",") for i in range(int(p.split("-")[0]), int(p.split("-")[-1]) + 1)]
print(",".join(map(str, c[:4])))' "/sys/bus/pci/devices/${bus:4}/local_cpulist") || exit 1
  echo "GPU $bus, the worker on CPUs $cpus of $(nproc)"
  for pass in 1 2; do
    for variant in free pinned; do
      PIN=""; [ "$variant" = pinned ] && PIN="taskset -c $cpus"
      ab "$variant" "$pass" 1024,2048
    done
  done
  python3 scripts/device/ab_moves.py "$W" | tee "$W/affinity_ab.txt"
  ;;
profile)
  cd "$W" || exit 1
  t0=$SECONDS
  timeout 240 python3 -m cProfile -o "$W/inputs.prof" -m adaptive_fp8.bench.step_inputs \
    --model MoE-64x1408/config.json --tp 1 --json "$W/prof_inputs.json" > "$W/prof.log" 2>&1
  echo "profile rc=$? $((SECONDS - t0)) s"
  python3 - "$W/inputs.prof" <<'PY' | tee "$W/prof.txt"
import pstats, sys
s = pstats.Stats(sys.argv[1])
s.sort_stats("cumulative").print_stats(r"adaptive_fp8|profiler|collect|empty_cache|synchronize", 45)
PY
  cd - > /dev/null || exit 1
  ;;
esac
tar -C /tmp --exclude='*.svg' -czf "$OUT/$phase.tar.gz" sm
for f in "$W"/judge_*.md; do [ -f "$f" ] && { echo "== $f"; cut -c1-200 "$f" | head -30; }; done
