#!/usr/bin/env bash
# Issue 14 on the device, after the TE install (../shared/tools/te-device), on the 2-GPU kind.
#   bash scripts/device/trainer_loop.sh a   # host probe, host-profile policies, step benchmark:
#                                          # Qwen2.5-72B TP 8 (large dense), DeepSeek-V3 TP 8 EP 64
#                                          # (high-TP MoE + MLA)
#   bash scripts/device/trainer_loop.sh b   # TP 2 with real communication (2 GPUs), step benchmark:
#                                          # Llama-3.2-1B (short sequences), Qwen3-30B-A3B and
#                                          # Mixtral-8x7B (not in fixtures/), Qwen3-VL ViT (VLM)
#   bash scripts/device/trainer_loop.sh te  # TE-backend policies (gen-policy --backend te) for
#                                          # Qwen3-30B-A3B, Mixtral-8x7B, Llama-3.2-1B, judged by the
#                                          # step benchmark (eager and graphed objectives)
#   bash scripts/device/trainer_loop.sh d   # Qwen3-VL LLM TP 4 (small experts); DeepSeek-V3 TP 2
#                                          # with a dense and an MoE layer (the shared row/fc2 key)
#   bash scripts/device/trainer_loop.sh e   # cuBLASLt + host-profile policies (eager objective)
#   bash scripts/device/trainer_loop.sh f   # gradient accumulation 8: Qwen3-30B-A3B, Llama-3.2-1B
#   bash scripts/device/trainer_loop.sh g   # TP 2 with communication, end to end (2 GPUs): te_tp reports
#                                          # through `fp8sel bench --backend te --tp-comm` (Qwen2.5-72B,
#                                          # Llama-3.2-1B), comm-aware eager policies from them, and
#                                          # Qwen2.5-72B's step over a real TP group (step_bench --tp-comm)
#   bash scripts/device/trainer_loop.sh h   # Llama-3.2-1B's TP 2 step over a real group; then two lanes,
#                                          # one per GPU: the policies not yet judged by a step
#                                          # (eager DeepSeek-V3 and Qwen3-VL, tensorwise, delayed), the
#                                          # Qwen3-VL ViT again, the GPU tests and a TE-worker smoke run
#   bash scripts/device/trainer_loop.sh i   # TE-backend policies for the MoE models without them, one lane
#                                          # per GPU: DeepSeek-V3 TP 8 EP 64, Qwen3-VL LLM TP 4 EP 16
#                                          # (gen-policy --backend te), judged by the step benchmark
#                                          # against the cuBLASLt and host-profile policies
#   bash scripts/device/trainer_loop.sh j   # TE-backend policies for the Qwen3-VL ViT at TP 1, judged by
#                                          # the step benchmark with every objective
#   bash scripts/device/trainer_loop.sh c   # the fp8-bench GPU tests (devcarry/gpu); gradient
#                                          # accumulation 8 vs 1 (Qwen2.5-72B TP 8); Mixtral at ETP 1,
#                                          # the layout its TE policies were swept at
# Needs devcarry/{fp8sel, adaptive_fp8 wheel, pol/} (pol/: made on the CPU by
# scripts/device/trainer_loop_policies.sh). Everything lands in one tarball in $OUT; the tables
# print last.
set -uo pipefail
OUT=${OUT:-/tmp/out}
PHASE=${1:?phase: a, b, te, d, e, f, g, h, i, j or c}
R=/root/tl; mkdir -p $R/sb $R/pol
export PYTHONPATH=/root/te/site:${PYTHONPATH:-} PYTHONUNBUFFERED=1 NVTE_FLASH_ATTN=1
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
python3 -m pip install -q --no-index --no-deps --upgrade --target /root/te/site devcarry/adaptive_fp8-*.whl \
  || python3 -m zipfile -e devcarry/adaptive_fp8-*.whl /root/te/site
