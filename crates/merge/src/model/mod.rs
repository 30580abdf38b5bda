//! The step model: a policy from a model of the training step, calibrated on a few real steps
//! and checked in the step, instead of a search by trying (the step oracle of [`crate::step`]).
//!
//! **Inputs** (`fp8_report::step_inputs`, one layout): per module group `g` and swept count `t`,
//! the group alone in BF16 and FP8: GPU ms `gpu_g(p, t)` and host ms `host_g(p)` per module and
//! step, measured apart; `n_g` modules of it per step. Per execution, at two to four counts,
//! whole steps in all-BF16 and all-FP8: wall, host and GPU ms.
//!
//! **The model** of a plan `P` (the groups it runs FP8) at `t` tokens, with `dg_g(t)` and
//! `dh_g` one module's FP8 - BF16 GPU and host differences:
//!
//! ```text
//! GPU(P, t)  = sum_g n_g gpu_g(bf16, t) + R(t) + s_gpu(t) sum_{g in P} n_g dg_g(t) + [P nonempty] Z_gpu(t)
//! Host(P)    = H_bf16 + s_host sum_{g in P} n_g dh_g + [P nonempty] Z_host
//! Step(P, t) = max(Host, GPU) + k(P, t) min(Host, GPU)
//! ```
//!
//! `R(t)` is what the all-BF16 step's GPU time holds beyond its modules (attention, norms,
//! router, permutation, optimizer; least squares of degree up to 2 in `t` through the calibrated
//! counts); `s_gpu(t)` and `s_host` the share of the modules' summed FP8 difference the whole
//! all-FP8 step shows, the rest (`Z`) a cost of any FP8 plan; `H_bf16` the all-BF16 step's host
//! time (a small step's wall time, bounded by every calibrated step's); `k` the share of the
//! smaller time that does not overlap the larger (0 where host and GPU overlap fully, more where
//! syncs split the step, as MoE's token-count sync does): measured in all-BF16 and all-FP8 at
//! each calibrated count (linear between counts), a plan's share between the two by its part of
//! all-FP8's module differences. In a graphed step the host time of captured groups is not the
//! step's. Between swept counts a module's time is read linearly, above the largest on the line
//! through the last two.
//!
//! **The choice** at each count: the plan of least predicted step over every subset of policy
//! keys (greedy above [`ChoiceOptions::exhaustive_up_to`] keys), a key only where it is faster
//! alone in GPU or host time, then each FP8 key kept only where its gain (the step without it
//! minus with it) beats its measured noise plus a margin (host and GPU noise each weighted by
//! what that side adds to the predicted wall: [`Prediction::sensitivity`]). **Thresholds** over a grid (the swept
//! counts and four counts per doubling, up to 64 times the largest swept count): for a key FP8
//! at the sweep's top, the smallest count from which it is FP8 up to there; for one BF16 there,
//! the model's crossing above the sweep; "never" only past the grid.
//!
//! **The check** ([`check`]): the chosen plans, all-BF16 and all-FP8 as whole steps at the swept
//! counts and between thresholds; rows where the model is off by more than 3% and the noise are
//! disagreements (provenance records them), a plan the step measured slower than BF16 moves
//! its keys above that count ([`check::guard`]), and one it measured behind all-FP8 moves the
//! crossings of the keys it left BF16 down to that count ([`check::lift`]); one it measured
//! faster than BF16, which a refit of the model then moved, is kept ([`check::hold`]).
//!
//! Pure: documents in, a policy out.

pub mod check;
pub mod choose;
pub mod curve;
pub mod fit;
mod policy;
pub mod recipes;
pub mod refit;
mod summary;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use fp8_policy::Execution;
use fp8_report::step_inputs::StepInputs;

pub use check::{
    CheckPlan, CheckRow, FP8_SLACK, RepeatRow, behind_fp8, compare, guard, repeats,
    timed_in_inputs, trails_fp8,
};
pub use choose::{
    Choice, ChoiceOptions, SEQUENCE_GRAIN, Unit, UnitThreshold, choose, grid, thresholds, units,
};
pub use fit::{Fit, GroupCurves, Prediction};
pub use policy::model_policy;
pub use summary::summary_markdown;

