//! Megatron's experts: their count, widths and top-k, and which layers are dense
//! (`first_k_dense_replace`, or `moe_layer_freq` as an integer or a layer pattern, counted).

use crate::config::error::ConfigError;
use crate::config::fields::Fields;
use crate::model::Moe;

pub(super) fn moe(
    f: Fields<'_>,
    num_layers: u64,
    ffn: u64,
    defaults: &mut Vec<String>,
) -> Result<Option<Moe>, ConfigError> {
    let Some(num_experts) = f.opt_u64(&["num_moe_experts", "num_experts"])? else {
        return Ok(None);
    };
    if num_experts == 0 {
        return Err(f.err(
            "num_moe_experts",
            "0 experts",
            "remove the field (or set it to null) for a dense model, or give the expert count",
        ));
    }
    let moe_ffn = match f.opt_u64(&["moe_ffn_hidden_size"])? {
        Some(v) => v,
        None => {
            defaults.push(format!(
                "moe_ffn_hidden_size absent: ffn_hidden_size = {ffn}"
            ));
            ffn
        }
    };
    let topk = match f.opt_u64(&["moe_router_topk"])? {
        Some(0) => {
            return Err(f.err(
                "moe_router_topk",
                "must be at least 1",
                "set the router's top-k",
            ));
        }
        Some(k) if k > num_experts => {
            return Err(f.err(
                "moe_router_topk",
                format!("{k} is more than the {num_experts} experts"),
                "a token is routed to at most num_moe_experts experts; check both values",
            ));
        }
        Some(k) => k,
        None => {
            defaults.push("moe_router_topk absent: 2 (Megatron's default)".to_owned());
            2.min(num_experts)
        }
    };
    let dense_layers = dense_layer_count(f, num_layers)?;
    Ok(Some(Moe {
        num_experts,
        moe_ffn_hidden_size: moe_ffn,
        router_topk: topk,
        shared_expert_ffn_hidden_size: f
            .opt_u64(&["moe_shared_expert_intermediate_size"])?
            .filter(|s| *s > 0),
        dense_layers,
    }))
}

/// Counts layers with a dense MLP from `moe_layer_freq` (an int, a 0/1 list, or the
/// `([0]*3+[1]*58)` expression LoongForge configs use) or `first_k_dense_replace`.
fn dense_layer_count(f: Fields<'_>, num_layers: u64) -> Result<u64, ConfigError> {
    if let Some(k) = f.opt_u64(&["first_k_dense_replace"])? {
        return Ok(k.min(num_layers));
    }
    let Some(v) = f.map.get("moe_layer_freq").filter(|v| !v.is_null()) else {
        return Ok(0);
    };
    let bad = |why: &str| {
        f.err(
            "moe_layer_freq",
            format!("{why} (found {v})"),
            "write an integer, a list of 0/1 per layer, or an expression like ([0]*3+[1]*58)",
        )
    };
    // (layers described, dense layers among them), counted without expanding the pattern.
    let (len, dense) = match v {
        serde_json::Value::Number(n) => {
            let k = n
                .as_u64()
                .filter(|k| *k > 0)
                .ok_or_else(|| bad("not a positive integer"))?;
            // Layers 0, k, 2k, ... are MoE.
            (num_layers, num_layers - num_layers.div_ceil(k))
        }
        serde_json::Value::Array(a) => {
            let bits: Vec<u64> = a
                .iter()
                .map(|x| x.as_u64().filter(|b| *b <= 1))
                .collect::<Option<_>>()
                .ok_or_else(|| bad("list entries must be 0 or 1"))?;
            let dense = bits.iter().filter(|b| **b == 0).count() as u64;
            (bits.len() as u64, dense)
        }
        serde_json::Value::String(s) => {
            parse_layer_expr(s).ok_or_else(|| bad("cannot parse expression"))?
        }
        _ => return Err(bad("unsupported type")),
    };
    if len != num_layers {
        return Err(bad(&format!(
            "describes {len} layers but num_layers is {num_layers}"
        )));
    }
    Ok(dense)
}

/// `(layers, dense layers)` that a `([0]*3+[1]*58)` expression describes, counted without
/// expanding it (a repeat count is bounded by nothing but 64 bits); `None` where it does not
/// parse or its counts overflow.
fn parse_layer_expr(s: &str) -> Option<(u64, u64)> {
    let s: String = s.chars().filter(|c| !c.is_whitespace()).collect();
    let s = s
        .strip_prefix('(')
        .and_then(|x| x.strip_suffix(')'))
        .unwrap_or(&s);
    let (mut len, mut dense) = (0u64, 0u64);
    for term in s.split('+') {
        let (list, times) = match term.split_once('*') {
            Some((l, n)) => (l, n.parse::<u64>().ok()?),
            None => (term, 1),
        };
        let inner = list.strip_prefix('[')?.strip_suffix(']')?;
        let items: Vec<u64> = inner
            .split(',')
            .map(|x| x.parse::<u64>().ok().filter(|b| *b <= 1))
            .collect::<Option<_>>()?;
        let zeros = items.iter().filter(|b| **b == 0).count() as u64;
        len = len.checked_add((items.len() as u64).checked_mul(times)?)?;
        dense = dense.checked_add(zeros.checked_mul(times)?)?;
    }
    Some((len, dense))
}

#[cfg(test)]
mod tests {
    use super::parse_layer_expr;

    #[test]
    fn layer_expressions() {
        assert_eq!(parse_layer_expr("([0]*3+[1]*58)"), Some((61, 3)));
        assert_eq!(parse_layer_expr("[1,0]*2"), Some((4, 2)));
        assert_eq!(parse_layer_expr("[2]*3"), None);
        assert_eq!(parse_layer_expr("nonsense"), None);
        // Counted, never expanded: a huge repeat is a count, an overflowing one no pattern.
        assert_eq!(
            parse_layer_expr("[0]*1000000000000+[1]"),
            Some((1_000_000_000_001, 1_000_000_000_000))
        );
        assert_eq!(parse_layer_expr("[0,1]*9223372036854775808"), None);
    }
}