# The Python sources of this checkout win over the wheel's (a fix needs no rebuild).
cp -r crates/py/python/adaptive_fp8/. /root/te/site/adaptive_fp8/
F=./devcarry/fp8sel
H=reports/h200
SB="--steps 5 --repeats 7 --oracle-repeats 3 --warmup 3 --execution eager,graphed"
# The results so far, in case the device time runs out before the end.
# A lane (phase h) snapshots into its own tarball: two lanes never write one file.
snap() { tar czf "$OUT/trainer_loop_$PHASE${LANE:+_$LANE}.tar.gz" -C $R . 2>/dev/null; }
sb() { local name=$1 limit=$2; shift 2; local t0=$(date +%s)
  CUDA_VISIBLE_DEVICES=${GPU:-0} timeout "$limit" python3 -m adaptive_fp8.bench.step_bench "$@" --json "$R/sb/$name.json" --md "$R/sb/$name.md" > "$R/sb/$name.log" 2>&1
  echo "$name rc=$? $(( $(date +%s) - t0 )) s"; snap; }
# The step over a real TP group of 2 GPUs (rank 0 writes).
sbtp() { local name=$1 limit=$2; shift 2; local t0=$(date +%s)
  timeout "$limit" python3 -m torch.distributed.run --standalone --nproc-per-node 2 -m adaptive_fp8.bench.step_bench --tp-comm --tp 2 "$@" \
    --json "$R/sb/$name.json" --md "$R/sb/$name.md" > "$R/sb/$name.log" 2>&1
  echo "$name rc=$? $(( $(date +%s) - t0 )) s"; snap; }
pol() { for f in "$@"; do [ -f "$f" ] && echo --policy "$f"; done; }
hostpol() { # model, output name, cuBLASLt reports...
  local model=$1 name=$2; shift 2
  $F merge-policy --reports "$@" --trainer eager --host-profile $R/host.json --output $R/pol/$name.json > $R/pol/$name.log 2>&1 \
    || echo "hostpol $name failed: $(tail -n 2 $R/pol/$name.log)"; }
case $PHASE in
a)
  t0=$(date +%s)
  CUDA_VISIBLE_DEVICES=0 timeout 120 python3 -m adaptive_fp8.bench.probe_host --out $R/host.json > $R/probe_host.log 2>&1
  echo "probe_host rc=$? $(( $(date +%s) - t0 )) s"; tail -n 12 $R/probe_host.log
  hostpol qwen qwen2_5_72b_host $H/qwen2_5_72b_tp{1,2,4,8}.json
  hostpol ds deepseek_v3_host $H/deepseek_v3_tp{1,2,4,8}_ep*.json
  hostpol llama llama3_2_1b_host $H/llama3_2_1b_tp{1,2}.json
  Q=fixtures/models/qwen2_5_72b.yaml
  sb qwen72b_tp8 230 --model $Q --tp 8 --layers 2 --tokens 1024,4096,16384 $SB \
    $(pol policies/qwen2_5_72b.json $R/pol/qwen2_5_72b_host.json devcarry/pol/qwen2_5_72b_te_eager.json devcarry/pol/qwen2_5_72b_te_graphed.json)
  sb deepseek_v3_tp8 200 --model fixtures/models/deepseek_v3.yaml --tp 8 --ep 64 --layers 2 --tokens 1024,2048,4096 $SB \
    $(pol policies/deepseek_v3.json $R/pol/deepseek_v3_host.json)
  ;;
