//! Config readers: every fixture loads, YAML and HF forms agree, and bad configs name the field.

#![allow(clippy::unwrap_used)]

use std::path::PathBuf;

use fp8_engine::model::{Moe, Norm};
use fp8_engine::{ConfigError, Role, load_model};

mod common;
use common::{field_error, hf_llm, write};

fn fixture(p: &str) -> PathBuf {
    PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../fixtures/models"
    ))
    .join(p)
}

#[test]
fn qwen2_5_72b_yaml() {
    let m = load_model(fixture("qwen2_5_72b.yaml")).unwrap();
    assert_eq!(m.name, "qwen2_5_72b");
    let c = &m.components[0];
    assert_eq!(c.role, Role::Llm);
    let a = &c.arch;
    assert_eq!(
        (a.num_layers, a.hidden_size, a.ffn_hidden_size),
        (80, 8192, 29568)
    );
    assert_eq!(
        (a.num_attention_heads, a.num_query_groups, a.head_dim),
        (64, 8, 128)
    );
    assert!(a.gated_mlp);
    assert_eq!(a.norm, Norm::RmsNorm);
    assert!(a.moe.is_none() && a.mla.is_none());
    assert_eq!(c.recommended.tp, Some(4));
    assert_eq!(c.recommended.seq_length, Some(4096));
}

#[test]
fn deepseek_v3_yaml_moe_and_mla() {
    let m = load_model(fixture("deepseek_v3.yaml")).unwrap();
    let a = &m.components[0].arch;
    assert_eq!(
        a.moe,
        Some(Moe {
            num_experts: 256,
            moe_ffn_hidden_size: 2048,
            router_topk: 8,
            shared_expert_ffn_hidden_size: Some(2048),
            dense_layers: 3
        })
    );
    let mla = a.mla.unwrap();
    assert_eq!(
        (mla.q_lora_rank, mla.kv_lora_rank, mla.qk_pos_emb_head_dim),
        (Some(1536), 512, 64)
    );
    // kv_channels is absent, and unused by MLA: no default is claimed for it.
    assert!(
        !m.components[0]
            .defaults_applied
            .iter()
            .any(|d| d.contains("kv_channels"))
    );
    // Nor for HuggingFace's head_dim, which a DeepSeek config.json leaves out for the same reason.
    let h = load_model(fixture("hf/deepseek_v3.json")).unwrap();
    assert!(h.components[0].arch.mla.is_some());
    let said = &h.components[0].defaults_applied;
    assert!(!said.iter().any(|d| d.contains("head_dim")), "{said:?}");
}

#[test]
fn vlm_yaml_resolves_hydra_defaults_per_component() {
    let m = load_model(fixture("qwen3_vl_235b_a22b.yaml")).unwrap();
    assert_eq!(m.components.len(), 2);
    let llm = m.component(Role::Llm).unwrap();
    let vit = m.component(Role::Vit).unwrap();
    assert_eq!(llm.arch.num_layers, 94);
    assert_eq!(llm.arch.moe.unwrap().num_experts, 128);
    assert_eq!(llm.recommended.ep, Some(8));
    assert_eq!(vit.arch.num_layers, 27);
    assert_eq!((vit.arch.hidden_size, vit.arch.head_dim), (1152, 72));
    assert!(!vit.arch.gated_mlp);
    assert_eq!(vit.arch.norm, Norm::LayerNorm);
}

/// A `sel/` variant: its `../` defaults reach the base configs. With no root given, the search
/// path is the checkout's root (no `configs` ancestor here), which holds them; an explicit
/// `--config-root` of `fixtures/models` reads the same model, and the config's own directory
/// refuses them.
fn sel(name: &str) -> fp8_engine::ModelDesc {
    let path = fixture(&format!("sel/{name}"));
    let own = path.parent().unwrap().to_path_buf();
    let e = fp8_engine::load_model_with(&path, &fp8_engine::LoadOptions::with_config_root(own))
        .unwrap_err();
    assert!(e.to_string().contains("outside the config root"), "{e}");
    let root = path.parent().unwrap().parent().unwrap().to_path_buf();
    let given =
        fp8_engine::load_model_with(&path, &fp8_engine::LoadOptions::with_config_root(root))
            .unwrap();
    // The default search path: in a checkout its root (which holds `fixtures/models`); in a copy
    // without `.git` (a source tarball) the config's own directory, which refuses them as above.
    let in_checkout = path.ancestors().any(|a| a.join(".git").exists());
    match load_model(&path) {
        Ok(m) => {
            assert!(in_checkout, "read outside a checkout");
            assert_eq!(m, given);
        }
        Err(e) => {
            assert!(!in_checkout, "{e}");
            assert!(e.to_string().contains("outside the config root"), "{e}");
        }
    }
    given
}

