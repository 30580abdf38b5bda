//! Megatron/LoongForge field names -> one [`Component`].

use crate::model::{Arch, Component, Mla, Norm, RecommendedRun, Role};

use super::error::ConfigError;
use super::fields::Fields;
use super::linear_attention::linear_attention;
use experts::moe;
use fp8::fp8_settings;

mod experts;
mod fp8;

/// The fields the engine reads from a Megatron/LoongForge config that describe the model; with
/// [`RUN_FIELDS`], every field it reads ([`is_read`]).
const MODEL_FIELDS: &[&str] = &[
    "num_layers",
    "hidden_size",
    "num_attention_heads",
    "ffn_hidden_size",
    "group_query_attention",
    "num_query_groups",
    "kv_channels",
    "activation_func",
    "hidden_act",
    "activation",
    "swiglu",
    "gated_linear_unit",
    "quick_geglu",
    "normalization",
    "multi_latent_attention",
    "q_lora_rank",
    "kv_lora_rank",
    "qk_head_dim",
    "qk_pos_emb_head_dim",
    "v_head_dim",
    "num_moe_experts",
    "num_experts",
    "moe_ffn_hidden_size",
    "moe_router_topk",
    "moe_shared_expert_intermediate_size",
    "first_k_dense_replace",
    "moe_layer_freq",
    "selective_fp8",
    "fp8_dynamic_policy_path",
    "fp8_dynamic_num_tokens",
    "mtp_num_layers",
    "experimental_attention_variant",
    "linear_attention_freq",
    "full_attention_interval",
    "linear_num_key_heads",
    "linear_num_value_heads",
    "linear_key_head_dim",
    "linear_value_head_dim",
    "attention_output_gate",
    "hybrid_layer_pattern",
    "hybrid_override_pattern",
    "hybrid_attention_ratio",
    "hybrid_mlp_ratio",
    "is_hybrid_model",
    "heterogeneous_layers_config_path",
    "heterogeneous_layers_config_encoded_json",
];

/// The fields the engine reads that set the run rather than the model (its sequence,
/// micro-batch, parallel sizes, FP8 recipe and CUDA graphs): a launch script's win over the
/// model's YAML.
pub(crate) const RUN_FIELDS: &[&str] = &[
    "seq_length",
    "encoder_seq_length",
    "micro_batch_size",
    "tensor_model_parallel_size",
    "expert_model_parallel_size",
    "expert_tensor_parallel_size",
    "context_parallel_size",
    "fp8_recipe",
    "fp8",
    "fp8_format",
    "fp8_amax_history_len",
    "fp8_amax_compute_algo",
    "cuda_graph_impl",
    "enable_cuda_graph",
    "external_cuda_graph",
    "te_precision_config_file",
];

/// The fields of Megatron-LM's multimodal programs that set the language model's sequence,
/// read from a launch script (`launch::program`).
pub(crate) const MULTIMODAL_FIELDS: &[&str] = &[
    "language_model_type",
    "vision_model_type",
    "decoder_seq_length",
    "dataloader_seq_length",
    "img_h",
    "img_w",
    "patch_dim",
    "disable_vision_class_token",
];

/// Every field the engine reads from a Megatron/LoongForge config.
fn read_fields() -> impl Iterator<Item = &'static str> {
    MODEL_FIELDS
        .iter()
        .chain(RUN_FIELDS)
        .chain(MULTIMODAL_FIELDS)
        .copied()
}

/// Whether the engine reads `key` from a Megatron/LoongForge config.
pub(crate) fn is_read(key: &str) -> bool {
    read_fields().any(|k| k == key)
}

/// Whether `key` is one of the fields that describe the model (not the run's).
pub(crate) fn is_model_field(key: &str) -> bool {
    MODEL_FIELDS.contains(&key)
}

/// Keys that are one or two edits from a field the engine reads, while that field is absent: a
/// typo that would silently fall back to a default (`ffn_hidden_sise` -> 4 x hidden).
fn likely_typos(f: Fields<'_>) -> Vec<String> {
    let mut out = Vec::new();
    for key in f.map.keys() {
        if is_read(key) || key.len() < 6 {
            continue;
        }
        let near = read_fields()
            .filter(|k| !f.has(k))
            .map(|k| (edit_distance(key, k), k))
            .filter(|(d, _)| *d <= 2)
            .min();
        if let Some((_, k)) = near {
            out.push(format!(
                "unknown key `{}`: did you mean `{k}`? (`{k}` is absent, so its default is used)",
                f.path(key)
            ));
        }
    }
    out
}

