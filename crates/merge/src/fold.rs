//! One policy for both executions: an eager policy's thresholds as `min_tokens` and a graphed
//! policy's as `min_tokens_graphed`, rule by rule, so one file is right for an eager trainer and
//! for a CUDA-graphed one (`merge-policy --trainer both`).
//!
//! A key with a rule in one policy only gets [`crate::step::NEVER`] in the other execution; a key
//! with a rule in neither stays out, a measured BF16 key when both measured it so.

use std::collections::{BTreeMap, BTreeSet};

use fp8_policy::{Execution, Policy, PolicyError, RuleKey, Threshold, Thresholds};

use crate::step::NEVER;

/// `(min_tokens, measured_speedup)` per key of one policy.
fn thresholds(p: &Policy) -> BTreeMap<RuleKey, (u64, Option<f64>)> {
    both_thresholds(p)
        .into_iter()
        .map(|(k, (min_tokens, _, speedup))| (k, (min_tokens, speedup)))
        .collect()
}

/// Adds one rule to `out` ([`Policy::insert`]).
fn add_rule(
    out: &mut Policy,
    key: &RuleKey,
    min_tokens: u64,
    min_tokens_graphed: Option<u64>,
    measured_speedup: Option<f64>,
) -> Result<(), PolicyError> {
    out.insert(
        key,
        Thresholds {
            eager: Threshold::from_wire(min_tokens),
            graphed: min_tokens_graphed.map(Threshold::from_wire),
            measured_speedup,
        },
    )
}

/// What a single-execution policy's thresholds were made from, in words (its provenance's
/// timing and host profile), unless it already says so.
fn source(p: &Policy, field: &str) -> String {
    let Some(pr) = p.provenance() else {
        return "unrecorded".to_owned();
    };
    if let Some(s) = pr.thresholds.get(field) {
        return s.clone();
    }
    let mut s = if pr.timing.is_empty() {
        "unrecorded timing".to_owned()
    } else {
        pr.timing.join("+")
    };
    if let Some(h) = &pr.host_profile {
        s.push_str(&format!(" with host profile {h}"));
    }
    if pr.step.is_some() {
        s.push_str(" (training step oracle)");
    }
    s
}

fn union(a: &mut Vec<String>, b: &[String]) {
    let set: BTreeSet<String> = a.iter().chain(b).cloned().collect();
    *a = set.into_iter().collect();
}

/// `primary`'s rules, and `fallback`'s for every key `primary` did not measure (neither a rule
/// nor a measured BF16 answer): e.g. the TE backend's eager thresholds where TE measured a
/// layout, the host-profile ones elsewhere. Both are policies of one execution.
pub fn overlay(primary: &Policy, fallback: &Policy) -> Result<Policy, PolicyError> {
    let mine = thresholds(primary);
    let measured_bf16: BTreeSet<RuleKey> = primary
        .provenance()
        .map(|p| p.measured_bf16_keys.iter().cloned().collect())
        .unwrap_or_default();
    let mut out = primary.clone();
    let mut added = 0usize;
    for (key, (min_tokens, speedup)) in thresholds(fallback) {
        if !mine.contains_key(&key) && !measured_bf16.contains(&key) {
            add_rule(&mut out, &key, min_tokens, None, speedup)?;
            added += 1;
        }
    }
    let mut prov = primary.provenance().cloned().unwrap_or_default();
    if let Some(fp) = fallback.provenance() {
        union(&mut prov.timing, &fp.timing);
        union(&mut prov.reports, &fp.reports);
        union(&mut prov.device, &fp.device);
        union_shapes(&mut prov.shapes, &fp.shapes);
        for k in &fp.measured_bf16_keys {
            if !mine.contains_key(k) && !prov.measured_bf16_keys.contains(k) {
                prov.measured_bf16_keys.push(k.clone());
            }
        }
        prov.measured_bf16_keys.sort();
        if fp.host_profile.is_some() && prov.host_profile.is_none() {
            prov.host_profile.clone_from(&fp.host_profile);
        }
    }
    let text = format!(
        "{}; {} for the keys it did not measure ({added} rule(s))",
        source(primary, "min_tokens"),
        source(fallback, "min_tokens")
    );
    prov.thresholds.insert("min_tokens".to_owned(), text);
    out.set_provenance(prov);
    Ok(out)
}

