//! The merge's objectives: the trainer picks the figure (GPU time, eager time, host-floored),
//! shared keys decided by the summed step, expert split variants, host profiles, and reports over
//! a real TP group beside one-rank reports.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeSet;
use std::path::PathBuf;

use fp8_merge::{GroupKey, MergeOptions, ParKey, Sample, merge, threshold_of};
use fp8_policy::ModuleKind;
use fp8_report::Stat;
use proptest::prelude::*;

mod common;
use common::*;

#[test]
fn the_trainer_picks_the_figure_and_refuses_a_report_without_it() {
    let k = fc2();
    // An eager report with GPU time beside it: eager loses below 4096, GPU wins from 1024.
    let te_sample = |t: u64, eager: (f64, f64), gpu: (f64, f64)| Sample {
        gpu: Some((Stat::exact(gpu.0), Stat::exact(gpu.1))),
        ..sample(&k, "fc2", t, eager.0, eager.1)
    };
    let mut te = loaded(
        vec![
            te_sample(1024, (1.0, 1.5), (0.4, 0.3)),
            te_sample(4096, (2.0, 1.5), (1.6, 1.2)),
        ],
        "NVIDIA H200",
    );
    te.origin.timing = "te-eager".into();
    let rule = |trainer| {
        let out = merge(
            std::slice::from_ref(&te),
            &MergeOptions {
                trainer,
                ..Default::default()
            },
        )
        .unwrap();
        (
            out.outcomes[0].rule.map(|r| r.0),
            out.policies["llm"].provenance().unwrap().trainer.clone(),
        )
    };
    assert_eq!(
        rule(Some(fp8_policy::Execution::Eager)),
        (Some(4096), Some("eager".into()))
    );
    assert_eq!(
        rule(Some(fp8_policy::Execution::Graphed)),
        (Some(1024), Some("graphed".into()))
    );
    assert_eq!(rule(None), (Some(4096), None));
    // GPU-time reports have no eager figure; reference reports no GPU figure.
    let gpu = loaded(vec![sample(&k, "fc2", 4096, 2.0, 1.0)], "NVIDIA H200");
    let e = merge(
        &[gpu],
        &MergeOptions {
            trainer: Some(fp8_policy::Execution::Eager),
            ..Default::default()
        },
    )
    .unwrap_err();
    // The library's words; the CLI names its flags (`--trainer`, `--backend te`).
    assert!(
        matches!(
            e,
            fp8_merge::MergeError::Setting {
                setting: fp8_merge::Setting::Trainer,
                ..
            }
        ) && e.to_string().contains("the TE backend"),
        "{e}"
    );
    let mut reference = loaded(vec![sample(&k, "fc2", 4096, 2.0, 1.0)], "");
    reference.origin.timing = "reference-eager".into();
    let e = merge(
        &[reference],
        &MergeOptions {
            trainer: Some(fp8_policy::Execution::Graphed),
            ..Default::default()
        },
    )
    .unwrap_err();
    assert!(e.to_string().contains("only eager times"), "{e}");
}

/// DeepSeek-V3's `row/fc2` at one TP: 3 dense-layer FC2s that win and 58 shared-expert FC2s that
/// lose share the key. All-win keeps it BF16 everywhere; the step rule follows the summed time.
#[test]
fn a_shared_key_is_decided_by_the_summed_step_and_all_win_stays_available() {
    let k = fc2();
    let mut v = Vec::new();
    for (t, dense_fp8, shared_fp8) in [
        (4096u64, 0.80, 1.30),
        (8192, 0.75, 1.02),
        (16384, 0.70, 0.90),
    ] {
        // bf16 time 1.0 for both modules at every count.
        v.push(weighted(
            &k,
            "decoder.layers.mlp.linear_fc2",
            3,
            t,
            1.0,
            dense_fp8,
        ));
        v.push(weighted(
            &k,
            "decoder.layers.mlp.shared_experts.linear_fc2",
            58,
            t,
            1.0,
            shared_fp8,
        ));
    }
    let step = MergeOptions::default();
    let (rule, _, _) = threshold_of(&v, &step);
    // 4096: (3 + 58) / (2.4 + 75.4) < 1; 8192: 61 / (2.25 + 59.16) = 0.993 < 1.02;
    // 16384: 61 / (2.1 + 52.2) = 1.123.
    assert_eq!(rule.map(|r| r.0), Some(16384));
    assert!((rule.unwrap().1 - 1.123).abs() < 1e-3, "{rule:?}");
    let all_win = MergeOptions {
        shared_key: fp8_merge::SharedKey::AllWin,
        ..MergeOptions::default()
    };
    assert_eq!(threshold_of(&v, &all_win).0.map(|r| r.0), Some(16384));
    // Where the many instances win and the few lose, the step turns FP8 on and all-win does not.
    let w: Vec<Sample> = [(4096u64, 1.3, 0.8), (8192, 1.3, 0.8)]
        .into_iter()
        .flat_map(|(t, dense, shared)| {
            [
                weighted(&k, "decoder.layers.mlp.linear_fc2", 3, t, 1.0, dense),
                weighted(
                    &k,
                    "decoder.layers.mlp.shared_experts.linear_fc2",
                    58,
                    t,
                    1.0,
                    shared,
                ),
            ]
        })
        .collect();
    assert_eq!(threshold_of(&w, &step).0.map(|r| r.0), Some(4096));
    assert_eq!(threshold_of(&w, &all_win).0, None);
    // Merged: the policy's provenance records each module's own verdict.
    let m = merge(&[loaded(w.clone(), "h200")], &step).unwrap();
    let p = &m.policies["llm"];
    let prov = p.provenance().unwrap();
    assert_eq!(prov.shared_keys.len(), 1);
    let sk = &prov.shared_keys[0];
    assert_eq!((sk.rule.as_str(), sk.min_tokens), ("step", Some(4096)));
    let own: Vec<(Option<u64>, Option<u64>)> = sk
        .modules
        .iter()
        .map(|m| (m.instances, m.min_tokens))
        .collect();
    assert_eq!(own, [(Some(3), None), (Some(58), Some(4096))]);
    // And it survives the policy's own JSON round trip.
    let again = fp8_policy::Policy::from_json_str(&p.to_json(), "again.json").unwrap();
    assert_eq!(again.provenance().unwrap().shared_keys, prov.shared_keys);
}

