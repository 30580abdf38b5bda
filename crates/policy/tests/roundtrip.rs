//! Writing: a snapshot of the seed's example, byte-determinism, atomicity, and proptests.

#![allow(clippy::unwrap_used)]

use fp8_policy::{DenseKind, DenseRule, GroupedKind, GroupedRule, Lookup, Policy};
use proptest::prelude::*;

const SEED: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../fixtures/policies/seed_example.json"
);

#[test]
fn seed_example_after_load_and_write() {
    let p = Policy::load(SEED).unwrap();
    assert_eq!(p.rule_count(), 6);
    insta::assert_snapshot!(p.to_json());
}

#[test]
fn output_is_a_fixed_point() {
    let p = Policy::load(SEED).unwrap();
    let once = p.to_json();
    let twice = Policy::from_json_str(&once, "once.json").unwrap().to_json();
    assert_eq!(once, twice);
    assert!(once.ends_with("}\n"));
}

#[test]
fn write_is_atomic_and_leaves_no_temp_files() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("policy.json");
    std::fs::write(&path, "old contents").unwrap();
    let p = Policy::load(SEED).unwrap();
    p.write(&path).unwrap();
    assert_eq!(std::fs::read_to_string(&path).unwrap(), p.to_json());
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, vec![std::ffi::OsString::from("policy.json")]);
}

#[test]
fn failed_write_leaves_the_old_file() {
    let dir = tempfile::tempdir().unwrap();
    // A directory where the file should be: the final rename fails.
    let target = dir.path().join("policy.json");
    std::fs::create_dir(&target).unwrap();
    std::fs::write(target.join("keep"), "x").unwrap();
    let p = Policy::load(SEED).unwrap();
    let e = p.write(&target).unwrap_err();
    assert!(e.to_string().contains("policy.json"), "{e}");
    assert!(target.join("keep").exists());
    let stray: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".fp8-tmp"))
        .collect();
    assert!(stray.is_empty(), "{stray:?}");
    // And a missing directory is a clear error, not a panic.
    assert!(p.write(dir.path().join("no/such/dir/p.json")).is_err());
}

fn arb_policy() -> impl Strategy<Value = Policy> {
    let dense = prop::collection::vec(
        (
            0usize..4,
            "[a-z_]{1,12}",
            1u32..64,
            any::<u64>(),
            prop::option::of(0.01f64..10.0),
        ),
        0..24,
    );
    let grouped = prop::collection::vec(
        (
            0usize..2,
            1u32..16,
            1u32..512,
            any::<u64>(),
            prop::option::of(0.01f64..10.0),
        ),
        0..12,
    );
    (0.01f64..4.0, dense, grouped).prop_map(|(threshold, dense, grouped)| {
        let mut p = Policy::new(threshold).unwrap();
        for (k, ub, tp, min_tokens, s) in dense {
            // Duplicates are refused; skipping them keeps every generated policy valid.
            let _ = p.add_dense_rule(
                DenseKind::ALL[k],
                &ub,
                DenseRule {
                    tp,
                    min_tokens: fp8_policy::Threshold::from_wire(min_tokens),
                    min_tokens_graphed: None,
                    measured_speedup: s,
                },
            );
        }
        for (k, etp, num_gemms, min_tokens, s) in grouped {
            let _ = p.add_grouped_rule(
                GroupedKind::ALL[k],
                GroupedRule {
                    etp,
                    num_gemms,
                    min_tokens: fp8_policy::Threshold::from_wire(min_tokens),
                    min_tokens_graphed: None,
                    measured_speedup: s,
                },
            );
        }
        let mut prov = fp8_policy::Provenance::default();
        prov.tool = "proptest".into();
        p.set_provenance(prov);
        p
    })
}

