//! The config readers never panic on user input: arbitrary bytes, and arbitrary JSON/YAML trees
//! shaped like configs, all give a model or an error; well-formed configs of random dimensions
//! (Megatron and HuggingFace forms, dense and MoE) parse and reach the inventory, and one field
//! of them set to a hostile value still gives a model or an error.

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
        Just("architectures"),
        Just("interleave_moe_layer_step"),
        Just("intermediate_size_mlp"),
        Just("embed_dim"),
        Just("mlp_ratio"),
        Just("depth"),
        Just("num_heads"),
        Just("moe_num_experts"),
        Just("moe_k"),
        Just("moe_layer_start_index"),
        Just("moe_layer_end_index"),
        Just("moe_layer_interval"),
        Just("moe_num_shared_experts"),
        Just("shared_intermediate_size"),
        Just("n_embd"),
        Just("n_layer"),
        Just("n_head"),
        Just("n_inner"),
        Just("multi_query"),
        Just("use_parallel_residual"),
        Just("moe_layers"),
        Just("multi_query_group_num"),
        Just("new_decoder_architecture"),
        Just("num_kv_heads"),
        Just("kv_channels"),
        Just("mlp_only_layers"),
        Just("decoder_sparse_step"),
        Just("first_k_dense_replace"),
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
            Just("llama4"),
            Just("llama4_text"),
            Just("qwen2_5_vl"),
            Just("ernie4_5_moe"),
            Just("internvl"),
            Just("dots1"),
            Just("gpt2"),
            Just("gpt_bigcode"),
            Just("gpt_neox"),
            Just("cohere"),
            Just("deepseek"),
            Just("stablelm"),
            Just("chatglm"),
            Just("falcon"),
            Just("kimi_k2"),
            Just("DeepseekV3ForCausalLM"),
            Just("Qwen2VLForConditionalGeneration"),
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

/// A well-formed config of random dimensions: `(tree, hf, heads)`, heads dividing every size
/// that TP splits.
fn arb_config() -> impl Strategy<Value = (Value, bool, u64)> {
    (
        any::<bool>(),
        1u64..6,
        prop::sample::select(vec![4u64, 8, 16, 32]),
        prop::sample::select(vec![32u64, 64, 128]),
        1u64..5,
        prop::option::of((prop::sample::select(vec![4u64, 8, 16, 64]), 1u64..4)),
    )
        .prop_map(|(hf, layers, heads, head_dim, ffn_mult, moe)| {
            let hidden = heads * head_dim;
            let ffn = hidden * ffn_mult;
            let v = if hf {
                let mut v = json!({"architectures": ["LlamaForCausalLM"], "model_type": "llama",
                    "num_hidden_layers": layers, "hidden_size": hidden, "intermediate_size": ffn,
                    "num_attention_heads": heads, "num_key_value_heads": heads, "vocab_size": 1024});
                if let Some((experts, topk)) = moe {
                    v = json!({"architectures": ["MixtralForCausalLM"], "model_type": "mixtral",
                        "num_hidden_layers": layers, "hidden_size": hidden, "intermediate_size": ffn,
                        "num_attention_heads": heads, "num_key_value_heads": heads, "vocab_size": 1024,
                        "num_local_experts": experts, "num_experts_per_tok": topk});
                }
                v
            } else {
                let mut v = json!({"num_layers": layers, "hidden_size": hidden, "ffn_hidden_size": ffn,
                    "num_attention_heads": heads, "num_query_groups": heads, "kv_channels": head_dim,
                    "swiglu": true, "normalization": "RMSNorm"});
                if let Some((experts, topk)) = moe {
                    v["num_moe_experts"] = json!(experts);
                    v["moe_ffn_hidden_size"] = json!(ffn);
                    v["moe_router_topk"] = json!(topk);
                }
                v
            };
            (v, hf, heads)
        })
}