#[test]
fn a_shared_key_without_instance_counts_falls_back_to_all_win_and_says_so() {
    let k = fc2();
    let v: Vec<Sample> = [4096u64, 8192]
        .into_iter()
        .flat_map(|t| {
            [
                sample(&k, "decoder.layers.mlp.linear_fc2", t, 1.0, 0.7),
                sample(
                    &k,
                    "decoder.layers.mlp.shared_experts.linear_fc2",
                    t,
                    1.0,
                    1.1,
                ),
            ]
        })
        .collect();
    assert_eq!(threshold_of(&v, &MergeOptions::default()).0, None);
    let m = merge(&[loaded(v, "h200")], &MergeOptions::default()).unwrap();
    assert!(
        m.warnings
            .iter()
            .any(|w| w.contains("no instance counts") && w.contains("all-win")),
        "{:?}",
        m.warnings
    );
    let prov = m.policies["llm"].provenance().unwrap().clone();
    assert_eq!(prov.shared_keys[0].rule, "all-win");
}

#[test]
fn expert_split_variants_are_scenarios_not_instances() {
    // One grouped module measured under two splits is one module: the step rule judges each
    // split on its own (with any dense module of the key), never their sum.
    let k = key(ModuleKind::RowGrouped, None, ParKey::Grouped(1, 8));
    let v = vec![
        weighted(&k, "experts.linear_fc2 [uniform]", 58, 8192, 1.0, 0.8),
        weighted(&k, "experts.linear_fc2 [zipf1.2]", 58, 8192, 1.0, 1.1),
        weighted(&k, "experts.linear_fc2 [uniform]", 58, 16384, 1.0, 0.8),
        weighted(&k, "experts.linear_fc2 [zipf1.2]", 58, 16384, 1.0, 0.9),
    ];
    assert_eq!(
        threshold_of(&v, &MergeOptions::default()).0.map(|r| r.0),
        Some(16384)
    );
}

const PROFILE: &str = r#"{"format": "adaptive-fp8-host-profile", "version": 1, "device": "d", "te_version": "2.20.2",
    "kinds": {"row": {"bf16_ms": 0.5, "fp8_ms": 1.0},
              "row_grouped": {"bf16_ms": 0.5, "fp8_ms": 1.0, "bf16_per_expert_ms": 0.1, "fp8_per_expert_ms": 0.2}}}"#;

#[test]
fn a_host_profile_floors_each_module_by_its_kind_and_experts() {
    use fp8_merge::host::HostProfile;
    let profile = HostProfile::parse(PROFILE, "host.json").unwrap();
    let opt = MergeOptions {
        host_profile: Some(profile),
        ..MergeOptions::default()
    };
    // Dense fc2: GPU time says FP8 from 2048 (1.0 vs 0.6); the host floors (0.5 / 1.0) push the
    // FP8 step up to 1.0 there, so FP8 starts where its GPU time passes the FP8 host cost.
    let k = fc2();
    let v = vec![
        sample(&k, "fc2", 2048, 1.0, 0.6),
        sample(&k, "fc2", 4096, 2.0, 1.2),
        sample(&k, "fc2", 8192, 4.0, 2.4),
    ];
    assert_eq!(
        threshold_of(&v, &MergeOptions::default()).0.map(|r| r.0),
        Some(2048)
    );
    assert_eq!(threshold_of(&v, &opt).0.map(|r| r.0), Some(4096));
    // Grouped, 8 local experts: floors 0.5 + 7 x 0.1 = 1.2 and 1.0 + 7 x 0.2 = 2.4.
    let g = key(ModuleKind::RowGrouped, None, ParKey::Grouped(1, 8));
    let w = vec![
        sample(&g, "experts", 4096, 2.0, 1.2),
        sample(&g, "experts", 8192, 5.0, 3.0),
    ];
    assert_eq!(threshold_of(&w, &opt).0.map(|r| r.0), Some(8192));
    // Both ways of setting floors at once is refused; the policy names its profile.
    let both = MergeOptions {
        host_floor_ms: Some((0.7, 1.15)),
        ..opt.clone()
    };
    let e = merge(&[loaded(v.clone(), "h200")], &both)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("host floors and a host profile") && !e.contains("--"),
        "{e}"
    );
    let m = merge(&[loaded(v, "h200")], &opt).unwrap();
    let src = m.policies["llm"]
        .provenance()
        .unwrap()
        .host_profile
        .clone()
        .unwrap();
    assert!(src.starts_with("host.json (d, 2.20.2"), "{src}");
}

