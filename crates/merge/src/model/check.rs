//! The check: the model's plans, all-BF16 and all-FP8 timed as whole steps, against what the
//! model predicted; the guard that keeps a plan the step measured slower than BF16 out of the
//! policy, and the lift that moves a crossing down where the step measured the plan behind
//! all-FP8.

use std::collections::{BTreeMap, BTreeSet};

use fp8_policy::Execution;
use fp8_report::step_inputs::{StepInputs, StepMode};
use serde::{Deserialize, Serialize};

use super::choose::{ChoiceOptions, Unit, UnitThreshold, grid, pays_somewhere};
use super::curve::{median, quantile};
use super::fit::Fit;

/// The relative error below which the model agrees with the step, whatever the noise.
pub const TOLERANCE: f64 = 0.03;

/// One checked step: predicted against measured (`provenance.step.model[].check`, read back by
/// the docs' tables).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CheckRow {
    /// Eager or graphed.
    pub execution: Execution,
    /// The count.
    pub tokens: u64,
    /// What ran.
    pub mode: StepMode,
    /// Its FP8 groups.
    pub fp8_groups: BTreeSet<String>,
    /// The model's wall ms.
    pub predicted_ms: f64,
    /// The model's host ms of that step (0 in rows written before it was recorded).
    #[serde(default)]
    pub predicted_host_ms: f64,
    /// The model's GPU ms of that step (0 in rows written before it was recorded).
    #[serde(default)]
    pub predicted_gpu_ms: f64,
    /// The step's median wall ms.
    pub measured_ms: f64,
    /// `(predicted - measured) / measured`.
    pub error: f64,
    /// Half the p10-p90 band of the rounds, relative to the median.
    pub noise: f64,
    /// The paired ratio to all-BF16 by round: median, p10, p90.
    pub vs_bf16: (f64, f64, f64),
    /// Whether the calibration used this count's real steps.
    pub calibrated: bool,
    /// `|error|` beyond both [`TOLERANCE`] and the noise.
    pub disagrees: bool,
    /// The error of the model refit with the check's all-BF16 and all-FP8 steps at its other
    /// counts, this count's left out (the refit, `fp8_merge::model::refit`); none at a calibrated count.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refit_error: Option<f64>,
}

impl CheckRow {
    /// A plan the step measured slower than all-BF16 beyond the noise (its whole band above 1).
    pub fn loses(&self) -> bool {
        self.mode == StepMode::Plan && self.vs_bf16.1 > 1.0
    }

    /// A plan with FP8 in it the step measured faster than all-BF16 beyond the noise (its whole
    /// band below 1).
    pub fn wins(&self) -> bool {
        self.mode == StepMode::Plan && !self.fp8_groups.is_empty() && self.vs_bf16.2 < 1.0
    }
}

/// How far a plan may trail all-FP8 at its count: issue 46's bar, 1.01 x.
pub const FP8_SLACK: f64 = 0.01;

/// Whether a plan trails all-FP8 beyond the noise, each as its paired ratio to all-BF16 in the
/// same rounds (median, p10, p90): the bands apart (the plan's p10 above all-FP8's p90) and the
/// medians more than [`FP8_SLACK`] apart.
pub fn trails_fp8(plan: (f64, f64, f64), fp8: (f64, f64, f64)) -> bool {
    plan.1 > fp8.2 && plan.0 > (1.0 + FP8_SLACK) * fp8.0
}

/// The checked plans that trail all-FP8 at their count and execution ([`trails_fp8`]), each
/// with all-FP8's row.
pub fn behind_fp8(rows: &[CheckRow]) -> Vec<(&CheckRow, &CheckRow)> {
    rows.iter()
        .filter(|r| r.mode == StepMode::Plan)
        .filter_map(|p| {
            let f = rows.iter().find(|f| {
                f.mode == StepMode::Fp8 && (f.execution, f.tokens) == (p.execution, p.tokens)
            })?;
            (p.fp8_groups != f.fp8_groups && trails_fp8(p.vs_bf16, f.vs_bf16)).then_some((p, f))
        })
        .collect()
}