#[test]
fn selective_fp8_settings_per_component() {
    let m = sel("qwen3_vl_235b_a22b_fp8_sel.yaml");
    let llm = m.component(Role::Llm).unwrap();
    let vit = m.component(Role::Vit).unwrap();
    assert!(llm.fp8.selective_fp8 && vit.fp8.selective_fp8);
    assert_eq!(
        llm.fp8.policy_path.as_deref(),
        Some("policies/qwen3_vl_235b_a22b.llm.json")
    );
    assert_eq!(
        vit.fp8.policy_path.as_deref(),
        Some("policies/qwen3_vl_235b_a22b.vit.json")
    );
    assert_eq!(
        (llm.fp8.num_tokens, vit.fp8.num_tokens),
        (None, Some(16384))
    );
    // Inherited through two levels of defaults.
    assert_eq!(llm.arch.num_layers, 94);
    let d = sel("deepseek_v3_fp8_sel.yaml");
    assert_eq!(d.name, "deepseek_v3");
    assert_eq!(d.components[0].fp8.recipe.as_deref(), Some("blockwise"));
    assert_eq!(d.components[0].arch.moe.unwrap().dense_layers, 3);
}

#[test]
fn yaml_and_hf_forms_describe_the_same_architecture() {
    for (yaml, hf) in [
        ("qwen2_5_72b.yaml", "hf/qwen2_5_72b.json"),
        ("deepseek_v3.yaml", "hf/deepseek_v3.json"),
        ("qwen3_vl_235b_a22b.yaml", "hf/qwen3_vl_235b_a22b.json"),
        ("llama3_2_1b.yaml", "hf/llama3_2_1b.json"),
    ] {
        let y = load_model(fixture(yaml)).unwrap();
        let h = load_model(fixture(hf)).unwrap();
        assert_eq!(y.name, h.name, "{yaml}");
        assert_eq!(y.components.len(), h.components.len(), "{yaml}");
        for (a, b) in y.components.iter().zip(&h.components) {
            assert_eq!(a.role, b.role);
            assert_eq!(a.arch, b.arch, "{yaml} vs {hf} ({})", a.role);
        }
    }
}

#[test]
fn malformed_configs_name_the_file_and_field() {
    let dir = tempfile::tempdir().unwrap();
    let p = write(&dir, "a.yaml", "num_layers: 2\nnum_attention_heads: 4\n");
    let e = load_model(&p).unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.contains("a.yaml") && msg.contains("hidden_size") && msg.contains("fix:"),
        "{msg}"
    );
    let p = write(
        &dir,
        "b.yaml",
        "num_layers: two\nhidden_size: 8\nnum_attention_heads: 2\n",
    );
    assert_eq!(field_error(load_model(&p).unwrap_err()).0, "num_layers");
    let p = write(
        &dir,
        "c.yaml",
        "num_layers: 2\nhidden_size: 8\nnum_attention_heads: 4\nnum_query_groups: 3\n",
    );
    assert_eq!(
        field_error(load_model(&p).unwrap_err()).0,
        "num_query_groups"
    );
    let p = write(
        &dir,
        "d.yaml",
        "num_layers: 2\nhidden_size: 8\nnum_attention_heads: 2\nnormalization: BatchNorm\n",
    );
    assert_eq!(field_error(load_model(&p).unwrap_err()).0, "normalization");
    let p = write(
        &dir,
        "e.yaml",
        "num_layers: 4\nhidden_size: 8\nnum_attention_heads: 2\nnum_moe_experts: 4\nmoe_layer_freq: \"[0]*3\"\n",
    );
    let (f, problem) = field_error(load_model(&p).unwrap_err());
    assert_eq!(f, "moe_layer_freq");
    assert!(problem.contains("3 layers"), "{problem}");
    let p = write(
        &dir,
        "f.yaml",
        "model:\n  foundation:\n    num_layers: 2\n    hidden_size: 0\n    num_attention_heads: 2\n",
    );
    assert_eq!(
        field_error(load_model(&p).unwrap_err()).0,
        "model.foundation.hidden_size"
    );
    let p = write(&dir, "g.yaml", "num_layers: [2\n");
    assert!(matches!(
        load_model(&p).unwrap_err(),
        ConfigError::Syntax { format: "YAML", .. }
    ));
    let p = write(&dir, "h.yaml", "- 1\n- 2\n");
    assert!(load_model(&p).unwrap_err().to_string().contains("mapping"));
    assert!(matches!(
        load_model(dir.path().join("nope.yaml")).unwrap_err(),
        ConfigError::File(_)
    ));
}

