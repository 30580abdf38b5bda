//! The merge: thresholds, soundness properties, both report formats, and bad input.

#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};

use fp8_merge::{
    GroupKey, Loaded, MergeError, MergeOptions, Sample, load, merge, parse, threshold_of,
};
use fp8_policy::{DenseKind, Lookup, ModuleKind};
use fp8_report::Stat;
use proptest::prelude::*;

mod common;
use common::*;

#[test]
fn threshold_is_the_start_of_the_winning_tail() {
    let k = fc2();
    let s = vec![
        sample(&k, "fc2", 256, 1.0, 1.2),
        sample(&k, "fc2", 1024, 1.0, 0.99),
        sample(&k, "fc2", 4096, 1.0, 0.8),
        sample(&k, "fc2", 16384, 1.0, 0.7),
    ];
    let (rule, non_mono, counts) = threshold_of(&s, &MergeOptions::default());
    assert_eq!(rule, Some((4096, 1.25)));
    assert!(!non_mono);
    assert_eq!(counts, vec![256, 1024, 4096, 16384]);
    // 1024 wins by 1.031: in with no margin or the default 0.02, out with 0.05.
    let s2: Vec<Sample> = s
        .iter()
        .cloned()
        .map(|mut x| {
            if x.tokens == 1024 {
                x.fp8 = Stat::exact(0.97)
            }
            x
        })
        .collect();
    assert_eq!(
        threshold_of(
            &s2,
            &MergeOptions {
                margin: 0.0,
                ..Default::default()
            }
        )
        .0
        .map(|r| r.0),
        Some(1024)
    );
    assert_eq!(
        threshold_of(
            &s2,
            &MergeOptions {
                margin: 0.05,
                ..Default::default()
            }
        )
        .0
        .map(|r| r.0),
        Some(4096)
    );
}

#[test]
fn one_noisy_point_cannot_switch_fp8_on_below_a_loss() {
    // The reference would pick 512 (first win) and run FP8 at 2048 where it loses.
    let k = fc2();
    let s = vec![
        sample(&k, "fc2", 512, 1.0, 0.8),
        sample(&k, "fc2", 2048, 1.0, 1.1),
        sample(&k, "fc2", 8192, 1.0, 0.8),
    ];
    let (rule, non_mono, _) = threshold_of(&s, &MergeOptions::default());
    assert_eq!(rule.map(|r| r.0), Some(8192));
    assert!(non_mono);
    let out = merge(&[loaded(s, "dev")], &MergeOptions::default()).unwrap();
    assert!(
        out.warnings
            .iter()
            .any(|w| w.contains("non-monotone") && w.contains("row/fc2")),
        "{:?}",
        out.warnings
    );
}

#[test]
fn no_rule_where_fp8_never_wins() {
    let k = fc2();
    let s = vec![
        sample(&k, "fc2", 512, 1.0, 1.5),
        sample(&k, "fc2", 8192, 1.0, 1.01),
    ];
    let out = merge(&[loaded(s, "dev")], &MergeOptions::default()).unwrap();
    assert_eq!(out.policies["llm"].rule_count(), 0);
    assert_eq!(out.outcomes[0].rule, None);
    // Provenance records that the key was measured, so `check` can tell it from a gap.
    assert_eq!(
        out.policies["llm"].measured_bf16_keys(),
        [fp8_policy::RuleKey::Dense {
            kind: fp8_policy::DenseKind::Row,
            ub_name: "fc2".into(),
            tp: 1
        }]
    );
}

#[test]
fn pessimistic_percentiles_must_clear_too() {
    let k = fc2();
    let mut s = sample(&k, "fc2", 4096, 1.0, 0.9);
    s.has_spread = true;
    s.bf16 = Stat {
        median: 1.0,
        p10: 0.85,
        p90: 1.1,
    };
    s.fp8 = Stat {
        median: 0.9,
        p10: 0.8,
        p90: 0.95,
    };
    // median 1.11x, but bf16 p10 / fp8 p90 = 0.89 < 1.
    assert_eq!(threshold_of(&[s.clone()], &MergeOptions::default()).0, None);
    s.bf16.p10 = 0.97;
    assert!(threshold_of(&[s], &MergeOptions::default()).0.is_some());
}

