"""Tiny HF configs for the step benchmark's CPU stand-in runs, and torch or a skip."""

from __future__ import annotations

import pytest

TINY = {
    "mla_moe": {
        "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "hidden_act": "silu",
        "hidden_size": 128, "intermediate_size": 256, "moe_intermediate_size": 64, "n_routed_experts": 16,
        "n_shared_experts": 1, "num_experts_per_tok": 4, "first_k_dense_replace": 1, "moe_layer_freq": 1,
        "num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 8, "q_lora_rank": 64,
        "kv_lora_rank": 32, "qk_nope_head_dim": 16, "qk_rope_head_dim": 16, "v_head_dim": 16,
        "rms_norm_eps": 1e-6, "vocab_size": 1000,
    },
    "gqa_moe": {
        "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "hidden_act": "silu",
        "hidden_size": 128, "intermediate_size": 256, "moe_intermediate_size": 48, "num_experts": 8,
        "num_experts_per_tok": 2, "num_hidden_layers": 2, "num_attention_heads": 8, "num_key_value_heads": 2,
        "head_dim": 16, "rms_norm_eps": 1e-6, "vocab_size": 1000,
    },
}


def torch_or_skip():
    return pytest.importorskip("torch", reason="skipped: torch not installed (the CPU stand-in run needs it)")