use crate::error::MergeError;

/// One layout's model: its inputs, fits, units, thresholds and (once checked) the check.
#[derive(Debug, Clone)]
pub struct LayoutModel {
    /// The inputs document.
    pub file: PathBuf,
    /// Its contents.
    pub inputs: StepInputs,
    /// One fit per execution the inputs calibrate.
    pub fits: BTreeMap<Execution, Fit>,
    /// The policy keys and their groups.
    pub units: Vec<Unit>,
    /// The swept counts.
    pub swept: Vec<u64>,
    /// Per execution, each unit's threshold (same order as `units`).
    pub thresholds: BTreeMap<Execution, Vec<UnitThreshold>>,
    /// Per execution, the choice at each grid count.
    pub choices: BTreeMap<Execution, Vec<Choice>>,
    /// The checked steps (empty until checked).
    pub check: Vec<CheckRow>,
    /// `(execution, count)` where the check measured the plan slower than BF16, moving its keys.
    pub guarded: Vec<(Execution, u64)>,
    /// Where the check measured the plan behind all-FP8 and moved crossings down to that count
    /// ([`check::lift`]): the execution, the count and the groups moved.
    pub lifted: Vec<check::Lifted>,
    /// Where the check measured a plan faster than BF16 that a refit moved, and kept it
    /// ([`check::hold`]): the execution, the count and the groups moved back down.
    pub held: Vec<check::Held>,
    /// The steps the check timed again of those the inputs timed: the step's repeatability.
    pub repeats: Vec<RepeatRow>,
    /// The policy modes a judge (the Megatron one, `--step-trainer megatron`) timed against
    /// all-BF16 at the check's counts.
    pub judged: Vec<crate::step::JudgedPolicy>,
    /// The options the choice used.
    pub options: ChoiceOptions,
    /// The numerics bound applied ([`LayoutModel::bound`]), with every key it kept BF16.
    pub numerics: Option<fp8_policy::NumericsBoundApplied>,
    /// The overlap shares the check's all-BF16 and all-FP8 steps added to the fits
    /// ([`refit`]); empty until checked.
    pub refit: Vec<refit::OverlapPoint>,
    /// The units a numerics bound keeps BF16 (a choice made again keeps them so).
    bounded: BTreeSet<usize>,
    /// The fits before any refit, and every guard and lift in the order applied: a later
    /// [`LayoutModel::add_checks`] refits from the first fits and replays them.
    first_fits: Option<BTreeMap<Execution, Fit>>,
    moves: Vec<Move>,
}

/// Each plan `checks` timed, at its execution and count: a later check's, which decides over
/// an earlier check's row of the same plan there.
fn timed_again<'a>(checks: &[&'a StepInputs]) -> BTreeSet<(Execution, u64, &'a BTreeSet<String>)> {
    checks
        .iter()
        .flat_map(|c| c.step_times.iter())
        .map(|s| (s.execution, s.tokens, &s.fp8_groups))
        .collect()
}

/// A threshold move a check or a judge made: replayed after a choice made again.
#[derive(Debug, Clone)]
enum Move {
    Guard(Execution, u64, BTreeSet<String>),
    Lift(check::Lifted),
    Hold(check::Held),
}

