//! HuggingFace dense families beyond Llama's layout: ungated MLPs, LayerNorm, GPT-2's names,
//! parallel layers; and the older llama-layout families.

#![allow(clippy::unwrap_used)]

use fp8_engine::load_model;
use fp8_engine::model::Norm;

mod common;
use common::{hf_llm, hf_refused_field, write};

#[test]
fn ungated_and_layernorm_families_read_their_mlp_width_and_norm() {
    // Minitron-8B (nemotron: squared ReLU, LayerNorm1P), StarCoder2-15B, Pythia-12B (gpt_neox),
    // Phi-2: one FC1 of intermediate_size, LayerNorm.
    for (t, extra, groups) in [
        (
            "nemotron",
            r#", "num_key_value_heads": 8, "hidden_act": "relu2""#,
            8,
        ),
        (
            "starcoder2",
            r#", "num_key_value_heads": 4, "hidden_act": "gelu_pytorch_tanh""#,
            4,
        ),
        ("gpt_neox", r#", "use_parallel_residual": true"#, 32),
        ("phi", r#", "num_key_value_heads": null"#, 32),
    ] {
        let a = hf_llm(&format!(
            r#"{{"model_type": "{t}", "hidden_size": 4096, "intermediate_size": 16384,
            "num_hidden_layers": 32, "num_attention_heads": 32{extra}}}"#
        ));
        assert!(!a.gated_mlp && a.moe.is_none(), "{t}");
        assert_eq!(a.norm, Norm::LayerNorm, "{t}");
        assert_eq!(
            (a.ffn_hidden_size, a.num_query_groups, a.head_dim),
            (16384, groups, 128),
            "{t}"
        );
    }
    // Cohere's Command R: gated, LayerNorm.
    let a = hf_llm(
        r#"{"model_type": "cohere", "hidden_size": 8192, "intermediate_size": 22528,
        "num_hidden_layers": 40, "num_attention_heads": 64, "num_key_value_heads": 8}"#,
    );
    assert!(a.gated_mlp);
    assert_eq!((a.norm, a.num_query_groups), (Norm::LayerNorm, 8));
}

#[test]
fn gpt2_and_gpt_bigcode_read_by_gpt2s_names() {
    // GPT-2 XL: n_inner null -> 4 x n_embd, MHA; StarCoder (gpt_bigcode): multi_query by default.
    let a = hf_llm(
        r#"{"model_type": "gpt2", "n_embd": 1600, "n_layer": 48, "n_head": 25, "n_inner": null}"#,
    );
    assert_eq!(
        (
            a.num_layers,
            a.hidden_size,
            a.ffn_hidden_size,
            a.num_query_groups,
            a.head_dim
        ),
        (48, 1600, 6400, 25, 64)
    );
    assert!(!a.gated_mlp);
    let a = hf_llm(
        r#"{"model_type": "gpt_bigcode", "n_embd": 6144, "n_layer": 40, "n_head": 48,
        "n_inner": 24576}"#,
    );
    assert_eq!((a.ffn_hidden_size, a.num_query_groups), (24576, 1));
    let a = hf_llm(
        r#"{"model_type": "gpt_bigcode", "n_embd": 6144, "n_layer": 40, "n_head": 48,
        "multi_query": false}"#,
    );
    assert_eq!(a.num_query_groups, 48);
    // A width the heads do not divide is named.
    assert_eq!(
        hf_refused_field(r#"{"model_type": "gpt2", "n_embd": 100, "n_layer": 2, "n_head": 3}"#),
        "n_embd"
    );
}

#[test]
fn a_parallel_layer_is_planned_as_the_sequential_one_and_the_plan_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let parallel = |json: &str| {
        let p = write(&dir, "config.json", json);
        load_model(&p).unwrap().components[0]
            .defaults_applied
            .iter()
            .any(|d| d.contains("in parallel"))
    };
    let neox = |flag: &str| {
        format!(
            r#"{{"model_type": "gpt_neox", "hidden_size": 512, "intermediate_size": 2048,
            "num_hidden_layers": 2, "num_attention_heads": 8{flag}}}"#
        )
    };
    assert!(parallel(&neox("")));
    assert!(!parallel(&neox(r#", "use_parallel_residual": false"#)));
    assert!(parallel(
        r#"{"model_type": "cohere2", "hidden_size": 512, "intermediate_size": 2048,
        "num_hidden_layers": 2, "num_attention_heads": 8}"#
    ));
    assert!(!parallel(
        r#"{"model_type": "starcoder2", "hidden_size": 512, "intermediate_size": 2048,
        "num_hidden_layers": 2, "num_attention_heads": 8}"#
    ));
}

