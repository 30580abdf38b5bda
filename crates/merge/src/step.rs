//! Thresholds from the training step itself: what the step benchmark's per-group oracle chose at
//! each swept token count, turned into each key's `min_tokens`.
//!
//! A key's threshold is the smallest swept count from which the oracle keeps FP8 at that count
//! and at every larger one: a BF16 verdict above a FP8 one moves the threshold above it, so a rule
//! never enables FP8 where the step lost (the reference took the first count that passed). Ties
//! are BF16, because the oracle keeps a switch to FP8 only when the step got faster beyond its
//! noise. A key shared by several groups (DeepSeek-V3's dense `fc2` and its shared experts' `fc2`
//! are both `(row, fc2, tp)`) is FP8 at a count only where the oracle kept every one of them FP8.
//! Where a count's interleaved rounds measured all-BF16, all-FP8 or a policy faster than the
//! oracle beyond the noise, that mode is the count's verdict (the search decides on fewer pairs).
//!
//! Pure: the counts come from the step benchmark's results, and the output is data for a policy.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use fp8_policy::{Execution, Policy, PolicyError, Provenance, RuleKey};
use serde_json::json;

use crate::error::MergeError;

mod provenance;
mod results;
pub use provenance::{KeyRecord, LayoutRecord, PerExecution, RunInfo, RunRecord, StepRecord};
pub use results::{
    FailedCount, JudgedPolicy, MAX_STEP_BYTES, StepCount, StepGroup, StepLayers, StepRun,
    StepSetup, failed_counts, judged_policies, parse_results,
};

/// One key's threshold and the verdicts it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyThreshold {
    /// `min_tokens` in the key's own tokens (routed tokens for experts); `None`: BF16 at every
    /// swept count's top (FP8 never kept up to the largest count).
    pub min_tokens: Option<u64>,
    /// `(swept count, FP8?)` for every count, ascending.
    pub verdicts: Vec<(u64, bool)>,
    /// The smallest swept count in the key's own tokens: below it the step has no verdict.
    pub swept_from: u64,
    /// The largest swept count in the key's own tokens: above it the step has no verdict.
    pub swept_to: u64,
    /// The groups that share the key.
    pub groups: Vec<String>,
}

/// Each key's threshold from the oracle's verdicts (any order). A count timed twice (a run and
/// its re-run) is FP8 only if both verdicts are: a threshold never rests on the kinder of two
/// readings. Groups the step did not build are ignored.
pub fn thresholds(counts: &[StepCount], groups: &[StepGroup]) -> BTreeMap<RuleKey, KeyThreshold> {
    let mut sorted: Vec<&StepCount> = counts.iter().collect();
    sorted.sort_by_key(|c| c.tokens);
    let mut by_key: BTreeMap<&RuleKey, (Vec<&str>, u64)> = BTreeMap::new();
    for g in groups {
        let e = by_key.entry(&g.key).or_insert((Vec::new(), g.scale));
        e.0.push(&g.group);
    }
    by_key
        .into_iter()
        .map(|(key, (members, scale))| {
            let mut verdicts: Vec<(u64, bool)> = Vec::with_capacity(sorted.len());
            for c in &sorted {
                let fp8 = members.iter().all(|g| c.fp8_groups.contains(*g));
                match verdicts.last_mut() {
                    Some(last) if last.0 == c.tokens => last.1 &= fp8,
                    _ => verdicts.push((c.tokens, fp8)),
                }
            }
            let min_tokens = fp8_from(&verdicts).map(|i| verdicts[i].0.saturating_mul(scale));
            let swept_from = verdicts.first().map_or(0, |v| v.0.saturating_mul(scale));
            let swept_to = verdicts.last().map_or(0, |v| v.0.saturating_mul(scale));
            let threshold = KeyThreshold {
                min_tokens,
                swept_from,
                swept_to,
                verdicts,
                groups: members.iter().map(|g| (*g).to_owned()).collect(),
            };
            (key.clone(), threshold)
        })
        .collect()
}