#[test]
fn hf_errors() {
    let dir = tempfile::tempdir().unwrap();
    let p = write(
        &dir,
        "x.json",
        r#"{"model_type": "jamba", "architectures": []}"#,
    );
    let (f, problem) = field_error(load_model(&p).unwrap_err());
    assert_eq!(f, "model_type");
    assert!(problem.contains("jamba"));
    let p = write(
        &dir,
        "y.json",
        r#"{"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4}"#,
    );
    assert_eq!(
        field_error(load_model(&p).unwrap_err()).0,
        "intermediate_size"
    );
    let p = write(
        &dir,
        "z.json",
        r#"{"model_type": "qwen3_vl_moe", "text_config": {}, "vision_config": {}}"#,
    );
    assert_eq!(
        field_error(load_model(&p).unwrap_err()).0,
        "text_config.num_hidden_layers"
    );
    let p = write(&dir, "w.json", "{not json");
    assert!(matches!(
        load_model(&p).unwrap_err(),
        ConfigError::Syntax { format: "JSON", .. }
    ));
    // Mixtral: experts use intermediate_size.
    let p = write(
        &dir,
        "mixtral.json",
        r#"{"model_type": "mixtral", "hidden_size": 4096, "intermediate_size": 14336,
        "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
        "num_local_experts": 8, "num_experts_per_tok": 2}"#,
    );
    let m = load_model(&p).unwrap();
    let moe = m.components[0].arch.moe.unwrap();
    assert_eq!(
        (
            moe.num_experts,
            moe.moe_ffn_hidden_size,
            moe.router_topk,
            moe.dense_layers
        ),
        (8, 14336, 2, 0)
    );
}

#[test]
fn hydra_defaults_errors_and_forms() {
    let dir = tempfile::tempdir().unwrap();
    let p = write(
        &dir,
        "a.yaml",
        "defaults:\n  - missing_part\nnum_layers: 2\n",
    );
    let e = load_model(&p).unwrap_err().to_string();
    assert!(
        e.contains("defaults[0]") && e.contains("missing_part"),
        "{e}"
    );
    write(&dir, "loop1.yaml", "defaults:\n  - loop2\n");
    let p = write(&dir, "loop2.yaml", "defaults:\n  - loop1\n");
    assert!(load_model(&p).unwrap_err().to_string().contains("circular"));
    // Group form and self ordering: own values before _self_ are overridden by later entries.
    write(
        &dir,
        "arch/small.yaml",
        "num_layers: 2\nhidden_size: 64\nnum_attention_heads: 4\n",
    );
    let p = write(
        &dir,
        "m.yaml",
        "defaults:\n  - _self_\n  - arch: small\nnum_layers: 99\n",
    );
    assert_eq!(load_model(&p).unwrap().components[0].arch.num_layers, 2);
    let p = write(
        &dir,
        "n.yaml",
        "defaults:\n  - arch: small\n  - _self_\nnum_layers: 99\n",
    );
    assert_eq!(load_model(&p).unwrap().components[0].arch.num_layers, 99);
}

