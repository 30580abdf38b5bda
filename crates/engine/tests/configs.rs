//! Config readers: every fixture loads, YAML and HF forms agree, and bad configs name the field.

#![allow(clippy::unwrap_used)]

use std::path::PathBuf;

use fp8_engine::model::{Moe, Norm};
use fp8_engine::{ConfigError, Role, load_model};

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

fn write(dir: &tempfile::TempDir, name: &str, text: &str) -> PathBuf {
    let p = dir.path().join(name);
    if let Some(parent) = p.parent() {
        std::fs::create_dir_all(parent).unwrap();
    }
    std::fs::write(&p, text).unwrap();
    p
}

fn field_error(e: ConfigError) -> (String, String) {
    match e {
        ConfigError::Field { field, problem, .. } => (field, problem),
        other => panic!("expected a field error, got {other}"),
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
        r#"{"model_type": "gpt_neox", "architectures": []}"#,
    );
    let (f, problem) = field_error(load_model(&p).unwrap_err());
    assert_eq!(f, "model_type");
    assert!(problem.contains("gpt_neox"));
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

/// The LLM arch of one HF config.
fn hf_llm(json: &str) -> fp8_engine::model::Arch {
    let dir = tempfile::tempdir().unwrap();
    let p = write(&dir, "config.json", json);
    load_model(&p).unwrap().components[0].arch.clone()
}

#[test]
fn more_hf_families_read_as_their_layouts() {
    // OLMoE: num_experts, and the experts use intermediate_size.
    let a = hf_llm(
        r#"{"model_type": "olmoe", "hidden_size": 2048, "intermediate_size": 1024,
        "num_hidden_layers": 16, "num_attention_heads": 16, "num_key_value_heads": 16,
        "num_experts": 64, "num_experts_per_tok": 8}"#,
    );
    let moe = a.moe.unwrap();
    assert_eq!(
        (moe.num_experts, moe.moe_ffn_hidden_size, moe.router_topk),
        (64, 1024, 8)
    );
    assert_eq!(
        (moe.dense_layers, moe.shared_expert_ffn_hidden_size),
        (0, None)
    );
    // GLM-4.5: DeepSeek's experts (shared = n_shared x moe size, first dense layers), GQA
    // attention with its own head_dim, no MLA.
    let a = hf_llm(
        r#"{"model_type": "glm4_moe", "hidden_size": 5120, "intermediate_size": 12288,
        "moe_intermediate_size": 1536, "num_hidden_layers": 92, "num_attention_heads": 96,
        "num_key_value_heads": 8, "head_dim": 128, "n_routed_experts": 160,
        "n_shared_experts": 1, "num_experts_per_tok": 8, "first_k_dense_replace": 3}"#,
    );
    let moe = a.moe.unwrap();
    assert!(a.mla.is_none());
    assert_eq!(
        (a.head_dim, a.num_query_groups, a.ffn_hidden_size),
        (128, 8, 12288)
    );
    assert_eq!(
        (
            moe.num_experts,
            moe.moe_ffn_hidden_size,
            moe.shared_expert_ffn_hidden_size,
            moe.dense_layers
        ),
        (160, 1536, Some(1536), 3)
    );
    // Gemma 2: hidden_activation (GeGLU, gated), head_dim wider than hidden / heads.
    let a = hf_llm(
        r#"{"model_type": "gemma2", "hidden_size": 3584, "intermediate_size": 14336,
        "num_hidden_layers": 42, "num_attention_heads": 16, "num_key_value_heads": 8,
        "head_dim": 256, "hidden_activation": "gelu_pytorch_tanh"}"#,
    );
    assert!(a.gated_mlp && a.moe.is_none());
    assert_eq!((a.head_dim, a.num_attention_heads), (256, 16));
    // Granite MoE: Mixtral's fields.
    let a = hf_llm(
        r#"{"model_type": "granitemoe", "hidden_size": 1024, "intermediate_size": 512,
        "num_hidden_layers": 24, "num_attention_heads": 16, "num_key_value_heads": 8,
        "num_local_experts": 32, "num_experts_per_tok": 8}"#,
    );
    assert_eq!(a.moe.unwrap().num_experts, 32);
    // Gemma 3 (VLM): the LLM from text_config, the SigLIP ViT (ungated) from vision_config.
    let dir = tempfile::tempdir().unwrap();
    let p = write(
        &dir,
        "config.json",
        r#"{"model_type": "gemma3", "text_config": {"hidden_size": 2560,
        "intermediate_size": 10240, "num_hidden_layers": 34, "num_attention_heads": 8,
        "num_key_value_heads": 4, "head_dim": 256, "hidden_activation": "gelu_pytorch_tanh"},
        "vision_config": {"hidden_size": 1152, "intermediate_size": 4304,
        "num_hidden_layers": 27, "num_attention_heads": 16}}"#,
    );
    let m = load_model(&p).unwrap();
    assert_eq!(m.components.len(), 2);
    assert!(m.components[0].arch.gated_mlp && !m.components[1].arch.gated_mlp);
    // A family with another MLP layout is refused by name.
    let p = write(
        &dir,
        "s.json",
        r#"{"model_type": "starcoder2", "hidden_size": 64, "intermediate_size": 256,
        "num_hidden_layers": 2, "num_attention_heads": 4}"#,
    );
    let (f, problem) = field_error(load_model(&p).unwrap_err());
    assert!(f == "model_type" && problem.contains("starcoder2"));
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
fn a_forks_model_type_is_read_by_its_architectures_class_and_says_so() {
    // Kimi K2's config.json: model_type `kimi_k2`, the class DeepseekV3ForCausalLM.
    let dir = tempfile::tempdir().unwrap();
    let p = write(
        &dir,
        "kimi_k2.json",
        r#"{"model_type": "kimi_k2", "architectures": ["DeepseekV3ForCausalLM"],
        "hidden_size": 7168, "intermediate_size": 18432, "moe_intermediate_size": 2048,
        "n_routed_experts": 384, "n_shared_experts": 1, "num_experts_per_tok": 8,
        "first_k_dense_replace": 1, "num_hidden_layers": 61, "num_attention_heads": 64,
        "num_key_value_heads": 64, "q_lora_rank": 1536, "kv_lora_rank": 512,
        "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128}"#,
    );
    let m = load_model(&p).unwrap();
    let a = &m.components[0].arch;
    let moe = a.moe.unwrap();
    assert!(a.mla.is_some());
    assert_eq!(
        (moe.num_experts, moe.router_topk, moe.dense_layers),
        (384, 8, 1)
    );
    let said = &m.components[0].defaults_applied;
    assert!(
        said.iter().any(|d| d.contains("kimi_k2")
            && d.contains("deepseek_v3")
            && d.contains("DeepseekV3ForCausalLM")),
        "{said:?}"
    );
    // A known model_type is read as itself, with no such note.
    let own = hf_llm(
        r#"{"model_type": "llama", "architectures": ["MixtralForCausalLM"], "hidden_size": 64,
        "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4}"#,
    );
    assert!(own.moe.is_none());
    // An unknown class names what it read.
    let p = write(
        &dir,
        "foo.json",
        r#"{"model_type": "foo", "architectures": ["FooForCausalLM"]}"#,
    );
    let (f, problem) = field_error(load_model(&p).unwrap_err());
    assert_eq!(f, "model_type");
    assert!(problem.contains("FooForCausalLM"), "{problem}");
}