proptest! {
    #[test]
    fn write_then_load_is_identity(p in arb_policy()) {
        let text = p.to_json();
        let back = Policy::from_json_str(&text, "gen.json").unwrap();
        prop_assert_eq!(&back, &p);
        prop_assert_eq!(back.to_json(), text);
    }

    #[test]
    fn decide_is_monotone_in_tokens(p in arb_policy(), a in any::<u64>(), b in any::<u64>(),
                                    tp in 1u32..64, gemms in 1u32..512) {
        let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
        let mut lookups = Vec::new();
        for kind in DenseKind::ALL {
            for ub in p.dense_rules(kind).keys() {
                lookups.push(Lookup::Dense { kind, ub_name: Some(ub.as_str()), tp });
            }
        }
        for kind in GroupedKind::ALL {
            lookups.push(Lookup::Grouped { kind, etp: 1, num_gemms: gemms });
            for r in p.grouped_rules(kind) {
                lookups.push(Lookup::Grouped { kind, etp: r.etp, num_gemms: r.num_gemms });
            }
        }
        for l in lookups {
            if p.decide(l, lo).use_fp8 {
                prop_assert!(p.decide(l, hi).use_fp8, "{:?}: fp8 at {} but not at {}", l, lo, hi);
            }
        }
    }

    #[test]
    fn loader_never_panics_on_bytes(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        let text = String::from_utf8_lossy(&bytes);
        let _ = Policy::from_json_str(&text, "fuzz.json");
    }

    #[test]
    fn loader_never_panics_on_json_shaped_input(v in arb_json()) {
        let text = serde_json::to_string(&v).unwrap();
        let _ = Policy::from_json_str(&text, "fuzz.json");
        let wrapped = serde_json::json!({"version": 1, "speedup_threshold": 1.0, "rules": v});
        let _ = Policy::from_json_str(&wrapped.to_string(), "fuzz.json");
        let nested = serde_json::json!({"version": 1, "speedup_threshold": 1.0,
            "rules": {"row": {"fc2": [v.clone()]}, "row_grouped": [v]}});
        let _ = Policy::from_json_str(&nested.to_string(), "fuzz.json");
    }
}

fn arb_json() -> impl Strategy<Value = serde_json::Value> {
    use serde_json::Value;
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(Value::from),
        prop_oneof![
            Just("tp"),
            Just("etp"),
            Just("num_gemms"),
            Just("min_tokens"),
            Just("row"),
            Just("fc2"),
            Just("x")
        ]
        .prop_map(Value::from),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        let key = prop_oneof![
            Just("tp"),
            Just("etp"),
            Just("num_gemms"),
            Just("min_tokens"),
            Just("measured_speedup"),
            Just("row"),
            Just("column_grouped"),
            Just("fc2"),
            Just("version"),
            Just("rules")
        ];
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map(key.prop_map(String::from), inner, 0..5)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

#[test]
fn rules_and_insert_round_trip_every_shape_of_key() {
    use fp8_policy::{DenseKind, GroupedKind, Policy, RuleKey, Threshold, Thresholds};
    let mut p = Policy::new(1.0).unwrap();
    let dense = RuleKey::Dense {
        kind: DenseKind::Row,
        ub_name: "fc2".into(),
        tp: 2,
    };
    let grouped = RuleKey::Grouped {
        kind: GroupedKind::ColumnGrouped,
        etp: 1,
        num_gemms: 8,
    };
    let t = |eager: Threshold, g: Option<u64>| Thresholds {
        eager,
        graphed: g.map(Threshold::From),
        measured_speedup: None,
    };
    p.insert(&dense, t(Threshold::From(4096), Some(1024)))
        .unwrap();
    p.insert(&grouped, t(Threshold::Never, Some(32768)))
        .unwrap();
    assert!(
        p.insert(&dense, t(Threshold::From(1), None)).is_err(),
        "a key given twice is refused"
    );
    let rules = p.rules();
    assert_eq!(rules.len(), p.rule_count());
    assert_eq!(rules[0], (dense, t(Threshold::From(4096), Some(1024))));
    assert_eq!(rules[1], (grouped, t(Threshold::Never, Some(32768))));
    // Never is 2^53 in the file only, where the reference's loader reads a number.
    assert!(p.to_json().contains("9007199254740992"));
    assert_eq!(Threshold::from_wire(1 << 53), Threshold::Never);
    assert!(Threshold::From(1 << 40) < Threshold::Never);
    assert!(Threshold::From(4096).allows(4096) && !Threshold::Never.allows(u64::MAX));
    assert_eq!(Threshold::Never.to_string(), "never");
    // What rules() lists, insert() rebuilds: the same file.
    let mut again = Policy::new(1.0).unwrap();
    for (k, th) in &rules {
        again.insert(k, *th).unwrap();
    }
    assert_eq!(again.to_json(), p.to_json());
}