#[test]
fn gated_delta_net_patterns_and_their_errors() {
    let dir = tempfile::tempdir().unwrap();
    let base = "num_layers: 4\nhidden_size: 512\nnum_attention_heads: 4\nffn_hidden_size: 1024\n";
    let heads = "linear_key_head_dim: 64\nlinear_value_head_dim: 64\nlinear_num_key_heads: 2\nlinear_num_value_heads: 4\n";
    // The variant named without a pattern: which layers are full is an error, not a guess.
    let p = write(
        &dir,
        "a.yaml",
        &format!("{base}{heads}experimental_attention_variant: gated_delta_net\n"),
    );
    assert_eq!(
        field_error(load_model(&p).unwrap_err()).0,
        "linear_attention_freq"
    );
    // A pattern list of the wrong length, and an entry that is neither 0 nor 1.
    let gdn = "experimental_attention_variant: gated_delta_net\n";
    let p = write(
        &dir,
        "b.yaml",
        &format!("{base}{heads}{gdn}linear_attention_freq: [1, 0]\n"),
    );
    assert!(
        field_error(load_model(&p).unwrap_err())
            .1
            .contains("2 entries for 4 layers")
    );
    let p = write(
        &dir,
        "c.yaml",
        &format!("{base}{heads}{gdn}linear_attention_freq: [1, 2, 1, 0]\n"),
    );
    assert_eq!(
        field_error(load_model(&p).unwrap_err()).0,
        "linear_attention_freq"
    );
    // Value heads must be a multiple of key heads (Megatron asserts it).
    let p = write(
        &dir,
        "d.yaml",
        &format!(
            "{base}linear_key_head_dim: 64\nlinear_value_head_dim: 64\nlinear_num_key_heads: 3\nlinear_num_value_heads: 4\nfull_attention_interval: 2\n"
        ),
    );
    assert_eq!(
        field_error(load_model(&p).unwrap_err()).0,
        "linear_num_value_heads"
    );
    let no_linear_attention = |name: &str, rest: &str| {
        let p = write(&dir, name, &format!("{base}{heads}{rest}"));
        load_model(&p).unwrap().components[0]
            .arch
            .linear_attention
            .is_none()
    };
    // Every layer full: no linear attention at all.
    assert!(no_linear_attention(
        "e.yaml",
        &format!("{gdn}linear_attention_freq: [0, 0, 0, 0]\n")
    ));
    // Megatron's TransformerConfig carries linear head sizes and a frequency on every model:
    // without the variant they mean nothing.
    assert!(no_linear_attention("g.yaml", "linear_attention_freq: 4\n"));
    // HF Qwen3-Next: layer_types, Qwen-MoE experts with the shared expert, gated attention.
    let a = hf_llm(
        r#"{"model_type": "qwen3_next", "hidden_size": 2048, "intermediate_size": 5120,
        "num_hidden_layers": 4, "num_attention_heads": 16, "num_key_value_heads": 2, "head_dim": 256,
        "num_experts": 512, "moe_intermediate_size": 512, "shared_expert_intermediate_size": 512,
        "num_experts_per_tok": 10, "linear_key_head_dim": 128, "linear_value_head_dim": 128,
        "linear_num_key_heads": 16, "linear_num_value_heads": 32,
        "layer_types": ["linear_attention", "linear_attention", "linear_attention", "full_attention"]}"#,
    );
    let l = a.linear_attention.unwrap();
    assert_eq!((l.full_attention_layers, l.num_value_heads), (1, 32));
    assert!(a.attention_output_gate && a.moe.unwrap().shared_expert_ffn_hidden_size == Some(512));
    // HF Qwen3.5 (VLM): the MoE language model from text_config, with its Gated DeltaNet.
    let dir2 = tempfile::tempdir().unwrap();
    let p = write(
        &dir2,
        "config.json",
        r#"{"model_type": "qwen3_5_moe", "text_config": {"hidden_size": 2048,
        "intermediate_size": 512, "num_hidden_layers": 8, "num_attention_heads": 16,
        "num_key_value_heads": 2, "head_dim": 256, "num_experts": 256, "moe_intermediate_size": 512,
        "num_experts_per_tok": 8, "linear_key_head_dim": 128, "linear_value_head_dim": 128,
        "linear_num_key_heads": 16, "linear_num_value_heads": 32, "full_attention_interval": 4},
        "vision_config": {"depth": 2, "hidden_size": 1152, "num_heads": 16, "intermediate_size": 4304}}"#,
    );
    let m = load_model(&p).unwrap();
    let a = &m.components[0].arch;
    assert_eq!(a.linear_attention.unwrap().full_attention_layers, 2);
    assert!(a.attention_output_gate && a.moe.is_some() && m.components.len() == 2);
    // Gemma 3's layer_types (sliding and full attention) are not a linear-attention pattern.
    let a = hf_llm(
        r#"{"model_type": "gemma3_text", "hidden_size": 1152, "intermediate_size": 6912,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 256,
        "layer_types": ["sliding_attention", "full_attention"]}"#,
    );
    assert!(a.linear_attention.is_none() && !a.attention_output_gate);
}