/// The index of the first verdict from which every verdict is FP8 (ascending counts); `None`
/// where the largest count is BF16.
pub fn fp8_from(verdicts: &[(u64, bool)]) -> Option<usize> {
    let from = verdicts
        .iter()
        .rposition(|(_, fp8)| !fp8)
        .map_or(0, |last_bf16| last_bf16 + 1);
    (from < verdicts.len()).then_some(from)
}

/// The "never" threshold a rule gets for the execution where FP8 never held while the other
/// execution has one: 2^53, the largest integer every JSON reader keeps exact.
pub const NEVER: u64 = fp8_policy::NEVER;

/// A policy from step sweeps: each key's `min_tokens` from the eager sweep and
/// `min_tokens_graphed` from the graphed one (a key FP8 in only one execution gets [`NEVER`] in
/// the other; in neither, it is a measured BF16 key). An execution not swept leaves its
/// threshold out: with only a graphed sweep, `min_tokens` is [`NEVER`] so an eager trainer
/// stays BF16. Provenance records each run and each key's verdicts. Runs must agree on model,
/// component and recipe; several layouts' runs combine (a key two of them share takes the
/// larger threshold).
pub fn step_policy(runs: &[StepRun]) -> Result<Policy, MergeError> {
    let first = runs.first().ok_or_else(|| MergeError::Empty {
        file: PathBuf::from("(no step results)"),
        problem: "no step results given".into(),
    })?;
    for r in runs {
        for (what, a, b) in [
            ("model", &first.model, &r.model),
            ("component", &first.component, &r.component),
            ("recipe", &first.recipe, &r.recipe),
        ] {
            agree(what, (a, &first.file), (b, &r.file))?;
        }
    }
    // Several layouts' sweeps of one execution meet here: their dense keys differ by TP; a
    // grouped key two layouts share (the same EP and ETP under two TP sizes) takes the larger
    // threshold, BF16 if either never held FP8.
    let mut per_exec: BTreeMap<Execution, BTreeMap<RuleKey, KeyThreshold>> = BTreeMap::new();
    for r in &joined(runs) {
        let into = per_exec.entry(r.execution).or_default();
        for (key, t) in thresholds(&r.counts, &r.groups) {
            match into.get_mut(&key) {
                None => {
                    into.insert(key, t);
                }
                Some(have) => {
                    have.min_tokens = have.min_tokens.zip(t.min_tokens).map(|(a, b)| a.max(b));
                    // The counts both sweeps cover: a verdict outside them is one layout's alone.
                    have.swept_from = have.swept_from.max(t.swept_from);
                    have.swept_to = have.swept_to.min(t.swept_to);
                    have.verdicts.extend(t.verdicts);
                }
            }
        }
    }
    let keys: BTreeSet<RuleKey> = per_exec.values().flat_map(|m| m.keys().cloned()).collect();
    let mut policy = Policy::new(1.0).map_err(|e| policy_err(&first.file, e))?;
    let mut bf16 = Vec::new();
    let mut verdicts = serde_json::Map::new();
    for key in keys {
        let t = |e| per_exec.get(&e).and_then(|m| m.get(&key));
        let (eager, graphed) = (t(Execution::Eager), t(Execution::Graphed));
        verdicts.insert(
            key.to_string(),
            json!({
                "eager": eager.map(|k| &k.verdicts), "graphed": graphed.map(|k| &k.verdicts),
                "groups": eager.or(graphed).map(|k| &k.groups),
                "swept_from": {"eager": eager.map(|k| k.swept_from), "graphed": graphed.map(|k| k.swept_from)},
                "swept_to": {"eager": eager.map(|k| k.swept_to), "graphed": graphed.map(|k| k.swept_to)},
            }),
        );
        let e_min = eager.and_then(|k| k.min_tokens);
        let g_min = graphed.and_then(|k| k.min_tokens);
        if e_min.is_none() && g_min.is_none() {
            bf16.push(key);
            continue;
        }
        let min_tokens = e_min.unwrap_or(NEVER);
        let min_tokens_graphed = match (graphed, g_min) {
            (None, _) => None,
            (Some(_), g) => Some(g.unwrap_or(NEVER)).filter(|g| *g != min_tokens),
        };
        add_rule(&mut policy, &key, min_tokens, min_tokens_graphed)
            .map_err(|e| policy_err(&first.file, e))?;
    }
    let mut prov = Provenance::default();
    prov.tool = format!("fp8sel merge-policy --step {}", env!("CARGO_PKG_VERSION"));
    prov.component = first.component.clone();
    prov.models = vec![first.model.clone()]
        .into_iter()
        .filter(|m| !m.is_empty())
        .collect();
    prov.device = runs
        .iter()
        .map(|r| r.device.clone())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    prov.recipe = vec![first.recipe.clone()];
    prov.reports = runs
        .iter()
        .map(|r| r.file.display().to_string())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    prov.rule = "each key FP8 from the smallest swept count from which the step's per-group oracle kept it FP8 at every larger count (ties BF16; a shared key only where every group sharing it was FP8; all-BF16, all-FP8 or a policy in the oracle's place where the count's interleaved rounds measured it faster beyond the noise)".into();
    prov.timing = runs
        .iter()
        .map(|r| format!("step-{}", r.execution))
        .collect();
    prov.measured_bf16_keys = bf16;
    prov.eager_source = Some(fp8_policy::ThresholdSource::Step);
    prov.step = Some(json!({
        "runs": runs.iter().map(|r| json!({"execution": r.execution.name(), "counts": r.counts.iter().map(|c| c.tokens).collect::<Vec<_>>(),
            "overruled": overruled(r), "info": r.info()})).collect::<Vec<_>>(),
        "verdicts": verdicts,
    }));
    policy.set_provenance(prov);
    Ok(policy)
}