#[test]
fn mistral_small_3_1_reads_its_language_model_and_pixtrals_gated_vit() {
    let dir = tempfile::tempdir().unwrap();
    let p = write(
        &dir,
        "config.json",
        r#"{"model_type": "mistral3", "architectures": ["Mistral3ForConditionalGeneration"],
        "text_config": {"model_type": "mistral", "hidden_size": 5120, "intermediate_size": 32768,
          "num_hidden_layers": 40, "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128},
        "vision_config": {"model_type": "pixtral", "hidden_size": 1024, "intermediate_size": 4096,
          "num_hidden_layers": 24, "num_attention_heads": 16, "head_dim": 64, "hidden_act": "silu"}}"#,
    );
    let m = load_model(&p).unwrap();
    let (llm, vit) = (&m.components[0].arch, &m.components[1].arch);
    assert_eq!(
        (llm.hidden_size, llm.num_query_groups, llm.head_dim),
        (5120, 8, 128)
    );
    assert_eq!(
        (vit.num_layers, vit.head_dim, vit.gated_mlp),
        (24, 64, true)
    );
}

#[test]
fn qwen2_vl_and_qwen2_5_vl_read_their_language_model_from_the_top_and_their_vit_by_its_own_names() {
    let dir = tempfile::tempdir().unwrap();
    let llm = r#""hidden_size": 3584, "intermediate_size": 18944, "num_attention_heads": 28,
        "num_hidden_layers": 28, "num_key_value_heads": 4"#;
    // Qwen2.5-VL: a gated ViT (silu), width hidden_size.
    let p = write(
        &dir,
        "qwen2_5_vl.json",
        &format!(
            r#"{{"model_type": "qwen2_5_vl", {llm}, "vision_config": {{"depth": 32,
            "hidden_act": "silu", "hidden_size": 1280, "intermediate_size": 3420, "num_heads": 16,
            "out_hidden_size": 3584}}}}"#
        ),
    );
    let m = load_model(&p).unwrap();
    let (l, v) = (&m.components[0].arch, &m.components[1].arch);
    assert_eq!(
        (l.hidden_size, l.num_query_groups, l.head_dim),
        (3584, 4, 128)
    );
    assert_eq!(
        (
            v.num_layers,
            v.hidden_size,
            v.ffn_hidden_size,
            v.head_dim,
            v.gated_mlp
        ),
        (32, 1280, 3420, 80, true)
    );
    // Qwen2-VL: the ViT's width is embed_dim (its hidden_size is the LLM's), its MLP mlp_ratio x it.
    let p = write(
        &dir,
        "qwen2_vl.json",
        &format!(
            r#"{{"model_type": "qwen2_vl", {llm}, "vision_config": {{"depth": 32,
            "embed_dim": 1280, "mlp_ratio": 4, "num_heads": 16, "hidden_size": 3584}}}}"#
        ),
    );
    let v = load_model(&p).unwrap().components[1].arch.clone();
    assert_eq!(
        (v.hidden_size, v.ffn_hidden_size, v.gated_mlp),
        (1280, 5120, false)
    );
    // Without the LLM's fields at the top nor a text_config, the missing field is named.
    let p = write(
        &dir,
        "bare.json",
        r#"{"model_type": "qwen2_5_vl", "vision_config": {"depth": 2, "hidden_size": 64,
        "intermediate_size": 128, "num_heads": 4}}"#,
    );
    assert_eq!(
        field_error(load_model(&p).unwrap_err()).0,
        "num_hidden_layers"
    );
}