proptest! {
    #[test]
    fn host_profile_parser_never_panics(text in ".{0,300}") {
        let _ = fp8_merge::host::HostProfile::parse(&text, "fuzz.json");
    }

    #[test]
    fn host_profile_values_are_bounded(v in proptest::num::f64::ANY) {
        let t = PROFILE.replace("0.5, \"fp8_ms\": 1.0}", &format!("{v:?}, \"fp8_ms\": 1.0}}"));
        match fp8_merge::host::HostProfile::parse(&t, "p.json") {
            Ok(p) => {
                let (b, _) = p.floors(ModuleKind::Row, 1).unwrap();
                prop_assert!(b.is_finite() && (0.0..=1000.0).contains(&b));
            }
            Err(e) => prop_assert!(e.to_string().contains("p.json")),
        }
    }
}

#[test]
fn the_profile_probe_host_writes_parses() {
    // fixtures/host/example.json is what adaptive_fp8.bench.probe_host.profile makes of example inputs
    // (crates/py/tests/test_probe_host.py checks that side).
    let text = std::fs::read_to_string(root().join("fixtures/host/example.json")).unwrap();
    let p = fp8_merge::host::HostProfile::parse(&text, "example.json").unwrap();
    assert_eq!(p.floors(ModuleKind::Row, 1), Some((0.52, 0.93)));
    let (b, f) = p.floors(ModuleKind::RowGrouped, 8).unwrap();
    assert!((b - 1.4).abs() < 1e-9 && (f - 2.6).abs() < 1e-9, "{b} {f}");
    assert_eq!(p.kinds().count(), 3);
}

#[test]
fn tp_communication_reports_never_merge_with_one_rank_reports_of_the_same_tp() {
    let k = key(ModuleKind::Row, Some("fc2"), ParKey::Tp(2));
    let mut comm = loaded(vec![sample(&k, "c", 4096, 1.0, 0.8)], "d");
    comm.origin.tp_comm = Some(true);
    comm.origin.tps = BTreeSet::from([2]);
    comm.file = PathBuf::from("comm.json");
    let mut alone = loaded(vec![sample(&k, "c", 4096, 1.0, 0.8)], "d");
    alone.origin.tps = BTreeSet::from([2]);
    alone.file = PathBuf::from("alone.json");
    let e = merge(&[comm.clone(), alone.clone()], &MergeOptions::default())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("TP communication at TP 2")
            && e.contains("one report per TP size")
            && e.contains("comm.json")
            && e.contains("alone.json"),
        "{e}"
    );
    // A TP 1 report has no communication to disagree about.
    alone.origin.tps.clear();
    let m = merge(&[comm.clone(), alone], &MergeOptions::default()).unwrap();
    assert_eq!(m.policies["llm"].provenance().unwrap().tp_comm, vec![2]);
}

#[test]
fn a_tp_communication_report_folds_in_beside_one_rank_reports_of_other_tp_sizes() {
    // te_tp at TP 2 decides the TP 2 key; one rank alone at TP 8 decides the TP 8 key.
    let k2 = key(ModuleKind::Row, Some("fc2"), ParKey::Tp(2));
    let k8 = key(ModuleKind::Row, Some("fc2"), ParKey::Tp(8));
    let mut comm = loaded(vec![sample(&k2, "c", 4096, 1.0, 1.2)], "d");
    comm.origin.tp_comm = Some(true);
    comm.origin.tps = BTreeSet::from([2]);
    let mut alone = loaded(vec![sample(&k8, "c", 4096, 1.0, 0.5)], "d");
    alone.origin.tps = BTreeSet::from([8]);
    let m = merge(&[alone, comm], &MergeOptions::default()).unwrap();
    let p = &m.policies["llm"];
    assert_eq!(p.provenance().unwrap().tp_comm, vec![2]);
    let won = |k: &GroupKey| {
        m.outcomes
            .iter()
            .find(|o| &o.key == k)
            .unwrap()
            .rule
            .is_some()
    };
    assert!(
        won(&k8) && !won(&k2),
        "TP 8 wins FP8 alone, TP 2 loses with communication"
    );
}
