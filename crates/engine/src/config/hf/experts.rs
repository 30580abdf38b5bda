//! The experts and multi-latent attention of HuggingFace's MoE families: where each family keeps
//! its expert count, widths, top-k and which layers are sparse.

use std::collections::BTreeSet;

use crate::model::{Mla, Moe};

use crate::config::error::ConfigError;
use crate::config::fields::Fields;

/// Qwen2/3-MoE experts: every `decoder_sparse_step`-th layer sparse (`(i + 1) % step == 0`)
/// unless `mlp_only_layers` lists it.
pub(super) fn qwen_moe(f: Fields<'_>, num_layers: u64) -> Result<Moe, ConfigError> {
    let num_experts = f.req_pos(&["num_experts"], "routed experts")?;
    let moe_ffn = f.req_pos(&["moe_intermediate_size"], "expert FFN size")?;
    let topk = f.req_pos(&["num_experts_per_tok"], "router top-k")?;
    let step = f.opt_u64(&["decoder_sparse_step"])?.unwrap_or(1).max(1);
    let mlp_only = match f.map.get("mlp_only_layers").filter(|v| !v.is_null()) {
        Some(v) => listed_layers(f, "mlp_only_layers", v, num_layers)?,
        None => Default::default(),
    };
    let sparse = every_nth(0, num_layers - 1, step)
        - mlp_only
            .iter()
            .filter(|i| (*i + 1).is_multiple_of(step))
            .count() as u64;
    let dense_layers = num_layers - sparse;
    Ok(Moe {
        num_experts,
        moe_ffn_hidden_size: moe_ffn,
        router_topk: topk,
        shared_expert_ffn_hidden_size: f
            .opt_u64(&["shared_expert_intermediate_size"])?
            .filter(|s| *s > 0),
        dense_layers,
    })
}

/// Mixtral-style experts in every layer, `ffn` wide, no shared expert; `experts` names the
/// field with the routed expert count.
/// Granite MoE's shared variant adds one shared expert `shared_intermediate_size` wide.
pub(super) fn every_layer_moe(
    f: Fields<'_>,
    experts: &'static str,
    ffn: u64,
) -> Result<Moe, ConfigError> {
    Ok(Moe {
        num_experts: f.req_pos(&[experts], "routed experts")?,
        moe_ffn_hidden_size: ffn,
        router_topk: f.req_pos(&["num_experts_per_tok"], "router top-k")?,
        shared_expert_ffn_hidden_size: f.opt_u64(&["shared_intermediate_size"])?.filter(|s| *s > 0),
        dense_layers: 0,
    })
}

/// ERNIE 4.5's experts: layer `i` is MoE when `moe_layer_start_index <= i <=
/// moe_layer_end_index` (-1 or absent: the last layer) and `(i + 1) % moe_layer_interval == 0`;
/// `moe_num_shared_experts` shared experts of `moe_intermediate_size` each.
pub(super) fn ernie_moe(f: Fields<'_>, num_layers: u64) -> Result<Moe, ConfigError> {
    let moe_ffn = f.req_pos(&["moe_intermediate_size"], "expert FFN size")?;
    let start = f.opt_u64(&["moe_layer_start_index"])?.unwrap_or(0);
    let last = num_layers.saturating_sub(1);
    let end = match f.map.get("moe_layer_end_index") {
        None => last,
        Some(v) => match v.as_i64() {
            Some(-1) => last,
            Some(e) if e >= 0 => (e as u64).min(last),
            _ => {
                return Err(f.err(
                    "moe_layer_end_index",
                    format!("{v} is not a layer index"),
                    "set the last MoE layer's index, or -1 for the last layer",
                ));
            }
        },
    };
    let step = f.opt_u64(&["moe_layer_interval"])?.unwrap_or(1).max(1);
    let sparse = every_nth(start, end, step);
    let shared = f.opt_u64(&["moe_num_shared_experts"])?.unwrap_or(0);
    Ok(Moe {
        num_experts: f.req_pos(&["moe_num_experts"], "routed experts")?,
        moe_ffn_hidden_size: moe_ffn,
        router_topk: f.req_pos(&["moe_k"], "router top-k")?,
        shared_expert_ffn_hidden_size: (shared > 0).then_some(shared * moe_ffn),
        dense_layers: num_layers - sparse.min(num_layers),
    })
}

/// DeepSeek-V2/V3 and GLM-4.5 experts: routed and shared experts after the first dense layers,
/// in every `moe_layer_freq`-th layer from there (layer `i` is MoE when `i >=
/// first_k_dense_replace` and `i % moe_layer_freq == 0`, as their modelling code has it).
pub(super) fn deepseek_moe(f: Fields<'_>, num_layers: u64) -> Result<Moe, ConfigError> {
    let moe_ffn = f.req_pos(&["moe_intermediate_size"], "expert FFN size")?;
    let shared = f.opt_u64(&["n_shared_experts"])?.unwrap_or(0);
    let first = f.opt_u64(&["first_k_dense_replace"])?.unwrap_or(0);
    let freq = f.opt_u64(&["moe_layer_freq"])?.unwrap_or(1).max(1);
    let sparse = multiples(first, num_layers - 1, freq);
    Ok(Moe {
        num_experts: f.req_pos(&["n_routed_experts"], "routed experts")?,
        moe_ffn_hidden_size: moe_ffn,
        router_topk: f.req_pos(&["num_experts_per_tok"], "router top-k")?,
        shared_expert_ffn_hidden_size: (shared > 0).then_some(shared * moe_ffn),
        dense_layers: num_layers - sparse,
    })
}

