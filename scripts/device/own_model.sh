#!/usr/bin/env bash
# A new user's path on the H200, for two models written here from public dimensions (in no
# fixture of the repository): the plain `fp8sel gen-policy --model M --tp 1` (on a GPU with TE
# it measures this machine's host profile first), `fp8sel check`, then the Megatron judge
# (upstream GPTModel, eager steps, 21 interleaved rounds, 2 layers) of that policy against BF16
# and all-FP8 at 1536, 3072 and 6144 tokens: counts the default sweep (1024-16384 in powers of two)
# made no policy at.
# After the TE install (../shared/tools/te-device), one call per phase, back to back:
#   bash scripts/device/own_model.sh gen      # both policies (+ the judge of the dense model)
#   bash scripts/device/own_model.sh moe      # the judge of the MoE model
#   bash scripts/device/own_model.sh graphed  # both judged in CUDA-graphed steps (2 layers; the
#                                             # dense at 1536-6144, the MoE at 1536 and 3072), with
#                                             # the policies of `gen` carried in devcarry/own_model/
#   bash scripts/device/own_model.sh script   # a Megatron-LM launch script (Mistral-NeMo-12B's
#       public dimensions, TP 1, 4096 tokens) as the model: the plain `fp8sel gen-policy --model
#       train.sh` (no --tp: the script's TP first, the others while --time-limit lasts), then
#       `te-precision-config --model train.sh` and the judge at counts no policy was made at
#   bash scripts/device/own_model.sh heldout  # today's default (the step model) for both models,
#       then the dense one judged eager and graphed at 3072 and 6144 (2 layers, 21 rounds)
#   bash scripts/device/own_model.sh heldout-moe  # the MoE's judged the same way (the policy
#       `heldout` made on this machine, else devcarry/own_model/), after the dense one's
#       judges that `heldout` had no time left for (BUDGET=S: the call's seconds, 585 by default)
#   bash scripts/device/own_model.sh glm      # GLM-4.5-Air's public dimensions (128 experts, top-8,
#       a shared expert, its first layer dense) at TP 1 EP 8: the plain `fp8sel gen-policy --tp 1
#       --ep 8`, `check`, then `glm-judge` in the next call: the judge at 3072 and 6144, eager and
#       graphed (2 MoE layers, 21 rounds)
#   bash scripts/device/own_model.sh q3moe    # Qwen3-30B-A3B's public dimensions (128 experts of
#       768, top-8, no shared expert) the same way, then `q3moe-judge` in the next call
#   bash scripts/device/own_model.sh mx22     # Mixtral-8x22B's public dimensions (8 experts of
#       16384, top-2: experts large enough for FP8 to pay, where the others' stay BF16) the same
#       way at EP 4, then `mx22-judge` in the next call
#   bash scripts/device/own_model.sh script-graphed  # the policy `script` made on this machine,
#       else the committed one (docs/device-logs/own_model/script/policies/), judged in
#       CUDA-graphed steps at 3072 and 6144, and eager at 4608, 21 rounds
# Carries devcarry/ (fp8sel, the wheel) and .te/mc. Writes $OUT/<phase>.tar.gz (with steps.txt: each
# run's rc and seconds); prints a table.
set -uo pipefail
phase=${1:?gen, moe, graphed, heldout, heldout-moe, glm, glm-judge, q3moe, q3moe-judge, mx22, mx22-judge, script or script-graphed}
OUT=${OUT:-/tmp/out}
W=/tmp/om
mkdir -p "$W" "$OUT"
. scripts/device/te_env.sh
te_env "$W" > /dev/null

# Qwen2.5-14B (dense, GQA) and Qwen1.5-MoE-A2.7B (60 experts, top-4, a shared expert), from
# their public config.json dimensions.
mkdir -p "$W/Qwen2.5-14B" "$W/Qwen1.5-MoE-A2.7B"
cat > "$W/Qwen2.5-14B/config.json" <<'EOF'
{"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 5120,
 "intermediate_size": 13824, "num_attention_heads": 40, "num_key_value_heads": 8,
 "num_hidden_layers": 48, "vocab_size": 152064, "hidden_act": "silu", "rms_norm_eps": 1e-06}