b)
  t0=$(date +%s)
  timeout 150 python3 -m torch.distributed.run --nproc-per-node 2 -m adaptive_fp8.bench.te_tp --model fixtures/models/qwen2_5_72b.yaml \
    --tokens 1024,2048,4096,8192,16384 --json $R/te_tp2_qwen2_5_72b.json --md $R/te_tp2_qwen2_5_72b.md \
    --report $R/te_tp2_qwen2_5_72b_report.json > $R/te_tp2.log 2>&1
  echo "te_tp rc=$? $(( $(date +%s) - t0 )) s"
  [ -f $R/host.json ] || echo "no host.json (phase a did not run on this machine)"
  sb llama1b_tp1 120 --model fixtures/models/llama3_2_1b.yaml --tp 1 --layers 4 --tokens 512,1024,2048,4096 $SB \
    $(pol policies/llama3_2_1b.json $R/pol/llama3_2_1b_host.json)
  sb qwen3_30b_a3b_tp1 130 --model examples/models/qwen3_30b_a3b.json --tp 1 --ep 8 --layers 2 --tokens 1024,4096,8192 $SB \
    --policy devcarry/pol/est/estimated/h200/qwen3_30b_a3b.json
  sb mixtral_8x7b_tp2 100 --model examples/models/mixtral_8x7b.json --tp 2 --ep 8 --layers 2 --tokens 1024,4096,8192 $SB \
    --policy devcarry/pol/est/estimated/h200/mixtral_8x7b.json
  sb qwen3_vl_vit_tp1 80 --model fixtures/models/qwen3_vl_235b_a22b.yaml --component vit --tp 1 --layers 4 --tokens 1024,4096,16384 $SB \
    --policy policies/qwen3_vl_235b_a22b.vit.json
  ;;
te)
  T=$R/tegen; mkdir -p $T
  for m in "examples/models/qwen3_30b_a3b.json --tp 1 --ep 8" "examples/models/mixtral_8x7b.json --tp 2 --ep 8 --etp 1" "fixtures/models/llama3_2_1b.yaml --tp 1"; do
    n=$(basename "${m%% *}"); n=${n%.*}
    CUDA_VISIBLE_DEVICES=0 timeout 150 $F gen-policy --model $m --backend te --trainer eager --python python3 \
      --policies-dir $T/pol --reports-dir $T/rep > $T/$n.log 2>&1; echo "gen-policy te $n rc=$?"
    cp $T/pol/te/$n.json $R/pol/${n}_te_eager.json
    $F merge-policy --reports $T/rep/h200/te/${n}_tp*.json --trainer graphed --output $R/pol/${n}_te_graphed.json > /dev/null 2>&1
  done
  SBT="--steps 5 --repeats 7 --oracle none --warmup 3 --execution eager,graphed"
  tp() { echo $(pol $R/pol/$1_te_eager.json $R/pol/$1_te_graphed.json); }
  sb qwen3_30b_a3b 150 --model examples/models/qwen3_30b_a3b.json --tp 1 --ep 8 --layers 2 --tokens 1024,4096,8192 $SBT \
    $(pol devcarry/pol/est/estimated/h200/qwen3_30b_a3b.json) $(tp qwen3_30b_a3b)
  sb mixtral_8x7b 150 --model examples/models/mixtral_8x7b.json --tp 2 --ep 8 --etp 1 --layers 2 --tokens 1024,4096,8192 $SBT \
    $(pol devcarry/pol/est/estimated/h200/mixtral_8x7b.json) $(tp mixtral_8x7b)
  sb llama3_2_1b 150 --model fixtures/models/llama3_2_1b.yaml --tp 1 --layers 4 --tokens 512,1024,2048,4096 $SBT \
    $(pol policies/llama3_2_1b.json) $(tp llama3_2_1b)
  ;;
d)
  SBD="--steps 5 --repeats 7 --oracle-repeats 3 --warmup 3"
  sb qwen3_vl_llm_tp4 170 --model fixtures/models/qwen3_vl_235b_a22b.yaml --tp 4 --ep 16 --layers 2 --tokens 1024,4096,8192 \
    --execution eager,graphed $SBD $(pol policies/qwen3_vl_235b_a22b.llm.json)
  sb deepseek_v3_tp2_dense_moe 200 --model fixtures/models/deepseek_v3.yaml --tp 2 --ep 16 --layers 2 --dense-layers 1 \
    --tokens 1024,2048,4096 --execution eager $SBD $(pol policies/deepseek_v3.json)
  ;;