#[test]
fn modules_sharing_a_key_must_all_win() {
    // A dense fc2 and a shared-expert fc2 at the same TP share (row, fc2, tp): the rule must hold
    // for both.
    let k = fc2();
    let s = vec![
        sample(&k, "mlp.linear_fc2", 1024, 1.0, 0.8),
        sample(&k, "mlp.linear_fc2", 4096, 1.0, 0.8),
        sample(&k, "mlp.shared_experts.linear_fc2", 1024, 1.0, 1.3),
        sample(&k, "mlp.shared_experts.linear_fc2", 4096, 1.0, 0.9),
    ];
    let (rule, _, _) = threshold_of(&s, &MergeOptions::default());
    assert_eq!(rule, Some((4096, 1.111)));
}

#[test]
fn duplicates_are_combined_by_the_median_with_a_warning() {
    let k = fc2();
    let a = vec![sample(&k, "fc2", 4096, 1.0, 0.5)];
    let b = vec![sample(&k, "fc2", 4096, 1.0, 0.9)];
    let c = vec![sample(&k, "fc2", 4096, 1.0, 2.0)];
    let out = merge(
        &[loaded(a, "d"), loaded(b, "d"), loaded(c, "d")],
        &MergeOptions::default(),
    )
    .unwrap();
    let r = out.policies["llm"].dense_rules(DenseKind::Row)["fc2"][0];
    assert_eq!(r.measured_speedup, Some(1.111));
    assert!(
        out.warnings
            .iter()
            .any(|w| w.contains("combined by the median"))
    );
}