/// Megatron's hybrid stacks (`hybrid_layer_pattern`, or its ratios: each layer one of Mamba,
/// Gated DeltaNet, attention, MLP or MoE) and heterogeneous layers are refused: read as
/// transformer layers of one shape, every layer would be planned as the config's widths say,
/// and the Mamba mixers' projections not at all.
fn refuse_mixed_layers(f: Fields<'_>) -> Result<(), ConfigError> {
    let pattern = ["hybrid_layer_pattern", "hybrid_override_pattern"]
        .into_iter()
        .find(|k| {
            f.opt_str(&[k])
                .ok()
                .flatten()
                .is_some_and(|p| !p.trim().is_empty())
        });
    let ratio = ["hybrid_attention_ratio", "hybrid_mlp_ratio"]
        .into_iter()
        .find(|k| {
            f.map
                .get(*k)
                .and_then(|v| v.as_f64())
                .is_some_and(|r| r > 0.0)
        });
    let flagged = f.opt_bool(&["is_hybrid_model"]).ok().flatten() == Some(true);
    if let Some(k) = pattern.or(ratio).or(flagged.then_some("is_hybrid_model")) {
        return Err(f.err(
            k,
            "a hybrid stack (Mamba, attention, MLP and MoE layers apart), which is not planned: \
             read as transformer layers its plan would be wrong",
            "plan a transformer model (attention and MLP in every layer, MoE or Gated DeltaNet \
             as the reader knows them); hybrid stacks are not supported",
        ));
    }
    // Megatron's heterogeneous layers (Llama-Nemotron's: each layer its own attention and MLP
    // widths, some of them none): one layer's shapes would stand for all.
    let per_layer = [
        "heterogeneous_layers_config_path",
        "heterogeneous_layers_config_encoded_json",
    ]
    .into_iter()
    .find(|k| {
        f.opt_str(&[k])
            .ok()
            .flatten()
            .is_some_and(|v| !v.trim().is_empty())
    });
    match per_layer {
        None => Ok(()),
        Some(k) => Err(f.err(
            k,
            "heterogeneous layers (each layer its own widths), which are not planned: one \
             layer's shapes would stand for every layer",
            "plan a model whose layers share their shapes; heterogeneous layers are not supported",
        )),
    }
}

/// Levenshtein distance (short ASCII keys).
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            cur[j + 1] = (prev[j] + usize::from(ca != *cb))
                .min(prev[j + 1] + 1)
                .min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

pub(crate) fn component(f: Fields<'_>, role: Role) -> Result<Component, ConfigError> {
    refuse_mixed_layers(f)?;
    let variant = attention_variant(f)?;
    let mut defaults = Vec::new();
    let num_layers = f.req_pos(&["num_layers"], "number of transformer layers")?;
    let linear_attention = linear_attention(f, num_layers, variant == Variant::GatedDeltaNet)?;
    // LoongForge's pattern field: its Qwen3-Next/Qwen3.5 layers, with gated full attention.
    let loongforge_form = linear_attention.is_some() && f.has("full_attention_interval");
    let attention_output_gate = output_gate(f, loongforge_form, &mut defaults)?;
    let hidden = f.req_pos(&["hidden_size"], "model width")?;
    let heads = f.req_pos(&["num_attention_heads"], "attention heads")?;
    let ffn = match f.opt_u64(&["ffn_hidden_size"])? {
        Some(v) => v,
        None => {
            let ffn = hidden.checked_mul(4).ok_or_else(|| {
                f.err(
                    "hidden_size",
                    format!("{hidden} is too large to derive ffn_hidden_size (4 x hidden_size)"),
                    "write the model's width, or give ffn_hidden_size",
                )
            })?;
            defaults.push(format!("ffn_hidden_size absent: 4 x hidden_size = {ffn}"));
            ffn
        }
    };
    let groups = query_groups(f, heads, &mut defaults)?;
    let is_mla = f.opt_bool(&["multi_latent_attention"])? == Some(true);
    let head_dim = head_dim(f, hidden, heads, is_mla, &mut defaults)?;
    let gated = gated_mlp(f, &mut defaults)?;
    let norm = normalization(f, &mut defaults)?;
    let mla = if is_mla {
        Some(mla(f, &mut defaults)?)
    } else {
        None
    };
    let moe = moe(f, num_layers, ffn, &mut defaults)?;
    Ok(Component {
        role,
        arch: Arch {
            num_layers,
            hidden_size: hidden,
            ffn_hidden_size: ffn,
            num_attention_heads: heads,
            num_query_groups: groups,
            head_dim,
            gated_mlp: gated,
            norm,
            mla,
            moe,
            linear_attention,
            attention_output_gate,
            mtp_layers: f.opt_u64(&["mtp_num_layers"])?.unwrap_or(0),
        },
        fp8: fp8_settings(f, &mut defaults)?,
        recommended: recommended_run(f)?,
        defaults_applied: defaults,
        warnings: likely_typos(f)
            .into_iter()
            .chain(variant.warning())
            .chain(loongforge_form.then(loongforge_linear_attention_warning))
            .collect(),
    })
}