/// The counts of a run where BF16 or all-FP8, not the oracle, is the verdict: `{count:
/// reference}`, for provenance.
fn overruled(run: &StepRun) -> serde_json::Map<String, serde_json::Value> {
    run.counts
        .iter()
        .filter_map(|c| Some((c.tokens.to_string(), json!(c.overruled_by.as_ref()?))))
        .collect()
}

/// One sweep per layout and execution: the runs of one layout (their groups map to the same
/// keys), execution and step ([`StepSetup`]: trainer, layers, micro-batches, recipe, versions),
/// from several files (a sweep, its refinements, a count timed alone after a run cut by its time
/// limit), with their counts together, so a threshold is read over every count the step was
/// timed at.
pub fn joined(runs: &[StepRun]) -> Vec<StepRun> {
    let mut out: Vec<StepRun> = Vec::new();
    for r in runs {
        match out
            .iter_mut()
            .find(|o| o.execution == r.execution && o.groups == r.groups && o.setup == r.setup)
        {
            Some(o) => o.counts.extend(r.counts.iter().cloned()),
            None => out.push(r.clone()),
        }
    }
    out
}

/// `a` (from `file_a`) and `b` (from `file_b`) must be the same `what`: the inputs of one policy
/// are of one model, component and recipe.
pub(crate) fn agree(
    what: &'static str,
    a: (&str, &Path),
    b: (&str, &Path),
) -> Result<(), MergeError> {
    if a.0 == b.0 {
        return Ok(());
    }
    Err(MergeError::Mixed {
        what,
        a: a.0.to_owned(),
        file_a: a.1.to_path_buf(),
        b: b.0.to_owned(),
        file_b: b.1.to_path_buf(),
    })
}

fn policy_err(file: &Path, e: PolicyError) -> MergeError {
    MergeError::Format {
        file: file.to_path_buf(),
        message: e.to_string(),
    }
}