#[test]
fn older_llama_layout_and_layernorm_gated_families_read_as_their_gemms() {
    // InternLM2, Baichuan 2, MiniCPM: llama's layout; StableLM 2 and OLMo: gated, LayerNorm.
    for (t, norm) in [
        ("internlm2", Norm::RmsNorm),
        ("baichuan", Norm::RmsNorm),
        ("minicpm", Norm::RmsNorm),
        ("stablelm", Norm::LayerNorm),
        ("olmo", Norm::LayerNorm),
    ] {
        let a = hf_llm(&format!(
            r#"{{"model_type": "{t}", "hidden_size": 4096, "intermediate_size": 11008,
            "num_hidden_layers": 32, "num_attention_heads": 32}}"#
        ));
        assert!(a.gated_mlp && a.moe.is_none(), "{t}");
        assert_eq!(
            (a.norm, a.num_query_groups, a.ffn_hidden_size),
            (norm, 32, 11008),
            "{t}"
        );
    }
    // StableLM's parallel residual, off by default, said when on.
    let dir = tempfile::tempdir().unwrap();
    let p = write(
        &dir,
        "config.json",
        r#"{"model_type": "stablelm", "hidden_size": 512, "intermediate_size": 1408,
        "num_hidden_layers": 2, "num_attention_heads": 8, "use_parallel_residual": true}"#,
    );
    let m = load_model(&p).unwrap();
    assert!(
        m.components[0]
            .defaults_applied
            .iter()
            .any(|d| d.contains("in parallel"))
    );
    // DeepSeek-MoE (v1): DeepSeek's experts with MHA attention, the first layer dense.
    let a = hf_llm(
        r#"{"model_type": "deepseek", "hidden_size": 2048, "intermediate_size": 10944,
        "moe_intermediate_size": 1408, "n_routed_experts": 64, "n_shared_experts": 2,
        "num_experts_per_tok": 6, "first_k_dense_replace": 1, "moe_layer_freq": 1,
        "num_hidden_layers": 28, "num_attention_heads": 16, "num_key_value_heads": 16}"#,
    );
    let moe = a.moe.unwrap();
    assert_eq!(
        (
            moe.num_experts,
            moe.shared_expert_ffn_hidden_size,
            moe.dense_layers,
            a.mla
        ),
        (64, Some(2816), 1, None)
    );
}

#[test]
fn chatglm_reads_its_own_names() {
    // GLM-4-9B-chat's config.json: two key/value groups, a gated MLP, RMSNorm.
    let glm = r#""model_type": "chatglm", "num_layers": 40, "hidden_size": 4096,
        "ffn_hidden_size": 13696, "kv_channels": 128, "num_attention_heads": 32"#;
    let a = hf_llm(&format!(
        r#"{{{glm}, "multi_query_attention": true, "multi_query_group_num": 2, "rmsnorm": true}}"#
    ));
    assert_eq!(
        (
            a.num_layers,
            a.ffn_hidden_size,
            a.num_query_groups,
            a.head_dim,
            a.norm,
            a.gated_mlp
        ),
        (40, 13696, 2, 128, Norm::RmsNorm, true)
    );
    let a = hf_llm(&format!(r#"{{{glm}, "rmsnorm": false}}"#));
    assert_eq!((a.num_query_groups, a.norm), (32, Norm::LayerNorm));
    assert_eq!(
        hf_refused_field(&format!(r#"{{{glm}, "multi_query_attention": true}}"#)),
        "multi_query_group_num"
    );
}

#[test]
fn falcon_reads_its_kv_heads_and_parallel_layers() {
    // Falcon-180B (new decoder architecture: 8 key/value heads), Falcon-7B (multi-query: one),
    // both with attention and MLP in parallel; the MLP 4 x width unless said.
    let a = hf_llm(
        r#"{"model_type": "falcon", "hidden_size": 14848, "num_attention_heads": 232,
        "num_hidden_layers": 80, "new_decoder_architecture": true, "num_kv_heads": 8}"#,
    );
    assert_eq!(
        (
            a.num_query_groups,
            a.head_dim,
            a.ffn_hidden_size,
            a.gated_mlp,
            a.norm
        ),
        (8, 64, 59392, false, Norm::LayerNorm)
    );
    let dir = tempfile::tempdir().unwrap();
    let p = write(
        &dir,
        "config.json",
        r#"{"model_type": "falcon", "hidden_size": 4544, "n_head": 71, "n_layer": 32,
        "multi_query": true, "parallel_attn": true, "ffn_hidden_size": 18176}"#,
    );
    let c = &load_model(&p).unwrap().components[0];
    assert_eq!(
        (c.arch.num_query_groups, c.arch.ffn_hidden_size),
        (1, 18176)
    );
    assert!(c.defaults_applied.iter().any(|d| d.contains("in parallel")));
    let no_kv_heads = r#"{"model_type": "falcon", "hidden_size": 1024,
        "num_attention_heads": 8, "num_hidden_layers": 2, "new_decoder_architecture": true}"#;
    assert_eq!(hf_refused_field(no_kv_heads), "num_kv_heads");
}