/// The attention variants the engine plans (Megatron's `experimental_attention_variant`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Variant {
    /// Ordinary attention (MHA/GQA, or MLA).
    Standard,
    /// DeepSeek Sparse Attention (DeepSeek-V3.2, GLM-5): MLA plus a small lightning indexer.
    Dsa,
    /// Gated DeltaNet linear attention in the layers without full attention.
    GatedDeltaNet,
}

impl Variant {
    fn warning(self) -> Option<String> {
        (self == Variant::Dsa).then(|| super::DSA_WARNING.to_owned())
    }
}

/// `experimental_attention_variant`: none, DSA (planned as MLA, with a warning) or Gated
/// DeltaNet; any other is refused.
fn attention_variant(f: Fields<'_>) -> Result<Variant, ConfigError> {
    match f.opt_str(&["experimental_attention_variant"])? {
        None => Ok(Variant::Standard),
        Some("dsa") => Ok(Variant::Dsa),
        Some("gated_delta_net") => Ok(Variant::GatedDeltaNet),
        Some(v) => Err(f.err(
            "experimental_attention_variant",
            format!("attention variant {v} is not supported: its TE modules are not in the engine's inventory"),
            "plan the model's other modules with a config without this variant, or open an issue with its module list",
        )),
    }
}

/// Whether full attention has an output gate: `attention_output_gate` as given, else on for a
/// LoongForge Qwen3-Next/Qwen3.5 config (`loongforge_form`: those models gate it), else off.
fn output_gate(
    f: Fields<'_>,
    loongforge_form: bool,
    defaults: &mut Vec<String>,
) -> Result<bool, ConfigError> {
    if let Some(g) = f.opt_bool(&["attention_output_gate"])? {
        return Ok(g);
    }
    let gated = loongforge_form;
    if gated {
        defaults.push(
            "attention_output_gate absent: on (Qwen3-Next and Qwen3.5 gate their full attention)"
                .to_owned(),
        );
    }
    Ok(gated)
}

/// LoongForge's own Qwen3-Next/Qwen3.5 layers build the Gated DeltaNet projections as plain TE
/// `Linear` modules (not Megatron's wrappers) and the gated QKV without the fused norm; the
/// engine plans them as upstream Megatron builds them.
fn loongforge_linear_attention_warning() -> String {
    "Gated DeltaNet planned as upstream megatron-core builds it (in_proj: norm-fused column, \
     fc1; out_proj: row, fc2; the gated QKV norm-fused). LoongForge's own Qwen3-Next/Qwen3.5 \
     layers build those projections as plain TE Linear modules, which the build-time callback \
     never sees (they run in the launch region's precision), and the gated QKV as a column module"
        .to_owned()
}

/// Query groups (GQA), MHA when absent or `group_query_attention: false`.
fn query_groups(f: Fields<'_>, heads: u64, defaults: &mut Vec<String>) -> Result<u64, ConfigError> {
    let gqa_off = f.opt_bool(&["group_query_attention"])? == Some(false);
    let groups = match f.opt_u64(&["num_query_groups"])? {
        Some(g) if !gqa_off => g,
        _ => {
            // Multi-latent attention has no query groups: nothing to say there.
            if f.opt_bool(&["multi_latent_attention"])? != Some(true) {
                defaults.push(format!(
                    "num_query_groups absent: MHA, groups = num_attention_heads = {heads}"
                ));
            }
            heads
        }
    };
    if groups == 0 || !heads.is_multiple_of(groups) {
        return Err(f.err(
            "num_query_groups",
            format!("{groups} does not divide num_attention_heads {heads}"),
            "use a divisor of num_attention_heads",
        ));
    }
    Ok(groups)
}

/// The per-head width: `kv_channels`, else hidden / heads.
fn head_dim(
    f: Fields<'_>,
    hidden: u64,
    heads: u64,
    is_mla: bool,
    defaults: &mut Vec<String>,
) -> Result<u64, ConfigError> {
    Ok(match f.opt_u64(&["kv_channels"])? {
        Some(0) => {
            return Err(f.err(
                "kv_channels",
                "0 is not a head dimension",
                "set kv_channels to the per-head width, or remove it to use hidden_size / num_attention_heads",
            ));
        }
        Some(v) => v,
        // MLA has its own per-head dimensions; kv_channels is unused there.
        None if is_mla => hidden / heads,
        None if !hidden.is_multiple_of(heads) => {
            return Err(f.err(
                "hidden_size",
                format!(
                    "{hidden} is not divisible by num_attention_heads {heads}, so the head \
                     dimension is not hidden_size / num_attention_heads"
                ),
                "set kv_channels to the per-head width",
            ));
        }
        None => {
            defaults.push(format!(
                "kv_channels absent: head_dim = hidden_size / num_attention_heads = {}",
                hidden / heads
            ));
            hidden / heads
        }
    })
}

