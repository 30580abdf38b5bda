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
