//! The one fold (`fp8_merge::fold`): each numbered rule of its module doc on small policies,
//! and a property over random ones.

use fp8_merge::fold::{Source, both_thresholds, fold, fold_pair};
use fp8_policy::{DenseKind, Execution, Lookup, Policy, RuleKey, Threshold, ThresholdSource};
use proptest::prelude::*;

use Execution::{Eager, Graphed};
use Threshold::{From, Never};

fn parsed(text: &str) -> Policy {
    Policy::from_json_str(text, "p.json").unwrap_or_else(|e| panic!("{e}"))
}

fn policy(rules: &str, provenance: &str) -> Policy {
    parsed(&format!(
        r#"{{"version": 1, "speedup_threshold": 1.0, "rules": {rules}, "provenance": {provenance}}}"#
    ))
}

fn key(kind: DenseKind, ub: &str, tp: u32) -> RuleKey {
    RuleKey::Dense {
        kind,
        ub_name: ub.to_owned(),
        tp,
    }
}

fn row(ub: &str, tp: u32) -> RuleKey {
    key(DenseKind::Row, ub, tp)
}

fn folded(sources: &[Source]) -> Policy {
    fold(sources, 1.0).unwrap_or_else(|e| panic!("{e}"))
}

/// The threshold pair of a key, `(Never, Never)` where it has no rule.
fn pair(p: &Policy, k: &RuleKey) -> (Threshold, Threshold) {
    both_thresholds(p)
        .get(k)
        .map_or((Never, Never), |t| (t.0, t.1.unwrap_or(t.0)))
}

fn source_of(p: &Policy, k: &RuleKey) -> (Option<ThresholdSource>, Option<ThresholdSource>) {
    let s = p
        .provenance()
        .and_then(|v| v.sources.iter().find(|s| s.key == *k))
        .unwrap_or_else(|| panic!("no sources entry for {k}"));
    (s.eager, s.graphed)
}

#[test]
fn an_eager_and_a_graphed_policy_fold_to_each_executions_own_answer() {
    let eager = policy(
        r#"{"row": {"fc2": [{"tp": 1, "min_tokens": 8192}]}}"#,
        r#"{"eager_source": "eager_step"}"#,
    );
    let graphed = policy(
        r#"{"row": {"fc2": [{"tp": 1, "min_tokens": 1024}], "proj": [{"tp": 1, "min_tokens": 2048}]}}"#,
        r#"{"eager_source": "gpu_time"}"#,
    );
    let f = fold_pair(&eager, &graphed).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(pair(&f, &row("fc2", 1)), (From(8192), From(1024)));
    // Rule 3: no eager evidence for proj, so BF16 there.
    assert_eq!(pair(&f, &row("proj", 1)), (Never, From(2048)));
    assert_eq!(
        source_of(&f, &row("proj", 1)),
        (None, Some(ThresholdSource::GpuTime))
    );
    let prov = f.provenance().unwrap_or_else(|| panic!("provenance"));
    assert_eq!(prov.trainer.as_deref(), Some("eager+graphed"));
    // Two eager origins (eager_step, none): no single eager_source.
    assert_eq!(prov.eager_source, None);
    // Both fields written even where equal.
    let same = fold_pair(&eager, &eager).unwrap_or_else(|e| panic!("{e}"));
    let v: serde_json::Value =
        serde_json::from_str(&same.to_json()).unwrap_or_else(|e| panic!("{e}"));
    let fc2 = &v["rules"]["row"]["fc2"][0];
    assert_eq!(fc2["min_tokens_graphed"], fc2["min_tokens"]);
    assert_eq!(v["provenance"]["eager_source"], "eager_step");
}