/// A gated (SwiGLU) MLP, from the flag or the activation's name (NeMo's `activation`:
/// `swiglu`, `fast-geglu`, `reglu` gated; `gelu`, `squared-relu` not).
fn gated_mlp(f: Fields<'_>, defaults: &mut Vec<String>) -> Result<bool, ConfigError> {
    let act = f
        .opt_str(&["activation_func", "hidden_act", "activation"])?
        .unwrap_or("");
    // Megatron gates the MLP for --swiglu and for --quick-geglu (gpt-oss's).
    let said = [
        f.opt_bool(&["swiglu"])?,
        f.opt_bool(&["gated_linear_unit"])?,
        f.opt_bool(&["quick_geglu"])?,
    ];
    let gated = match said.iter().flatten().copied().reduce(|a, b| a || b) {
        Some(g) => g,
        None if act.contains("glu") => true,
        None => {
            defaults.push(
                "swiglu / gated_linear_unit / quick_geglu absent: plain (ungated) MLP".to_owned(),
            );
            false
        }
    };
    Ok(gated)
}

/// RMSNorm or LayerNorm, in any framework's spelling.
fn normalization(f: Fields<'_>, defaults: &mut Vec<String>) -> Result<Norm, ConfigError> {
    // Framework spellings too: Torch_RMSNorm (ERNIE 4.5), TERMSNorm, FusedLayerNorm, NeMo's
    // layernorm1p (Nemotron's zero-centred gamma: a LayerNorm's GEMMs and kernels).
    let norm = match f.opt_str(&["normalization"])? {
        Some(n) if n.to_ascii_lowercase().ends_with("rmsnorm") => Norm::RmsNorm,
        Some(n)
            if n.to_ascii_lowercase().ends_with("layernorm")
                || n.eq_ignore_ascii_case("layernorm1p") =>
        {
            Norm::LayerNorm
        }
        Some(other) => {
            return Err(f.err(
                "normalization",
                format!("unknown normalization `{other}`"),
                "use RMSNorm or LayerNorm",
            ));
        }
        None => {
            defaults.push("normalization absent: LayerNorm (Megatron's default)".to_owned());
            Norm::LayerNorm
        }
    };
    Ok(norm)
}

/// The run the config recommends: sequence, micro-batch and parallel sizes.
fn recommended_run(f: Fields<'_>) -> Result<RecommendedRun, ConfigError> {
    let small = |keys: &[&'static str]| -> Result<Option<u32>, ConfigError> {
        f.opt_u64(keys)?
            .map(|v| {
                u32::try_from(v).map_err(|_| {
                    f.err(
                        keys[0],
                        format!("{v} is too large"),
                        "use a realistic parallel size",
                    )
                })
            })
            .transpose()
    };
    Ok(RecommendedRun {
        // Megatron-LM's --encoder-seq-length is --seq-length's other name (one of the two is
        // given); NeMo's model configs write it.
        seq_length: f.opt_u64(&["seq_length", "encoder_seq_length"])?,
        micro_batch_size: f.opt_u64(&["micro_batch_size"])?,
        tp: small(&["tensor_model_parallel_size"])?,
        ep: small(&["expert_model_parallel_size"])?,
        etp: small(&["expert_tensor_parallel_size"])?,
        cp: small(&["context_parallel_size"])?,
    })
}

fn mla(f: Fields<'_>, defaults: &mut Vec<String>) -> Result<Mla, ConfigError> {
    let dflt = |keys: &[&'static str], v: u64, d: &mut Vec<String>| -> Result<u64, ConfigError> {
        Ok(match f.opt_u64(keys)? {
            Some(x) => x,
            None => {
                d.push(format!("{} absent: {v} (Megatron's default)", keys[0]));
                v
            }
        })
    };
    Ok(Mla {
        q_lora_rank: f.opt_u64(&["q_lora_rank"])?,
        kv_lora_rank: f.req_pos(&["kv_lora_rank"], "MLA key/value down-projection rank")?,
        qk_head_dim: dflt(&["qk_head_dim"], 128, defaults)?,
        qk_pos_emb_head_dim: dflt(&["qk_pos_emb_head_dim"], 64, defaults)?,
        v_head_dim: dflt(&["v_head_dim"], 128, defaults)?,
    })
}

#[cfg(test)]
mod tests {
    use super::{MODEL_FIELDS, RUN_FIELDS, is_read};

    #[test]
    fn every_run_field_is_a_field_the_engine_reads() {
        for f in RUN_FIELDS {
            assert!(is_read(f) && !MODEL_FIELDS.contains(f), "{f}");
        }
    }
}