#[test]
fn llama4_and_gpt_oss_read_as_their_moe_layouts() {
    // Llama 4 Maverick's language model: MoE every second layer (128 experts, top-1, one shared
    // expert, all 8192 wide), dense layers 16384 wide.
    let a = hf_llm(
        r#"{"model_type": "llama4_text", "hidden_size": 5120, "intermediate_size": 8192,
        "intermediate_size_mlp": 16384, "num_local_experts": 128, "num_experts_per_tok": 1,
        "interleave_moe_layer_step": 2, "num_hidden_layers": 48, "num_attention_heads": 40,
        "num_key_value_heads": 8, "head_dim": 128}"#,
    );
    let moe = a.moe.unwrap();
    assert_eq!(a.ffn_hidden_size, 16384);
    assert_eq!(
        (
            moe.num_experts,
            moe.moe_ffn_hidden_size,
            moe.router_topk,
            moe.shared_expert_ffn_hidden_size,
            moe.dense_layers
        ),
        (128, 8192, 1, Some(8192), 24)
    );
    // gpt-oss: Mixtral's layout (experts of intermediate_size in every layer).
    let a = hf_llm(
        r#"{"model_type": "gpt_oss", "hidden_size": 2880, "intermediate_size": 2880,
        "num_local_experts": 128, "num_experts_per_tok": 4, "num_hidden_layers": 36,
        "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 64, "hidden_act": "silu"}"#,
    );
    let moe = a.moe.unwrap();
    assert_eq!(
        (
            moe.num_experts,
            moe.moe_ffn_hidden_size,
            moe.router_topk,
            moe.dense_layers,
            a.head_dim
        ),
        (128, 2880, 4, 0, 64)
    );
    // Scout: every layer MoE.
    let a = hf_llm(
        r#"{"model_type": "llama4_text", "hidden_size": 5120, "intermediate_size": 8192,
        "intermediate_size_mlp": 16384, "num_local_experts": 16, "num_experts_per_tok": 1,
        "interleave_moe_layer_step": 1, "num_hidden_layers": 48, "num_attention_heads": 40,
        "num_key_value_heads": 8, "head_dim": 128}"#,
    );
    assert_eq!(a.moe.unwrap().dense_layers, 0);
}
