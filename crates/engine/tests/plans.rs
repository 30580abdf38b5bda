//! Inventory shapes, plan decisions, and snapshots of the plan for every fixture model.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;

use fp8_engine::{
    LayoutError, ModelDesc, Parallel, PlanError, Role, TeClass, TokenConfig, inventory, load_model,
    plan, render,
};
use fp8_policy::{ModuleKind, Policy};

mod common;
use common::{cfg, model, policy};

fn shapes(
    m: &ModelDesc,
    role: Role,
    p: Parallel,
) -> BTreeMap<String, (u64, u64, u32, ModuleKind, u64)> {
    inventory(m.component(role).unwrap(), p)
        .unwrap()
        .into_iter()
        .map(|s| {
            (
                s.name.rsplit('.').take(2).collect::<Vec<_>>().join("<"),
                (
                    s.in_features,
                    s.out_features,
                    s.num_gemms,
                    s.module_kind,
                    s.layers,
                ),
            )
        })
        .collect()
}

#[test]
fn qwen72b_shapes_match_the_measured_anchor_modules() {
    let m = model("qwen2_5_72b.yaml");
    let tp1 = shapes(&m, Role::Llm, Parallel::tp(1));
    assert_eq!(
        tp1["linear_qkv<self_attention"],
        (8192, 10240, 1, ModuleKind::LayernormColumn, 80)
    );
    assert_eq!(
        tp1["linear_proj<self_attention"],
        (8192, 8192, 1, ModuleKind::Row, 80)
    );
    assert_eq!(
        tp1["linear_fc1<mlp"],
        (8192, 59136, 1, ModuleKind::LayernormColumn, 80)
    );
    assert_eq!(tp1["linear_fc2<mlp"], (29568, 8192, 1, ModuleKind::Row, 80));
    let tp8 = shapes(&m, Role::Llm, Parallel::tp(8));
    assert_eq!(tp8["linear_qkv<self_attention"].1, 1280);
    assert_eq!(tp8["linear_proj<self_attention"].0, 1024);
    assert_eq!(tp8["linear_fc1<mlp"].1, 7392);
    assert_eq!(tp8["linear_fc2<mlp"].0, 3696);
}

#[test]
fn deepseek_inventory_covers_mla_experts_shared_and_dense_layers() {
    let m = model("deepseek_v3.yaml");
    let p = Parallel {
        tp: 8,
        ep: 32,
        etp: 1,
        cp: 1,
        sequence_parallel: true,
    };
    let inv = inventory(m.component(Role::Llm).unwrap(), p).unwrap();
    let by = |suffix: &str| {
        inv.iter()
            .find(|s| s.name.ends_with(suffix))
            .unwrap_or_else(|| panic!("{suffix}"))
    };
    let q_down = by("linear_q_down_proj");
    assert_eq!(
        (
            q_down.te_class,
            q_down.module_kind,
            q_down.in_features,
            q_down.out_features
        ),
        (TeClass::Linear, ModuleKind::Duplicated, 7168, 1536)
    );
    assert_eq!(
        q_down.row_divisor, 8,
        "unsplit modules run on the sequence shard under SP"
    );
    assert_eq!(by("linear_kv_down_proj").out_features, 576);
    assert_eq!(by("linear_q_up_proj").out_features, 16 * 192);
    assert_eq!(by("linear_kv_up_proj").in_features, 512);
    assert_eq!(by("linear_kv_up_proj").out_features, 16 * 256);
    assert_eq!(by("self_attention.linear_proj").in_features, 16 * 128);
    let fc1 = by("mlp.linear_fc1");
    assert_eq!((fc1.layers, fc1.out_features), (3, 2 * 18432 / 8));
    let e1 = by("experts.linear_fc1");
    assert_eq!(
        (e1.layers, e1.num_gemms, e1.module_kind, e1.out_features),
        (58, 8, ModuleKind::ColumnGrouped, 4096)
    );
    assert!(e1.is_expert);
    let e2 = by("experts.linear_fc2");
    assert_eq!(
        (e2.module_kind, e2.in_features),
        (ModuleKind::RowGrouped, 2048)
    );
    let s1 = by("shared_experts.linear_fc1");
    assert_eq!(
        (s1.module_kind, s1.out_features, s1.is_expert),
        (ModuleKind::Column, 512, false)
    );
    assert_eq!(by("shared_experts.linear_fc2").in_features, 256);
    assert_eq!(
        inv.iter()
            .filter(|s| s.module_kind == ModuleKind::Duplicated)
            .count(),
        2
    );
}

