//! Where a step sweep should be timed again: between the two swept counts a key's threshold
//! falls between. A threshold from the step can only sit at a swept count, so a coarse sweep
//! (powers of two) leaves a key BF16 up to twice the count at which FP8 started to pay. Timing
//! the geometric midpoint of that interval and reading the thresholds over every count halves
//! the gap (in log tokens) each round.
//!
//! Pure: the sweeps in, the counts to add out; the worker runs elsewhere.

use std::collections::{BTreeMap, BTreeSet};

use fp8_policy::Execution;

use crate::step::{StepRun, fp8_from, joined, thresholds};

/// TE's blockwise FP8 asks for token counts that are multiples of 16.
const ALIGN: u64 = 16;

/// The counts to add to each execution's sweep: for every key whose threshold lies above a
/// BF16 verdict, the midpoint of the two counts it lies between, where it is a new count.
/// A key FP8 from the smallest swept count, or never, adds nothing (the sweep's ends are the
/// user's choice).
pub fn refinements(runs: &[StepRun], step: u64) -> BTreeMap<Execution, BTreeSet<u64>> {
    let mut out: BTreeMap<Execution, BTreeSet<u64>> = BTreeMap::new();
    for run in joined(runs) {
        let swept: BTreeSet<u64> = run.counts.iter().map(|c| c.tokens).collect();
        for t in thresholds(&run.counts, &run.groups).into_values() {
            // FP8 from the first count (nothing below to bisect) or never: nothing to ask for.
            let Some(from) = fp8_from(&t.verdicts).filter(|&i| i > 0) else {
                continue;
            };
            let (below, at) = (t.verdicts[from - 1].0, t.verdicts[from].0);
            if let Some(m) = midpoint_on(below, at, step).filter(|m| !swept.contains(m)) {
                out.entry(run.execution).or_default().insert(m);
            }
        }
    }
    out
}

/// The geometric midpoint of `lo` and `hi` on the 16-token grid, strictly between them; `None`
/// where the grid has no count there.
pub fn midpoint(lo: u64, hi: u64) -> Option<u64> {
    midpoint_on(lo, hi, ALIGN)
}