pub(crate) fn add_rule(
    policy: &mut Policy,
    key: &RuleKey,
    min_tokens: u64,
    min_tokens_graphed: Option<u64>,
) -> Result<(), PolicyError> {
    policy.insert(
        key,
        fp8_policy::Thresholds {
            eager: fp8_policy::Threshold::from_wire(min_tokens),
            graphed: min_tokens_graphed.map(fp8_policy::Threshold::from_wire),
            measured_speedup: None,
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use fp8_policy::{DenseKind, GroupedKind};

    fn dense(ub: &str) -> RuleKey {
        RuleKey::Dense {
            kind: DenseKind::Row,
            ub_name: ub.to_owned(),
            tp: 1,
        }
    }

    fn experts() -> RuleKey {
        RuleKey::Grouped {
            kind: GroupedKind::ColumnGrouped,
            etp: 1,
            num_gemms: 8,
        }
    }

    fn group(g: &str, key: RuleKey, scale: u64) -> StepGroup {
        StepGroup {
            group: g.to_owned(),
            key,
            scale,
        }
    }

    /// A step-time model: each group saves `gain * tokens` in FP8 and pays a fixed `cost`
    /// (casts, host time), plus a deterministic wobble of `noise` around it. The oracle keeps a
    /// group FP8 only where it saves more than `margin` (what the step benchmark's p90 rule
    /// does): the verdicts this module is given.
    fn oracle(counts: &[u64], model: &[(&str, f64, f64, f64)], margin: f64) -> Vec<StepCount> {
        counts
            .iter()
            .enumerate()
            .map(|(i, &t)| StepCount {
                tokens: t,
                fp8_groups: model
                    .iter()
                    .filter(|(_, gain, cost, noise)| {
                        let wobble = if i % 2 == 0 { *noise } else { -*noise };
                        gain * t as f64 - cost + wobble > margin
                    })
                    .map(|(g, ..)| (*g).to_owned())
                    .collect(),
                overruled_by: None,
            })
            .collect()
    }

    const COUNTS: [u64; 6] = [256, 512, 1024, 2048, 4096, 8192];

    #[test]
    fn the_threshold_is_where_fp8_holds_from_there_up() {
        // fc2 pays from 1024 (0.01 * 1024 - 5 = 5.24 > 1), proj from 4096, fc1 never.
        let model = [
            ("fc2", 0.01, 5.0, 0.0),
            ("proj", 0.001, 2.5, 0.0),
            ("fc1", 0.0, 1.0, 0.0),
        ];
        let counts = oracle(&COUNTS, &model, 1.0);
        let keys = [
            group("fc2", dense("fc2"), 1),
            group("proj", dense("proj"), 1),
            group("fc1", dense("fc1"), 1),
        ];
        let t = thresholds(&counts, &keys);
        assert_eq!(t[&dense("fc2")].min_tokens, Some(1024));
        assert_eq!(t[&dense("proj")].min_tokens, Some(4096));
        assert_eq!(t[&dense("fc1")].min_tokens, None);
        assert_eq!(t[&dense("fc2")].verdicts.len(), COUNTS.len());
    }

    #[test]
    fn a_bf16_verdict_above_an_fp8_one_moves_the_threshold_up() {
        // Noise makes 512 pass and 1024 fail: the rule starts above the failure.
        let mut counts = oracle(&COUNTS, &[("fc2", 0.01, 5.0, 0.0)], 1.0);
        counts[1].fp8_groups.insert("fc2".into());
        counts[2].fp8_groups.clear();
        let t = thresholds(&counts, &[group("fc2", dense("fc2"), 1)]);
        assert_eq!(t[&dense("fc2")].min_tokens, Some(2048));
        // FP8 lost at the largest count: no threshold at all, whatever passed below.
        counts[5].fp8_groups.clear();
        let t = thresholds(&counts, &[group("fc2", dense("fc2"), 1)]);
        assert_eq!(t[&dense("fc2")].min_tokens, None);
    }

    #[test]
    fn ties_are_bf16() {
        // Saving exactly the margin at 2048 (2048 / 1024 - 1 = 1, exact in binary): not beyond
        // the noise, so BF16 there.
        let counts = oracle(&COUNTS, &[("proj", 1.0 / 1024.0, 1.0, 0.0)], 1.0);
        let t = thresholds(&counts, &[group("proj", dense("proj"), 1)]);
        assert_eq!(t[&dense("proj")].min_tokens, Some(4096));
    }

    #[test]
    fn a_shared_key_is_fp8_only_where_every_group_is() {
        // Dense fc2 pays from 512, the shared experts' fc2 only from 4096: the key waits.
        let model = [("fc2", 0.02, 5.0, 0.0), ("shared.fc2", 0.002, 5.0, 0.0)];
        let counts = oracle(&COUNTS, &model, 1.0);
        let t = thresholds(
            &counts,
            &[
                group("fc2", dense("fc2"), 1),
                group("shared.fc2", dense("fc2"), 1),
            ],
        );
        let k = &t[&dense("fc2")];
        assert_eq!(k.min_tokens, Some(4096));
        assert_eq!(k.groups, ["fc2", "shared.fc2"]);
    }

    #[test]
    fn expert_thresholds_are_in_routed_tokens_and_order_does_not_matter() {
        let mut counts = oracle(&COUNTS, &[("experts.fc1", 0.01, 5.0, 0.0)], 1.0);
        counts.reverse();
        let t = thresholds(&counts, &[group("experts.fc1", experts(), 8)]);
        assert_eq!(t[&experts()].min_tokens, Some(1024 * 8));
        assert!(t[&experts()].verdicts.windows(2).all(|w| w[0].0 < w[1].0));
        // The sweep's bounds in the key's tokens too: the fold reads them against thresholds.
        let (first, last) = (COUNTS[0], COUNTS[COUNTS.len() - 1]);
        assert_eq!(t[&experts()].swept_from, first * 8);
        assert_eq!(t[&experts()].swept_to, last * 8);
    }

    #[test]
    fn a_count_timed_twice_is_fp8_only_if_both_runs_say_so() {
        let at = |tokens: u64, fp8: bool| StepCount {
            tokens,
            fp8_groups: if fp8 {
                ["fc2".to_owned()].into()
            } else {
                Default::default()
            },
            overruled_by: None,
        };
        let keys = [group("fc2", dense("fc2"), 1)];
        // Either order of the two readings at 2048: BF16 there, so FP8 from 4096.
        for counts in [
            vec![
                at(1024, false),
                at(2048, true),
                at(2048, false),
                at(4096, true),
            ],
            vec![
                at(1024, false),
                at(2048, false),
                at(2048, true),
                at(4096, true),
            ],
        ] {
            let t = &thresholds(&counts, &keys)[&dense("fc2")];
            assert_eq!(t.min_tokens, Some(4096));
            assert_eq!(t.verdicts, [(1024, false), (2048, false), (4096, true)]);
        }
    }

    #[test]
    fn thresholds_are_monotone_in_the_model() {
        // A larger fixed cost never gives a smaller threshold, under noise too.
        let mut last = Some(0);
        for cost in [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0] {
            let counts = oracle(&COUNTS, &[("qkv", 0.01, cost, 0.5)], 1.0);
            let t = thresholds(&counts, &[group("qkv", dense("qkv"), 1)])[&dense("qkv")].min_tokens;
            assert!(
                match (last, t) {
                    (Some(a), Some(b)) => b >= a,
                    (Some(_), None) | (None, None) => true,
                    (None, Some(_)) => false,
                },
                "cost {cost}: {last:?} -> {t:?}"
            );
            last = t;
        }
        assert_eq!(last, None);
    }
}