impl LayoutModel {
    /// Fits every execution of `executions` and chooses over the grid.
    pub fn new(
        inputs: StepInputs,
        file: &Path,
        executions: &[Execution],
        options: ChoiceOptions,
    ) -> Result<LayoutModel, MergeError> {
        let mut fits = BTreeMap::new();
        for &e in executions {
            fits.insert(e, Fit::calibrate(&inputs, e, file)?);
        }
        let first = fits.values().next().ok_or_else(|| MergeError::Empty {
            file: file.to_path_buf(),
            problem: "no execution to model".into(),
        })?;
        let units = units(&inputs, first);
        let mut swept: Vec<u64> = inputs.modules.iter().map(|m| m.tokens).collect();
        swept.sort_unstable();
        swept.dedup();
        if swept.is_empty() {
            return Err(MergeError::Empty {
                file: file.to_path_buf(),
                problem: "no module group was measured alone, so the step model has nothing to choose with; fix: measure again (the worker stopped before its first count?)".into(),
            });
        }
        let mut th = BTreeMap::new();
        let mut choices = BTreeMap::new();
        for (&e, fit) in &fits {
            let (t, c) = thresholds(fit, &units, &swept, &options);
            th.insert(e, t);
            choices.insert(e, c);
        }
        Ok(LayoutModel {
            file: file.to_path_buf(),
            inputs,
            fits,
            units,
            swept,
            thresholds: th,
            choices,
            check: Vec::new(),
            guarded: Vec::new(),
            lifted: Vec::new(),
            held: Vec::new(),
            repeats: Vec::new(),
            judged: Vec::new(),
            options,
            numerics: None,
            refit: Vec::new(),
            bounded: BTreeSet::new(),
            first_fits: None,
            moves: Vec::new(),
        })
    }

    /// The plans the check times: per execution, the policy's plan ([`LayoutModel::plan_at`]) at
    /// every swept count and at the geometric midpoint of each pair of neighbouring distinct
    /// thresholds within the sweep (on the layout's token step).
    pub fn check_plans(&self) -> Vec<(Execution, u64, Vec<String>)> {
        let mut out = Vec::new();
        let (lo, hi) = (self.swept[0], *self.swept.last().unwrap_or(&self.swept[0]));
        for &e in self.fits.keys() {
            let mut counts: Vec<u64> = self.swept.clone();
            let mut ths: Vec<u64> = self.thresholds[&e]
                .iter()
                .filter_map(|t| t.from)
                .filter(|&f| f > lo && f <= hi)
                .collect();
            ths.push(lo);
            ths.push(hi);
            ths.sort_unstable();
            ths.dedup();
            for w in ths.windows(2) {
                counts.extend(crate::refine::midpoint_on(
                    w[0],
                    w[1],
                    self.options.token_step,
                ));
            }
            counts.sort_unstable();
            counts.dedup();
            for t in counts {
                out.push((e, t, self.plan_at(e, t).into_iter().collect()));
            }
        }
        out
    }

    /// Adds a check's timings: compares them with the model, guards and lifts the thresholds.
    /// A count checked again replaces its earlier rows.
    pub fn add_check(&mut self, check: &StepInputs) {
        self.add_checks(&[check]);
    }

    /// Adds checks in the order they ran: a later one's rows replace an earlier one's at the
    /// counts it timed again, and a loss guards its keys (a plan behind all-FP8 lifts them, one
    /// faster than BF16 holds them: [`check::hold`]) only where no later check timed that plan
    /// at that count again (confirmed first: the re-timing decides; a later check of another
    /// plan there, one the move made, does not undo it).
    ///
    /// First the model is refit ([`refit`]): the checks' all-BF16 and all-FP8 steps at counts
    /// not calibrated join the overlap shares, and the choice is made again (the numerics bound
    /// kept); the rows keep the first model's predictions, the error each count left out gets
    /// under the refit beside them.
    pub fn add_checks(&mut self, checks: &[&StepInputs]) {
        let rows = self.refit_with(checks);
        for (i, (check, rows)) in checks.iter().zip(rows).enumerate() {
            self.add_one(check, rows, &timed_again(&checks[i + 1..]));
        }
    }