#[test]
fn nemo_model_configs_read_their_activation_and_encoder_seq_length() {
    // NeMo's megatron_gpt_config.yaml: the model under `model:`, its MLP by `activation`, its
    // sequence by `encoder_seq_length` (Megatron-LM's other name for --seq-length).
    let dir = tempfile::tempdir().unwrap();
    let nemo = |act: &str| {
        format!(
            "trainer:\n  devices: 8\nmodel:\n  tensor_model_parallel_size: 2\n  \
             encoder_seq_length: 8192\n  num_layers: 32\n  hidden_size: 4096\n  \
             ffn_hidden_size: 14336\n  num_attention_heads: 32\n  num_query_groups: 8\n  \
             activation: {act}\n  normalization: rmsnorm\n"
        )
    };
    for (act, gated) in [
        ("fast-swiglu", true),
        ("swiglu", true),
        ("geglu", true),
        ("reglu", true),
        ("gelu", false),
        ("squared-relu", false),
    ] {
        let p = write(&dir, "nemo.yaml", &nemo(act));
        let c = &load_model(&p).unwrap().components[0];
        assert_eq!(c.arch.gated_mlp, gated, "{act}");
        assert_eq!(c.arch.norm, Norm::RmsNorm);
        // Nemotron's NeMo configs: layernorm1p, a LayerNorm.
        let p = write(
            &dir,
            "nemo.yaml",
            &nemo(act).replace("rmsnorm", "layernorm1p"),
        );
        assert_eq!(
            load_model(&p).unwrap().components[0].arch.norm,
            Norm::LayerNorm
        );
        assert_eq!(
            (c.recommended.seq_length, c.recommended.tp),
            (Some(8192), Some(2)),
            "{act}"
        );
    }
}

#[test]
fn megatron_hybrid_stacks_are_refused_by_the_field_that_makes_them() {
    // Nemotron-H's form: a layer pattern (Mamba, attention, MLP layers apart). Read as
    // transformer layers it would plan attention and an MLP in all 52: refused instead.
    let dir = tempfile::tempdir().unwrap();
    let base =
        "num_layers: 52\nhidden_size: 4096\nffn_hidden_size: 21504\nnum_attention_heads: 32\n";
    for (extra, field) in [
        (
            "hybrid_layer_pattern: M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-\n",
            "hybrid_layer_pattern",
        ),
        ("hybrid_override_pattern: M*M*\n", "hybrid_override_pattern"),
        ("hybrid_attention_ratio: 0.08\n", "hybrid_attention_ratio"),
        ("is_hybrid_model: true\n", "is_hybrid_model"),
        (
            "heterogeneous_layers_config_path: llama_nemotron_super.json\n",
            "heterogeneous_layers_config_path",
        ),
    ] {
        let p = write(&dir, "h.yaml", &format!("{base}{extra}"));
        let (f, problem) = field_error(load_model(&p).unwrap_err());
        assert_eq!(f, field);
        assert!(
            problem.contains("hybrid stack") || problem.contains("heterogeneous layers"),
            "{problem}"
        );
    }
    // Unset or empty, the model is a transformer.
    for extra in [
        "hybrid_layer_pattern: null\n",
        "hybrid_override_pattern: ''\n",
        "hybrid_attention_ratio: 0.0\n",
        "is_hybrid_model: false\n",
    ] {
        let p = write(&dir, "h.yaml", &format!("{base}{extra}"));
        assert!(load_model(&p).is_ok(), "{extra}");
    }
}