e)
  HP=fixtures/host/h200_te2.20.2_blockwise.json
  $F merge-policy --reports $H/qwen2_5_72b_tp{1,2,4,8}.json --trainer eager --host-profile $HP --output $R/pol/qwen2_5_72b_host.json
  $F merge-policy --reports $H/llama3_2_1b_tp{1,2}.json --trainer eager --host-profile $HP --output $R/pol/llama3_2_1b_host.json
  SBE="--steps 5 --repeats 9 --oracle-repeats 3 --warmup 3 --execution eager,graphed"
  sb qwen72b_tp8_b 150 --model fixtures/models/qwen2_5_72b.yaml --tp 8 --layers 2 --tokens 2048,8192 $SBE \
    $(pol policies/qwen2_5_72b.json $R/pol/qwen2_5_72b_host.json devcarry/pol/qwen2_5_72b_te_eager.json devcarry/pol/qwen2_5_72b_te_graphed.json)
  sb llama1b_tp1_b 80 --model fixtures/models/llama3_2_1b.yaml --tp 1 --layers 4 --tokens 1024,2048,8192 $SBE \
    $(pol policies/llama3_2_1b.json $R/pol/llama3_2_1b_host.json)
  ;;
f)
  SBF="--grad-accum 8 --steps 2 --repeats 7 --warmup 2 --oracle none --execution eager,graphed"
  sb qwen3_30b_a3b_ga8 80 --model examples/models/qwen3_30b_a3b.json --tp 1 --ep 8 --tokens 1024,4096 $SBF \
    $(pol devcarry/pol/est/estimated/h200/qwen3_30b_a3b.json)
  sb llama1b_ga8 80 --model fixtures/models/llama3_2_1b.yaml --tp 1 --layers 4 --tokens 1024,2048 $SBF $(pol policies/llama3_2_1b.json)
  ;;
g)
  T=$R/tpc; mkdir -p $T
  for m in qwen2_5_72b:1024x1,2048x1,4096x1,8192x1,16384x1:110 llama3_2_1b:512x1,1024x1,2048x1,4096x1,8192x1:60; do
    IFS=: read -r n sweep limit <<< "$m"; t0=$(date +%s)
    timeout "$limit" $F bench --backend te --tp-comm --model fixtures/models/$n.yaml --tp 2 --shape-sweep "$sweep" --python python3 \
      --report $T/${n}_tp2_comm.json > $T/${n}_bench.log 2>&1
    echo "bench --tp-comm $n rc=$? $(( $(date +%s) - t0 )) s"
    $F merge-policy --reports $T/${n}_tp2_comm.json --trainer eager --output $R/pol/${n}_tp2_comm.json > $T/${n}_merge.log 2>&1 \
      || echo "merge $n failed: $(tail -n 2 $T/${n}_merge.log)"
  done
  snap
  sbtp qwen72b_tp2_comm 230 --model fixtures/models/qwen2_5_72b.yaml --layers 2 --tokens 1024,4096,8192 \
    --steps 4 --repeats 7 --oracle-repeats 3 --warmup 3 --execution eager,graphed \
    $(pol policies/qwen2_5_72b.json policies/eager/qwen2_5_72b.json policies/te/qwen2_5_72b.json $R/pol/qwen2_5_72b_tp2_comm.json)
  ;;