    /// The refit ([`LayoutModel::refit_with`]) and the holds of `checks` ([`check::hold`]),
    /// without the guards and lifts: the policy a caller deciding what to time again reads (a
    /// plan the step measured faster than BF16 is not timed again for a plan the refit moved it
    /// to; a loss or a trailing plan is timed again before it moves anything).
    pub fn refit_and_hold(&mut self, checks: &[&StepInputs]) {
        let rows = self.refit_with(checks);
        let mut lost: Vec<(Execution, u64, BTreeSet<String>)> = self.guards();
        for (i, rows) in rows.iter().enumerate() {
            let again = timed_again(&checks[i + 1..]);
            lost.extend(
                rows.iter()
                    .filter(|r| {
                        r.loses() && !again.contains(&(r.execution, r.tokens, &r.fp8_groups))
                    })
                    .map(|r| (r.execution, r.tokens, r.fp8_groups.clone())),
            );
        }
        let lost: Vec<_> = lost.iter().map(|(e, t, g)| (*e, *t, g)).collect();
        for (i, rows) in rows.iter().enumerate() {
            self.hold(rows, &lost, &timed_again(&checks[i + 1..]));
        }
    }

    /// Every loss a guard recorded: `(execution, count, the plan's FP8 groups)`.
    fn guards(&self) -> Vec<(Execution, u64, BTreeSet<String>)> {
        self.moves
            .iter()
            .filter_map(|m| match m {
                Move::Guard(e, t, g) => Some((*e, *t, g.clone())),
                _ => None,
            })
            .collect()
    }

    /// The refit alone ([`refit`]; the first part of [`LayoutModel::add_checks`]): the checks' all-BF16 and all-FP8 steps at
    /// counts not calibrated join the overlap shares (a later check's replace an earlier's at
    /// its counts) and the choice is made again, the numerics bound and earlier guards and
    /// lifts kept. Returns each check's rows against the first model, with their refit errors.
    pub fn refit_with(&mut self, checks: &[&StepInputs]) -> Vec<Vec<CheckRow>> {
        let first = self
            .first_fits
            .get_or_insert_with(|| self.fits.clone())
            .clone();
        let mut rows: Vec<Vec<CheckRow>> = checks.iter().map(|c| compare(&first, c)).collect();
        let new = refit::points(&rows.concat());
        if !self.options.refit {
            return rows;
        }
        if !new.is_empty() {
            self.refit.retain(|p| {
                !new.iter()
                    .any(|q| (q.execution, q.tokens, q.mode) == (p.execution, p.tokens, p.mode))
            });
            self.refit.extend(new);
            self.fits = refit::refit(&first, &self.refit);
            self.choose_again();
        }
        for r in &mut rows {
            refit::left_out(&first, &self.refit, r);
        }
        rows
    }

    /// Thresholds and choices from the fits as they stand (after a refit), the numerics bound
    /// kept.
    fn choose_again(&mut self) {
        for (&e, fit) in &self.fits {
            let (mut t, c) = thresholds(fit, &self.units, &self.swept, &self.options);
            for &i in &self.bounded {
                t[i].from = None;
            }
            self.thresholds.insert(e, t);
            self.choices.insert(e, c);
        }
        for m in &self.moves {
            match m {
                Move::Guard(e, t, g) => {
                    guard(
                        &mut self.thresholds,
                        &self.units,
                        &[(*e, *t, g)],
                        &self.swept,
                        &self.options,
                    );
                }
                Move::Lift((e, t, groups)) | Move::Hold((e, t, groups)) => {
                    let Some(ts) = self.thresholds.get_mut(e) else {
                        continue;
                    };
                    for (u, th) in self.units.iter().zip(ts.iter_mut()) {
                        if u.groups.iter().all(|g| groups.contains(g))
                            && th.from.is_some_and(|f| f > *t)
                        {
                            th.from = Some(*t);
                        }
                    }
                }
            }
        }
    }