/// Every whole step of `check` against `fits` (counts of an execution without a fit are skipped).
pub fn compare(fits: &BTreeMap<Execution, Fit>, check: &StepInputs) -> Vec<CheckRow> {
    let mut out = Vec::new();
    for s in &check.step_times {
        let Some(fit) = fits.get(&s.execution) else {
            continue;
        };
        let Some(base) = check.step_times.iter().find(|b| {
            b.execution == s.execution && b.tokens == s.tokens && b.mode == StepMode::Bf16
        }) else {
            continue;
        };
        let groups: BTreeSet<&str> = s.fp8_groups.iter().map(String::as_str).collect();
        let p = fit.predict(&groups, s.tokens as f64);
        let predicted = p.wall;
        let measured = median(&s.wall_ms);
        let noise = (quantile(&s.wall_ms, 0.9) - quantile(&s.wall_ms, 0.1)) / 2.0 / measured;
        let ratios: Vec<f64> = s
            .wall_ms
            .iter()
            .zip(&base.wall_ms)
            .map(|(a, b)| a / b)
            .collect();
        let error = (predicted - measured) / measured;
        out.push(CheckRow {
            execution: s.execution,
            tokens: s.tokens,
            mode: s.mode,
            fp8_groups: s.fp8_groups.clone(),
            predicted_ms: predicted,
            predicted_host_ms: p.host,
            predicted_gpu_ms: p.gpu,
            measured_ms: measured,
            error,
            noise,
            vs_bf16: (
                median(&ratios),
                quantile(&ratios, 0.1),
                quantile(&ratios, 0.9),
            ),
            calibrated: fit.calibrated_at.contains(&s.tokens),
            disagrees: error.abs() > TOLERANCE.max(noise),
            refit_error: None,
        });
    }
    out
}

/// Moves every unit of a plan the step measured slower than BF16 (`losses`: the execution, the
/// count and the plan's FP8 groups) above that count: its threshold becomes the next grid
/// count, or none past the grid. Returns the `(execution, count)` of each loss.
pub fn guard(
    thresholds: &mut BTreeMap<Execution, Vec<UnitThreshold>>,
    units: &[Unit],
    losses: &[(Execution, u64, &BTreeSet<String>)],
    swept: &[u64],
    o: &ChoiceOptions,
) -> Vec<(Execution, u64)> {
    let counts = grid(swept, o);
    let mut moved = Vec::new();
    for &(execution, tokens, groups) in losses {
        let Some(ts) = thresholds.get_mut(&execution) else {
            continue;
        };
        let next = counts.iter().copied().find(|&c| c > tokens);
        for (i, u) in units.iter().enumerate() {
            if !u.groups.iter().any(|g| groups.contains(g)) {
                continue;
            }
            let t = &mut ts[i];
            if t.from.is_some_and(|f| f <= tokens) {
                t.from = next;
            }
        }
        moved.push((execution, tokens));
    }
    moved
}

/// A plan the check measured behind all-FP8: `(execution, count, the plan's FP8 groups,
/// all-FP8's)`.
pub type Trailing<'a> = (Execution, u64, &'a BTreeSet<String>, &'a BTreeSet<String>);

/// A crossing the check moved down: `(execution, count, the groups now FP8 from that count)`.
pub type Lifted = (Execution, u64, Vec<String>);

