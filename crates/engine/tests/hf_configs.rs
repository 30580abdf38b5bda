//! HuggingFace families beyond the fixtures: each reads as its layout (MoE forms, VLMs whose
//! language model sits at the top or under `text_config`, a fork's `model_type` read by its
//! `architectures` class).

#![allow(clippy::unwrap_used)]

use fp8_engine::load_model;
use fp8_engine::model::Norm;

mod common;
use common::{field_error, hf_llm, write};

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
    // A family with layers that are not attention and MLP (Mamba's) is refused by name.
    let p = write(
        &dir,
        "s.json",
        r#"{"model_type": "nemotron_h", "hidden_size": 64, "intermediate_size": 256,
        "num_hidden_layers": 2, "num_attention_heads": 4}"#,
    );
    let (f, problem) = field_error(load_model(&p).unwrap_err());
    assert!(f == "model_type" && problem.contains("nemotron_h"));
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

#[test]
fn ernie_dots_and_granite_shared_read_as_their_moe_layouts() {
    // ERNIE-4.5-21B-A3B: MoE in layers 1..=27 (the first dense), two shared experts.
    let ernie = r#"{"model_type": "ernie4_5_moe", "hidden_size": 2560,
        "intermediate_size": 12288, "num_hidden_layers": 28, "num_attention_heads": 20,
        "num_key_value_heads": 4, "moe_num_experts": 64, "moe_k": 6,
        "moe_intermediate_size": 1536, "moe_num_shared_experts": 2,
        "moe_layer_start_index": 1, "moe_layer_end_index": END, "moe_layer_interval": STEP}"#;
    let moe = |end: &str, step: &str| {
        hf_llm(&ernie.replace("END", end).replace("STEP", step))
            .moe
            .unwrap()
    };
    let m = moe("27", "1");
    assert_eq!(
        (
            m.num_experts,
            m.moe_ffn_hidden_size,
            m.router_topk,
            m.shared_expert_ffn_hidden_size,
            m.dense_layers
        ),
        (64, 1536, 6, Some(3072), 1)
    );
    // -1 is the last layer; every second layer from 1: layers 1, 3, .., 27 (14 of 28).
    assert_eq!(moe("-1", "2").dense_layers, 14);
    // An end before the last layer leaves the layers after it dense.
    assert_eq!(moe("13", "1").dense_layers, 15);
    let dir = tempfile::tempdir().unwrap();
    let p = write(
        &dir,
        "config.json",
        &ernie.replace("END", "\"last\"").replace("STEP", "1"),
    );
    let (field, problem) = field_error(load_model(&p).unwrap_err());
    assert_eq!(field, "moe_layer_end_index");
    assert!(problem.contains("not a layer index"), "{problem}");

    // dots.llm1: DeepSeek's experts with GQA attention.
    let a = hf_llm(
        r#"{"model_type": "dots1", "hidden_size": 4096, "intermediate_size": 10944,
        "moe_intermediate_size": 1408, "num_hidden_layers": 62, "num_attention_heads": 32,
        "num_key_value_heads": 32, "n_routed_experts": 128, "n_shared_experts": 2,
        "num_experts_per_tok": 6, "first_k_dense_replace": 1}"#,
    );
    let m = a.moe.unwrap();
    assert!(a.mla.is_none());
    assert_eq!(
        (
            m.num_experts,
            m.shared_expert_ffn_hidden_size,
            m.dense_layers
        ),
        (128, Some(2816), 1)
    );
    // Granite MoE shared: Mixtral's experts and one shared expert.
    let a = hf_llm(
        r#"{"model_type": "granitemoeshared", "hidden_size": 1024, "intermediate_size": 512,
        "shared_intermediate_size": 1024, "num_hidden_layers": 24, "num_attention_heads": 16,
        "num_key_value_heads": 8, "num_local_experts": 32, "num_experts_per_tok": 8}"#,
    );
    assert_eq!(a.moe.unwrap().shared_expert_ffn_hidden_size, Some(1024));
}