#[test]
fn layouts_that_do_not_divide_are_errors() {
    let m = model("qwen2_5_72b.yaml");
    let e = inventory(m.component(Role::Llm).unwrap(), Parallel::tp(3)).unwrap_err();
    assert!(
        e.to_string().contains("num_attention_heads = 64") && e.to_string().contains("tp = 3"),
        "{e}"
    );
    let d = model("deepseek_v3.yaml");
    let e = inventory(
        d.component(Role::Llm).unwrap(),
        Parallel {
            ep: 3,
            ..Parallel::tp(1)
        },
    )
    .unwrap_err();
    assert!(e.to_string().contains("num_experts"), "{e}");
}

#[test]
fn expert_parallelism_on_a_dense_model_is_refused_but_a_vlms_vision_encoder_takes_it() {
    let m = model("qwen2_5_72b.yaml");
    let ep8 = Parallel {
        ep: 8,
        ..Parallel::tp(1)
    };
    let e = inventory(m.component(Role::Llm).unwrap(), ep8).unwrap_err();
    assert!(
        matches!(e, LayoutError::NoExperts { ep: 8, .. }) && e.to_string().contains("fix: ep 1"),
        "{e}"
    );
    assert!(inventory(m.component(Role::Llm).unwrap(), Parallel::tp(1)).is_ok());
    // A VLM's dense vision encoder runs beside its MoE language model's expert parallelism.
    let vlm = model("qwen3_vl_235b_a22b.yaml");
    for c in &vlm.components {
        assert!(inventory(c, ep8).is_ok(), "{:?}", c.role);
    }
}

#[test]
fn experts_use_etp_num_gemms_and_topk_tokens() {
    let m = model("deepseek_v3.yaml");
    let pol = policy("test_mixed.json");
    let p = Parallel {
        tp: 8,
        ep: 32,
        etp: 1,
        cp: 1,
        sequence_parallel: true,
    };
    // 8192 tokens x topk 8 = 65536 >= the (etp 1, num_gemms 8) threshold.
    let plan8k = plan(
        &m,
        &cfg(
            p,
            &[(Role::Llm, TokenConfig::new(8192, 1))],
            &[(Role::Llm, &pol)],
        ),
    )
    .unwrap();
    let e1 = plan8k
        .modules
        .iter()
        .find(|x| x.spec.name.ends_with("experts.linear_fc1"))
        .unwrap();
    assert_eq!(e1.num_tokens, 65536);
    assert!(e1.use_fp8, "{}", e1.reason);
    // With CP 2 each rank sees half: below the threshold.
    let p_cp = Parallel { cp: 2, ..p };
    let tokens = TokenConfig {
        context_parallel_size: 2,
        ..TokenConfig::new(8192, 1)
    };
    let cp_plan = plan(&m, &cfg(p_cp, &[(Role::Llm, tokens)], &[(Role::Llm, &pol)])).unwrap();
    let e1 = cp_plan
        .modules
        .iter()
        .find(|x| x.spec.name.ends_with("experts.linear_fc1"))
        .unwrap();
    assert_eq!(e1.num_tokens, 32768);
    assert!(!e1.use_fp8);
}

#[test]
fn vlm_components_have_their_own_tokens_and_policies() {
    let m = model("qwen3_vl_235b_a22b.yaml");
    let llm_pol = policy("test_mixed.json");
    let vit_pol = policy("test_vit.json");
    let p = Parallel {
        tp: 1,
        ep: 16,
        etp: 1,
        cp: 1,
        sequence_parallel: false,
    };
    let tokens = [
        (Role::Llm, TokenConfig::new(4096, 1)),
        (
            Role::Vit,
            TokenConfig {
                fp8_dynamic_num_tokens: Some(20000),
                ..TokenConfig::new(4096, 1)
            },
        ),
    ];
    let pl = plan(
        &m,
        &cfg(p, &tokens, &[(Role::Llm, &llm_pol), (Role::Vit, &vit_pol)]),
    )
    .unwrap();
    let vit_fc1 = pl
        .modules
        .iter()
        .find(|x| x.spec.component == Role::Vit && x.spec.name.ends_with("linear_fc1"))
        .unwrap();
    assert_eq!(vit_fc1.num_tokens, 20000);
    assert!(
        vit_fc1.use_fp8,
        "ViT uses its own policy and token count: {}",
        vit_fc1.reason
    );
    let llm_fc1 = pl
        .modules
        .iter()
        .find(|x| {
            x.spec.component == Role::Llm && x.spec.name.ends_with("self_attention.linear_qkv")
        })
        .unwrap();
    assert_eq!(llm_fc1.num_tokens, 4096);
    // Without a ViT policy, the ViT is BF16 and the summary says so.
    let pl = plan(&m, &cfg(p, &tokens, &[(Role::Llm, &llm_pol)])).unwrap();
    assert_eq!(pl.summary.components_without_policy, vec![Role::Vit]);
    assert!(
        pl.modules
            .iter()
            .filter(|x| x.spec.component == Role::Vit)
            .all(|x| !x.use_fp8)
    );
    // Missing token settings are an error, not a silent default.
    let e = plan(&m, &cfg(p, &tokens[..1], &[(Role::Llm, &llm_pol)])).unwrap_err();
    assert_eq!(e, PlanError::NoTokens(Role::Vit));
}