h)
  # /root/tl/pol/llama3_2_1b_tp2_comm.json is phase g's, on the same machine.
  sbtp llama1b_tp2_comm 100 --model fixtures/models/llama3_2_1b.yaml --layers 4 --tokens 1024,2048,4096,8192 \
    --steps 5 --repeats 7 --oracle-repeats 3 --warmup 3 --execution eager,graphed \
    $(pol policies/llama3_2_1b.json policies/eager/llama3_2_1b.json $R/pol/llama3_2_1b_tp2_comm.json)
  SBH="--steps 5 --repeats 7 --warmup 3 --oracle none"
  Q=fixtures/models/qwen2_5_72b.yaml
  VL=fixtures/models/qwen3_vl_235b_a22b.yaml
  ( export GPU=0 LANE=0
    sb qwen3_vl_vit_tp1_b 150 --model $VL --component vit --tp 1 --layers 4 --tokens 1024,4096,16384 --execution eager,graphed \
      --steps 5 --repeats 7 --oracle-repeats 3 --warmup 3 $(pol policies/qwen3_vl_235b_a22b.vit.json policies/eager/qwen3_vl_235b_a22b.vit.json)
    sb qwen72b_tp8_delayed 90 --model $Q --tp 8 --layers 2 --tokens 1024,4096,16384 --execution eager,graphed --recipe delayed $SBH \
      $(pol policies/delayed/qwen2_5_72b.json)
    t0=$(date +%s); CUDA_VISIBLE_DEVICES=0 timeout 150 ./devcarry/gpu --test-threads=1 > $R/gpu_tests.txt 2>&1
    echo "gpu tests rc=$? $(( $(date +%s) - t0 )) s: $(grep 'test result' $R/gpu_tests.txt)"
    t0=$(date +%s); CUDA_VISIBLE_DEVICES=0 timeout 60 $F bench --backend te --model fixtures/models/llama3_2_1b.yaml --tp 1 \
      --shape-sweep 1024x1,4096x1 --python python3 --report $R/te_worker_smoke.json > $R/te_worker_smoke.log 2>&1
    echo "te worker smoke rc=$? $(( $(date +%s) - t0 )) s"; snap ) > $R/lane0.txt 2>&1 &
  ( export GPU=1 LANE=1
    sb deepseek_v3_tp8_eager 180 --model fixtures/models/deepseek_v3.yaml --tp 8 --ep 64 --layers 2 --tokens 1024,2048,4096 \
      --execution eager $SBH $(pol policies/deepseek_v3.json policies/eager/deepseek_v3.json)
    sb qwen3_vl_llm_tp4_eager 120 --model $VL --tp 4 --ep 16 --layers 2 --tokens 1024,4096,8192 --execution eager $SBH \
      $(pol policies/qwen3_vl_235b_a22b.llm.json policies/eager/qwen3_vl_235b_a22b.llm.json)
    sb qwen72b_tp8_tensorwise 100 --model $Q --tp 8 --layers 2 --tokens 1024,4096,16384 --execution eager,graphed --recipe tensorwise $SBH \
      $(pol policies/tensorwise/qwen2_5_72b.json) ) > $R/lane1.txt 2>&1 &
  wait; cat $R/lane0.txt $R/lane1.txt
  ;;
i)
  T=$R/tegen2; mkdir -p $T
  SBI="--steps 5 --repeats 7 --warmup 3 --oracle none --execution eager,graphed"
  # lane: GPU, model config, layout, policy base name, step tokens, step flags...
  lane() { local gpu=$1 cfg=$2 layout=$3 n=$4 toks=$5; shift 5; local t0=$(date +%s)
    CUDA_VISIBLE_DEVICES=$gpu timeout 180 $F gen-policy --model $cfg $layout --backend te --trainer eager --python python3 \
      --policies-dir $T/pol --reports-dir $T/rep > $T/$n.log 2>&1; echo "gen-policy te $n rc=$? $(( $(date +%s) - t0 )) s"
    local eager=$(ls $T/pol/te/$n*.json 2>/dev/null | grep -v '\.vit\.' | head -n 1)
    [ -n "$eager" ] && cp "$eager" $R/pol/${n}_te_eager.json
    $F merge-policy --reports $T/rep/h200/te/${n}_tp*.json --trainer graphed --component llm --output $R/pol/${n}_te_graphed.json > $T/${n}_graphed.log 2>&1 \
      || echo "graphed merge $n failed: $(tail -n 2 $T/${n}_graphed.log)"
    GPU=$gpu sb ${n}_te 170 --model $cfg $layout --layers 2 --tokens $toks $SBI "$@" $(pol $R/pol/${n}_te_eager.json $R/pol/${n}_te_graphed.json); }
  ( LANE=0 lane 0 fixtures/models/deepseek_v3.yaml "--tp 8 --ep 64" deepseek_v3 1024,2048,4096 \
      $(pol policies/deepseek_v3.json policies/eager/deepseek_v3.json) ) > $R/lane0.txt 2>&1 &
  ( LANE=1 lane 1 fixtures/models/qwen3_vl_235b_a22b.yaml "--tp 4 --ep 16" qwen3_vl_235b_a22b 1024,4096,8192 \
      $(pol policies/qwen3_vl_235b_a22b.llm.json policies/eager/qwen3_vl_235b_a22b.llm.json) ) > $R/lane1.txt 2>&1 &
  wait; cat $R/lane0.txt $R/lane1.txt
  ;;