/// Moves down to each trailing plan's count (a plan the step measured behind all-FP8,
/// [`trails_fp8`], where all-FP8 beat all-BF16 beyond the noise) the threshold of every unit
/// all-FP8 runs there and the plan does not, where the model already has that unit FP8 at a
/// larger count (a finite threshold above the count: the step says the crossing lies lower) and
/// the unit is faster alone in GPU or host time at every grid count from there up to it. A unit
/// BF16 up to the grid's top stays so: one count does not make a crossing; so does one a
/// measured loss keeps BF16 there (`losses`, as [`hold`] reads them). Returns each trailing plan
/// that moved a threshold: its execution, its count and the groups it moved.
pub fn lift(
    thresholds: &mut BTreeMap<Execution, Vec<UnitThreshold>>,
    fits: &BTreeMap<Execution, Fit>,
    units: &[Unit],
    trailing: &[Trailing<'_>],
    losses: &[(Execution, u64, &BTreeSet<String>)],
    swept: &[u64],
    o: &ChoiceOptions,
) -> Vec<Lifted> {
    let moves: Vec<_> = trailing
        .iter()
        .map(|&(execution, tokens, plan, fp8)| {
            let missing = move |u: &Unit| {
                u.groups
                    .iter()
                    .any(|g| fp8.contains(g) && !plan.contains(g))
            };
            (execution, tokens, missing)
        })
        .collect();
    move_down(thresholds, fits, units, &moves, losses, swept, o)
}

/// A plan the step measured faster than BF16 that a refit moved, kept: `(execution, count, the
/// groups FP8 from that count again)`.
pub type Held = (Execution, u64, Vec<String>);

/// Keeps each winning plan (`wins`: the execution, the count and the plan's FP8 groups; the
/// step measured it faster than all-BF16 beyond the noise, [`CheckRow::wins`]) where a refit of
/// the model moved it: every unit the plan runs FP8 whose threshold now lies above the count
/// moves down to it, where the unit is faster alone in GPU or host time at every grid count from
/// there up to its threshold. The step measured the plan; the refit is a fit of other steps. Not
/// a unit BF16 up to the grid's top (one count does not make a crossing), nor one a measured
/// loss keeps BF16 there (`losses`: a plan running the unit slower than BF16 at that count or
/// above). Returns each plan that moved a threshold: its execution, its count and the groups.
pub fn hold(
    thresholds: &mut BTreeMap<Execution, Vec<UnitThreshold>>,
    fits: &BTreeMap<Execution, Fit>,
    units: &[Unit],
    wins: &[(Execution, u64, &BTreeSet<String>)],
    losses: &[(Execution, u64, &BTreeSet<String>)],
    swept: &[u64],
    o: &ChoiceOptions,
) -> Vec<Held> {
    let moves: Vec<_> = wins
        .iter()
        .map(|&(execution, tokens, plan)| {
            let ran = move |u: &Unit| u.groups.iter().all(|g| plan.contains(g));
            (execution, tokens, ran)
        })
        .collect();
    move_down(thresholds, fits, units, &moves, losses, swept, o)
}

/// Moves down to each move's count (`(execution, count, which units it moves)`) the threshold of
/// every unit it names that the model has FP8 only further up (a finite threshold above the
/// count), that is faster alone in GPU or host time at every grid count from there up to that
/// threshold, and that no loss at that count or above ran FP8 ([`lost_at_or_above`]). Returns
/// each move that moved a threshold: its execution, its count and the groups moved. What
/// [`lift`] and [`hold`] share.
fn move_down(
    thresholds: &mut BTreeMap<Execution, Vec<UnitThreshold>>,
    fits: &BTreeMap<Execution, Fit>,
    units: &[Unit],
    moves: &[(Execution, u64, impl Fn(&Unit) -> bool)],
    losses: &[(Execution, u64, &BTreeSet<String>)],
    swept: &[u64],
    o: &ChoiceOptions,
) -> Vec<(Execution, u64, Vec<String>)> {
    let counts = grid(swept, o);
    let mut moved = Vec::new();
    for (execution, tokens, names) in moves {
        let (execution, tokens) = (*execution, *tokens);
        let (Some(ts), Some(fit)) = (thresholds.get_mut(&execution), fits.get(&execution)) else {
            continue;
        };
        let mut groups = Vec::new();
        for (i, u) in units.iter().enumerate() {
            let Some(from) = ts[i].from.filter(|&f| f > tokens) else {
                continue;
            };
            let pays = std::iter::once(tokens)
                .chain(counts.iter().copied().filter(|&c| c > tokens && c < from))
                .all(|c| pays_somewhere(fit, u, c as f64));
            if names(u) && pays && !lost_at_or_above(losses, execution, tokens, u) {
                ts[i].from = Some(tokens);
                groups.extend(u.groups.iter().cloned());
            }
        }
        if !groups.is_empty() {
            moved.push((execution, tokens, groups));
        }
    }
    moved
}

/// Whether a loss (a plan the step measured slower than BF16) ran one of `u`'s groups FP8 at
/// `tokens` or above in `execution`: moving `u` down to `tokens` would run it FP8 there again.
fn lost_at_or_above(
    losses: &[(Execution, u64, &BTreeSet<String>)],
    execution: Execution,
    tokens: u64,
    u: &Unit,
) -> bool {
    losses
        .iter()
        .any(|&(e, t, g)| e == execution && t >= tokens && u.groups.iter().any(|x| g.contains(x)))
}

/// A plan the check would time, its count and execution: `(execution, count, FP8 groups)`.
pub type CheckPlan = (Execution, u64, Vec<String>);

/// Splits the check's plans: a plan at a count the inputs calibrated (whole steps timed there in
/// all-BF16 and all-FP8, interleaved) that is all-BF16 or all-FP8 is a step already timed, so
/// its rows come from the inputs (its plan row the same rounds as its twin); the rest are to be
/// timed. With `anchor_again`, the smallest calibrated count of each execution is not:
/// timed again, its steps (the shortest, the most host-bound) say how far the step moved between
/// the inputs and the check where steps move most ([`repeats`]). Returns the timed rows as a
/// check document (empty `step_times` when none) and the plans left.
pub fn timed_in_inputs(
    inputs: &StepInputs,
    plans: &[CheckPlan],
    anchor_again: bool,
) -> (StepInputs, Vec<CheckPlan>) {
    // The inputs' header (the same worker's layout) without its measurements: no module rows, and
    // no settling of its own (the check timed nothing).
    let mut known = StepInputs {
        modules: Vec::new(),
        step_times: Vec::new(),
        failed: Vec::new(),
        notes: Vec::new(),
        settled: None,
        ..inputs.clone()
    };
    let mut left = Vec::new();
    for p in plans {
        let (e, t, groups) = p;
        if anchor_again && anchor(inputs, *e) == Some(*t) {
            left.push(p.clone());
            continue;
        }
        let row = |mode: StepMode| {
            inputs
                .step_times
                .iter()
                .find(|s| s.execution == *e && s.tokens == *t && s.mode == mode)
        };
        let wanted: BTreeSet<String> = groups.iter().cloned().collect();
        let twin = match (row(StepMode::Bf16), row(StepMode::Fp8)) {
            (Some(b), Some(f)) if wanted.is_empty() || wanted == f.fp8_groups => {
                Some((b, f, if wanted.is_empty() { b } else { f }))
            }
            _ => None,
        };
        let Some((b, f, twin)) = twin else {
            left.push(p.clone());
            continue;
        };
        let mut plan = twin.clone();
        plan.mode = StepMode::Plan;
        plan.fp8_groups = wanted;
        plan.host_ms = None;
        plan.gpu_ms = None;
        for r in [b, f] {
            if !known.step_times.contains(r) {
                known.step_times.push(r.clone());
            }
        }
        known.step_times.push(plan);
    }
    (known, left)
}

/// The check's anchor in `execution`: the smallest count the inputs timed whole steps at in both
/// all-BF16 and all-FP8 (`None` without one).
pub(crate) fn anchor(inputs: &StepInputs, execution: Execution) -> Option<u64> {
    let at = |mode: StepMode| {
        inputs
            .step_times
            .iter()
            .filter(move |s| s.execution == execution && s.mode == mode)
            .map(|s| s.tokens)
    };
    let fp8: BTreeSet<u64> = at(StepMode::Fp8).collect();
    at(StepMode::Bf16).filter(|t| fp8.contains(t)).min()
}

/// The same step timed twice: all-BF16 or all-FP8 at a count and execution the inputs timed,
/// timed again by a check in its own rounds. What separates the two is the step's own
/// repeatability, a floor under any model's error.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RepeatRow {
    /// Eager or graphed.
    pub execution: Execution,
    /// The count.
    pub tokens: u64,
    /// All-BF16 or all-FP8.
    pub mode: StepMode,
    /// The inputs' median wall ms.
    pub inputs_ms: f64,
    /// The check's median wall ms.
    pub check_ms: f64,
    /// `check_ms / inputs_ms - 1`.
    pub change: f64,
}

/// Every step `check` timed again of those `inputs` timed (rows with the inputs' own rounds,
/// [`timed_in_inputs`], are the same measurement and left out).
pub fn repeats(inputs: &StepInputs, check: &StepInputs) -> Vec<RepeatRow> {
    let mut out = Vec::new();
    for c in check.step_times.iter().filter(|c| c.mode != StepMode::Plan) {
        let Some(i) = inputs
            .step_times
            .iter()
            .find(|i| (i.execution, i.tokens, i.mode) == (c.execution, c.tokens, c.mode))
        else {
            continue;
        };
        if i.wall_ms == c.wall_ms || i.wall_ms.is_empty() || c.wall_ms.is_empty() {
            continue;
        }
        let (a, b) = (median(&i.wall_ms), median(&c.wall_ms));
        out.push(RepeatRow {
            execution: c.execution,
            tokens: c.tokens,
            mode: c.mode,
            inputs_ms: a,
            check_ms: b,
            change: b / a - 1.0,
        });
    }
    out
}