/// Adds `theirs`' shapes to `mine`, key by key, each key's shapes sorted and distinct.
fn union_shapes(mine: &mut Vec<fp8_policy::KeyShapes>, theirs: &[fp8_policy::KeyShapes]) {
    let mut by: BTreeMap<RuleKey, BTreeSet<fp8_policy::GemmShape>> = BTreeMap::new();
    for k in mine.iter().chain(theirs) {
        by.entry(k.key.clone())
            .or_default()
            .extend(k.shapes.iter().copied());
    }
    *mine = by
        .into_iter()
        .map(|(key, shapes)| fp8_policy::KeyShapes {
            key,
            shapes: shapes.into_iter().collect(),
        })
        .collect();
}

/// The folded policy. Its provenance is the eager policy's, with the graphed policy's timing,
/// reports and devices added, `trainer` set to `eager+graphed`, and `thresholds` naming what
/// each threshold field was made from.
pub fn fold(eager: &Policy, graphed: &Policy) -> Result<Policy, PolicyError> {
    let (e, g) = (thresholds(eager), thresholds(graphed));
    let keys: BTreeSet<&RuleKey> = e.keys().chain(g.keys()).collect();
    let mut out = Policy::new(eager.speedup_threshold())?;
    for key in keys {
        let (min_tokens, speedup) = e.get(key).copied().unwrap_or((NEVER, None));
        let graphed_min = g.get(key).map_or(NEVER, |r| r.0);
        // Written even where it equals `min_tokens`: the file says both thresholds outright.
        let min_tokens_graphed = Some(graphed_min);
        let speedup = speedup.or_else(|| g.get(key).and_then(|r| r.1));
        add_rule(&mut out, key, min_tokens, min_tokens_graphed, speedup)?;
    }
    let mut prov = eager.provenance().cloned().unwrap_or_default();
    if let Some(gp) = graphed.provenance() {
        union(&mut prov.timing, &gp.timing);
        union(&mut prov.reports, &gp.reports);
        union(&mut prov.device, &gp.device);
        union_shapes(&mut prov.shapes, &gp.shapes);
        prov.measured_bf16_keys
            .retain(|k| gp.measured_bf16_keys.contains(k));
    }
    prov.thresholds = BTreeMap::from([
        ("min_tokens".to_owned(), source(eager, "min_tokens")),
        (
            "min_tokens_graphed".to_owned(),
            source(graphed, "min_tokens"),
        ),
    ]);
    prov.trainer = Some("eager+graphed".to_owned());
    out.set_provenance(prov);
    Ok(out)
}

/// Every rule's key and both thresholds (`min_tokens`, `min_tokens_graphed`) and speedup.
pub type BothThresholds = BTreeMap<RuleKey, (u64, Option<u64>, Option<f64>)>;

/// Every rule of `p` by its key: `min_tokens`, `min_tokens_graphed` and `measured_speedup`.
pub fn both_thresholds(p: &Policy) -> BothThresholds {
    p.rules()
        .into_iter()
        .map(|(k, t)| {
            let graphed = t.graphed.map(Threshold::to_wire);
            (k, (t.eager.to_wire(), graphed, t.measured_speedup))
        })
        .collect()
}

/// The counts a step swept for one key and execution, in the key's own tokens.
#[derive(Debug, Clone, Copy)]
struct Swept {
    from: u64,
    to: u64,
}

/// One execution's threshold of a key the step measured: the step's (`step_t`), but the
/// default's where the step has no verdict to overrule it: an execution the step did not sweep
/// (`swept` is `None` in a step that records its verdicts; BF16 where the default has no rule),
/// a key the step kept BF16 up to its largest count when the default's threshold lies above
/// that count, and a key the step kept FP8 from its smallest count when the default's threshold
/// lies below that count.
fn one_execution(step_t: u64, swept: Option<Swept>, recorded: bool, default_t: Option<u64>) -> u64 {
    match swept {
        None if recorded => default_t.unwrap_or(NEVER),
        Some(s) if step_t >= NEVER => default_t.filter(|t| *t > s.to).unwrap_or(step_t),
        Some(Swept { from, .. }) if step_t == from => {
            default_t.filter(|t| *t < from).unwrap_or(step_t)
        }
        _ => step_t,
    }
}

