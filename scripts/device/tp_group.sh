#!/usr/bin/env bash
# Issue 27 on a 4- or 8-GPU machine (nvidia-h200-x4 / -x8): TP 4 and TP 8 timed over a real TP
# group. After the TE install (scripts/device/README.md); carry devcarry/ and .te/mc. Phases:
#   bash scripts/device/tp_group.sh bench   # `fp8sel bench --backend te --tp-comm` at each TP the
#                                          # machine holds (4; 8 on 8 GPUs) for Qwen2.5-72B and
#                                          # Llama-3.2-1B, and a policy of both executions from each
#                                          # report (`merge-policy --trainer both`)
#   bash scripts/device/tp_group.sh judge   # the step over the real TP group (torchrun step_bench
#                                          # --tp-comm, then --trainer megatron: GPTModel at TP N),
#                                          # 1024-8192 tokens, eager and graphed: the shipped
#                                          # default (one rank alone at TP 4/8) against the
#                                          # TP-group policy of `bench` (same machine, right after)
# Then commit the reports as reports/h200/te/te_<model>_tp<N>_comm.json and run
# `cargo xtask gen-policy`: the TP-group rules replace the one-rank ones for those TP sizes.
# Writes $OUT/tp_group_<phase>.tar.gz; the table of each run is printed last.
set -uo pipefail
phase=${1:?bench or judge}
OUT=${OUT:-/tmp/out}
W=/tmp/tpg
mkdir -p "$W/$phase" "$W/pol" "$OUT" && touch "$W/$phase/steps.txt"
. scripts/device/te_env.sh
te_env "$W/$phase"
gpus=$(nvidia-smi -L | wc -l)
sizes=$(for t in 4 8; do [ "$t" -le "$gpus" ] && echo "$t"; done)
[ -n "$sizes" ] || { echo "tp_group: $gpus GPU(s) here; TP 4 needs 4 (nvidia-h200-x4)" >&2; exit 2; }
F=./devcarry/fp8sel
MODELS="qwen2_5_72b llama3_2_1b"

run() {  # name, seconds, command...: its log beside the results, rc and time in steps.txt
  local name=$1 t=$2; shift 2
  local t0=$(date +%s)
  timeout "$t" "$@" > "$W/$phase/$name.log" 2>&1
  echo "$name rc=$? in $(( $(date +%s) - t0 )) s" | tee -a "$W/$phase/steps.txt"
}
case $phase in
bench)
  for tp in $sizes; do
    for m in $MODELS; do
      r=$W/$phase/te_${m}_tp${tp}_comm.json
      run "${m}_tp$tp" 240 $F bench --backend te --tp-comm --model fixtures/models/$m.yaml --tp "$tp" \
        --shape-sweep 1024x1,2048x1,4096x1,8192x1,16384x1 --python python3 --report "$r"
      [ -f "$r" ] && run "${m}_tp${tp}_merge" 30 $F merge-policy --reports "$r" --trainer both \
        --output "$W/pol/${m}_tp${tp}_comm.json"
    done
  done
  cp -r "$W/pol" "$W/$phase/"
  ;;
judge)
  for tp in $sizes; do
    for m in $MODELS; do
      p=$W/pol/${m}_tp${tp}_comm.json
      [ -f "$p" ] || { echo "no $p: run the bench phase first (same machine)"; continue; }
      layers=2; [ "$m" = llama3_2_1b ] && layers=4
      run "${m}_tp${tp}_step" 280 python3 -m torch.distributed.run --standalone --nproc-per-node "$tp" \
        -m adaptive_fp8.bench.step_bench --tp-comm --tp "$tp" --model fixtures/models/$m.yaml --layers $layers \
        --tokens 1024,2048,4096,8192 --execution eager,graphed --steps 5 --repeats 21 --oracle none \
        --policy policies/$m.json --policy "$p" --json "$W/$phase/${m}_tp${tp}_step.json" --md "$W/$phase/${m}_tp${tp}_step.md"
      # The same in Megatron's own GPTModel at TP N (sequence parallel), hook and native.
      run "${m}_tp${tp}_megatron" 300 python3 -m torch.distributed.run --standalone --nproc-per-node "$tp" \
        -m adaptive_fp8.bench.step_bench --trainer megatron --tp "$tp" --model fixtures/models/$m.yaml --layers $layers \
        --tokens 1024,2048,4096,8192 --execution eager,graphed --steps 5 --repeats 21 \
        --policy policies/$m.json --policy "$p" --json "$W/$phase/${m}_tp${tp}_megatron.json" --md "$W/$phase/${m}_tp${tp}_megatron.md"
    done
  done
  ;;
*) echo "tp_group: unknown phase $phase (bench or judge)" >&2; exit 2 ;;
esac
tar -C "$W" -czf "$OUT/tp_group_$phase.tar.gz" "$phase"
cat "$W/$phase/steps.txt"
for f in "$W/$phase"/*.md; do [ -f "$f" ] && { echo "== $f"; grep -v '^$' "$f" | cut -c1-200 | head -40; }; done
exit 0