/// Llama 4's experts: routed and one shared expert of `intermediate_size` in the layers
/// `moe_layers` lists (as transformers saves it), else every `interleave_moe_layer_step`-th
/// layer (Megatron's `moe_layer_freq`).
pub(super) fn llama4_moe(f: Fields<'_>, num_layers: u64) -> Result<Moe, ConfigError> {
    let moe_ffn = f.req_pos(&["intermediate_size"], "expert FFN size")?;
    let sparse = match f.map.get("moe_layers").filter(|v| !v.is_null()) {
        Some(v) => listed_layers(f, "moe_layers", v, num_layers)?.len() as u64,
        None => {
            let step = f
                .opt_u64(&["interleave_moe_layer_step"])?
                .unwrap_or(1)
                .max(1);
            every_nth(0, num_layers - 1, step)
        }
    };
    Ok(Moe {
        num_experts: f.req_pos(&["num_local_experts"], "routed experts")?,
        moe_ffn_hidden_size: moe_ffn,
        router_topk: f.req_pos(&["num_experts_per_tok"], "router top-k")?,
        shared_expert_ffn_hidden_size: Some(moe_ffn),
        dense_layers: num_layers - sparse,
    })
}

/// The distinct layers a list of layer indices names, each checked to be one of the model's
/// `num_layers`.
fn listed_layers(
    f: Fields<'_>,
    key: &str,
    v: &serde_json::Value,
    num_layers: u64,
) -> Result<BTreeSet<u64>, ConfigError> {
    let bad = |why: String| {
        f.err(
            key,
            why,
            format!("list layer indices, each below num_hidden_layers ({num_layers})"),
        )
    };
    let list = v
        .as_array()
        .ok_or_else(|| bad(format!("expected a list of layer indices, found {v}")))?;
    list.iter()
        .map(|x| match x.as_u64() {
            Some(i) if i < num_layers => Ok(i),
            _ => Err(bad(format!("{x} is not a layer index of this model"))),
        })
        .collect()
}

/// How many of the layers `first..=last` are multiples of `step` (`i % step == 0`, DeepSeek's
/// `moe_layer_freq` rule), counted without walking them.
fn multiples(first: u64, last: u64, step: u64) -> u64 {
    if first > last {
        return 0;
    }
    last / step + 1 - first.div_ceil(step)
}

/// How many of the layers `first..=last` (0-based) are every `step`-th (`(i + 1) % step == 0`,
/// HF's sparse-step rule), counted without walking them: a config's layer count is bounded
/// only after it is read.
fn every_nth(first: u64, last: u64, step: u64) -> u64 {
    if first > last {
        return 0;
    }
    (last + 1) / step - first / step
}

/// DeepSeek-V2/V3's multi-latent attention.
pub(super) fn mla(f: Fields<'_>) -> Result<Mla, ConfigError> {
    Ok(Mla {
        q_lora_rank: f.opt_u64(&["q_lora_rank"])?.filter(|r| *r > 0),
        kv_lora_rank: f.req_pos(&["kv_lora_rank"], "MLA key/value rank")?,
        qk_head_dim: f.req_pos(&["qk_nope_head_dim"], "MLA per-head q/k dim")?,
        qk_pos_emb_head_dim: f.req_u64(&["qk_rope_head_dim"], "MLA rotary dim")?,
        v_head_dim: f.req_pos(&["v_head_dim"], "MLA value dim")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn multiples_counts_as_walking_the_layers_does() {
        for first in 0..12 {
            for last in 0..12 {
                for step in 1..5 {
                    let walked = (first..=last)
                        .filter(|i: &u64| i.is_multiple_of(step))
                        .count() as u64;
                    assert_eq!(
                        multiples(first, last, step),
                        walked,
                        "{first}..={last} / {step}"
                    );
                }
            }
        }
        assert_eq!(multiples(0, u64::MAX - 1, 2), u64::MAX / 2 + 1);
    }

    #[test]
    fn every_nth_counts_as_walking_the_layers_does() {
        for first in 0..12 {
            for last in 0..12 {
                for step in 1..5 {
                    let walked = (first..=last)
                        .filter(|i: &u64| (i + 1).is_multiple_of(step))
                        .count() as u64;
                    assert_eq!(
                        every_nth(first, last, step),
                        walked,
                        "{first}..={last} / {step}"
                    );
                }
            }
        }
        assert_eq!(every_nth(0, u64::MAX - 1, 2), u64::MAX / 2);
    }
}