    fn add_one(
        &mut self,
        check: &StepInputs,
        rows: Vec<CheckRow>,
        again: &BTreeSet<(Execution, u64, &BTreeSet<String>)>,
    ) {
        self.check.retain(|old| {
            !rows
                .iter()
                .any(|r| r.execution == old.execution && r.tokens == old.tokens)
        });
        let losses: Vec<_> = rows
            .iter()
            .filter(|r| r.loses() && !again.contains(&(r.execution, r.tokens, &r.fp8_groups)))
            .map(|r| (r.execution, r.tokens, &r.fp8_groups))
            .collect();
        // Read against the plans as they stood when the check ran: before its own guard.
        let trailing: Vec<check::Trailing<'_>> = behind_fp8(&rows)
            .into_iter()
            .filter(|(p, f)| {
                !again.contains(&(p.execution, p.tokens, &p.fp8_groups))
                    && !p.loses()
                    && f.vs_bf16.2 < 1.0
                    && self.plan_at(p.execution, p.tokens) == p.fp8_groups
            })
            .map(|(p, f)| (p.execution, p.tokens, &p.fp8_groups, &f.fp8_groups))
            .collect();
        // Every loss so far, this check's and the guards before it: no move runs their keys FP8
        // at their counts again.
        let mut lost = self.guards();
        lost.extend(losses.iter().map(|&(e, t, g)| (e, t, g.clone())));
        let lost: Vec<_> = lost.iter().map(|(e, t, g)| (*e, *t, g)).collect();
        self.hold(&rows, &lost, again);
        self.guard(&losses);
        let lifted = check::lift(
            &mut self.thresholds,
            &self.fits,
            &self.units,
            &trailing,
            &lost,
            &self.swept,
            &self.options,
        );
        self.moves.extend(lifted.iter().cloned().map(Move::Lift));
        self.lifted.extend(lifted);
        self.check.extend(rows);
        let again = repeats(&self.inputs, check);
        self.repeats.retain(|old| {
            !again
                .iter()
                .any(|r| (r.execution, r.tokens, r.mode) == (old.execution, old.tokens, old.mode))
        });
        self.repeats.extend(again);
    }

    /// The policy's plan at `tokens` in `execution`, as a trainer runs it: the groups of every
    /// unit whose threshold is at or below the count (the choice between grid counts can differ;
    /// the policy is what runs).
    pub fn plan_at(&self, execution: Execution, tokens: u64) -> std::collections::BTreeSet<String> {
        let Some(ts) = self.thresholds.get(&execution) else {
            return Default::default();
        };
        self.units
            .iter()
            .zip(ts)
            .filter(|(_, t)| t.from.is_some_and(|f| f <= tokens))
            .flat_map(|(u, _)| u.groups.iter().cloned())
            .collect()
    }

    /// Whether a plan the check measured behind all-FP8 could move a crossing down
    /// ([`check::lift`]): a key all-FP8 ran and the plan did not has a threshold above the count
    /// (not one BF16 to the grid's top, nor one a numerics bound keeps BF16). Only such a count
    /// is worth timing again.
    pub fn could_lift(&self, plan: &CheckRow, fp8: &CheckRow) -> bool {
        let Some(ts) = self.thresholds.get(&plan.execution) else {
            return false;
        };
        self.units.iter().zip(ts).any(|(u, t)| {
            t.from.is_some_and(|f| f > plan.tokens)
                && u.groups
                    .iter()
                    .any(|g| fp8.fp8_groups.contains(g) && !plan.fp8_groups.contains(g))
        })
    }

    /// The checked plans that are not the policy's plan at their count
    /// ([`LayoutModel::plan_at`]): a check of an earlier choice, read back by a later tool, or a
    /// count whose thresholds the check itself moved.
    pub fn not_the_policy(&self) -> Vec<&CheckRow> {
        self.check
            .iter()
            .filter(|r| {
                r.mode == fp8_report::step_inputs::StepMode::Plan
                    && self.plan_at(r.execution, r.tokens) != r.fp8_groups
            })
            .collect()
    }

    /// The median and largest `|change|` of [`LayoutModel::repeats`], `None` without any.
    pub fn repeatability(&self) -> Option<(f64, f64)> {
        let v: Vec<f64> = self.repeats.iter().map(|r| r.change.abs()).collect();
        (!v.is_empty()).then(|| (curve::median(&v), v.iter().copied().fold(0.0, f64::max)))
    }