EOF
cat > "$W/Qwen1.5-MoE-A2.7B/config.json" <<'EOF'
{"architectures": ["Qwen2MoeForCausalLM"], "model_type": "qwen2_moe", "hidden_size": 2048,
 "intermediate_size": 5632, "moe_intermediate_size": 1408, "shared_expert_intermediate_size": 5632,
 "num_experts": 60, "num_experts_per_tok": 4, "num_attention_heads": 16, "num_key_value_heads": 16,
 "num_hidden_layers": 24, "vocab_size": 151936, "hidden_act": "silu", "rms_norm_eps": 1e-06}
EOF

# The MoE models judged at TP 1 (their phase, then <phase>-judge in the next call), and their EP:
# 8, but Mixtral's 4 (its 8 experts at EP 8 are one a rank, which the one-GPU judge cannot build:
# Megatron needs two, and top-2 distinct ones; the judge refuses it).
declare -A MOE=([glm]=GLM-4.5-Air [q3moe]=Qwen3-30B-A3B [mx22]=Mixtral-8x22B)
declare -A MOE_EP=([glm]=8 [q3moe]=8 [mx22]=4)
# Judged on 2 layers, Mixtral's on 1: its judge holds four GPTModels (BF16, all-FP8, the hook, native)
# of two 16384-wide experts a layer, with their Adam state: about 100 GB at 2 layers.
declare -A MOE_LAYERS=([mx22]=1)
mkdir -p "$W/GLM-4.5-Air" "$W/Qwen3-30B-A3B" "$W/Mixtral-8x22B"
cat > "$W/GLM-4.5-Air/config.json" <<'EOF'
{"architectures": ["Glm4MoeForCausalLM"], "model_type": "glm4_moe", "hidden_size": 4096,
 "intermediate_size": 10944, "moe_intermediate_size": 1408, "num_attention_heads": 96,
 "num_key_value_heads": 8, "head_dim": 128, "num_hidden_layers": 46, "n_routed_experts": 128,
 "n_shared_experts": 1, "num_experts_per_tok": 8, "first_k_dense_replace": 1,
 "vocab_size": 151552, "attention_bias": true, "hidden_act": "silu", "rms_norm_eps": 1e-05}
EOF
cat > "$W/Qwen3-30B-A3B/config.json" <<'EOF'
{"architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "hidden_size": 2048,
 "intermediate_size": 6144, "moe_intermediate_size": 768, "num_experts": 128,
 "num_experts_per_tok": 8, "decoder_sparse_step": 1, "mlp_only_layers": [], "norm_topk_prob": true,
 "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128, "num_hidden_layers": 48,
 "vocab_size": 151936, "hidden_act": "silu", "rms_norm_eps": 1e-06}
EOF
cat > "$W/Mixtral-8x22B/config.json" <<'EOF'
{"architectures": ["MixtralForCausalLM"], "model_type": "mixtral", "hidden_size": 6144,
 "intermediate_size": 16384, "num_local_experts": 8, "num_experts_per_tok": 2,
 "num_attention_heads": 48, "num_key_value_heads": 8, "num_hidden_layers": 56,
 "vocab_size": 32768, "hidden_act": "silu", "rms_norm_eps": 1e-05}
EOF