#[test]
fn components_are_never_pooled() {
    let llm = fc2();
    let vit = GroupKey {
        component: "vit".into(),
        ..fc2()
    };
    let s = vec![
        sample(&llm, "fc2", 4096, 1.0, 0.5),
        sample(&vit, "fc2", 4096, 1.0, 2.0),
    ];
    let out = merge(&[loaded(s.clone(), "d")], &MergeOptions::default()).unwrap();
    assert_eq!(out.policies["llm"].rule_count(), 1);
    assert_eq!(out.policies["vit"].rule_count(), 0);
    let only_vit = merge(
        &[loaded(s, "d")],
        &MergeOptions {
            component: Some("vit".into()),
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(only_vit.policies.keys().collect::<Vec<_>>(), vec!["vit"]);
}

#[test]
fn host_floor_turns_small_wins_into_losses() {
    let k = fc2();
    let s = vec![
        sample(&k, "fc2", 1024, 0.30, 0.26),
        sample(&k, "fc2", 16384, 3.0, 2.0),
    ];
    let gpu = threshold_of(&s, &MergeOptions::default()).0;
    assert_eq!(gpu.map(|r| r.0), Some(1024));
    let eager = threshold_of(
        &s,
        &MergeOptions {
            host_floor_ms: Some((0.5, 1.2)),
            ..Default::default()
        },
    )
    .0;
    assert_eq!(eager.map(|r| r.0), Some(16384));
}

#[test]
fn provenance_and_threshold_are_recorded() {
    let k = fc2();
    let out = merge(
        &[loaded(
            vec![sample(&k, "fc2", 4096, 1.0, 0.5)],
            "NVIDIA H200",
        )],
        &MergeOptions {
            threshold: 1.1,
            margin: 0.05,
            ..Default::default()
        },
    )
    .unwrap();
    let p = &out.policies["llm"];
    assert_eq!(p.speedup_threshold(), 1.1);
    let prov = p.provenance().expect("merge writes provenance");
    assert_eq!(prov.device, ["NVIDIA H200"]);
    assert_eq!(prov.margin, Some(0.05));
    assert!(!prov.estimated && !p.estimated());
    assert_eq!(prov.reports, ["NVIDIA H200.json"]);
}

#[test]
fn mixed_devices_and_estimates_are_errors_unless_allowed() {
    let k = fc2();
    let a = loaded(vec![sample(&k, "fc2", 4096, 1.0, 0.5)], "NVIDIA H200");
    let b = loaded(vec![sample(&k, "fc2", 8192, 1.0, 0.5)], "NVIDIA H100");
    let e = merge(&[a.clone(), b.clone()], &MergeOptions::default()).unwrap_err();
    assert!(matches!(e, MergeError::Mixed { what: "device", .. }), "{e}");
    assert!(e.to_string().contains("--allow-mixed"));
    assert!(
        merge(
            &[a.clone(), b],
            &MergeOptions {
                allow_mixed: true,
                ..Default::default()
            }
        )
        .is_ok()
    );
    let mut est = a.clone();
    est.origin.estimated = true;
    assert!(matches!(
        merge(&[a, est], &MergeOptions::default()).unwrap_err(),
        MergeError::Mixed {
            what: "estimated",
            ..
        }
    ));
}

#[test]
fn bad_options() {
    let k = fc2();
    let l = loaded(vec![sample(&k, "fc2", 4096, 1.0, 0.5)], "d");
    assert!(
        merge(
            std::slice::from_ref(&l),
            &MergeOptions {
                threshold: 0.0,
                ..Default::default()
            }
        )
        .is_err()
    );
    assert!(
        merge(
            std::slice::from_ref(&l),
            &MergeOptions {
                margin: -0.1,
                ..Default::default()
            }
        )
        .is_err()
    );
    assert!(merge(&[], &MergeOptions::default()).is_err());
    assert!(
        merge(
            &[l],
            &MergeOptions {
                component: Some("vit".into()),
                ..Default::default()
            }
        )
        .is_err()
    );
}

fn parse_err(text: &str) -> MergeError {
    parse(text, Path::new("r.json"), 16).unwrap_err()
}

#[test]
fn bad_reports_name_the_file_and_point() {
    assert!(matches!(parse_err(""), MergeError::Empty { .. }));
    assert!(matches!(parse_err("{not json"), MergeError::Format { .. }));
    assert!(matches!(
        parse_err(r#"{"points": []}"#),
        MergeError::Report(r) if matches!(r.kind(), fp8_report::ReportErrorKind::Format(_))
    ));
    assert!(matches!(parse_err("42"), MergeError::Format { .. }));
    assert!(matches!(parse_err("[]"), MergeError::Empty { .. }));
    assert!(
        parse_err(r#"{"format": "fp8sel-report", "report_version": 9}"#)
            .to_string()
            .contains("report_version")
    );
    // Reference format: only BF16.
    let bf16_only = r#"[{"module_kind": "row", "precision": "bf16", "num_tokens": 1024, "total_ms": 1.0, "tp_size": 1, "ub_name": "fc2", "case_name": "fc2"}]"#;
    let e = parse_err(bf16_only);
    assert!(e.to_string().contains("only bf16"), "{e}");
    // NaN-like and negative times.
    for t in ["-1.0", "0"] {
        let bad = format!(
            r#"[{{"module_kind": "row", "precision": "bf16", "num_tokens": 1024, "total_ms": {t}, "ub_name": "fc2", "case_name": "fc2"}},
                {{"module_kind": "row", "precision": "fp8", "num_tokens": 1024, "total_ms": 1.0, "ub_name": "fc2", "case_name": "fc2"}}]"#
        );
        let e = parse_err(&bad);
        assert!(matches!(e, MergeError::Point { index: 0, .. }), "{e}");
        assert!(e.to_string().contains("r.json"));
    }
    let unknown_kind =
        r#"[{"module_kind": "linear", "precision": "bf16", "num_tokens": 1, "total_ms": 1.0}]"#;
    assert!(matches!(parse_err(unknown_kind), MergeError::Point { .. }));
    // Our format with only BF16 timings.
    let ours = r#"{"format": "fp8sel-report", "report_version": 1, "provenance": {"tool_version": "x", "device": {"name": "d", "compute_capability": "9.0"},
        "recipe": "blockwise", "scale_mode": "pow2", "fp8_param": true, "fp8_pad": 16, "warmup": 1, "iters": 1, "timing": "gpu", "model": "m",
        "model_config": "c", "parallel": {"tp": 1, "ep": 1, "etp": 1, "cp": 1}},
        "points": [{"component": "llm", "module": "m", "te_class": "TERowParallelLinear", "module_kind": "row", "ub_name": "fc2", "tp": 1, "etp": 1,
        "num_gemms": 1, "tokens": 1024, "gemm_rows": 1024, "padded_rows": 1024, "in_features": 8, "out_features": 8, "status": "ok",
        "bf16": {"fwd_ms": {"median": 1, "p10": 1, "p90": 1}, "bwd_ms": {"median": 1, "p10": 1, "p90": 1}, "total_ms": {"median": 1, "p10": 1, "p90": 1}, "launches": 3}}]}"#;
    assert!(parse_err(ours).to_string().contains("only BF16"));
    let nan_ours = ours.replace(r#""launches": 3}"#, r#""launches": 3}, "fp8": {"fwd_ms": {"median": 1, "p10": 1, "p90": 1}, "bwd_ms": {"median": 1, "p10": 1, "p90": 1}, "total_ms": {"median": -2, "p10": 1, "p90": 1}, "launches": 5}"#);
    let e = parse_err(&nan_ours);
    assert!(
        matches!(&e, MergeError::Report(r) if matches!(r.kind(), fp8_report::ReportErrorKind::Point { index: 0, .. })),
        "{e}"
    );
    assert!(
        e.to_string().contains("points[0]") && e.to_string().contains("fp8.total_ms.median"),
        "{e}"
    );
}

#[test]
fn reference_reports_pair_padded_fp8_counts() {
    let mut l = load(
        &root().join("fixtures/reports/reference/ref_all_kinds.json"),
        16,
    )
    .unwrap();
    // Provenance records report paths as given; keep the snapshot independent of the checkout.
    l.file = PathBuf::from("ref_all_kinds.json");
    // Grouped points: FP8 counts are padded by up to 64 x 16; pairing keys them by the BF16 count.
    let grouped: Vec<u64> = l
        .samples
        .iter()
        .filter(|s| s.key.kind == ModuleKind::ColumnGrouped)
        .map(|s| s.tokens)
        .collect();
    assert_eq!(grouped, vec![424, 3392, 27136, 217088]);
    // The 424-token dense point pairs with its padded 432 FP8 count.
    assert!(
        l.samples
            .iter()
            .any(|s| s.key.kind == ModuleKind::LayernormColumn && s.tokens == 424)
    );
    assert_eq!(l.unpaired.len(), 1, "{:?}", l.unpaired);
    assert!(l.unpaired[0].contains("99999"));
    // ViT results are their own component.
    assert!(l.samples.iter().any(|s| s.key.component == "vit"));
    let out = merge(&[l], &MergeOptions::default()).unwrap();
    let llm = &out.policies["llm"];
    let g = llm.decide(
        Lookup::Grouped {
            kind: fp8_policy::GroupedKind::ColumnGrouped,
            etp: 1,
            num_gemms: 64,
        },
        27136,
    );
    assert!(
        g.use_fp8,
        "MoE rules are emitted from padded reference reports: {}",
        g.reason
    );
    insta::assert_snapshot!("reference_llm", llm.to_json());
    insta::assert_snapshot!("reference_vit", out.policies["vit"].to_json());
}

#[test]
fn measured_vlm_reports_give_one_policy_per_component() {
    let dir = root().join("reports/h200");
    let reports: Vec<Loaded> = [
        "qwen3_vl_llm_tp1_ep4.json",
        "qwen3_vl_vit_tp1.json",
        "qwen3_vl_vit_tp2.json",
    ]
    .iter()
    .map(|f| load(&dir.join(f), 16).unwrap())
    .collect();
    let out = merge(&reports, &MergeOptions::default()).unwrap();
    assert_eq!(out.policies.keys().collect::<Vec<_>>(), vec!["llm", "vit"]);
    // Every written rule is sound on the data it came from.
    let mut checked = 0;
    for s in reports.iter().flat_map(|l| &l.samples) {
        if let Some(o) = out.outcomes.iter().find(|o| o.key == s.key)
            && let Some((min, _)) = o.rule
            && s.tokens >= min
        {
            assert!(s.bf16.median / s.fp8.median >= 1.02, "{s:?}");
            checked += 1;
        }
    }
    assert!(
        checked > 0,
        "the measured VLM reports should produce at least one rule"
    );
}

fn arb_samples() -> impl Strategy<Value = Vec<Sample>> {
    let k = fc2();
    prop::collection::vec((0usize..8, 0usize..2, 0.2f64..3.0, 0.2f64..3.0), 1..24).prop_map(
        move |v| {
            v.into_iter()
                .map(|(t, c, b, f)| sample(&k, ["a", "b"][c], 256u64 << t, b, f))
                .collect()
        },
    )
}

proptest! {
    #[test]
    fn report_parser_never_panics_on_bytes(bytes in prop::collection::vec(any::<u8>(), 0..600)) {
        let _ = parse(&String::from_utf8_lossy(&bytes), Path::new("fuzz.json"), 16);
    }

    #[test]
    fn report_parser_never_panics_on_result_lists(rows in prop::collection::vec(
        (prop_oneof![Just("row"), Just("column_grouped"), Just("x")], prop_oneof![Just("bf16"), Just("fp8"), Just("fp4")],
         any::<u64>(), any::<f64>(), 0u64..4, 0u64..4, 0u64..300), 0..12)) {
        let list: Vec<serde_json::Value> = rows.into_iter().map(|(k, p, t, ms, tp, etp, g)| serde_json::json!({
            "module_kind": k, "precision": p, "num_tokens": t, "total_ms": if ms.is_finite() { ms } else { 1.0 },
            "tp_size": tp, "etp_size": etp, "num_gemms": g, "ub_name": "fc2", "case_name": "c"})).collect();
        if let Ok(l) = parse(&serde_json::to_string(&list).unwrap(), Path::new("fuzz.json"), 16) {
            let _ = merge(&[l], &MergeOptions::default());
        }
    }

    #[test]
    fn every_count_from_min_tokens_up_clears_the_bar(s in arb_samples(), thr in 0.8f64..1.3, margin in 0.0f64..0.1) {
        let opt = MergeOptions { threshold: thr, margin, ..Default::default() };
        let out = merge(&[loaded(s.clone(), "d")], &opt).unwrap();
        let rules = out.policies["llm"].dense_rules(DenseKind::Row);
        if let Some(r) = rules.get("fc2").and_then(|v| v.first()) {
            // Duplicates are combined by the median first; check against the combined values.
            let mut by: std::collections::BTreeMap<(String, u64), Vec<(f64, f64)>> = Default::default();
            for x in &s { by.entry((x.curve.clone(), x.tokens)).or_default().push((x.bf16.median, x.fp8.median)); }
            for ((_, t), v) in by {
                if r.min_tokens.allows(t) {
                    let mut bs: Vec<f64> = v.iter().map(|p| p.0).collect();
                    let mut fs: Vec<f64> = v.iter().map(|p| p.1).collect();
                    bs.sort_by(f64::total_cmp); fs.sort_by(f64::total_cmp);
                    let med = |x: &[f64]| if x.len() % 2 == 1 { x[x.len() / 2] } else { (x[x.len() / 2 - 1] + x[x.len() / 2]) / 2.0 };
                    prop_assert!(med(&bs) / med(&fs) >= thr + margin - 1e-12);
                }
            }
        }
    }

    #[test]
    fn raising_the_threshold_never_lowers_min_tokens(s in arb_samples(), a in 0.8f64..1.3, b in 0.8f64..1.3) {
        let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
        let r_lo = threshold_of(&s, &MergeOptions { threshold: lo, ..Default::default() }).0;
        let r_hi = threshold_of(&s, &MergeOptions { threshold: hi, ..Default::default() }).0;
        match (r_lo, r_hi) {
            (Some((t_lo, _)), Some((t_hi, _))) => prop_assert!(t_hi >= t_lo),
            (None, Some(_)) => prop_assert!(false, "a higher threshold produced a rule where a lower one did not"),
            _ => {}
        }
    }

    #[test]
    fn input_order_never_changes_the_bytes(s in arb_samples(), split in 0usize..24, seed in any::<u64>()) {
        let split = split.min(s.len());
        let (a, b) = s.split_at(split);
        let one = merge(&[loaded(a.to_vec(), "d"), loaded(b.to_vec(), "d")], &MergeOptions::default());
        let mut shuffled = s.clone();
        let n = shuffled.len();
        for i in (1..n).rev() { shuffled.swap(i, (seed as usize ^ i.wrapping_mul(2654435761)) % (i + 1)); }
        let (c, d) = shuffled.split_at(split);
        let two = merge(&[loaded(d.to_vec(), "d"), loaded(c.to_vec(), "d")], &MergeOptions::default());
        match (one, two) {
            (Ok(x), Ok(y)) => prop_assert_eq!(x.policies["llm"].to_json(), y.policies["llm"].to_json()),
            (Err(_), Err(_)) => {}
            _ => prop_assert!(false, "order changed success"),
        }
    }
}