#[test]
fn the_first_source_with_evidence_decides_and_a_measured_bf16_answer_is_evidence() {
    let te = policy(
        r#"{"row": {"fc2": [{"tp": 1, "min_tokens": 8192, "measured_speedup": 1.1}]}}"#,
        r#"{"timing": ["te-eager"], "eager_source": "eager_step",
            "measured_bf16_keys": [{"kind": "row", "ub_name": "proj", "tp": 1}]}"#,
    );
    let host = policy(
        r#"{"row": {"fc2": [{"tp": 1, "min_tokens": 1024}, {"tp": 2, "min_tokens": 4096}],
                    "proj": [{"tp": 1, "min_tokens": 2048}]}}"#,
        r#"{"timing": ["gpu"], "eager_source": "host_profile", "host_profile": "h.json"}"#,
    );
    let gpu = policy(
        r#"{"row": {"fc2": [{"tp": 1, "min_tokens": 512}, {"tp": 2, "min_tokens": 1024}]}}"#,
        r#"{"timing": ["gpu"], "eager_source": "gpu_time",
            "measured_bf16_keys": [{"kind": "row", "ub_name": "proj", "tp": 1}]}"#,
    );
    let f = folded(&[
        Source::of_policy(&te, Eager),
        Source::of_policy(&host, Eager),
        Source::of_policy(&gpu, Graphed),
    ]);
    assert_eq!(pair(&f, &row("fc2", 1)), (From(8192), From(512)));
    assert_eq!(pair(&f, &row("fc2", 2)), (From(4096), From(1024)));
    use ThresholdSource::{EagerStep, GpuTime, HostProfile};
    assert_eq!(
        source_of(&f, &row("fc2", 1)),
        (Some(EagerStep), Some(GpuTime))
    );
    assert_eq!(
        source_of(&f, &row("fc2", 2)),
        (Some(HostProfile), Some(GpuTime))
    );
    // TE's measured BF16 stands over the host profile's 2048; graphed measured it BF16 too:
    // rule 4, no rule, a measured BF16 key.
    assert_eq!(pair(&f, &row("proj", 1)), (Never, Never));
    let prov = f.provenance().unwrap_or_else(|| panic!("provenance"));
    assert_eq!(prov.measured_bf16_keys, [row("proj", 1)]);
    assert_eq!(
        source_of(&f, &row("proj", 1)),
        (Some(EagerStep), Some(GpuTime))
    );
    // Rule 5: the eager answer's speedup. Rule 6: TE's base, the others' timing and profile.
    assert_eq!(both_thresholds(&f)[&row("fc2", 1)].2, Some(1.1));
    assert_eq!(prov.timing, ["gpu", "te-eager"]);
    assert_eq!(prov.host_profile.as_deref(), Some("h.json"));
}

/// One execution's verdicts of a key: `(count, fp8)` per count swept, `None` where not swept.
type Timed<'a> = Option<&'a [(u64, bool)]>;

/// A step policy as `step::step_policy` writes it: `rules`, `bf16` (keys BF16 at every count)
/// and per key `(name, eager verdicts, graphed verdicts)` recorded.
fn step(rules: &str, bf16: &str, verdicts: &[(&str, Timed, Timed)]) -> Policy {
    let timed = |v: Timed| {
        v.map_or("null".to_owned(), |v| {
            let s: Vec<String> = v.iter().map(|(c, f)| format!("[{c}, {f}]")).collect();
            format!("[{}]", s.join(", "))
        })
    };
    let edge = |v: Timed, last: bool| {
        v.and_then(|v| if last { v.last() } else { v.first() })
            .map_or("null".to_owned(), |c| c.0.to_string())
    };
    let body: Vec<String> = verdicts
        .iter()
        .map(|(k, e, g)| {
            format!(
                r#""{k}": {{"eager": {}, "graphed": {}, "swept_from": {{"eager": {}, "graphed": {}}},
                    "swept_to": {{"eager": {}, "graphed": {}}}}}"#,
                timed(*e),
                timed(*g),
                edge(*e, false),
                edge(*g, false),
                edge(*e, true),
                edge(*g, true)
            )
        })
        .collect();
    policy(
        rules,
        &format!(
            r#"{{"timing": ["step-eager"], "eager_source": "step", "measured_bf16_keys": [{bf16}],
                "step": {{"verdicts": {{{}}}}}}}"#,
            body.join(", ")
        ),
    )
}