gen() {  # name[, timeout]: the plain command, timed, then check at the judged layout
  # GEN_ARGS: more gen-policy flags, CHECK_ARGS: check's layout, SEQ: check's sequence length
  local m=$1 t=${2:-300}
  cd "$W" || exit 1
  local t0=$SECONDS
  # shellcheck disable=SC2086  # GEN_ARGS, CHECK_ARGS: flags, split into words
  timeout "$t" "$FP8SEL" gen-policy --model "$m/config.json" --tp 1 ${GEN_ARGS:-} > "gen_$m.log" 2>&1
  echo "gen $m rc=$? $((SECONDS - t0)) s" | tee -a steps.txt  # in the tarball if the output is cut
  grep -E "note: eager|warning|held-out|error" "gen_$m.log" | cut -c1-220
  # shellcheck disable=SC2086
  "$FP8SEL" check --model "$m/config.json" --policy "policies/$m.json" --seq-length "${SEQ:-2048}" \
    ${CHECK_ARGS:-} > "check_$m.log" 2>&1
  echo "check $m rc=$?"
  cd - > /dev/null || exit 1
}
judge() {  # name, timeout, layers[, execution[, counts[, prefix]]]
  local m=$1 t=$2 layers=$3 ex=${4:-eager} pre=${6:-judge}
  # `judge_<model>[_<execution>]` (eager unnamed, as the committed logs), `hj_<model>_<execution>`
  local tag=$m tokens=${5:-1536,3072,6144} t0=$SECONDS; [ "$ex" = eager ] && [ "$pre" = judge ] || tag=${m}_$ex
  [ "$t" -gt 30 ] || { echo "judge $tag: no time left in this call" | tee -a "$W/steps.txt"; return; }
  # shellcheck disable=SC2086  # JUDGE_ARGS: more step_bench flags (a layout), split into words
  timeout "$t" python3 -m adaptive_fp8.bench.step_bench --trainer megatron --model "$W/$m/config.json" \
    --policy "$W/policies/$m.json" --tokens "$tokens" --execution "$ex" --layers "$layers" ${JUDGE_ARGS:-} \
    --repeats 21 --json "$W/${pre}_$tag.json" --md "$W/${pre}_$tag.md" > "$W/${pre}_$tag.log" 2>&1
  echo "judge $tag rc=$? $((SECONDS - t0)) s" | tee -a "$W/steps.txt"
  grep -E "differ from fp8sel explain|Error" "$W/${pre}_$tag.log" | head -5
  cp "$W/${pre}_$tag.md" "$W/${pre}_$tag.json" "$OUT/" 2>/dev/null  # back even if the call is cut
}
launch_script() {  # a Megatron-LM launch script from Mistral-NeMo-12B's public dimensions
  mkdir -p "$W/Mistral-NeMo-12B"
  cat > "$W/Mistral-NeMo-12B/train.sh" <<'EOF'
#!/bin/bash
# Mistral-NeMo-12B's dimensions, as a Megatron-LM user launches it (written for this check).
TP=1
SEQ=${SEQ_LEN:-4096}
MODEL_ARGS=(
    --num-layers 40 --hidden-size 5120 --ffn-hidden-size 14336
    --num-attention-heads 32 --group-query-attention --num-query-groups 8 --kv-channels 128
    --swiglu --normalization RMSNorm --disable-bias-linear --untie-embeddings-and-output-weights
    --seq-length $SEQ --max-position-embeddings $SEQ
)
PARALLEL_ARGS=(--tensor-model-parallel-size $TP --sequence-parallel --micro-batch-size 1)
torchrun --nproc_per_node 8 pretrain_gpt.py "${MODEL_ARGS[@]}" "${PARALLEL_ARGS[@]}" \
    --fp8-format e4m3 --fp8-recipe blockwise --save "${CKPT:-ckpt}"
EOF
}
hj() {  # name, timeout, execution: counts no policy was made at, LAYERS (2)
  judge "$1" "$2" "${LAYERS:-2}" "$3" 3072,6144 hj
}
case $phase in
heldout)
  gen Qwen2.5-14B
  gen Qwen1.5-MoE-A2.7B
  # What the call has left (600 s): a judge that cannot finish is left to `heldout-moe`'s call.
  for ex in eager graphed; do
    if [ $SECONDS -lt 420 ]; then hj Qwen2.5-14B $((570 - SECONDS)) "$ex"; else echo "judge Qwen2.5-14B $ex: next call"; fi
  done
  ;;
