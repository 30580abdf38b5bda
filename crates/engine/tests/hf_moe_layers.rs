//! Which layers of a HuggingFace MoE config are sparse: each family's own rule, counted.

#![allow(clippy::unwrap_used)]

mod common;
use common::{hf_llm, hf_refused_field};

const DEEPSEEK: &str = r#""model_type": "deepseek_v3", "hidden_size": 1024, "intermediate_size": 4096,
    "moe_intermediate_size": 512, "n_routed_experts": 16, "n_shared_experts": 1,
    "num_experts_per_tok": 4, "num_hidden_layers": 12, "num_attention_heads": 8,
    "q_lora_rank": 256, "kv_lora_rank": 128, "qk_nope_head_dim": 64, "qk_rope_head_dim": 32,
    "v_head_dim": 64"#;

#[test]
fn deepseek_layers_are_moe_from_first_k_dense_replace_every_moe_layer_freq() {
    // 12 layers, first 3 dense, then layer i MoE where i % freq == 0: freq 1 -> 9 MoE; freq 2
    // -> 4, 6, 8, 10 MoE (8 dense); freq 5 -> 5, 10 (10 dense).
    for (freq, dense) in [
        ("", 3),
        (r#", "moe_layer_freq": 1"#, 3),
        (r#", "moe_layer_freq": 2"#, 8),
        (r#", "moe_layer_freq": 5"#, 10),
    ] {
        let a = hf_llm(&format!(
            r#"{{{DEEPSEEK}, "first_k_dense_replace": 3{freq}}}"#
        ));
        assert_eq!(a.moe.unwrap().dense_layers, dense, "{freq}");
    }
}

const LLAMA4: &str = r#""model_type": "llama4_text", "hidden_size": 1024, "intermediate_size": 2048,
    "intermediate_size_mlp": 4096, "num_local_experts": 16, "num_experts_per_tok": 1,
    "num_hidden_layers": 8, "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 128"#;

#[test]
fn llama4_moe_layers_as_listed_else_every_interleave_step() {
    // The list transformers saves wins over the step it was made from.
    let a = hf_llm(&format!(
        r#"{{{LLAMA4}, "interleave_moe_layer_step": 2, "moe_layers": [0, 1, 2]}}"#
    ));
    assert_eq!(a.moe.unwrap().dense_layers, 5);
    let a = hf_llm(&format!(
        r#"{{{LLAMA4}, "interleave_moe_layer_step": 2, "moe_layers": null}}"#
    ));
    assert_eq!(a.moe.unwrap().dense_layers, 4);
    // An index past the model, or not a list: named.
    for bad in [r#"[1, 8]"#, r#"[-1]"#, r#""1,3""#] {
        assert_eq!(
            hf_refused_field(&format!(r#"{{{LLAMA4}, "moe_layers": {bad}}}"#)),
            "moe_layers",
            "{bad}"
        );
    }
}

const QWEN_MOE: &str = r#""model_type": "qwen3_moe", "hidden_size": 1024, "intermediate_size": 4096,
    "moe_intermediate_size": 256, "num_experts": 16, "num_experts_per_tok": 4,
    "num_hidden_layers": 8, "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 128"#;

#[test]
fn qwen_moe_layers_every_sparse_step_unless_mlp_only() {
    // 8 layers, step 2: layers 1, 3, 5, 7 sparse. mlp_only [1, 2, 2]: layer 1 dense too (2 was
    // dense already, and a repeat is one layer) -> 5 dense.
    for (extra, dense) in [
        (r#""decoder_sparse_step": 2"#, 4),
        (
            r#""decoder_sparse_step": 2, "mlp_only_layers": [1, 2, 2]"#,
            5,
        ),
        (r#""decoder_sparse_step": 1, "mlp_only_layers": [0, 7]"#, 2),
        (r#""mlp_only_layers": []"#, 0),
    ] {
        let a = hf_llm(&format!(r#"{{{QWEN_MOE}, {extra}}}"#));
        assert_eq!(a.moe.unwrap().dense_layers, dense, "{extra}");
    }
    assert_eq!(
        hf_refused_field(&format!(r#"{{{QWEN_MOE}, "mlp_only_layers": [9]}}"#)),
        "mlp_only_layers"
    );
}
