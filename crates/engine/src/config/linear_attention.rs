//! Gated DeltaNet layers (Qwen3-Next, Qwen3.5), read the same way from every config format:
//! which layers keep full attention, and the linear attention's head dimensions.
//!
//! The pattern comes from whichever field the config has: Megatron's `linear_attention_freq`
//! (every N-th layer full, or a per-layer list with 1 for linear and 0 for full), LoongForge's and
//! HuggingFace's `full_attention_interval` (every N-th layer full), or HuggingFace's
//! `layer_types` (`linear_attention` / `full_attention` per layer).

use serde_json::Value;

use crate::model::LinearAttention;

use super::error::ConfigError;
use super::fields::Fields;

/// The fields a config names the pattern with, in the order they are read.
const PATTERN_FIELDS: [&str; 3] = [
    "layer_types",
    "linear_attention_freq",
    "full_attention_interval",
];

/// The Gated DeltaNet layers of a config, or `None` when it has none. `required`: the config
/// asked for them by name (Megatron's `experimental_attention_variant: gated_delta_net`), so a
/// missing pattern is an error rather than a model without linear attention.
///
/// Without the variant, only LoongForge's and HuggingFace's form counts: linear heads with
/// `full_attention_interval` or `layer_types`. Megatron's `TransformerConfig` carries linear
/// head sizes and `linear_attention_freq` on every model (defaults it reads only under the
/// variant), and Gemma 3's `layer_types` lists sliding and full attention.
pub(crate) fn linear_attention(
    f: Fields<'_>,
    num_layers: u64,
    required: bool,
) -> Result<Option<LinearAttention>, ConfigError> {
    let loongforge_form =
        f.has("linear_num_key_heads") && (f.has("full_attention_interval") || f.has("layer_types"));
    if !required && !loongforge_form {
        return Ok(None);
    }
    let full = match full_attention_layers(f, num_layers, required)? {
        None => {
            return Err(f.err(
                "linear_attention_freq",
                "missing: which layers keep full attention is not given",
                "set linear_attention_freq (Megatron: every N-th layer full, or a 0/1 list per layer), \
                 full_attention_interval, or layer_types",
            ));
        }
        Some(full) => full,
    };
    if full == num_layers {
        return Ok(None);
    }
    let l = LinearAttention {
        key_head_dim: f.req_pos(&["linear_key_head_dim"], "Gated DeltaNet key head dim")?,
        value_head_dim: f.req_pos(&["linear_value_head_dim"], "Gated DeltaNet value head dim")?,
        num_key_heads: f.req_pos(&["linear_num_key_heads"], "Gated DeltaNet key heads")?,
        num_value_heads: f.req_pos(&["linear_num_value_heads"], "Gated DeltaNet value heads")?,
        full_attention_layers: full,
    };
    if !l.num_value_heads.is_multiple_of(l.num_key_heads) {
        return Err(f.err(
            "linear_num_value_heads",
            format!(
                "{} is not a multiple of linear_num_key_heads {}",
                l.num_value_heads, l.num_key_heads
            ),
            "fix the head counts (Megatron requires value heads to be a multiple of key heads)",
        ));
    }
    Ok(Some(l))
}

/// How many layers keep full attention, from the first pattern field present (Megatron's own,
/// `linear_attention_freq`, only under its variant).
fn full_attention_layers(
    f: Fields<'_>,
    num_layers: u64,
    megatron_variant: bool,
) -> Result<Option<u64>, ConfigError> {
    let Some((key, v)) = PATTERN_FIELDS
        .iter()
        .filter(|k| megatron_variant || **k != "linear_attention_freq")
        .find_map(|k| f.map.get(*k).filter(|v| !v.is_null()).map(|v| (*k, v)))
    else {
        return Ok(None);
    };
    match (key, v) {
        ("layer_types", Value::Array(types)) => {
            per_layer(f, key, types.len(), num_layers)?;
            types.iter().try_fold(0, |full, t| match t.as_str() {
                Some("full_attention") => Ok(full + 1),
                Some("linear_attention") => Ok(full),
                _ => Err(f.err(
                    key,
                    format!("entry {t} is neither linear_attention nor full_attention"),
                    "list one of the two per layer",
                )),
            })
        }
        ("linear_attention_freq", Value::Array(flags)) => {
            per_layer(f, key, flags.len(), num_layers)?;
            flags.iter().try_fold(0, |full, flag| match flag.as_u64() {
                Some(0) => Ok(full + 1),
                Some(1) => Ok(full),
                _ => Err(f.err(
                    key,
                    format!("entry {flag} is neither 1 (linear) nor 0 (full attention)"),
                    "list 1 or 0 per layer",
                )),
            })
        }
        (_, v) => match v.as_u64() {
            Some(n) if n > 0 => Ok(num_layers / n),
            _ => Err(f.err(
                key,
                format!("expected a positive layer interval, found {v}"),
                "give N for every N-th layer full attention",
            )),
        },
    }
    .map(Some)
}

fn per_layer(f: Fields<'_>, key: &str, len: usize, num_layers: u64) -> Result<(), ConfigError> {
    if len as u64 == num_layers {
        return Ok(());
    }
    Err(f.err(
        key,
        format!("{len} entries for {num_layers} layers"),
        "give one entry per layer",
    ))
}