#[test]
fn flop_share_is_one_when_everything_is_fp8_and_zero_without_policy() {
    let m = model("qwen2_5_72b.yaml");
    let mut all = Policy::new(1.0).unwrap();
    for (k, ub) in [
        (fp8_policy::DenseKind::LayernormColumn, "qkv"),
        (fp8_policy::DenseKind::Row, "proj"),
        (fp8_policy::DenseKind::LayernormColumn, "fc1"),
        (fp8_policy::DenseKind::Row, "fc2"),
    ] {
        all.add_dense_rule(
            k,
            ub,
            fp8_policy::DenseRule {
                tp: 2,
                min_tokens: fp8_policy::Threshold::From(0),
                min_tokens_graphed: None,
                measured_speedup: None,
            },
        )
        .unwrap();
    }
    let t = [(Role::Llm, TokenConfig::new(4096, 1))];
    let pl = plan(&m, &cfg(Parallel::tp(2), &t, &[(Role::Llm, &all)])).unwrap();
    assert_eq!(pl.summary.fp8_flop_share, 1.0);
    assert_eq!(pl.summary.fp8_modules, 320);
    let none = plan(&m, &cfg(Parallel::tp(2), &t, &[])).unwrap();
    assert_eq!(
        (none.summary.fp8_flop_share, none.summary.fp8_modules),
        (0.0, 0)
    );
}

#[test]
fn plan_snapshots() {
    let mixed = policy("test_mixed.json");
    let vit = policy("test_vit.json");
    let cases: [(&str, &str, Parallel, u64); 8] = [
        ("qwen2_5_72b", "qwen2_5_72b.yaml", Parallel::tp(1), 4096),
        ("qwen2_5_72b", "qwen2_5_72b.yaml", Parallel::tp(8), 4096),
        (
            "deepseek_v3",
            "deepseek_v3.yaml",
            Parallel {
                tp: 8,
                ep: 32,
                etp: 1,
                cp: 1,
                sequence_parallel: true,
            },
            32768,
        ),
        (
            "deepseek_v3",
            "deepseek_v3.yaml",
            Parallel {
                tp: 1,
                ep: 8,
                etp: 1,
                cp: 1,
                sequence_parallel: false,
            },
            4096,
        ),
        (
            "qwen3_vl",
            "qwen3_vl_235b_a22b.yaml",
            Parallel {
                tp: 1,
                ep: 8,
                etp: 1,
                cp: 1,
                sequence_parallel: false,
            },
            32768,
        ),
        (
            "qwen3_vl",
            "qwen3_vl_235b_a22b.yaml",
            Parallel {
                tp: 4,
                ep: 16,
                etp: 1,
                cp: 1,
                sequence_parallel: true,
            },
            2048,
        ),
        ("llama3_2_1b", "llama3_2_1b.yaml", Parallel::tp(1), 4096),
        ("llama3_2_1b", "llama3_2_1b.yaml", Parallel::tp(2), 2048),
    ];
    for (name, file, p, seq) in cases {
        let m = model(file);
        let tokens = [
            (Role::Llm, TokenConfig::new(seq, 1)),
            (
                Role::Vit,
                TokenConfig {
                    fp8_dynamic_num_tokens: Some(16384),
                    ..TokenConfig::new(seq, 1)
                },
            ),
        ];
        let pl = plan(
            &m,
            &cfg(p, &tokens, &[(Role::Llm, &mixed), (Role::Vit, &vit)]),
        )
        .unwrap();
        let snap = format!("{name}_tp{}_ep{}_seq{seq}", p.tp, p.ep);
        insta::assert_snapshot!(snap, render::table(&pl));
    }
}

/// A Qwen3.5-like dense model in Megatron's names: Gated DeltaNet in three of four layers.
fn gated_delta_net_model(extra: &str) -> ModelDesc {
    gated_delta_net_heads(4, 8, extra)
}

fn gated_delta_net_heads(keys: u64, values: u64, extra: &str) -> ModelDesc {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("qwen3_5_like.yaml");
    std::fs::write(
        &p,
        format!(
            "num_layers: 8\nhidden_size: 1024\nffn_hidden_size: 3072\nnum_attention_heads: 8\n\
             num_query_groups: 2\nkv_channels: 256\nswiglu: true\nnormalization: RMSNorm\n\
             linear_key_head_dim: 128\nlinear_value_head_dim: 128\nlinear_num_key_heads: {keys}\n\
             linear_num_value_heads: {values}\n{extra}"
        ),
    )
    .unwrap();
    load_model(&p).unwrap()
}

