#!/usr/bin/env bash
# Issue 46's last step on the H200: the shipped models' policies (language models, and Qwen3-VL's vision encoder) made again by
# the plain `fp8sel gen-policy` (on a GPU with TE: the step model, 2 layers, 1024-16384 tokens,
# both executions), one layout per row, at every layout the shipped files cover. The sweep is
# longer than one session's device time (17 blockwise layouts of 25-480 s, then 16 of the other recipes), so it is a queue over
# sessions: a row whose reports are committed under docs/device-logs/regen_shipped/<row>/ is
# skipped unless stale (scripts/device/regen_queue.py says why); each call runs the rows that fit what is left of it
# (BUDGET seconds, default 560) and brings back what it made ($OUT/regen_shipped.tar.gz). After the TE install
# (../shared/tools/te-device), carrying devcarry/ and .te/mc:
#   bash scripts/device/regen_shipped.sh            # the next rows, in the order below (a row is
#       done when its committed check lost no count and timed its policy's plans)
#   bash scripts/device/regen_shipped.sh ROW...     # these rows again (e.g. llama3_2_1b_tp2)
#   bash scripts/device/regen_shipped.sh judge M... # the shipped policies/M.json (once made by
#       the step model) in upstream GPTModel at TP 1, 2 layers (Qwen2.5-72B: 1), at counts no
#       policy was made at (eager 3072 and 7168, graphed 6144; 21 rounds, hook and native), each M
#       a dense model; $OUT/regen_judge.tar.gz (commit under docs/device-logs/regen_shipped/judge/);
#       RECIPE=tensorwise|delayed: policies/<recipe>/M.json, judged in that recipe; AT="graphed:6144"
#       (execution:counts, space-separated): those runs alone; POLICY=FILE:
#       that file (one model: a row's policy made by an earlier command of the same call)
#   bash scripts/device/regen_shipped.sh judge-vit [TP...]  # the shipped Qwen3-VL vision encoder
#       in the TE blocks (its own layers), eager and graphed at 3072 and 6144, 21 rounds (the
#       file a row made on this machine where there is one)
# A row is <model>_tp<T>[_ep<E>] of fixtures/models/<model>.yaml; a VLM's row (Qwen3-VL) makes its
# language model alone (`--component llm`). A row <model>_vit_tp<T> makes the vision encoder
# (`gen-policy --component vit`; its layouts have no EP, so one row per TP), once per TP. A row
# <recipe>/<row> (tensorwise, delayed: the recipes whose files ship in policies/<recipe>/) makes
# that layout with `gen-policy --recipe <recipe>`. Land what a call
# brought back with `python3 scripts/upkeep/land_regen.py <files_at>/regen_shipped.tar.gz` (each
# finished row's logs under docs/device-logs/regen_shipped/<row>/, its reports replacing its
# layouts' in reports/h200/step_model/, a recipe's in reports/h200/<recipe>/step_model/; a cut
# row's log under cut/), and commit: `cargo xtask gen-policy --check`
# (fp8_pipeline::shipped) then makes a model's shipped file from them, in place of the fold, once
# they cover every key it has.
set -uo pipefail
# The queue reads the committed rows (their logs in docs/device-logs/regen_shipped/, their reports
# in reports/h200/): a tree without them (left out of a device call to save room) would run every
# row again. Refused.
if [ $# = 0 ] && ! compgen -G "docs/device-logs/regen_shipped/*/gen.log" > /dev/null; then
  echo "regen_shipped: no committed row under docs/device-logs/regen_shipped/ (is docs/device-logs/ in this tree?): the queue cannot tell which rows are done; name the rows to run, e.g. bash $0 qwen2_5_72b_tp1" >&2
  exit 2
fi
OUT=${OUT:-/tmp/out}
W=/tmp/regen
T0=$(date +%s)
mkdir -p "$W" "$OUT"
. scripts/device/te_env.sh
te_env "$W" > /dev/null
D=docs/device-logs/regen_shipped
# The shipped folders are the H200's: another GPU's rows run (a user's own machine, worth a log)
# but land nowhere (land_regen.py and `cargo xtask gen-policy` refuse them). Said first.
grep -q H200 "$W/gpu.txt" || echo "regen_shipped: note: this GPU is $(head -1 "$W/gpu.txt" | cut -d, -f1), not an H200: its rows cannot be landed in reports/h200/; keep them under docs/device-logs/" >&2
left() { echo $(( ${BUDGET:-560} - ($(date +%s) - T0) )); }
# Model by model, the cheapest first: a model's shipped file is made from every layout's reports
# (`cargo xtask gen-policy`), so a call that runs out leaves whole models measured one way.
ROWS=(llama3_2_1b_tp1 llama3_2_1b_tp2 qwen3_vl_235b_a22b_vit_tp1 qwen3_vl_235b_a22b_vit_tp2 qwen3_vl_235b_a22b_vit_tp4
  qwen2_5_72b_tp8 qwen2_5_72b_tp4 qwen2_5_72b_tp2 qwen2_5_72b_tp1
  qwen3_vl_235b_a22b_tp4_ep16 qwen3_vl_235b_a22b_tp2_ep8 qwen3_vl_235b_a22b_tp1_ep8 qwen3_vl_235b_a22b_tp1_ep4
  deepseek_v3_tp8_ep64 deepseek_v3_tp4_ep32 deepseek_v3_tp2_ep16 deepseek_v3_tp1_ep8)
# The recipes besides blockwise that ship files (policies/<recipe>/, fp8_pipeline::shipped's
# RECIPE_DIRS), at the layouts those files cover.
for recipe in tensorwise delayed; do
  ROWS+=("$recipe"/qwen2_5_72b_tp{1,2,4,8} "$recipe"/deepseek_v3_tp{8_ep64,4_ep32,2_ep16,1_ep8})
done
if [ "${1:-}" = judge-vit ]; then
  # The shipped vision encoder (policies/qwen3_vl_235b_a22b.vit.json) in the TE blocks' step of its
  # own layers (the Megatron judge builds the language model only) at counts no policy was made
  # at, both executions, 21 rounds, no oracle, at each TP given (default 1).
  shift
  mkdir -p "$W/judge"
  for tp in "${@:-1}"; do
    [ "$(left)" -lt 150 ] && { echo "judge-vit tp$tp: next call ($(left) s left)"; continue; }
    tag=qwen3_vl_235b_a22b_vit_tp$tp
    # The file this machine's row just made (its TP's rules are the shipped file's once
    # committed), else the shipped one.
    pol=policies/qwen3_vl_235b_a22b.vit.json
    [ -f "$W/$tag/qwen3_vl_235b_a22b.vit.json" ] && pol=$W/$tag/qwen3_vl_235b_a22b.vit.json
    echo "judge-vit tp$tp: $pol" | tee -a "$W/judge/steps.txt"
    t1=$(date +%s)
    timeout 240 python3 -m adaptive_fp8.bench.step_bench --trainer te --component vit --oracle none \
      --model fixtures/models/qwen3_vl_235b_a22b.yaml --tp "$tp" --policy "$pol" \
      --tokens 3072,6144 --execution eager,graphed --layers 2 --repeats 21 \
      --json "$W/judge/$tag.json" --md "$W/judge/$tag.md" > "$W/judge/$tag.log" 2>&1
    echo "judge $tag rc=$? in $(( $(date +%s) - t1 )) s" | tee -a "$W/judge/steps.txt"
    tar -C /tmp -czf "$OUT/regen_judge.tar.gz" regen/judge
  done
  for f in "$W"/judge/*.md; do [ -f "$f" ] && { echo "== $f"; cut -c1-200 "$f" | head -14; }; done
  exit 0
fi
if [ "${1:-}" = judge ]; then
  shift
  mkdir -p "$W/judge"
  for m in "$@"; do
    # AT=<execution:counts ...>: these instead (e.g. AT=graphed:6144 after a change to graphed steps).
    for ex in ${AT:-eager:3072,7168 graphed:6144}; do
      [ "$(left)" -lt 150 ] && { echo "judge $m ${ex%%:*}: next call ($(left) s left)"; continue; }
      # RECIPE=<recipe>: that recipe's shipped file (policies/<recipe>/M.json), in that recipe.
      recipe=${RECIPE:-blockwise} pol=policies/$m.json tag=${m}_${ex%%:*}
      [ "$recipe" != blockwise ] && pol=policies/$recipe/$m.json tag=${recipe}_$tag
      # POLICY=<file>: that file instead (a row's policy just made on this machine, before it
      # lands: /tmp/regen/<row>/<model>.json).
      pol=${POLICY:-$pol}
      t1=$(date +%s)
      # One model per mode stays alive for the interleaved rounds: a 72B-class layer takes ~30 GB
      # with its optimizer state, so those run one layer.
      layers=2
      case $m in qwen2_5_72b) layers=1 ;; esac
      timeout 200 python3 -m adaptive_fp8.bench.step_bench --trainer megatron --model "fixtures/models/$m.yaml" \
        --tp 1 --recipe "$recipe" --policy "$pol" --tokens "${ex#*:}" --execution "${ex%%:*}" --layers "$layers" --repeats 21 \
        --json "$W/judge/$tag.json" --md "$W/judge/$tag.md" > "$W/judge/$tag.log" 2>&1
      echo "judge $tag rc=$? in $(( $(date +%s) - t1 )) s" | tee -a "$W/judge/steps.txt"
      tar -C /tmp -czf "$OUT/regen_judge.tar.gz" regen/judge
    done
  done
  for f in "$W"/judge/*.md; do [ -f "$f" ] && { echo "== $f"; cut -c1-200 "$f" | head -14; }; done
  exit 0
fi
named=0
[ $# -gt 0 ] && { ROWS=("$@"); named=1; }
# A committed row is done unless its reports are stale (scripts/device/regen_queue.py says why:
# its check lost counts, its inputs miss a count of today's default calibration, today's
# fp8sel finds checked plans that are not its policy's, or a count its check disagreed at was
# not timed again).
done_row() {
  # Made on this machine by an earlier call: done when it finished (a row cut by its call's
  # budget runs again, from its inputs where they were measured: gen-policy --resume).
  [ -e "$W/$1/gen.log" ] && { grep -q "^$1 rc=0 " "$W/steps.txt" 2>/dev/null; return; }
  [ -e "$D/$1/gen.log" ] || return 1
  python3 scripts/device/regen_queue.py "$1" --fp8sel "$FP8SEL" --work "$W"
}
for row in "${ROWS[@]}"; do
  # Rows named on the command line run again; the queue skips rows done.
  [ $named = 0 ] && done_row "$row" && continue
  # A recipe's row (<recipe>/<row>): the same layout, `gen-policy --recipe <recipe>`.
  recipe=blockwise layout=$row
  case $row in */*) recipe=${row%%/*} layout=${row#*/} ;; esac
  model=${layout%%_tp*}
  rest=${layout#"$model"_tp}
  tp=${rest%%_ep*}
  ep=1
  [ "$rest" != "$tp" ] && ep=${rest#*_ep}
  # A vision-encoder row: the VLM's config, that part alone, no EP.
  part=(--ep "$ep")
  case $model in
    *_vit) model=${model%_vit}; part=(--component vit) ;;
    qwen3_vl*) part+=(--component llm) ;;  # its vision encoder: the _vit rows, one per TP
  esac
  # What the row took when it last finished (regen_queue.py --need: its time in steps.txt with a
  # margin); one that needs more than a call's budget starts only at the head of a fresh call.
  need=$(python3 scripts/device/regen_queue.py "$row" --need) || exit 2
  [ "$need" -gt $(( ${BUDGET:-560} - 30 )) ] && need=$(( ${BUDGET:-560} - 30 ))
  [ "$(left)" -lt "$need" ] && { echo "$row: next call ($(left) s left)"; continue; }
  mkdir -p "$W/$row"
  # A row an earlier call on this machine cut (its last line not rc=0) goes on from its inputs
  # (`gen-policy --resume`: they are reused where complete and measured as this run would).
  resume=()
  last=$(grep "^$row rc=" "$W/steps.txt" 2>/dev/null | tail -1)
  case $last in "" | *" rc=0 "*) ;; *) resume=(--resume) ;; esac
  t1=$(date +%s)
  timeout $(( $(left) - 5 )) "$FP8SEL" gen-policy --model "fixtures/models/$model.yaml" --tp "$tp" "${part[@]}" \
    --recipe "$recipe" --out "$W/$row" "${resume[@]}" > "$W/$row/gen.log" 2>&1
  echo "$row rc=$? in $(( $(date +%s) - t1 )) s" | tee -a "$W/steps.txt"
  grep -E "modelled|disagree|Error|error:" "$W/$row/gen.log" | cut -c1-200 | head -4
  tar -C /tmp --exclude='*.svg' -czf "$OUT/regen_shipped.tar.gz" regen
done
tar -C /tmp --exclude='*.svg' -czf "$OUT/regen_shipped.tar.gz" regen
echo "== regen_shipped ($(left) s of the budget left)"; cat "$W/steps.txt" 2>/dev/null