/// A value to put in one field of a well-formed config.
fn hostile() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        Just(json!(0)),
        Just(json!(-1)),
        Just(json!(u64::MAX)),
        Just(json!(1.5)),
        Just(json!("x")),
        Just(json!([1, 2])),
        Just(json!({"a": 1})),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn well_formed_configs_parse_and_reach_the_inventory(
        (v, hf, heads) in arb_config(),
        tp in prop::sample::select(vec![1u32, 2, 4]),
    ) {
        let m = model_from_value(&v, std::path::Path::new("gen.json"), "gen", hf)
            .map_err(|e| TestCaseError::fail(format!("{v}: {e}")))?;
        prop_assert!(!m.components.is_empty());
        if u64::from(tp) <= heads {
            let modules = inventory(&m.components[0], Parallel::tp(tp))
                .map_err(|e| TestCaseError::fail(format!("{v} at tp {tp}: {e}")))?;
            prop_assert!(modules.len() >= 4, "{v}: {modules:?}");
            prop_assert!(modules.iter().all(|s| s.in_features > 0 && s.out_features > 0));
        }
    }

    #[test]
    fn a_hostile_field_in_a_well_formed_config_never_panics(
        (mut v, hf, _) in arb_config(),
        field in 0usize..12,
        bad in hostile(),
        tp in 1u32..16,
    ) {
        let keys: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
        let key = keys[field % keys.len()].clone();
        v[&key] = bad;
        if let Ok(m) = model_from_value(&v, std::path::Path::new("gen.json"), "gen", hf) {
            for c in &m.components {
                let _ = inventory(c, Parallel::tp(tp));
            }
        }
    }

    /// The FP8 fields a trainer sets (`fp8`, `fp8_format`, `fp8_recipe`, the amax options), each
    /// well-formed, absent or hostile: never a panic; read, the format is the value as written
    /// (lowercase), and the amax options are set exactly where the config trains delayed scaling
    /// or names them (Megatron's defaults, 1 and most_recent, filled in).
    #[test]
    fn a_configs_fp8_fields_never_panic_and_read_as_megatron_does(
        (base, hf, _) in arb_config(),
        fields in prop::collection::vec(
            (
                prop::sample::select(vec!["fp8", "fp8_format", "fp8_recipe", "fp8_amax_history_len", "fp8_amax_compute_algo"]),
                prop_oneof![
                    prop::sample::select(vec!["e4m3", "HYBRID", " hybrid ", "none", "delayed", "tensorwise", "max", "most_recent", ""])
                        .prop_map(|s| json!(s)),
                    Just(json!(true)),
                    Just(json!(1024)),
                    hostile(),
                ],
            ),
            0..5,
        ),
    ) {
        prop_assume!(!hf);
        let mut v = base;
        for (k, val) in &fields {
            v[*k] = val.clone();
        }
        let Ok(m) = model_from_value(&v, std::path::Path::new("gen.yaml"), "gen", false) else {
            return Ok(());
        };
        let fp8 = &m.components[0].fp8;
        if let Some(f) = &fp8.format {
            prop_assert!(!f.is_empty() && f == &f.trim().to_ascii_lowercase() && f != "none" && f != "true", "{v}: {f:?}");
        }
        let delayed = fp8.recipe.as_deref().is_some_and(|r| r.trim().eq_ignore_ascii_case("delayed"));
        if delayed {
            prop_assert!(fp8.amax_history_len.is_some() && fp8.amax_compute_algo.is_some(), "{v}");
        } else {
            prop_assert_eq!(fp8.amax_history_len, v.get("fp8_amax_history_len").and_then(Value::as_u64), "{}", v);
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

/// Arbitrary trees shaped like configs, grafted onto well-formed ones so that a share of them
/// parses: every tree gives a model or an error, and the ones that parse reach the inventory at
/// random layouts without a panic. The run counts how many parsed and reached it, and fails if
/// too few did (a generator that only makes errors tests nothing past the parser).
#[test]
fn config_trees_never_panic_and_many_reach_the_inventory() {
    use proptest::test_runner::{Config, TestRunner};
    let strategy = (
        arb_config(),
        arb_value(),
        any::<bool>(),
        // Mostly sizes a config's heads divide, and now and then one that does not.
        prop::sample::select(vec![1u32, 1, 2, 4, 3, 16]),
        prop::sample::select(vec![1u32, 1, 2, 8, 7, 64]),
        any::<bool>(),
    );
    let mut runner = TestRunner::new(Config {
        cases: 512,
        ..Config::default()
    });
    let parsed = std::cell::Cell::new(0u32);
    let inventoried = std::cell::Cell::new(0u32);
    runner
        .run(
            &strategy,
            |((mut cfg, hf, _), tree, graft, tp, ep, pure)| {
                // Either the arbitrary tree alone, or its fields grafted over a well-formed config.
                let v = if pure {
                    tree
                } else {
                    if let (Some(o), Value::Object(t)) = (cfg.as_object_mut(), tree) {
                        for (k, x) in t.into_iter().take(if graft { 3 } else { 1 }) {
                            o.insert(k, x);
                        }
                    }
                    cfg
                };
                if let Ok(m) = model_from_value(&v, std::path::Path::new("fuzz.yaml"), "fuzz", hf) {
                    parsed.set(parsed.get() + 1);
                    for c in &m.components {
                        let par = Parallel {
                            tp,
                            ep,
                            etp: 1,
                            cp: 1,
                            sequence_parallel: tp > 1,
                        };
                        if inventory(c, par).is_ok() {
                            inventoried.set(inventoried.get() + 1);
                        }
                    }
                }
                Ok(())
            },
        )
        .unwrap();
    assert!(
        parsed.get() >= 100 && inventoried.get() >= 50,
        "of 512 trees {} parsed and {} reached the inventory: the generator tests too little past the parser",
        parsed.get(),
        inventoried.get()
    );
}

#[test]
fn huge_counts_do_not_overflow_the_inventory() {
    let v = json!({"num_layers": u64::MAX, "hidden_size": u64::MAX, "num_attention_heads": 1, "ffn_hidden_size": u64::MAX,
                   "num_moe_experts": 1, "moe_ffn_hidden_size": u64::MAX});
    // The reader refuses sizes no GPU holds, naming the field; below that bound the inventory's
    // per-rank shapes stay exact (no wrap-around).
    let e = model_from_value(&v, std::path::Path::new("big.yaml"), "big", false)
        .err()
        .map(|e| e.to_string());
    let inv = model_from_value(&v, std::path::Path::new("big.yaml"), "big", false)
        .ok()
        .map(|m| {
            inventory(&m.components[0], Parallel::tp(1))
                .map(|_| ())
                .map_err(|e| e.to_string())
        });
    let refused = e.clone().or_else(|| inv.clone().and_then(Result::err));
    let refused = refused.unwrap_or_else(|| panic!("u64::MAX sizes were accepted: {inv:?}"));
    assert!(
        refused.contains("big.yaml")
            || refused.contains("hidden_size")
            || refused.contains("overflow"),
        "{refused}"
    );
}

/// Layer counts and layer patterns are counted, never walked or expanded, before the reader's
/// bounds apply: each of these used to loop or allocate per layer (hours, or exabytes).
#[test]
fn huge_layer_counts_and_patterns_are_refused_without_walking_the_layers() {
    let n = 1_000_000_000_000_000u64;
    let megatron = |freq: Value, layers: u64| {
        json!({"num_layers": layers, "hidden_size": 128, "ffn_hidden_size": 256,
               "num_attention_heads": 8, "num_moe_experts": 8, "moe_ffn_hidden_size": 64,
               "moe_router_topk": 2, "moe_layer_freq": freq})
    };
    let hf = |t: &str, extra: Value| {
        let mut v = json!({"model_type": t, "hidden_size": 128, "intermediate_size": 256,
            "moe_intermediate_size": 64, "num_hidden_layers": n, "num_attention_heads": 8,
            "num_experts": 8, "num_local_experts": 8, "moe_num_experts": 8, "moe_k": 2,
            "num_experts_per_tok": 2});
        v.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        v
    };
    let cases = [
        (megatron(json!(2), n), false, "num_layers"),
        (
            megatron(json!("[0]*99999999999999+[1]*3"), 4),
            false,
            "moe_layer_freq",
        ),
        (
            megatron(json!("[0,1]*9223372036854775808"), 4),
            false,
            "moe_layer_freq",
        ),
        (
            hf("qwen3_moe", json!({"decoder_sparse_step": 2})),
            true,
            "num_layers",
        ),
        (
            hf("ernie4_5_moe", json!({"moe_layer_interval": 2})),
            true,
            "num_layers",
        ),
        (
            hf("gpt2", json!({"n_layer": n, "n_embd": 128, "n_head": 8})),
            true,
            "num_layers",
        ),
        (
            hf(
                "llama4_text",
                json!({"intermediate_size_mlp": 256, "interleave_moe_layer_step": 2}),
            ),
            true,
            "num_layers",
        ),
    ];
    for (v, is_hf, field) in cases {
        let e = model_from_value(&v, std::path::Path::new("big.json"), "big", is_hf)
            .err()
            .unwrap_or_else(|| panic!("accepted: {v}"))
            .to_string();
        assert!(e.contains(field), "{e}");
    }
}

#[test]
fn a_width_too_large_to_derive_the_mlp_from_is_refused_naming_the_field() {
    // No ffn_hidden_size: the reader derives 4 x hidden_size, which must not wrap (the fuzzer
    // found hidden_size above 2^62 panicking there).
    let v = json!({"num_layers": 2, "hidden_size": u64::MAX / 2, "num_attention_heads": 1});
    let e = model_from_value(&v, std::path::Path::new("wide.yaml"), "wide", false)
        .expect_err("refused")
        .to_string();
    assert!(
        e.contains("wide.yaml") && e.contains("hidden_size") && e.contains("ffn_hidden_size"),
        "{e}"
    );
}
