//! HuggingFace `config.json` -> components.
//!
//! Supported `model_type`s, a gated MLP with RMSNorm unless said:
//! - dense: llama, mistral, ministral, qwen2, qwen3, olmo2, olmo3, granite, internlm3, phi3, glm,
//!   glm4, gemma, gemma2, gemma3_text, smollm3, seed_oss, exaone4, helium, ernie4_5,
//!   hunyuan_v1_dense, internlm2, baichuan, minicpm; with LayerNorm and an ungated MLP (one FC1
//!   of the FFN width): nemotron (squared ReLU), starcoder2, gpt_neox, phi (Phi-1/2), and by
//!   GPT-2's names (`n_embd`, `n_layer`, `n_head`, `n_inner`) gpt2 and gpt_bigcode
//!   (`multi_query`: one key/value group); by its own names (`num_layers`, `ffn_hidden_size`,
//!   `kv_channels`, `multi_query_group_num`) chatglm, and falcon (ungated, LayerNorm; its
//!   `num_kv_heads` or `multi_query`); with LayerNorm and a gated MLP: cohere, cohere2,
//!   stablelm, olmo. Where attention and the MLP run in parallel (gpt_neox's and stablelm's
//!   `use_parallel_residual`, phi, cohere) the GEMMs are those of the sequential layer
//!   Megatron's `GPTModel` builds, and the plan's defaults say so;
//! - MoE: qwen2_moe, qwen3_moe (`moe_intermediate_size`, sparse-step and dense layers);
//!   qwen3_next (the same experts, Gated DeltaNet in the layers without full attention, gated
//!   attention); mixtral, granitemoe, granitemoeshared (`shared_intermediate_size`), phimoe,
//!   gpt_oss, minimax_m2 (`num_local_experts`; gpt-oss's attention sinks and windows change no
//!   GEMM); olmoe (`num_experts`; experts use `intermediate_size`); deepseek (DeepSeek-MoE),
//!   glm4_moe, dots1 (DeepSeek's routed and shared experts and first dense layers, with GQA
//!   attention); deepseek_v3, deepseek_v2 (the same with MLA); deepseek_v32 (the same; its
//!   sparse attention's indexer, `index_n_heads`, is not planned, and a warning says so);
//!   ernie4_5_moe (`moe_num_experts`, `moe_k`, MoE layers from `moe_layer_start_index` every
//!   `moe_layer_interval`-th); llama4_text (routed and one shared expert every
//!   `interleave_moe_layer_step`-th layer, `intermediate_size` wide; dense layers
//!   `intermediate_size_mlp`);
//! - VLMs: qwen3_vl_moe, qwen3_vl, qwen3_5_moe, qwen3_5, gemma3, mistral3, llama4 (LLM from
//!   `text_config`, ViT from `vision_config`: Pixtral's is gated, `hidden_act` silu); qwen2_vl,
//!   qwen2_5_vl (the LLM's fields at the top where there is no `text_config`; Qwen2-VL's ViT
//!   by `embed_dim` and `mlp_ratio`); internvl, llava, llava_next, llava_onevision, glm4v,
//!   glm4v_moe, paligemma, idefics3, smolvlm, aya_vision, internvl_chat (the LLM of whichever
//!   text family `text_config.model_type` names, `llm_config` in InternVL's remote code:
//!   GLM-4.5V's glm4v_moe_text has DeepSeek's experts with GQA, GLM-4.1V's glm4v_text is
//!   dense; their ViT is gated, `hidden_act` silu; InternViT-6B's `norm_type` RMSNorm);
//!   qwen3_5_text and qwen3_5_moe_text are Qwen3.5's language model alone. Gated DeltaNet
//!   layers are read wherever the text config has their heads (`config::linear_attention`),
//!   with gated full attention.
//!
//! A `model_type` not among these (a fork's own name, as Kimi K2's `kimi_k2`) is read by the
//! first `architectures` class that is one of theirs (`DeepseekV3ForCausalLM`), and the plan's
//! defaults say so.
//!
//! Not read: layers that are not attention and MLP (Mamba's mixers in nemotron_h, jamba,
//! falcon_h1).