    /// The `|error|` of each checked step at a count the model was not calibrated at.
    pub fn held_out_errors(&self) -> Vec<f64> {
        self.check
            .iter()
            .filter(|r| !r.calibrated)
            .map(|r| r.error.abs())
            .collect()
    }
}

impl LayoutModel {
    /// Keeps BF16, in every execution, each key whose modules' quantization error a numerics
    /// report puts over its bound, whatever the model's gain (as the per-module merge does with
    /// `--numerics`); a key the model had FP8 somewhere is recorded with the count speed alone
    /// gave it (eager where it has one). Before the check, so the check times the bounded plan.
    pub fn bound(&mut self, b: &crate::numerics::NumericsBound) {
        let mut overruled = Vec::new();
        for (i, u) in self.units.iter().enumerate() {
            let Some((module, operand, error)) = b.overrule(&self.inputs.component, &u.key) else {
                continue;
            };
            self.bounded.insert(i);
            let by_speed = [Execution::Eager, Execution::Graphed]
                .iter()
                .find_map(|e| self.thresholds.get(e).and_then(|ts| ts[i].from));
            for ts in self.thresholds.values_mut() {
                ts[i].from = None;
            }
            if let Some(f) = by_speed {
                overruled.push(fp8_policy::NumericsOverrule {
                    key: u.key.clone(),
                    module: module.to_owned(),
                    operand: operand.to_owned(),
                    error,
                    min_tokens: f.saturating_mul(u.scale),
                });
            }
        }
        self.numerics = Some(fp8_policy::NumericsBoundApplied {
            report: b.report.file.display().to_string(),
            max_quant_error: b.max_quant_error,
            overruled,
        });
    }

    /// Moves the keys of each loss (execution, count, FP8 groups) above its count.
    fn guard(&mut self, losses: &[(Execution, u64, &std::collections::BTreeSet<String>)]) {
        let moved = guard(
            &mut self.thresholds,
            &self.units,
            losses,
            &self.swept,
            &self.options,
        );
        self.moves
            .extend(losses.iter().map(|&(e, t, g)| Move::Guard(e, t, g.clone())));
        self.guarded.extend(moved);
    }

    /// Keeps the plans of `rows` the step measured faster than BF16 ([`check::hold`]) that no
    /// later check timed again (`again`), against every loss so far (`losses`).
    fn hold(
        &mut self,
        rows: &[CheckRow],
        losses: &[(Execution, u64, &BTreeSet<String>)],
        again: &BTreeSet<(Execution, u64, &BTreeSet<String>)>,
    ) {
        let wins: Vec<_> = rows
            .iter()
            .filter(|r| r.wins() && !again.contains(&(r.execution, r.tokens, &r.fp8_groups)))
            .map(|r| (r.execution, r.tokens, &r.fp8_groups))
            .collect();
        let held = check::hold(
            &mut self.thresholds,
            &self.fits,
            &self.units,
            &wins,
            losses,
            &self.swept,
            &self.options,
        );
        self.moves.extend(held.iter().cloned().map(Move::Hold));
        self.held.extend(held);
    }

    /// Adds a judge's timings of this layout's policy (its policy modes): where one ran slower
    /// than all-BF16 beyond the noise (its whole paired band above 1), its FP8 keys move above
    /// that count, as a check's loss does.
    pub fn add_judged(&mut self, rows: Vec<crate::step::JudgedPolicy>) {
        let losses: Vec<_> = rows
            .iter()
            .filter(|r| r.vs_bf16.1 > 1.0 && !r.fp8_groups.is_empty())
            .map(|r| (r.execution, r.tokens, &r.fp8_groups))
            .collect();
        self.guard(&losses);
        self.judged.extend(rows);
    }
}

#[cfg(test)]
mod any_document_tests;
#[cfg(test)]
mod calibrate_tests;
#[cfg(test)]
mod check_tests;
#[cfg(test)]
mod noise_tests;
#[cfg(test)]
mod recipes_tests;
#[cfg(test)]
mod refit_tests;
#[cfg(test)]
mod tests;