#[test]
fn newer_dense_families_read_as_llamas_layout_and_every_mlp_is_gated() {
    for (t, extra) in [
        ("smollm3", ""),
        ("seed_oss", r#", "head_dim": 64"#),
        ("exaone4", ""),
        ("ernie4_5", r#", "head_dim": 64"#),
        ("hunyuan_v1_dense", ""),
        ("olmo3", ""),
        ("glm", ""),
        ("ministral", ""),
        ("helium", ""),
        // An activation the reader has no name for is still a gated MLP in these families.
        ("llama", r#", "hidden_act": "relu""#),
    ] {
        let a = hf_llm(&format!(
            r#"{{"model_type": "{t}", "hidden_size": 2048, "intermediate_size": 11008,
            "num_hidden_layers": 36, "num_attention_heads": 16, "num_key_value_heads": 4{extra}}}"#
        ));
        assert!(a.gated_mlp && a.moe.is_none(), "{t}");
        assert_eq!((a.ffn_hidden_size, a.num_query_groups), (11008, 4), "{t}");
        // head_dim as given, else hidden_size / heads.
        let head_dim = if extra.contains("head_dim") { 64 } else { 128 };
        assert_eq!(a.head_dim, head_dim, "{t}");
    }
}

#[test]
fn a_vlm_that_names_its_language_model_by_text_config_reads_that_family() {
    // InternVL3.5-30B-A3B: a Qwen3-MoE language model under text_config, InternViT (gelu,
    // ungated).
    let dir = tempfile::tempdir().unwrap();
    let vlm = |text_type: &str| {
        format!(
            r#"{{"model_type": "internvl", "text_config": {{"model_type": "{text_type}",
            "hidden_size": 2048, "intermediate_size": 6144, "moe_intermediate_size": 768,
            "num_hidden_layers": 48, "num_attention_heads": 32, "num_key_value_heads": 4,
            "head_dim": 128, "num_experts": 128, "num_experts_per_tok": 8}},
            "vision_config": {{"hidden_size": 1024, "intermediate_size": 4096,
            "num_hidden_layers": 24, "num_attention_heads": 16, "hidden_act": "gelu"}}}}"#
        )
    };
    let p = write(&dir, "config.json", &vlm("qwen3_moe"));
    let m = load_model(&p).unwrap();
    let (llm, vit) = (&m.components[0].arch, &m.components[1].arch);
    assert_eq!(llm.moe.as_ref().unwrap().num_experts, 128);
    assert_eq!((vit.hidden_size, vit.gated_mlp), (1024, false));
    // A dense language model the same way (LLaVA-OneVision's Qwen2).
    let p = write(
        &dir,
        "config.json",
        &vlm("qwen2").replace("internvl", "llava_onevision"),
    );
    assert!(load_model(&p).unwrap().components[0].arch.moe.is_none());
    // The language model's type missing, or not a language model: named at text_config.
    for (text_type, problem) in [("", "missing"), ("gemma3", "not a language model")] {
        let text = vlm(text_type).replace(r#""model_type": "","#, "");
        let p = write(&dir, "config.json", &text);
        let (field, got) = field_error(load_model(&p).unwrap_err());
        assert_eq!(field, "text_config.model_type", "{text_type}");
        assert!(got.contains(problem), "{got}");
    }
}

#[test]
fn minimax_m2_reads_as_mixtrals_layout() {
    let a = hf_llm(
        r#"{"model_type": "minimax_m2", "hidden_size": 3072, "intermediate_size": 1536,
        "num_hidden_layers": 62, "num_attention_heads": 48, "num_key_value_heads": 8,
        "head_dim": 128, "num_local_experts": 256, "num_experts_per_tok": 8}"#,
    );
    let m = a.moe.unwrap();
    assert_eq!(
        (
            m.num_experts,
            m.moe_ffn_hidden_size,
            m.router_topk,
            a.head_dim
        ),
        (256, 1536, 8, 128)
    );
}

#[test]
fn glm_4_5v_reads_deepseeks_experts_and_its_gated_vit() {
    let dir = tempfile::tempdir().unwrap();
    let p = write(
        &dir,
        "config.json",
        r#"{"architectures": ["Glm4vMoeForConditionalGeneration"], "model_type": "glm4v_moe",
        "text_config": {"model_type": "glm4v_moe_text", "hidden_size": 4096,
        "intermediate_size": 10944, "moe_intermediate_size": 1408, "num_hidden_layers": 46,
        "num_attention_heads": 96, "num_key_value_heads": 8, "head_dim": 128,
        "n_routed_experts": 128, "n_shared_experts": 1, "num_experts_per_tok": 8,
        "first_k_dense_replace": 1},
        "vision_config": {"depth": 24, "hidden_size": 1536, "num_heads": 12,
        "intermediate_size": 13696, "hidden_act": "silu"}}"#,
    );
    let m = load_model(&p).unwrap();
    let (llm, vit) = (&m.components[0].arch, &m.components[1].arch);
    let moe = llm.moe.unwrap();
    assert_eq!(
        (
            moe.num_experts,
            moe.shared_expert_ffn_hidden_size,
            moe.dense_layers
        ),
        (128, Some(1408), 1)
    );
    assert_eq!(
        (vit.num_layers, vit.num_attention_heads, vit.gated_mlp),
        (24, 12, true)
    );
}