#[test]
fn the_step_decides_only_the_executions_and_counts_it_swept() {
    // Eager to 4096 only: fc1 FP8 from 4096, proj BF16 at every count.
    let s = step(
        r#"{"row": {"fc1": [{"tp": 8, "min_tokens": 4096}]}}"#,
        r#"{"kind": "row", "ub_name": "proj", "tp": 8}"#,
        &[
            (
                "(kind=row, ub_name=fc1, tp=8)",
                Some(&[(2048, false), (4096, true)]),
                None,
            ),
            (
                "(kind=row, ub_name=proj, tp=8)",
                Some(&[(2048, false), (4096, false)]),
                None,
            ),
        ],
    );
    let (e, g) = (
        policy(
            r#"{"row": {"fc1": [{"tp": 8, "min_tokens": 2048}], "proj": [{"tp": 8, "min_tokens": 16384}]}}"#,
            r#"{"eager_source": "host_profile"}"#,
        ),
        policy(
            r#"{"row": {"fc1": [{"tp": 8, "min_tokens": 256}], "proj": [{"tp": 8, "min_tokens": 2048}]}}"#,
            r#"{"eager_source": "gpu_time"}"#,
        ),
    );
    let sources = |e: &Policy| {
        [
            Source::of_step(&s).unwrap_or_else(|e| panic!("{e}")),
            Source::of_policy(e, Eager),
            Source::of_policy(&g, Graphed),
        ]
    };
    let f = folded(&sources(&e));
    // Eager from the step; graphed not swept, so the next source's.
    assert_eq!(pair(&f, &row("fc1", 8)), (From(4096), From(256)));
    assert_eq!(
        source_of(&f, &row("fc1", 8)),
        (Some(ThresholdSource::Step), Some(ThresholdSource::GpuTime))
    );
    // Rule 2: BF16 to 4096 in the step, 16384 later lies above the sweep: it stands.
    assert_eq!(pair(&f, &row("proj", 8)), (From(16384), From(2048)));
    // A later threshold inside the sweep does not: BF16 where the step said BF16.
    let inside = policy(
        r#"{"row": {"proj": [{"tp": 8, "min_tokens": 2048}]}}"#,
        r#"{"eager_source": "host_profile"}"#,
    );
    assert_eq!(
        pair(&folded(&sources(&inside)), &row("proj", 8)),
        (Never, From(2048))
    );
    let f = folded(&sources(&inside));
    assert_eq!(
        f.provenance().map(|p| p.step.is_some()),
        Some(true),
        "the step's record is kept"
    );
}

#[test]
fn from_its_first_count_the_step_leaves_a_lower_later_threshold() {
    // Eager at 4096 alone: fc1 and q_down FP8 there.
    let s = step(
        r#"{"row": {"fc1": [{"tp": 1, "min_tokens": 4096}]},
            "duplicated": {"q_down_proj": [{"tp": 1, "min_tokens": 4096}]}}"#,
        "",
        &[
            ("(kind=row, ub_name=fc1, tp=1)", Some(&[(4096, true)]), None),
            (
                "(kind=duplicated, ub_name=q_down_proj, tp=1)",
                Some(&[(4096, true)]),
                None,
            ),
        ],
    );
    let e = |t: u64| {
        policy(
            &format!(r#"{{"row": {{"fc1": [{{"tp": 1, "min_tokens": {t}}}]}}}}"#),
            r#"{"eager_source": "host_profile"}"#,
        )
    };
    let g = policy(
        r#"{"row": {"fc1": [{"tp": 1, "min_tokens": 256}]}}"#,
        r#"{"eager_source": "gpu_time"}"#,
    );
    let f = |t: u64| {
        folded(&[
            Source::of_step(&s).unwrap_or_else(|e| panic!("{e}")),
            Source::of_policy(&e(t), Eager),
            Source::of_policy(&g, Graphed),
        ])
    };
    let q_down = key(DenseKind::Duplicated, "q_down_proj", 1);
    // FP8 from the sweep's first count and a later 512 below it: 512 stands.
    assert_eq!(pair(&f(512), &row("fc1", 1)), (From(512), From(256)));
    // A later 16384 above it is overruled by the step's FP8 verdict.
    assert_eq!(pair(&f(16384), &row("fc1", 1)), (From(4096), From(256)));
    // FP8 where no later source has a rule: the step's eager, graphed (not swept) none: BF16.
    assert_eq!(pair(&f(512), &q_down), (From(4096), Never));
}

