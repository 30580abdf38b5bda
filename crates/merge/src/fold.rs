//! One policy for both executions: an eager policy's thresholds as `min_tokens` and a graphed
//! policy's as `min_tokens_graphed`, rule by rule, so one file is right for an eager trainer and
//! for a CUDA-graphed one (`merge-policy --trainer both`).
//!
//! A key with a rule in one policy only gets [`crate::step::NEVER`] in the other execution; a key
//! with a rule in neither stays out, a measured BF16 key when both measured it so.

use std::collections::{BTreeMap, BTreeSet};

use fp8_policy::{DenseKind, DenseRule, GroupedKind, GroupedRule, Policy, PolicyError, RuleKey};

use crate::step::NEVER;

/// `(min_tokens, measured_speedup)` per key of one policy.
fn thresholds(p: &Policy) -> BTreeMap<RuleKey, (u64, Option<f64>)> {
    let mut out = BTreeMap::new();
    for kind in DenseKind::ALL {
        for (ub, rules) in p.dense_rules(kind) {
            for r in rules {
                let key = RuleKey::Dense {
                    kind,
                    ub_name: ub.clone(),
                    tp: r.tp,
                };
                out.insert(key, (r.min_tokens, r.measured_speedup));
            }
        }
    }
    for kind in GroupedKind::ALL {
        for r in p.grouped_rules(kind) {
            let key = RuleKey::Grouped {
                kind,
                etp: r.etp,
                num_gemms: r.num_gemms,
            };
            out.insert(key, (r.min_tokens, r.measured_speedup));
        }
    }
    out
}

/// The folded policy. Its provenance is the eager policy's, with the graphed policy's timing,
/// reports and devices added and `trainer` set to `eager+graphed`.
pub fn fold(eager: &Policy, graphed: &Policy) -> Result<Policy, PolicyError> {
    let (e, g) = (thresholds(eager), thresholds(graphed));
    let keys: BTreeSet<&RuleKey> = e.keys().chain(g.keys()).collect();
    let mut out = Policy::new(eager.speedup_threshold())?;
    for key in keys {
        let (min_tokens, speedup) = e.get(key).copied().unwrap_or((NEVER, None));
        let graphed_min = g.get(key).map_or(NEVER, |r| r.0);
        let min_tokens_graphed = (graphed_min != min_tokens).then_some(graphed_min);
        let speedup = speedup.or_else(|| g.get(key).and_then(|r| r.1));
        match key {
            RuleKey::Dense { kind, ub_name, tp } => out.add_dense_rule(
                *kind,
                ub_name,
                DenseRule {
                    tp: *tp,
                    min_tokens,
                    min_tokens_graphed,
                    measured_speedup: speedup,
                },
            )?,
            RuleKey::Grouped {
                kind,
                etp,
                num_gemms,
            } => out.add_grouped_rule(
                *kind,
                GroupedRule {
                    etp: *etp,
                    num_gemms: *num_gemms,
                    min_tokens,
                    min_tokens_graphed,
                    measured_speedup: speedup,
                },
            )?,
        }
    }
    let mut prov = eager.provenance().cloned().unwrap_or_default();
    if let Some(gp) = graphed.provenance() {
        let union = |a: &mut Vec<String>, b: &[String]| {
            let set: BTreeSet<String> = a.iter().chain(b).cloned().collect();
            *a = set.into_iter().collect();
        };
        union(&mut prov.timing, &gp.timing);
        union(&mut prov.reports, &gp.reports);
        union(&mut prov.device, &gp.device);
        prov.measured_bf16_keys
            .retain(|k| gp.measured_bf16_keys.contains(k));
    }
    prov.trainer = Some("eager+graphed".to_owned());
    out.set_provenance(prov);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use fp8_policy::{Execution, Lookup};

    fn policy(rules: &str) -> Policy {
        Policy::from_json_str(
            &format!(r#"{{"version": 1, "speedup_threshold": 1.0, "rules": {rules}}}"#),
            "p.json",
        )
        .unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn each_execution_keeps_its_own_policys_answer() {
        let eager = policy(r#"{"row": {"fc2": [{"tp": 1, "min_tokens": 8192}]}}"#);
        let graphed = policy(
            r#"{"row": {"fc2": [{"tp": 1, "min_tokens": 1024}], "proj": [{"tp": 1, "min_tokens": 2048}]},
                "column_grouped": [{"etp": 1, "num_gemms": 8, "min_tokens": 8192}]}"#,
        );
        let f = fold(&eager, &graphed).unwrap_or_else(|e| panic!("{e}"));
        let fc2 = Lookup::Dense {
            kind: DenseKind::Row,
            ub_name: Some("fc2"),
            tp: 1,
        };
        let proj = Lookup::Dense {
            kind: DenseKind::Row,
            ub_name: Some("proj"),
            tp: 1,
        };
        for t in [512, 1024, 2048, 4096, 8192, 16384] {
            for (l, e, g) in [(fc2, &eager, &graphed), (proj, &eager, &graphed)] {
                assert_eq!(
                    f.decide_in(l, t, Execution::Eager).use_fp8,
                    e.decide(l, t).use_fp8,
                    "{t} eager"
                );
                assert_eq!(
                    f.decide_in(l, t, Execution::Graphed).use_fp8,
                    g.decide(l, t).use_fp8,
                    "{t} graphed"
                );
            }
        }
        assert_eq!(
            f.provenance().and_then(|p| p.trainer.as_deref()),
            Some("eager+graphed")
        );
        // Same threshold both ways: no second field.
        let same = fold(&eager, &eager).unwrap_or_else(|e| panic!("{e}"));
        assert!(!same.to_json().contains("min_tokens_graphed"));
    }
}