/// The geometric midpoint of `lo` and `hi` on the grid of `step` tokens (a layout's
/// `fp8_engine::Parallel::token_step`), strictly between them; `None` where the grid has no
/// count there.
pub fn midpoint_on(lo: u64, hi: u64, step: u64) -> Option<u64> {
    let step = step.max(1);
    // Token counts are far below 2^52: the float round trip is exact on the grid.
    let m = (((lo as f64) * (hi as f64)).sqrt() / step as f64).round() as u64 * step;
    (m > lo && m < hi).then_some(m)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::step::{StepCount, StepGroup, StepLayers, StepSetup};
    use fp8_policy::{DenseKind, RuleKey};
    use fp8_report::step_results::StepTrainer;
    use std::path::PathBuf;

    fn key(ub: &str) -> RuleKey {
        RuleKey::Dense {
            kind: DenseKind::Row,
            ub_name: ub.to_owned(),
            tp: 1,
        }
    }

    fn setup(trainer: StepTrainer) -> StepSetup {
        StepSetup {
            trainer,
            layers: StepLayers::Count(2),
            grad_accum: 1,
            recipe: "Float8BlockScaling".into(),
            te_version: "2.20.2".into(),
            megatron_core_version: None,
            tp: 1,
            tp_comm: false,
        }
    }

    /// One execution's sweep in which each group is FP8 from its own count.
    fn run(execution: Execution, counts: &[u64], from: &[(&str, u64)]) -> StepRun {
        StepRun {
            file: PathBuf::from("s.json"),
            execution,
            counts: counts
                .iter()
                .map(|&t| StepCount {
                    tokens: t,
                    fp8_groups: from
                        .iter()
                        .filter(|(_, f)| t >= *f)
                        .map(|(g, _)| (*g).to_owned())
                        .collect(),
                    overruled_by: None,
                })
                .collect(),
            groups: from
                .iter()
                .map(|(g, _)| StepGroup {
                    group: (*g).to_owned(),
                    key: key(g),
                    scale: 1,
                })
                .collect(),
            model: "m".into(),
            component: "llm".into(),
            device: "d".into(),
            recipe: "blockwise".into(),
            setup: setup(StepTrainer::Te),
            complete: true,
            copied_from: None,
        }
    }

    const SWEEP: [u64; 5] = [1024, 2048, 4096, 8192, 16384];

    #[test]
    fn midpoints_are_geometric_on_the_16_token_grid() {
        assert_eq!(midpoint(2048, 4096), Some(2896));
        assert_eq!(midpoint(1024, 2048), Some(1456));
        assert_eq!(midpoint(16, 32), None);
        assert_eq!(midpoint(16, 48), Some(32));
        // On a TP 8 layout's 128-token step: 1408, not 1456 (182 rows a rank).
        assert_eq!(midpoint_on(1024, 2048, 128), Some(1408));
        assert_eq!(midpoint_on(2048, 16384, 128), Some(5760));
        assert_eq!(midpoint_on(1024, 1152, 128), None);
        for (lo, hi) in [(1024, 2048), (2896, 4096), (100, 10_000)] {
            let m = midpoint(lo, hi).unwrap_or_else(|| panic!("{lo} {hi}"));
            assert!(m.is_multiple_of(16) && lo < m && m < hi);
        }
    }

    #[test]
    fn each_threshold_above_a_bf16_count_asks_for_its_midpoint() {
        let eager = run(
            Execution::Eager,
            &SWEEP,
            &[
                ("fc1", 4096),
                ("fc2", 4096),
                ("proj", 1 << 40),
                ("qkv", 512),
            ],
        );
        let graphed = run(Execution::Graphed, &SWEEP, &[("fc1", 2000), ("fc2", 8192)]);
        let r = refinements(&[eager, graphed], 16);
        // fc1 and fc2 share an interval; proj never FP8 and qkv FP8 from the first count add
        // nothing.
        assert_eq!(r[&Execution::Eager], BTreeSet::from([2896]));
        assert_eq!(r[&Execution::Graphed], BTreeSet::from([1456, 5792]));
    }

    #[test]
    fn a_refined_sweep_reads_its_thresholds_over_every_count() {
        let first = run(Execution::Eager, &SWEEP, &[("fc1", 2800)]);
        assert_eq!(
            refinements(std::slice::from_ref(&first), 16)[&Execution::Eager],
            BTreeSet::from([2896])
        );
        let again = run(Execution::Eager, &[2896], &[("fc1", 2800)]);
        let both = [first, again];
        let t = thresholds(&joined(&both)[0].counts, &joined(&both)[0].groups);
        assert_eq!(t[&key("fc1")].min_tokens, Some(2896));
        // The next round bisects (2048, 2896); a count already timed is not asked for again.
        assert_eq!(
            refinements(&both, 16)[&Execution::Eager],
            BTreeSet::from([2432])
        );
        let policy = crate::step::step_policy(&both).unwrap_or_else(|e| panic!("{e}"));
        assert!(
            policy.to_json().contains("\"min_tokens\": 2896"),
            "{}",
            policy.to_json()
        );
    }

    #[test]
    fn only_runs_of_the_same_step_are_one_sweep() {
        let with = |trainer, file: &str, complete: bool, copied_from: Option<&str>| StepRun {
            setup: setup(trainer),
            file: PathBuf::from(file),
            complete,
            copied_from: copied_from.map(str::to_owned),
            ..run(Execution::Eager, &[2896], &[("fc1", 2800)])
        };
        let a = with(StepTrainer::Te, "a.json", true, None);
        let b = with(StepTrainer::Te, "b.json", true, None);
        let c = with(StepTrainer::Megatron, "c.json", true, None);
        // A run cut by its time limit, and rows copied from an older file: the same step timed,
        // one sweep with the others (where a file came from is not what was timed).
        let cut = with(StepTrainer::Te, "d.json", false, None);
        let copied = with(StepTrainer::Te, "e.json", true, Some("ab12"));
        assert_eq!(joined(&[a.clone(), b]).len(), 1);
        assert_eq!(joined(&[a.clone(), cut]).len(), 1);
        assert_eq!(joined(&[a.clone(), copied]).len(), 1);
        assert_eq!(joined(&[a.clone(), c]).len(), 2);
        let mut other = a.clone();
        other.setup.grad_accum = 4;
        assert_eq!(
            joined(&[a, other]).len(),
            2,
            "another step: four micro-batches"
        );
    }

    proptest::proptest! {
        /// With FP8 paying from `crossover` up (a monotone step), refinement never asks for a
        /// count already timed, and each round's threshold is FP8-true, no higher than the
        /// sweep's, and never below the crossover.
        #[test]
        fn refinement_only_tightens_a_monotone_threshold(crossover in 600u64..20_000, rounds in 1usize..4) {
            let sweep = [1024, 2048, 4096, 8192, 16384];
            let mut runs = vec![run(Execution::Graphed, &sweep, &[("fc1", crossover)])];
            let threshold = |runs: &[StepRun]| {
                let j = joined(runs);
                thresholds(&j[0].counts, &j[0].groups)[&key("fc1")].min_tokens
            };
            let first = threshold(&runs);
            for _ in 0..rounds {
                let asked = refinements(&runs, 16);
                let timed: BTreeSet<u64> = joined(&runs)[0].counts.iter().map(|c| c.tokens).collect();
                let Some(counts) = asked.get(&Execution::Graphed) else { break };
                proptest::prop_assert!(counts.iter().all(|c| !timed.contains(c) && c.is_multiple_of(16)));
                let counts: Vec<u64> = counts.iter().copied().collect();
                runs.push(run(Execution::Graphed, &counts, &[("fc1", crossover)]));
                let now = threshold(&runs);
                // A sweep FP8 nowhere asks for nothing, so `first` is a threshold here.
                let (Some(f), Some(t)) = (first, now) else {
                    return Err(proptest::test_runner::TestCaseError::fail(format!("{first:?} -> {now:?}")));
                };
                proptest::prop_assert!(crossover <= t && t <= f, "{crossover}: {f} -> {t}");
            }
        }
    }
}