#[test]
fn deepseek_v3_2_plans_its_mla_and_warns_that_the_indexer_is_not_planned() {
    let dsv3 = r#"{"model_type": "MT", "hidden_size": 7168, "intermediate_size": 18432,
        "moe_intermediate_size": 2048, "num_hidden_layers": 61, "num_attention_heads": 128,
        "n_routed_experts": 256, "n_shared_experts": 1, "num_experts_per_tok": 8,
        "first_k_dense_replace": 3, "q_lora_rank": 1536, "kv_lora_rank": 512,
        "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128 EXTRA}"#;
    let dir = tempfile::tempdir().unwrap();
    let load = |t: &str, extra: &str| {
        let p = write(
            &dir,
            "config.json",
            &dsv3.replace("MT", t).replace("EXTRA", extra),
        );
        load_model(&p).unwrap().components.remove(0)
    };
    let v32 = load(
        "deepseek_v32",
        r#", "index_n_heads": 64, "index_head_dim": 128, "index_topk": 2048"#,
    );
    assert!(v32.arch.mla.is_some());
    assert!(
        v32.warnings.iter().any(|w| w.contains("indexer")),
        "{:?}",
        v32.warnings
    );
    // DeepSeek-V3 itself has no indexer and no warning.
    assert!(load("deepseek_v3", "").warnings.is_empty());
}

#[test]
fn more_vlms_read_the_language_model_their_text_config_names() {
    // PaliGemma 2 (Gemma 2), Idefics3 and SmolVLM (Llama), Aya Vision (Cohere 2): the language
    // model by text_config.model_type, the SigLIP encoder (ungated) by vision_config.
    let dir = tempfile::tempdir().unwrap();
    for (vlm, text, gated, norm) in [
        ("paligemma", "gemma2", true, Norm::RmsNorm),
        ("idefics3", "llama", true, Norm::RmsNorm),
        ("smolvlm", "llama", true, Norm::RmsNorm),
        ("aya_vision", "cohere2", true, Norm::LayerNorm),
    ] {
        let p = write(
            &dir,
            "config.json",
            &format!(
                r#"{{"model_type": "{vlm}", "text_config": {{"model_type": "{text}",
                "hidden_size": 2304, "intermediate_size": 9216, "num_hidden_layers": 26,
                "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256}},
                "vision_config": {{"hidden_size": 1152, "intermediate_size": 4304,
                "num_hidden_layers": 27, "num_attention_heads": 16,
                "hidden_act": "gelu_pytorch_tanh"}}}}"#
            ),
        );
        let m = load_model(&p).unwrap();
        let (llm, vit) = (&m.components[0].arch, &m.components[1].arch);
        assert_eq!(
            (llm.gated_mlp, llm.norm, llm.head_dim),
            (gated, norm, 256),
            "{vlm}"
        );
        assert_eq!((vit.hidden_size, vit.gated_mlp), (1152, false), "{vlm}");
    }
}

#[test]
fn internvl_chats_remote_code_config_reads_its_llm_config_and_internvit() {
    // InternVL2.5-8B's config.json: the language model under llm_config (InternLM2), InternViT
    // (gelu, ungated); InternViT-6B's norm_type rms_norm.
    let dir = tempfile::tempdir().unwrap();
    let cfg = |norm: &str| {
        format!(
            r#"{{"model_type": "internvl_chat", "architectures": ["InternVLChatModel"],
            "llm_config": {{"model_type": "internlm2", "hidden_size": 4096,
            "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
            "num_key_value_heads": 8}},
            "vision_config": {{"model_type": "intern_vit_6b", "hidden_size": 1024,
            "intermediate_size": 4096, "num_hidden_layers": 24, "num_attention_heads": 16,
            "hidden_act": "gelu", "norm_type": "{norm}"}}}}"#
        )
    };
    let p = write(&dir, "config.json", &cfg("layer_norm"));
    let m = load_model(&p).unwrap();
    let (llm, vit) = (&m.components[0].arch, &m.components[1].arch);
    assert_eq!((llm.num_query_groups, llm.gated_mlp), (8, true));
    assert_eq!(
        (vit.hidden_size, vit.gated_mlp, vit.norm),
        (1024, false, Norm::LayerNorm)
    );
    let p = write(&dir, "config.json", &cfg("rms_norm"));
    assert_eq!(
        load_model(&p).unwrap().components[1].arch.norm,
        Norm::RmsNorm
    );
}