/// The training step's answer where it was measured, `default`'s elsewhere: `step` (a policy
/// from `step::step_policy`) decides every key it has a rule for or found BF16 at every swept
/// count, in each execution it swept; `default` (a folded policy) keeps the other keys (e.g. the
/// TP sizes the step was not run at), a key's threshold in an execution the step did not sweep,
/// and one above the step's largest count where the step kept the key BF16 to it (the step has
/// no verdict there: a default threshold above it is consistent with every verdict). Provenance:
/// `default`'s, with the step's record and inputs added and each threshold's source naming both.
pub fn step_first(step: &Policy, default: &Policy) -> Result<Policy, crate::MergeError> {
    let mut mine = both_thresholds(step);
    let prov_step = step.provenance();
    for k in prov_step
        .map(|p| p.measured_bf16_keys.as_slice())
        .unwrap_or_default()
    {
        mine.entry(k.clone()).or_insert((NEVER, None, None));
    }
    let theirs = both_thresholds(default);
    let mut out = Policy::new(default.speedup_threshold())?;
    let mut kept = 0usize;
    for (key, (min_tokens, graphed, speedup)) in &theirs {
        if !mine.contains_key(key) {
            add_rule(&mut out, key, *min_tokens, *graphed, *speedup)?;
            kept += 1;
        }
    }
    // The step's record, typed (`crate::step::StepRecord`); one that does not read is refused.
    let record = match crate::step::StepRecord::of(step) {
        Some(Ok(r)) => Some(r),
        Some(Err(e)) => return Err(crate::MergeError::Record(format!("the step policy's {e}"))),
        None => None,
    };
    let swept = |key: &RuleKey, e: Execution| -> Option<Swept> {
        let (from, to) = record.as_ref()?.swept(key, e)?;
        Some(Swept { from, to })
    };
    let mut bf16 = Vec::new();
    for (key, (min_tokens, graphed, speedup)) in &mine {
        let d = theirs.get(key);
        let recorded = record.is_some();
        let pick = |step_t: u64, e: Execution, default_t: Option<u64>| {
            one_execution(step_t, swept(key, e), recorded, default_t)
        };
        let e = pick(*min_tokens, Execution::Eager, d.map(|d| d.0));
        let g = pick(
            graphed.unwrap_or(*min_tokens),
            Execution::Graphed,
            d.map(|d| d.1.unwrap_or(d.0)),
        );
        if e >= NEVER && g >= NEVER {
            bf16.push(key.clone());
            continue;
        }
        add_rule(&mut out, key, e, Some(g), *speedup)?;
    }
    let mut prov = default.provenance().cloned().unwrap_or_default();
    if let Some(sp) = prov_step {
        union(&mut prov.timing, &sp.timing);
        union(&mut prov.reports, &sp.reports);
        union(&mut prov.device, &sp.device);
        prov.step.clone_from(&sp.step);
        prov.measured_bf16_keys.retain(|k| !mine.contains_key(k));
        prov.measured_bf16_keys.extend(bf16);
        prov.measured_bf16_keys.sort();
    }
    for field in ["min_tokens", "min_tokens_graphed"] {
        let rest = prov
            .thresholds
            .get(field)
            .cloned()
            .unwrap_or_else(|| source(default, field));
        prov.thresholds.insert(
            field.to_owned(),
            format!(
                "the training step's verdicts (its per-group oracle, or the mode its rounds \
                 measured faster: provenance.step.runs[].overruled) for the {} key(s) it \
                 measured, in the executions and up to the counts it swept (provenance.step); \
                 elsewhere ({kept} rule(s)): {rest}",
                mine.len()
            ),
        );
    }
    out.set_provenance(prov);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use fp8_policy::{DenseKind, Lookup};

    fn policy(rules: &str) -> Policy {
        Policy::from_json_str(
            &format!(r#"{{"version": 1, "speedup_threshold": 1.0, "rules": {rules}}}"#),
            "p.json",
        )
        .unwrap_or_else(|e| panic!("{e}"))
    }

    fn parsed(text: &str) -> Policy {
        Policy::from_json_str(text, "step.json").unwrap_or_else(|e| panic!("{e}"))
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
        // Same threshold both ways: both fields all the same, so the file says both outright.
        let same = fold(&eager, &eager).unwrap_or_else(|e| panic!("{e}"));
        let v: serde_json::Value =
            serde_json::from_str(&same.to_json()).unwrap_or_else(|e| panic!("{e}"));
        let fc2 = &v["rules"]["row"]["fc2"][0];
        assert_eq!(fc2["min_tokens_graphed"], fc2["min_tokens"]);
    }

    #[test]
    fn overlay_fills_only_the_keys_the_primary_did_not_measure() {
        let te = Policy::from_json_str(
            r#"{"version": 1, "speedup_threshold": 1.0,
                "rules": {"row": {"fc2": [{"tp": 1, "min_tokens": 8192}]}},
                "provenance": {"timing": ["te-eager"], "measured_bf16_keys": [
                    {"kind": "row", "ub_name": "proj", "tp": 1}]}}"#,
            "te.json",
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let host = Policy::from_json_str(
            r#"{"version": 1, "speedup_threshold": 1.0,
                "rules": {"row": {"fc2": [{"tp": 1, "min_tokens": 1024}, {"tp": 2, "min_tokens": 4096}],
                                  "proj": [{"tp": 1, "min_tokens": 2048}]}},
                "provenance": {"timing": ["gpu"], "host_profile": "h.json"}}"#,
            "host.json",
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let o = overlay(&te, &host).unwrap_or_else(|e| panic!("{e}"));
        let at = |ub: &'static str, tp: u32, t: u64| {
            o.decide(
                Lookup::Dense {
                    kind: DenseKind::Row,
                    ub_name: Some(ub),
                    tp,
                },
                t,
            )
            .use_fp8
        };
        // TE's rule stands; TE's measured BF16 stands; the TP 2 key TE never timed comes from the host profile.
        assert!(!at("fc2", 1, 4096) && at("fc2", 1, 8192));
        assert!(!at("proj", 1, 1 << 20));
        assert!(!at("fc2", 2, 2048) && at("fc2", 2, 4096));
        let prov = o.provenance().unwrap_or_else(|| panic!("provenance"));
        assert_eq!(prov.timing, ["gpu", "te-eager"]);
        let text = &prov.thresholds["min_tokens"];
        assert!(
            text.starts_with(
                "te-eager; gpu with host profile h.json for the keys it did not measure (1 rule(s))"
            ),
            "{text}"
        );
        // Folding keeps the overlay's words for min_tokens and names the graphed source.
        let f = fold(&o, &host).unwrap_or_else(|e| panic!("{e}"));
        let prov = f.provenance().unwrap_or_else(|| panic!("provenance"));
        assert_eq!(prov.thresholds["min_tokens"], *text);
        assert_eq!(
            prov.thresholds["min_tokens_graphed"],
            "gpu with host profile h.json"
        );
    }

    #[test]
    fn the_step_decides_the_keys_it_measured_both_ways_and_the_default_the_rest() {
        let step = Policy::from_json_str(
            r#"{"version": 1, "speedup_threshold": 1.0,
                "rules": {"row": {"fc2": [{"tp": 1, "min_tokens": 8192, "min_tokens_graphed": 4096}]}},
                "provenance": {"timing": ["step"], "measured_bf16_keys": [
                    {"kind": "row", "ub_name": "proj", "tp": 1}]}}"#,
            "step.json",
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let default = Policy::from_json_str(
            r#"{"version": 1, "speedup_threshold": 1.0,
                "rules": {"row": {"fc2": [{"tp": 1, "min_tokens": 16384, "min_tokens_graphed": 1024},
                                          {"tp": 2, "min_tokens": 4096}],
                                  "proj": [{"tp": 1, "min_tokens": 2048}]}},
                "provenance": {"timing": ["gpu"], "thresholds": {"min_tokens": "te", "min_tokens_graphed": "cublaslt"}}}"#,
            "default.json",
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let o = step_first(&step, &default).unwrap_or_else(|e| panic!("{e}"));
        let at = |ub: &'static str, tp: u32, t: u64, e: Execution| {
            let l = Lookup::Dense {
                kind: DenseKind::Row,
                ub_name: Some(ub),
                tp,
            };
            o.decide_in(l, t, e).use_fp8
        };
        use Execution::{Eager, Graphed};
        // The step's thresholds in both executions, not the default's.
        assert!(!at("fc2", 1, 4096, Eager) && at("fc2", 1, 8192, Eager));
        assert!(!at("fc2", 1, 2048, Graphed) && at("fc2", 1, 4096, Graphed));
        // The step found proj BF16 at every count: the default's rule is gone.
        assert!(!at("proj", 1, 1 << 20, Eager) && !at("proj", 1, 1 << 20, Graphed));
        // The TP 2 key the step never ran stays the default's.
        assert!(!at("fc2", 2, 2048, Eager) && at("fc2", 2, 4096, Graphed));
        let prov = o.provenance().unwrap_or_else(|| panic!("provenance"));
        assert_eq!(prov.timing, ["gpu", "step"]);
        let text = &prov.thresholds["min_tokens_graphed"];
        assert!(
            text.contains("2 key(s) it measured") && text.ends_with("(1 rule(s)): cublaslt"),
            "{text}"
        );
    }

    #[test]
    fn the_step_decides_only_the_executions_and_counts_it_swept() {
        // An eager-only step to 4096: fc1 FP8 from 4096, proj BF16 at every count to 4096.
        let step = Policy::from_json_str(
            r#"{"version": 1, "speedup_threshold": 1.0,
                "rules": {"row": {"fc1": [{"tp": 8, "min_tokens": 4096}]}},
                "provenance": {"timing": ["step-eager"], "measured_bf16_keys": [
                    {"kind": "row", "ub_name": "proj", "tp": 8}],
                  "step": {"verdicts": {
                    "(kind=row, ub_name=fc1, tp=8)": {"eager": [[2048, false], [4096, true]], "graphed": null,
                        "swept_from": {"eager": 2048, "graphed": null}, "swept_to": {"eager": 4096, "graphed": null}},
                    "(kind=row, ub_name=proj, tp=8)": {"eager": [[2048, false], [4096, false]], "graphed": null,
                        "swept_from": {"eager": 2048, "graphed": null}, "swept_to": {"eager": 4096, "graphed": null}}}}}}"#,
            "step.json",
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let default = Policy::from_json_str(
            r#"{"version": 1, "speedup_threshold": 1.0,
                "rules": {"row": {"fc1": [{"tp": 8, "min_tokens": 2048, "min_tokens_graphed": 256}],
                                  "proj": [{"tp": 8, "min_tokens": 16384, "min_tokens_graphed": 2048}]}}}"#,
            "default.json",
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let o = step_first(&step, &default).unwrap_or_else(|e| panic!("{e}"));
        let both = both_thresholds(&o);
        let key = |ub: &str| RuleKey::Dense {
            kind: DenseKind::Row,
            ub_name: ub.to_owned(),
            tp: 8,
        };
        // Eager from the step, graphed (not swept) from the default.
        assert_eq!(both[&key("fc1")].0, 4096);
        assert_eq!(both[&key("fc1")].1, Some(256));
        // BF16 to 4096 in the step; the default's 16384 is above the sweep, so it stands.
        assert_eq!(both[&key("proj")].0, 16384);
        assert_eq!(both[&key("proj")].1, Some(2048));
        // A default threshold inside the sweep is overruled: BF16 where the step said BF16.
        let inside = Policy::from_json_str(
            r#"{"version": 1, "speedup_threshold": 1.0,
                "rules": {"row": {"proj": [{"tp": 8, "min_tokens": 2048, "min_tokens_graphed": 2048}]}}}"#,
            "default.json",
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let o = step_first(&step, &inside).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(both_thresholds(&o)[&key("proj")], (NEVER, Some(2048), None));
    }

    #[test]
    fn below_its_sweep_the_step_leaves_a_lower_default_threshold_and_adds_none() {
        // An eager-only step at 4096 alone: fc1 and q_down FP8 there, proj BF16.
        let step = parsed(
            r#"{"version": 1, "speedup_threshold": 1.0,
                "rules": {"row": {"fc1": [{"tp": 1, "min_tokens": 4096}]},
                          "duplicated": {"q_down_proj": [{"tp": 1, "min_tokens": 4096}]}},
                "provenance": {"timing": ["step-eager"],
                  "step": {"verdicts": {
                    "(kind=row, ub_name=fc1, tp=1)": {"eager": [[4096, true]], "graphed": null,
                        "swept_from": {"eager": 4096, "graphed": null},
                        "swept_to": {"eager": 4096, "graphed": null}},
                    "(kind=duplicated, ub_name=q_down_proj, tp=1)": {"eager": [[4096, true]], "graphed": null,
                        "swept_from": {"eager": 4096, "graphed": null},
                        "swept_to": {"eager": 4096, "graphed": null}}}}}}"#,
        );
        // The default: fc1 FP8 from 512 eager, q_down not at all (no rule: BF16 graphed too).
        let default = policy(
            r#"{"row": {"fc1": [{"tp": 1, "min_tokens": 512, "min_tokens_graphed": 256}]}}"#,
        );
        let o = step_first(&step, &default).unwrap_or_else(|e| panic!("{e}"));
        let both = both_thresholds(&o);
        let key = |kind, ub: &str| RuleKey::Dense {
            kind,
            ub_name: ub.into(),
            tp: 1,
        };
        let (fc1, q_down) = (
            key(DenseKind::Row, "fc1"),
            key(DenseKind::Duplicated, "q_down_proj"),
        );
        // FP8 from the sweep's first count, and the default lower: the default's stands.
        assert_eq!(both[&fc1], (512, Some(256), None));
        // FP8 where the default had none: the step's threshold eager, and graphed (not swept)
        // the default's answer, BF16.
        assert_eq!(both[&q_down], (4096, Some(NEVER), None));
        // A default above the sweep's first count is overruled by the step's FP8 verdict.
        let higher = policy(r#"{"row": {"fc1": [{"tp": 1, "min_tokens": 16384}]}}"#);
        let o = step_first(&step, &higher).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(both_thresholds(&o)[&fc1], (4096, Some(16384), None));
    }
}
