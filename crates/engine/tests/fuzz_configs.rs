//! The config readers never panic on user input: arbitrary bytes, and arbitrary JSON/YAML trees
//! shaped like configs, all give a model or an error.

#![allow(clippy::unwrap_used)]

use fp8_engine::config::model_from_value;
use fp8_engine::{Parallel, inventory, load_model};
use proptest::prelude::*;
use serde_json::{Value, json};

fn arb_value() -> impl Strategy<Value = Value> {
    let key = prop_oneof![
        Just("num_layers"),
        Just("hidden_size"),
        Just("num_attention_heads"),
        Just("ffn_hidden_size"),
        Just("num_query_groups"),
        Just("kv_channels"),
        Just("num_moe_experts"),
        Just("moe_router_topk"),
        Just("moe_layer_freq"),
        Just("multi_latent_attention"),
        Just("kv_lora_rank"),
        Just("q_lora_rank"),
        Just("normalization"),
        Just("swiglu"),
        Just("model"),
        Just("foundation"),
        Just("image_encoder"),
        Just("model_type"),
        Just("text_config"),
        Just("vision_config"),
        Just("num_hidden_layers"),
        Just("intermediate_size"),
        Just("n_routed_experts"),
        Just("num_experts"),
        Just("num_local_experts"),
        Just("moe_intermediate_size"),
        Just("hidden_activation"),
        Just("num_experts_per_tok"),
        Just("defaults"),
    ];
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        (0u64..5000).prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(Value::from),
        prop_oneof![
            Just("RMSNorm"),
            Just("LayerNorm"),
            Just("llama"),
            Just("deepseek_v3"),
            Just("qwen3_vl_moe"),
            Just("olmoe"),
            Just("glm4_moe"),
            Just("gemma3"),
            Just("([0]*3+[1]*58)"),
            Just("[1]*9999999999"),
            Just("x")
        ]
        .prop_map(Value::from),
    ];
    leaf.prop_recursive(3, 64, 10, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map(key.clone().prop_map(String::from), inner, 0..10)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn config_trees_never_panic(v in arb_value(), hf in any::<bool>(), tp in 1u32..16, ep in 1u32..64) {
        if let Ok(m) = model_from_value(&v, std::path::Path::new("fuzz.yaml"), "fuzz", hf) {
            for c in &m.components {
                let _ = inventory(c, Parallel { tp, ep, etp: 1, cp: 1, sequence_parallel: tp > 1 });
            }
        }
    }

    #[test]
    fn config_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..400), json_ext in any::<bool>()) {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join(if json_ext { "c.json" } else { "c.yaml" });
        std::fs::write(&p, &bytes).unwrap();
        let _ = load_model(&p);
    }
}

#[test]
fn huge_counts_do_not_overflow_the_inventory() {
    let v = json!({"num_layers": u64::MAX, "hidden_size": u64::MAX, "num_attention_heads": 1, "ffn_hidden_size": u64::MAX,
                   "num_moe_experts": 1, "moe_ffn_hidden_size": u64::MAX});
    if let Ok(m) = model_from_value(&v, std::path::Path::new("big.yaml"), "big", false) {
        let _ = inventory(&m.components[0], Parallel::tp(1));
    }
}