heldout-moe)
  mkdir -p "$W/policies"
  [ -f "$W/policies/Qwen1.5-MoE-A2.7B.json" ] || cp devcarry/own_model/*.json "$W/policies/" 2>/dev/null ||
    { echo "heldout-moe: no Qwen1.5-MoE-A2.7B policy: run \`heldout\` on this machine first, or carry devcarry/own_model/" >&2; exit 2; }
  for ex in eager graphed; do  # the dense one's judges `heldout` left, then the MoE's
    [ -f "$W/policies/Qwen2.5-14B.json" ] && [ ! -f "$W/hj_Qwen2.5-14B_$ex.md" ] && hj Qwen2.5-14B 150 "$ex"
  done
  # BUDGET: the seconds this call may take (585 of a 600 s call; less where less device time is left).
  hj Qwen1.5-MoE-A2.7B $(( (${BUDGET:-585} - SECONDS) / 2 )) eager
  hj Qwen1.5-MoE-A2.7B $(( ${BUDGET:-585} - SECONDS )) graphed
  ;;
script)
  launch_script
  cd "$W" || exit 1
  t0=$SECONDS
  timeout 450 "$FP8SEL" gen-policy --model Mistral-NeMo-12B/train.sh --time-limit 420 > gen_script.log 2>&1
  echo "gen script rc=$? $((SECONDS - t0)) s"
  grep -E "the config's tensor_model_parallel_size|left out|not modelled|warning" gen_script.log | cut -c1-220
  "$FP8SEL" te-precision-config --model Mistral-NeMo-12B/train.sh --policy policies/Mistral-NeMo-12B.json \
    --output te_precision.yaml > te_config.log 2>&1
  echo "te-precision-config rc=$?"; head -3 te_config.log
  cd - > /dev/null || exit 1
  timeout 120 python3 -m adaptive_fp8.bench.step_bench --trainer megatron --model "$W/Mistral-NeMo-12B/train.sh" \
    --policy "$W/policies/Mistral-NeMo-12B.json" --tokens 3072,6144 --execution eager --layers 2 --repeats 21 \
    --json "$W/judge_script.json" --md "$W/judge_script.md" > "$W/judge_script.log" 2>&1
  echo "judge script rc=$?"
  cp "$W"/judge_script.* "$OUT/" 2>/dev/null
  ;;
script-graphed)
  launch_script
  # The policy `script` made on this machine, else the committed one (H200).
  pol=$W/policies/Mistral-NeMo-12B.json
  [ -f "$pol" ] || pol=docs/device-logs/own_model/script/policies/Mistral-NeMo-12B.json
  [ -f "$pol" ] || { echo "script-graphed: no Mistral-NeMo-12B policy: run \`script\` on this machine first" >&2; exit 2; }
  for ex in graphed:3072,6144 eager:4608; do
    timeout 200 python3 -m adaptive_fp8.bench.step_bench --trainer megatron --model "$W/Mistral-NeMo-12B/train.sh" \
      --policy "$pol" --tokens "${ex#*:}" --execution "${ex%%:*}" --layers 2 --repeats 21 \
      --json "$W/judge_script_${ex%%:*}.json" --md "$W/judge_script_${ex%%:*}.md" > "$W/judge_script_${ex%%:*}.log" 2>&1
    echo "judge script ${ex%%:*} rc=$?"
    cp "$W"/judge_script_"${ex%%:*}".* "$OUT/" 2>/dev/null
  done
  ;;
glm | q3moe | mx22)
  ep=${MOE_EP[$phase]}
  GEN_ARGS="--ep $ep --time-limit 330" CHECK_ARGS="--tp 1 --ep $ep" SEQ=4096 gen "${MOE[$phase]}" 360
  ;;
glm-judge | q3moe-judge | mx22-judge)
  m=${MOE[${phase%-judge}]} ep=${MOE_EP[${phase%-judge}]}
  [ -f "$W/policies/$m.json" ] || { echo "$phase: no policy: run ${phase%-judge} on this machine first" >&2; exit 2; }
  for ex in ${EXECS:-eager graphed}; do  # EXECS=eager: where the call has time for one
    LAYERS=${MOE_LAYERS[${phase%-judge}]:-2} JUDGE_ARGS="--tp 1 --ep $ep" hj "$m" 270 "$ex"
  done
  ;;
gen)
  gen Qwen2.5-14B
  gen Qwen1.5-MoE-A2.7B
  judge Qwen2.5-14B 300 2
  ;;
moe)
  judge Qwen1.5-MoE-A2.7B 500 2
  ;;
graphed)
  mkdir -p "$W/policies"
  cp devcarry/own_model/*.json "$W/policies/"
  # Two layers: four modes' 4-layer 14B models with their graphs ran out of an H100's 80 GB at
  # 2048 (docs/device-logs/h100/own_model/graphed/).
  judge Qwen2.5-14B 240 2 graphed 1536,3072,6144
  judge Qwen1.5-MoE-A2.7B 330 2 graphed 1536,3072
  ;;
esac
tar -C /tmp --exclude='*.svg' -czf "$OUT/$phase.tar.gz" om
for f in "$W"/judge_*.md "$W"/hj_*.md; do [ -f "$f" ] && { echo "== $f"; cut -c1-200 "$f" | head -30; }; done