#[test]
fn gated_delta_net_layers_are_planned_as_megatron_builds_them() {
    // Megatron's variant and frequency: layers 4 and 8 full (gated: the config says so), the
    // other six Gated DeltaNet with in_proj (q, k, v, z, beta, alpha) and out_proj.
    let m = gated_delta_net_model(
        "experimental_attention_variant: gated_delta_net\nlinear_attention_freq: 4\nattention_output_gate: true\n",
    );
    let s = shapes(&m, Role::Llm, Parallel::tp(2));
    use ModuleKind::*;
    // qkv per rank: 4 heads x 256 x 2 (gate) + 2 x 1 group x 256.
    assert_eq!(
        s["linear_qkv<self_attention"],
        (1024, 2560, 1, LayernormColumn, 2)
    );
    // in_proj per rank: 2 x (128 x 2 key heads) + 2 x (128 x 4 value heads) + 2 x 4.
    assert_eq!(
        s["in_proj<self_attention"],
        (1024, 1544, 1, LayernormColumn, 6)
    );
    assert_eq!(s["out_proj<self_attention"], (512, 1024, 1, Row, 6));
    assert_eq!(s["linear_fc1<mlp"].4, 8);
    // A per-layer list (1 linear, 0 full) reads the same; without the gate the QKV is narrower.
    let list = gated_delta_net_model(
        "experimental_attention_variant: gated_delta_net\nlinear_attention_freq: [1, 1, 1, 0, 1, 1, 1, 0]\n",
    );
    let s = shapes(&list, Role::Llm, Parallel::tp(1));
    assert_eq!(
        s["linear_qkv<self_attention"],
        (1024, 8 * 256 + 2 * 2 * 256, 1, LayernormColumn, 2)
    );
    assert_eq!(s["in_proj<self_attention"].4, 6);
    // LoongForge's interval gates the full attention by default (Qwen3-Next and Qwen3.5 do).
    let lf = gated_delta_net_model("full_attention_interval: 4\n");
    assert!(lf.components[0].arch.attention_output_gate);
    assert!(
        lf.components[0]
            .warnings
            .iter()
            .any(|w| w.contains("plain TE Linear"))
    );
    // Linear heads that do not split over TP are an error naming them.
    let odd = gated_delta_net_heads(3, 6, "full_attention_interval: 4\n");
    let e = inventory(odd.component(Role::Llm).unwrap(), Parallel::tp(2)).unwrap_err();
    assert!(e.to_string().contains("linear_num_key_heads"), "{e}");
}

#[test]
fn a_layout_te_or_megatron_would_refuse_at_the_first_step_is_warned_of() {
    let m = model("llama3_2_1b.yaml");
    let p = Policy::load(common::root().join("policies/llama3_2_1b.json")).unwrap();
    let warned = |par: Parallel, seq: u64| -> Vec<String> {
        let c = cfg(
            par,
            &[(Role::Llm, TokenConfig::new(seq, 1))],
            &[(Role::Llm, &p)],
        );
        plan(&m, &c).unwrap().summary.warnings
    };
    let has = |w: &[String], what: &str| w.iter().any(|x| x.contains(what));
    // FP8 modules (the shipped file runs fc1 and fc2 FP8 at TP 1 from a few thousand tokens)
    // at rows TE's FP8 casts refuse; the layout's token step is fine, and so is a BF16 plan.
    assert!(has(
        &warned(Parallel::tp(1), 16392),
        "off this layout's step of 16"
    ));
    assert!(!has(
        &warned(Parallel::tp(1), 16384),
        "off this layout's step"
    ));
    assert!(!has(
        &warned(Parallel::tp(1), 1028),
        "off this layout's step"
    ));
    // At TP 2 under sequence parallelism each rank holds half: the step is 32.
    assert!(has(
        &warned(Parallel::tp(2), 16400),
        "off this layout's step of 32"
    ));
    // Under context parallelism each sequence splits 2 x CP ways (Megatron's load-balanced
    // split): at CP 2 the step is 64.
    let cp2 = Parallel::new(1, 1, 1, 2);
    assert!(has(&warned(cp2, 16416), "off this layout's step of 64"));
    assert!(!has(&warned(cp2, 16384), "off this layout's step"));
    // Under sequence parallelism (on by default at TP > 1) the sequence splits over TP.
    assert!(has(
        &warned(Parallel::tp(2), 4097),
        "splits each sequence over TP 2"
    ));
    assert!(!has(&warned(Parallel::tp(2), 4096), "splits each sequence"));
    assert!(!has(&warned(Parallel::tp(1), 4097), "splits each sequence"));
}