j)
  T=$R/tegen3; mkdir -p $T; VL=fixtures/models/qwen3_vl_235b_a22b.yaml; t0=$(date +%s)
  CUDA_VISIBLE_DEVICES=0 timeout 130 $F gen-policy --model $VL --tp 1 --ep 16 --backend te --trainer eager --python python3 \
    --policies-dir $T/pol --reports-dir $T/rep > $T/qwen3_vl.log 2>&1; echo "gen-policy te qwen3_vl tp1 rc=$? $(( $(date +%s) - t0 )) s"
  cp $T/pol/te/qwen3_vl_235b_a22b.vit.json $R/pol/qwen3_vl_vit_te_eager.json
  $F merge-policy --reports $T/rep/h200/te/qwen3_vl_235b_a22b_tp1*.json --trainer graphed --component vit \
    --output $R/pol/qwen3_vl_vit_te_graphed.json > $T/qwen3_vl_graphed.log 2>&1 || echo "graphed merge failed: $(tail -n 2 $T/qwen3_vl_graphed.log)"
  snap
  sb qwen3_vl_vit_te 150 --model $VL --component vit --tp 1 --layers 4 --tokens 1024,4096,16384 --execution eager,graphed \
    --steps 5 --repeats 7 --warmup 3 --oracle none $(pol policies/qwen3_vl_235b_a22b.vit.json policies/eager/qwen3_vl_235b_a22b.vit.json \
    $R/pol/qwen3_vl_vit_te_eager.json $R/pol/qwen3_vl_vit_te_graphed.json)
  ;;
c)
  Q=fixtures/models/qwen2_5_72b.yaml
  QP=$(pol policies/qwen2_5_72b.json devcarry/pol/qwen2_5_72b_eager_host.json devcarry/pol/qwen2_5_72b_te_eager.json devcarry/pol/qwen2_5_72b_te_graphed.json)
  SBC="--steps 5 --repeats 9 --warmup 3 --execution eager,graphed --oracle none"
  sb qwen72b_tp8_ga8 120 --model $Q --tp 8 --layers 2 --tokens 1024,2048,4096 --grad-accum 8 --steps 2 $QP ${SBC/--steps 5/}
  sb qwen72b_tp8_ga1 60 --model $Q --tp 8 --layers 2 --tokens 1024,2048,4096 $QP $SBC
  sb mixtral_8x7b_tp2_etp1 100 --model examples/models/mixtral_8x7b.json --tp 2 --ep 8 --etp 1 --layers 2 --tokens 1024,4096,8192 $SBC \
    $(pol devcarry/pol/est/estimated/h200/mixtral_8x7b.json devcarry/pol/mixtral_8x7b_te_eager.json devcarry/pol/mixtral_8x7b_te_graphed.json)
  snap
  t0=$(date +%s)
  CUDA_VISIBLE_DEVICES=0 timeout 150 ./devcarry/gpu --test-threads=1 > $R/gpu_tests.txt 2>&1
  echo "gpu tests rc=$? $(( $(date +%s) - t0 )) s: $(grep 'test result' $R/gpu_tests.txt)"
  ;;
esac
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $R/gpu.txt
snap
for f in $R/sb/*.log; do echo "== $f"; grep -v "^|" "$f" | tail -n 3; done
[ "$PHASE" = b ] && cat $R/te_tp2_qwen2_5_72b.md 2>/dev/null | tail -n 8 && tail -n 5 $R/te_tp2.log
[ "$PHASE" = g ] && for f in $R/tpc/*_bench.log; do echo "== $f"; tail -n 6 "$f"; done
for f in $R/sb/*.md; do grep -E "\| (bf16|fp8|oracle|policy:[^|]*) \|" "$f" | awk -F'|' '{printf "%-8s %-6s %-28s %s %s\n",$2,$3,$4,$7,$8}' | head -n 60; done