#[test]
fn a_step_without_a_record_decides_both_executions_and_a_bad_record_is_refused() {
    let s = policy(
        r#"{"row": {"fc2": [{"tp": 1, "min_tokens": 8192, "min_tokens_graphed": 4096}]}}"#,
        r#"{"timing": ["step"], "eager_source": "step",
            "measured_bf16_keys": [{"kind": "row", "ub_name": "proj", "tp": 1}]}"#,
    );
    let d = policy(
        r#"{"row": {"fc2": [{"tp": 1, "min_tokens": 16384}, {"tp": 2, "min_tokens": 4096}],
                    "proj": [{"tp": 1, "min_tokens": 2048}]}}"#,
        r#"{"eager_source": "gpu_time"}"#,
    );
    let f = folded(&[
        Source::of_step(&s).unwrap_or_else(|e| panic!("{e}")),
        Source::of_policy(&d, Eager),
        Source::of_policy(&d, Graphed),
    ]);
    assert_eq!(pair(&f, &row("fc2", 1)), (From(8192), From(4096)));
    assert_eq!(pair(&f, &row("proj", 1)), (Never, Never));
    assert_eq!(pair(&f, &row("fc2", 2)), (From(4096), From(4096)));
    let bad = policy(r#"{}"#, r#"{"step": {"verdicts": 3}}"#);
    let err = Source::of_step(&bad)
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(err.contains("provenance.step"), "{err}");
}

fn arb_policy() -> impl Strategy<Value = Policy> {
    let rule = (0usize..3, 1u32..3, prop::option::of(1u64..40));
    prop::collection::vec(rule, 0..6).prop_map(|rules| {
        let mut p = Policy::new(1.0).unwrap_or_else(|e| panic!("{e}"));
        let mut bf16 = Vec::new();
        for (ub, tp, t) in rules {
            let k = row(["fc1", "fc2", "proj"][ub], tp);
            match t {
                Some(t) => {
                    let th = fp8_policy::Thresholds {
                        eager: From(t * 256),
                        graphed: None,
                        measured_speedup: None,
                    };
                    let _ = p.insert(&k, th);
                }
                None => bf16.push(k),
            }
        }
        let mut prov = fp8_policy::Provenance::default();
        let rules: Vec<RuleKey> = p.rules().into_iter().map(|r| r.0).collect();
        bf16.retain(|k| !rules.contains(k));
        bf16.sort();
        bf16.dedup();
        prov.measured_bf16_keys = bf16;
        p.set_provenance(prov);
        p
    })
}

proptest! {
    /// Folding an eager policy with a graphed one changes no decision of either, at any count,
    /// and the source order never matters between two sources of different executions.
    #[test]
    fn a_pair_keeps_every_decision_of_each(e in arb_policy(), g in arb_policy()) {
        let f = fold_pair(&e, &g).unwrap_or_else(|e| panic!("{e}"));
        let other = folded(&[Source::of_policy(&g, Graphed), Source::of_policy(&e, Eager)]);
        prop_assert_eq!(both_thresholds(&f), both_thresholds(&other));
        for ub in ["fc1", "fc2", "proj"] {
            for tp in 1..3 {
                let l = Lookup::Dense { kind: DenseKind::Row, ub_name: Some(ub), tp };
                for t in (0..45).map(|i| i * 256) {
                    prop_assert_eq!(f.decide_in(l, t, Eager).use_fp8, e.decide(l, t).use_fp8);
                    prop_assert_eq!(f.decide_in(l, t, Graphed).use_fp8, g.decide(l, t).use_fp8);
                }
            }
        }
    }
}