use crate::model::{Arch, Component, Fp8Settings, Norm, RecommendedRun, Role};

use super::error::ConfigError;
use super::fields::Fields;
use super::linear_attention::linear_attention;
use experts::{deepseek_moe, ernie_moe, every_layer_moe, llama4_moe, mla, qwen_moe};
use types::{Kind, kind, supported};

mod experts;
mod types;

pub(crate) fn components(f: Fields<'_>) -> Result<Vec<Component>, ConfigError> {
    let model_type = f.opt_str(&["model_type"])?.ok_or_else(|| {
        f.err(
            "model_type",
            "missing",
            format!("add the HF model_type (one of {})", supported()),
        )
    })?;
    let (kind, read_as) = kind(f, model_type)?;
    let mut notes: Vec<String> = read_as.into_iter().collect();
    let mut out = match kind {
        Kind::Text(family) => vec![text(f, family)?],
        Kind::Vlm(_) | Kind::VlmTopText(_) | Kind::VlmByText => {
            // InternVL's remote-code configs (`internvl_chat`) name it llm_config.
            let under = match f.sub("text_config", "text_config")? {
                Some(t) => Some(t),
                None => f.sub("llm_config", "llm_config")?,
            };
            let t = match (under, kind) {
                (Some(t), _) => t,
                (None, Kind::VlmTopText(_)) => f,
                (None, _) => {
                    return Err(f.err(
                        "text_config",
                        "missing",
                        "a VLM config carries the LLM under text_config (InternVL's remote code: \
                         llm_config)",
                    ));
                }
            };
            let v = f.sub("vision_config", "vision_config")?.ok_or_else(|| {
                f.err(
                    "vision_config",
                    "missing",
                    "a VLM config carries the ViT under vision_config",
                )
            })?;
            let family = match kind {
                Kind::Vlm(family) | Kind::VlmTopText(family) => family,
                _ => {
                    let (family, note) = text_family(t)?;
                    notes.extend(note);
                    family
                }
            };
            vec![text(t, family)?, vision(v)?]
        }
    };
    for c in &mut out {
        for (i, note) in notes.iter().enumerate() {
            c.defaults_applied.insert(i, note.clone());
        }
    }
    Ok(out)
}

