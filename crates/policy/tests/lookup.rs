//! Lookup semantics: the seed's keys, the `>=` boundary, and a reason for every answer.

#![allow(clippy::unwrap_used)]

use fp8_policy::{DenseKind, GroupedKind, Lookup, MatchedRule, Policy, Reason, RuleKey};

fn seed() -> Policy {
    Policy::load(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../fixtures/policies/seed_example.json"
    ))
    .unwrap()
}

fn dense(kind: DenseKind, ub: &str, tp: u32) -> Lookup<'_> {
    Lookup::Dense {
        kind,
        ub_name: Some(ub),
        tp,
    }
}

#[test]
fn dense_boundaries() {
    let p = seed();
    let fc2 = dense(DenseKind::Row, "fc2", 1);
    let below = p.decide(fc2, 8191);
    assert!(!below.use_fp8);
    assert!(matches!(
        below.reason,
        Reason::BelowThreshold {
            num_tokens: 8191,
            ..
        }
    ));
    let at = p.decide(fc2, 8192);
    assert!(at.use_fp8);
    assert!(matches!(
        at.reason,
        Reason::AtOrAboveThreshold {
            num_tokens: 8192,
            ..
        }
    ));
    assert_eq!(
        at.rule().map(MatchedRule::min_tokens),
        Some(fp8_policy::Threshold::From(8192))
    );
    assert_eq!(
        at.rule().and_then(MatchedRule::measured_speedup),
        Some(1.23)
    );
    assert!(p.decide(fc2, u64::MAX).use_fp8);
    assert!(!p.decide(fc2, 0).use_fp8);
    assert_eq!(
        at.reason.to_string(),
        "tokens 8192 >= min_tokens 8192, measured speedup 1.23 at min_tokens"
    );
}

#[test]
fn dense_key_includes_kind_ub_name_and_tp() {
    let p = seed();
    // Same ub_name, other kind: no rule.
    let d = p.decide(dense(DenseKind::Column, "fc2", 1), 1 << 20);
    assert!(!d.use_fp8);
    assert_eq!(
        d.reason,
        Reason::NoRule {
            key: RuleKey::Dense {
                kind: DenseKind::Column,
                ub_name: "fc2".into(),
                tp: 1
            }
        }
    );
    // Other tp: no rule, and the message names the key.
    let d = p.decide(dense(DenseKind::Row, "fc2", 2), 1 << 20);
    assert!(!d.use_fp8);
    assert_eq!(
        d.reason.to_string(),
        "no rule for (kind=row, ub_name=fc2, tp=2): BF16 by default"
    );
    // Per-ub thresholds differ: qkv and fc1 share a kind.
    assert!(
        !p.decide(dense(DenseKind::LayernormColumn, "qkv", 1), 8192)
            .use_fp8
    );
    assert!(
        p.decide(dense(DenseKind::LayernormColumn, "fc1", 1), 8192)
            .use_fp8
    );
}

#[test]
fn no_ub_name_means_bf16() {
    let p = seed();
    let d = p.decide(
        Lookup::Dense {
            kind: DenseKind::Row,
            ub_name: None,
            tp: 1,
        },
        1 << 30,
    );
    assert!(!d.use_fp8);
    assert_eq!(
        d.reason,
        Reason::NoUbName {
            kind: DenseKind::Row,
            tp: 1
        }
    );
    assert!(d.reason.to_string().contains("no ub_name"));
}

#[test]
fn grouped_lookup_uses_etp_and_num_gemms() {
    let p = seed();
    let hit = Lookup::Grouped {
        kind: GroupedKind::ColumnGrouped,
        etp: 1,
        num_gemms: 64,
    };
    assert!(!p.decide(hit, 423).use_fp8);
    assert!(p.decide(hit, 424).use_fp8);
    let other_gemms = Lookup::Grouped {
        kind: GroupedKind::ColumnGrouped,
        etp: 1,
        num_gemms: 1,
    };
    let d = p.decide(other_gemms, 1 << 20);
    assert!(!d.use_fp8);
    assert!(d.reason.to_string().contains("num_gemms=1"), "{}", d.reason);
    let other_etp = Lookup::Grouped {
        kind: GroupedKind::RowGrouped,
        etp: 2,
        num_gemms: 64,
    };
    assert!(!p.decide(other_etp, 1 << 20).use_fp8);
}

#[test]
fn builder_refuses_duplicates_and_zeroes() {
    use fp8_policy::{DenseRule, GroupedRule};
    let mut p = Policy::new(1.0).unwrap();
    let r = DenseRule {
        tp: 2,
        min_tokens: fp8_policy::Threshold::From(10),
        min_tokens_graphed: None,
        measured_speedup: Some(1.1),
    };
    p.add_dense_rule(DenseKind::Row, "proj", r).unwrap();
    assert!(p.add_dense_rule(DenseKind::Row, "proj", r).is_err());
    assert!(p.add_dense_rule(DenseKind::Row, "", r).is_err());
    assert!(
        p.add_dense_rule(DenseKind::Row, "fc2", DenseRule { tp: 0, ..r })
            .is_err()
    );
    assert!(
        p.add_dense_rule(
            DenseKind::Row,
            "fc2",
            DenseRule {
                measured_speedup: Some(f64::NAN),
                ..r
            }
        )
        .is_err()
    );
    let g = GroupedRule {
        etp: 1,
        num_gemms: 8,
        min_tokens: fp8_policy::Threshold::From(5),
        min_tokens_graphed: None,
        measured_speedup: None,
    };
    p.add_grouped_rule(GroupedKind::RowGrouped, g).unwrap();
    assert!(p.add_grouped_rule(GroupedKind::RowGrouped, g).is_err());
    assert!(
        p.add_grouped_rule(GroupedKind::RowGrouped, GroupedRule { num_gemms: 0, ..g })
            .is_err()
    );
    assert!(Policy::new(f64::NAN).is_err());
    assert!(Policy::new(0.0).is_err());
    assert_eq!(p.rule_count(), 2);
    assert_eq!(p.rule_keys().len(), 2);
}

#[test]
fn a_recipe_plan_answers_the_recipe_question_itself() {
    // A policy measured in tensorwise warns a blockwise trainer; with a recipe plan (its base
    // tensorwise: the hook and the native config run every FP8 module so) it has nothing to say.
    let text = r#"{"version": 1, "speedup_threshold": 1.0, "rules": {},
        "provenance": {"recipe": ["tensorwise"]}}"#;
    let plain = Policy::from_json_str(text, "t.json").unwrap();
    let w = plain.recipe_warning(fp8_policy::Recipe::Blockwise).unwrap();
    assert!(
        w.contains("tensorwise") && w.contains("--recipe blockwise"),
        "{w}"
    );
    let planned = text.replace(
        r#""rules": {},"#,
        r#""rules": {}, "recipes": {"base": "tensorwise", "keys": []},"#,
    );
    let planned = Policy::from_json_str(&planned, "t.json").unwrap();
    assert!(planned.recipe_plan().is_some());
    assert_eq!(planned.recipe_warning(fp8_policy::Recipe::Blockwise), None);
}