/// The text family of a VLM that names its language model by `text_config.model_type`.
fn text_family(t: Fields<'_>) -> Result<(Family, Option<String>), ConfigError> {
    let model_type = t.opt_str(&["model_type"])?.ok_or_else(|| {
        t.err(
            "model_type",
            "missing",
            "name the language model's HF model_type (llama, qwen2, qwen3_moe, ...)",
        )
    })?;
    match kind(t, model_type)? {
        (Kind::Text(family), note) => Ok((family, note)),
        _ => Err(t.err(
            "model_type",
            format!("`{model_type}` is not a language model"),
            "name the language model's HF model_type (llama, qwen2, qwen3_moe, ...)",
        )),
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Family {
    Dense,
    /// Dense with LayerNorm and an ungated MLP (Nemotron, StarCoder2, GPT-NeoX, Phi).
    Ungated,
    /// GPT-2's layout and field names (`n_embd`, `n_layer`, `n_head`, `n_inner`): LayerNorm, an
    /// ungated MLP; GPT-BigCode's `multi_query` (its default) shares one key/value group.
    Gpt2,
    /// ChatGLM2/3 and GLM-4's first release by their own names (`num_layers`, `ffn_hidden_size`,
    /// `kv_channels`, `multi_query_group_num`): a gated MLP, RMSNorm where `rmsnorm` says.
    ChatGlm,
    /// Falcon by its own names: an ungated MLP (`ffn_hidden_size`, else 4 x width), LayerNorm,
    /// key/value heads by `new_decoder_architecture` (`num_kv_heads`) or `multi_query` (one).
    Falcon,
    /// Dense with LayerNorm and a gated MLP: Cohere's Command R (attention and MLP in
    /// parallel), StableLM 2, OLMo.
    GatedLayerNorm,
    QwenMoe,
    /// Qwen-MoE experts with Gated DeltaNet in three of four layers and gated full attention.
    QwenNext,
    Mixtral,
    Olmoe,
    /// DeepSeek's experts with GQA attention.
    DeepSeekMoe,
    /// DeepSeek's experts with MLA.
    DeepSeek,
    /// ERNIE 4.5: routed and shared experts in the layers from `moe_layer_start_index` to
    /// `moe_layer_end_index`, every `moe_layer_interval`-th.
    Ernie,
    /// Llama 4: every `interleave_moe_layer_step`-th layer MoE (routed experts and one shared
    /// expert, both `intermediate_size` wide), the others dense (`intermediate_size_mlp`).
    Llama4,
}

/// The shapes every text family names, by their names in its config.
struct Dims {
    layers: u64,
    hidden: u64,
    heads: u64,
    groups: u64,
    head_dim: u64,
    ffn: u64,
}

fn text(f: Fields<'_>, family: Family) -> Result<Component, ConfigError> {
    let mut defaults = Vec::new();
    let d = match family {
        Family::Gpt2 => gpt2_dims(f, &mut defaults)?,
        Family::ChatGlm => chatglm_dims(f, &mut defaults)?,
        Family::Falcon => falcon_dims(f, &mut defaults)?,
        _ => dims(f, family, &mut defaults)?,
    };
    defaults.extend(parallel_note(f, family)?);
    let Dims {
        layers: num_layers,
        hidden,
        heads,
        groups,
        head_dim,
        ffn,
    } = d;
    // A family's MLP is gated or not whatever its activation (SwiGLU, Gemma's GeGLU named by
    // hidden_activation, gpt-oss's clamped SwiGLU; Nemotron's squared ReLU, StarCoder2's GELU):
    // the GEMMs are the same.
    let gated = !matches!(family, Family::Ungated | Family::Gpt2 | Family::Falcon);
    let (moe, mla) = match family {
        Family::Dense
        | Family::Ungated
        | Family::Gpt2
        | Family::ChatGlm
        | Family::Falcon
        | Family::GatedLayerNorm => (None, None),
        Family::QwenMoe | Family::QwenNext => (Some(qwen_moe(f, num_layers)?), None),
        Family::Mixtral => (Some(every_layer_moe(f, "num_local_experts", ffn)?), None),
        Family::Ernie => (Some(ernie_moe(f, num_layers)?), None),
        Family::Olmoe => (Some(every_layer_moe(f, "num_experts", ffn)?), None),
        Family::DeepSeekMoe => (Some(deepseek_moe(f, num_layers)?), None),
        Family::DeepSeek => (Some(deepseek_moe(f, num_layers)?), Some(mla(f)?)),
        Family::Llama4 => (Some(llama4_moe(f, num_layers)?), None),
    };
    let linear_attention = linear_attention(f, num_layers, family == Family::QwenNext)?;
    // DeepSeek-V3.2's sparse attention: its indexer's fields beside MLA's.
    let mut warnings = Vec::new();
    if mla.is_some() && f.has("index_n_heads") {
        warnings.push(super::DSA_WARNING.to_owned());
    }
    Ok(Component {
        role: Role::Llm,
        arch: Arch {
            num_layers,
            hidden_size: hidden,
            ffn_hidden_size: ffn,
            num_attention_heads: heads,
            num_query_groups: groups,
            head_dim,
            gated_mlp: gated,
            norm: match family {
                Family::Ungated | Family::Gpt2 | Family::Falcon | Family::GatedLayerNorm => {
                    Norm::LayerNorm
                }
                Family::ChatGlm if f.opt_bool(&["rmsnorm"])? == Some(false) => Norm::LayerNorm,
                _ => Norm::RmsNorm,
            },
            mla,
            moe,
            linear_attention,
            attention_output_gate: linear_attention.is_some(),
            mtp_layers: f.opt_u64(&["num_nextn_predict_layers"])?.unwrap_or(0),
        },
        fp8: Fp8Settings::default(),
        recommended: RecommendedRun::default(),
        defaults_applied: defaults,
        warnings,
    })
}

/// [`Dims`] by the names most families share (`num_hidden_layers`, `hidden_size`,
/// `num_attention_heads`, `num_key_value_heads`, `head_dim`, `intermediate_size`; Llama 4's
/// dense layers `intermediate_size_mlp`).
fn dims(f: Fields<'_>, family: Family, defaults: &mut Vec<String>) -> Result<Dims, ConfigError> {
    let layers = f.req_pos(&["num_hidden_layers"], "number of transformer layers")?;
    let hidden = f.req_pos(&["hidden_size"], "model width")?;
    let heads = f.req_pos(&["num_attention_heads"], "attention heads")?;
    let ffn = if family == Family::Llama4 {
        f.req_pos(&["intermediate_size_mlp"], "dense MLP hidden size")?
    } else {
        f.req_pos(&["intermediate_size"], "MLP hidden size")?
    };
    let groups = match f.opt_u64(&["num_key_value_heads"])? {
        Some(g) if g > 0 => g,
        _ => {
            defaults.push(format!("num_key_value_heads absent: MHA, groups = {heads}"));
            heads
        }
    };
    dividing(f, "num_key_value_heads", groups, heads)?;
    let head_dim = match f.opt_u64(&["head_dim"])? {
        Some(0) => {
            return Err(f.err(
                "head_dim",
                "0 is not a head dimension",
                "set head_dim to the per-head width, or remove it",
            ));
        }
        Some(d) => d,
        None if !hidden.is_multiple_of(heads) && !f.has("kv_lora_rank") => {
            return Err(f.err(
                "hidden_size",
                format!("{hidden} is not divisible by num_attention_heads {heads}"),
                "set head_dim to the per-head width",
            ));
        }
        // Multi-latent attention's widths are its own (qk_nope/qk_rope/v_head_dim): the
        // quotient is never read, so no default is announced.
        None if f.has("kv_lora_rank") => hidden / heads,
        None => {
            defaults.push(format!(
                "head_dim absent: hidden_size / num_attention_heads = {}",
                hidden / heads
            ));
            hidden / heads
        }
    };
    Ok(Dims {
        layers,
        hidden,
        heads,
        groups,
        head_dim,
        ffn,
    })
}

/// The note for a family whose attention and MLP run in parallel: the plan is the sequential
/// layer's, whose GEMMs have the same shapes.
fn parallel_note(f: Fields<'_>, family: Family) -> Result<Option<String>, ConfigError> {
    let parallel = match (family, f.opt_str(&["model_type"])?) {
        (Family::GatedLayerNorm, Some("cohere" | "cohere2")) | (Family::Ungated, Some("phi")) => {
            true
        }
        (Family::Ungated, Some("gpt_neox")) => {
            f.opt_bool(&["use_parallel_residual"])?.unwrap_or(true)
        }
        (Family::Falcon, _) => {
            f.opt_bool(&["new_decoder_architecture"])? == Some(true)
                || f.opt_bool(&["parallel_attn"])?.unwrap_or(true)
        }
        (Family::GatedLayerNorm, Some("stablelm")) => {
            f.opt_bool(&["use_parallel_residual"])?.unwrap_or(false)
        }
        _ => false,
    };
    Ok(parallel.then(|| {
        "attention and MLP in parallel: planned as Megatron's sequential layer, whose GEMMs \
         have the same shapes"
            .to_owned()
    }))
}

/// [`Dims`] by GPT-2's names: `n_layer`, `n_embd`, `n_head`, `n_inner` (absent or null:
/// 4 x `n_embd`); GPT-BigCode's `multi_query` (true unless said) shares one key/value group.
fn gpt2_dims(f: Fields<'_>, defaults: &mut Vec<String>) -> Result<Dims, ConfigError> {
    let layers = f.req_pos(&["n_layer"], "number of transformer layers")?;
    let hidden = f.req_pos(&["n_embd"], "model width")?;
    let heads = f.req_pos(&["n_head"], "attention heads")?;
    if !hidden.is_multiple_of(heads) {
        return Err(f.err(
            "n_embd",
            format!("{hidden} is not divisible by n_head {heads}"),
            "fix the width or the head count",
        ));
    }
    let ffn = match f.opt_u64(&["n_inner"])? {
        Some(n) if n > 0 => n,
        _ => four_times(f, "n_inner", "n_embd", hidden, defaults)?,
    };
    let bigcode = f.opt_str(&["model_type"])? == Some("gpt_bigcode");
    let multi_query = f.opt_bool(&["multi_query"])?.unwrap_or(bigcode);
    Ok(Dims {
        layers,
        hidden,
        heads,
        groups: if multi_query { 1 } else { heads },
        head_dim: hidden / heads,
        ffn,
    })
}

/// [`Dims`] by ChatGLM's names: `num_layers`, `hidden_size`, `num_attention_heads`,
/// `ffn_hidden_size`, `kv_channels` (absent: hidden / heads), and `multi_query_group_num` key/value
/// groups where `multi_query_attention` is on.
fn chatglm_dims(f: Fields<'_>, defaults: &mut Vec<String>) -> Result<Dims, ConfigError> {
    let layers = f.req_pos(&["num_layers"], "number of transformer layers")?;
    let hidden = f.req_pos(&["hidden_size"], "model width")?;
    let heads = f.req_pos(&["num_attention_heads"], "attention heads")?;
    let ffn = f.req_pos(&["ffn_hidden_size"], "MLP hidden size")?;
    let groups = if f.opt_bool(&["multi_query_attention"])? == Some(true) {
        f.req_pos(&["multi_query_group_num"], "key/value groups")?
    } else {
        heads
    };
    dividing(f, "multi_query_group_num", groups, heads)?;
    let head_dim = match f.opt_u64(&["kv_channels"])? {
        Some(d) if d > 0 => d,
        _ if hidden.is_multiple_of(heads) => {
            defaults.push(format!(
                "kv_channels absent: hidden_size / num_attention_heads = {}",
                hidden / heads
            ));
            hidden / heads
        }
        _ => {
            return Err(f.err(
                "kv_channels",
                "absent, and hidden_size is not a multiple of num_attention_heads",
                "set kv_channels to the per-head width",
            ));
        }
    };
    Ok(Dims {
        layers,
        hidden,
        heads,
        groups,
        head_dim,
        ffn,
    })
}

/// [`Dims`] by Falcon's names (`num_hidden_layers` or `n_layer`, `num_attention_heads` or
/// `n_head`): key/value heads `num_kv_heads` under `new_decoder_architecture`, else one where
/// `multi_query` (its default) is on, else every head; `ffn_hidden_size`, else 4 x width.
fn falcon_dims(f: Fields<'_>, defaults: &mut Vec<String>) -> Result<Dims, ConfigError> {
    let layers = f.req_pos(
        &["num_hidden_layers", "n_layer"],
        "number of transformer layers",
    )?;
    let hidden = f.req_pos(&["hidden_size"], "model width")?;
    let heads = f.req_pos(&["num_attention_heads", "n_head"], "attention heads")?;
    if !hidden.is_multiple_of(heads) {
        return Err(f.err(
            "hidden_size",
            format!("{hidden} is not divisible by num_attention_heads {heads}"),
            "fix the width or the head count",
        ));
    }
    let groups = if f.opt_bool(&["new_decoder_architecture"])? == Some(true) {
        f.req_pos(&["num_kv_heads"], "key/value heads")?
    } else if f.opt_bool(&["multi_query"])?.unwrap_or(true) {
        1
    } else {
        heads
    };
    dividing(f, "num_kv_heads", groups, heads)?;
    let ffn = match f.opt_u64(&["ffn_hidden_size"])? {
        Some(n) if n > 0 => n,
        _ => four_times(f, "ffn_hidden_size", "hidden_size", hidden, defaults)?,
    };
    Ok(Dims {
        layers,
        hidden,
        heads,
        groups,
        head_dim: hidden / heads,
        ffn,
    })
}

/// `groups` key/value groups (`key`'s) must divide `heads`.
fn dividing(f: Fields<'_>, key: &str, groups: u64, heads: u64) -> Result<(), ConfigError> {
    if heads.is_multiple_of(groups) {
        return Ok(());
    }
    Err(f.err(
        key,
        format!("{groups} does not divide {heads} heads"),
        "fix the head counts",
    ))
}

/// An MLP width `ffn_key` left out: 4 x the width `width_key` (`hidden`), said.
fn four_times(
    f: Fields<'_>,
    ffn_key: &str,
    width_key: &str,
    hidden: u64,
    defaults: &mut Vec<String>,
) -> Result<u64, ConfigError> {
    let ffn = hidden
        .checked_mul(4)
        .ok_or_else(|| f.err(width_key, format!("{hidden} is too large"), "fix the width"))?;
    defaults.push(format!("{ffn_key} absent: 4 x {width_key} = {ffn}"));
    Ok(ffn)
}

fn vision(f: Fields<'_>) -> Result<Component, ConfigError> {
    let mut defaults = Vec::new();
    let num_layers = f.req_pos(&["depth", "num_hidden_layers"], "ViT blocks")?;
    // Qwen2-VL names the ViT's width embed_dim (its hidden_size is the merger's output, the
    // LLM's width) and its MLP by mlp_ratio, with quick_gelu.
    let hidden = f.req_pos(&["embed_dim", "hidden_size"], "ViT width")?;
    let heads = f.req_pos(&["num_heads", "num_attention_heads"], "ViT heads")?;
    let ffn = match f.opt_u64(&["intermediate_size"])? {
        Some(n) if n > 0 => n,
        _ => match f.opt_u64(&["mlp_ratio"])? {
            Some(r) if r > 0 => hidden * r,
            _ => f.req_pos(&["intermediate_size"], "ViT MLP size")?,
        },
    };
    let act = f.opt_str(&["hidden_act"])?.unwrap_or("gelu_pytorch_tanh");
    if !f.has("hidden_act") {
        defaults.push("vision hidden_act absent: gelu_pytorch_tanh (ungated)".to_owned());
    }
    Ok(Component {
        role: Role::Vit,
        arch: Arch {
            num_layers,
            hidden_size: hidden,
            ffn_hidden_size: ffn,
            num_attention_heads: heads,
            num_query_groups: heads,
            head_dim: hidden / heads,
            gated_mlp: act == "silu",
            // InternViT-6B's `norm_type: rms_norm`; SigLIP, CLIP and the 300M InternViT LayerNorm.
            norm: match f.opt_str(&["norm_type"])? {
                Some(n) if n.to_ascii_lowercase().contains("rms") => Norm::RmsNorm,
                _ => Norm::LayerNorm,
            },
            mla: None,
            moe: None,
            linear_attention: None,
            attention_output_gate: false,
            mtp_layers: 0,
        },
        fp8: Fp8Settings::default(),
        recommended: RecommendedRun::default(),
        defaults_applied: defaults,
        warnings: Vec::new(),
    })
}
