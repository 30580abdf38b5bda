//! The step model's tuner for one layout: its inputs measured by `python -m
//! adaptive_fp8.bench.step_inputs`, the model fitted and its choice made (`fp8_merge::model`),
//! the choice checked in whole steps, and the counts where the step disagrees with the model
//! timed once more.

use std::collections::BTreeSet;
use std::path::Path;

use fp8_merge::model::{ChoiceOptions, LayoutModel, timed_in_inputs};
use fp8_policy::Execution;
use fp8_report::step_inputs::{PlannedStep, StepInputs, StepMode, StepPlans, read_step_inputs};

use super::Layout;
use super::command::{command, inputs_args, inputs_command};
use super::lines::{checking, no_whole_step, summary, unsettled, unsteady};
use super::serve::{Served, Worker};
use super::worker::{WorkerEnd, run_worker};
use crate::generate::GenOutcome;

impl Layout<'_> {
    /// Measures, models and checks this layout; `None` (with a note) where the time limit left
    /// nothing to model.
    pub(super) fn model(
        &self,
        say: &dyn Fn(&str),
        outcome: &mut GenOutcome,
    ) -> Result<Option<LayoutModel>, String> {
        let (job, p, model) = (self.job, self.p, self.model);
        let at = format!("{model} {p}");
        let json = self.json("_inputs");
        let resumed = if job.resume {
            self.resumable(&json, say)?
        } else {
            None
        };
        let (mut worker, inputs) = match resumed {
            Some(d) => {
                let args = inputs_args(self.o, job, self.config, p);
                (Worker::Later(self.o.python.clone(), args), d)
            }
            None => {
                let Some((w, d)) = self.measure(&json, say, outcome)? else {
                    return Ok(None);
                };
                (Worker::Up(w), d)
            }
        };
        outcome.reports.push(json.clone());
        outcome.notes.extend(unsettled(&at, "inputs", &inputs));
        for f in &inputs.failed {
            outcome.notes.push(format!(
                "{at}: {} at {}: not timed: {}",
                f.execution, f.tokens, f.error
            ));
        }
        let executions: Vec<Execution> = job
            .executions
            .iter()
            .copied()
            .filter(|e| {
                let calibrated = inputs.step_times.iter().any(|s| s.execution == *e);
                if !calibrated {
                    outcome.notes.push(format!(
                        "{at}: {e}: no whole step was timed, so no {e} threshold of its own"
                    ));
                }
                calibrated
            })
            .collect();
        if executions.is_empty() {
            worker.end();
            outcome.notes.push(no_whole_step(&at, &inputs));
            return Ok(None);
        }
        // The check's counts on the layout's token step (every rank's FP8 GEMMs aligned) and
        // on the sequence grain.
        let options = ChoiceOptions::on_layout(self.p.token_step());
        let mut lm =
            LayoutModel::new(inputs, &json, &executions, options).map_err(|e| e.to_string())?;
        if let Some(b) = &self.o.merge.numerics {
            bound(&mut lm, b, &at, outcome)?;
        }
        let checked = self.check(&mut lm, &mut worker, say, outcome);
        worker.end();
        checked?;
        if job.trainer == "megatron" {
            self.judge(&mut lm, say, outcome)?;
        }
        say(&summary(&at, &lm));
        outcome.notes.extend(unsteady(&at, &lm));
        Ok(Some(lm))
    }

    /// The layout's inputs measured by a served worker (kept up for its checks) into `json`;
    /// `None` (with a note) where the time limit ran out first.
    fn measure(
        &self,
        json: &Path,
        say: &dyn Fn(&str),
        outcome: &mut GenOutcome,
    ) -> Result<Option<(Served, StepInputs)>, String> {
        let (job, at) = (self.job, format!("{} {}", self.model, self.p));
        say(&format!(
            "{at}: the step model's inputs: each module group alone at {} count(s), whole steps at the smallest, second-smallest, middle and largest, {}",
            job.tokens.len(),
            super::spoken(&job.executions)
        ));
        let args = inputs_command(self.o, job, self.config, self.p, json);
        // One worker for the inputs and the checks (TE's import and the CUDA start once).
        let (worker, end) = Served::start(&self.o.python, &args, self.clock, json)?;
        let inputs = match (end, read_step_inputs(json)) {
            (_, Ok(d)) => d,
            (WorkerEnd::Stopped, Err(_)) => {
                outcome.notes.push(format!(
                    "{at}: not modelled, the time limit ran out while its inputs were measured"
                ));
                return Ok(None);
            }
            (WorkerEnd::Finished, Err(e)) => return Err(e.to_string()),
        };
        Ok(Some((worker, inputs)))
    }

    /// The check, and one re-timing of the counts where it disagreed with the model.
    fn check(
        &self,
        lm: &mut LayoutModel,
        worker: &mut Worker,
        say: &dyn Fn(&str),
        outcome: &mut GenOutcome,
    ) -> Result<(), String> {
        let at = format!("{} {}", self.model, self.p);
        let plans = lm.check_plans();
        // A calibrated count's all-BF16 or all-FP8 plan: the inputs timed that step already
        // (with the anchor, the smallest calibrated count excepted: timed again).
        let (known, to_time) = timed_in_inputs(&lm.inputs, &plans, self.job.anchor);
        say(&checking(&at, plans.len(), to_time.len(), self.job.anchor));
        let json = self.json("_check");
        let asked: Vec<&(Execution, u64, Vec<String>)> = to_time.iter().collect();
        let timed = if asked.is_empty() {
            None
        } else {
            match self.time_plans("check", &asked, &lm.inputs, worker, outcome)? {
                Some(d) => Some(d),
                None => return Ok(()),
            }
        };
        // One check document: the worker's steps and the inputs' (saved so, as the saved
        // path reads it back).
        let mut first = timed.unwrap_or_else(|| StepInputs {
            step_times: Vec::new(),
            ..known.clone()
        });
        first.step_times.extend(known.step_times.iter().cloned());
        if first.step_times.is_empty() {
            return Ok(());
        }
        if !known.step_times.is_empty() {
            first.notes.push(format!(
                "{} step(s) of all-BF16 and all-FP8 at calibrated counts are the inputs' own rounds (fp8_merge::model::timed_in_inputs)",
                known.step_times.len()
            ));
            fp8_io::write_atomic(&json, first.to_json().as_bytes()).map_err(|e| e.to_string())?;
        }
        outcome.reports.push(json);
        // Timed again before the guard or the lift acts.
        let docs = self.retime(lm, first, &plans, say, worker, outcome)?;
        lm.add_checks(&docs.iter().collect::<Vec<_>>());
        let left: Vec<String> = lm
            .check
            .iter()
            .filter(|r| r.disagrees)
            .map(|r| {
                format!(
                    "{} {} at {}: predicted {:.3} ms, measured {:.3}",
                    r.execution,
                    mode(r.mode),
                    r.tokens,
                    r.predicted_ms,
                    r.measured_ms
                )
            })
            .collect();
        if !left.is_empty() {
            outcome.notes.push(format!("{at}: the model and the step disagree beyond 3% and the noise (provenance records it): {}", left.join("; ")));
        }
        for (e, t) in &lm.guarded {
            outcome.notes.push(format!("{at}: {e} at {t}: the check measured the model's plan slower than BF16; its keys are FP8 only above {t}"));
        }
        for (e, t, g) in &lm.lifted {
            outcome.notes.push(format!("{at}: {e} at {t}: the check measured the model's plan behind all-FP8; {} (BF16 in it, FP8 further up by the model) FP8 from {t}", g.join(", ")));
        }
        for (e, t, g) in &lm.held {
            outcome.notes.push(format!("{at}: {e} at {t}: the check measured the plan faster than BF16 and the refit had moved it; {} FP8 from {t} again", g.join(", ")));
        }
        let behind: Vec<String> = fp8_merge::model::behind_fp8(&lm.check)
            .iter()
            .map(|(p, f)| {
                format!(
                    "{} {}: {:.3} x BF16 against all-FP8's {:.3}",
                    p.execution, p.tokens, p.vs_bf16.0, f.vs_bf16.0
                )
            })
            .collect();
        if !behind.is_empty() {
            outcome.notes.push(format!(
                "{at}: the check measured the model's plan more than {:.0}% behind all-FP8, beyond both bands (where no key moved, the model has them BF16 up to the grid's top, slower alone or kept BF16 by the numerics bound, or all-FP8 did not beat BF16 beyond the noise): {}",
                100.0 * fp8_merge::model::FP8_SLACK,
                behind.join("; ")
            ));
        }
        Ok(())
    }
}

/// The plans the re-timing round times, said on stderr: each count the check's worker timed
/// (`timed`: not the inputs' own rounds, the calibration) where a step disagrees with the model
/// beyond 3% and its noise (the step or the model was off: the re-timing decides; on the H200
/// the first counts an MoE's check timed ran slower than the model where later counts agreed,
/// docs/RESULTS.md "The step model"); each count where the model's plan measured behind all-FP8
/// (with a crossing to move); and, where the refit (`fp8_merge::model::refit`) changed the
/// policy's plan at a checked count, that count with the new plan. A count is timed again for a
/// disagreement once: the later rounds time only plans the refit moved.
fn to_time_again(
    lm: &LayoutModel,
    first: &StepInputs,
    plans: &[(Execution, u64, Vec<String>)],
    timed: &BTreeSet<(Execution, u64)>,
    at: &str,
    say: &dyn Fn(&str),
) -> Vec<(Execution, u64, Vec<String>)> {
    let rows = fp8_merge::model::compare(&lm.fits, first);
    // A calibrated count's all-BF16 and all-FP8 (the anchor's too) are the calibration's steps.
    let disagree: BTreeSet<(Execution, u64)> = rows
        .iter()
        .filter(|r| r.disagrees && !(r.calibrated && r.mode != StepMode::Plan))
        .map(|r| (r.execution, r.tokens))
        .filter(|k| timed.contains(k))
        .collect();
    let behind: BTreeSet<(Execution, u64)> = fp8_merge::model::behind_fp8(&rows)
        .iter()
        .filter(|(p, f)| lm.could_lift(p, f))
        .map(|(p, _)| (p.execution, p.tokens))
        .collect();
    let moved = moved_again(lm, std::slice::from_ref(first));
    if !disagree.is_empty() {
        let slower = rows
            .iter()
            .filter(|r| r.disagrees && r.mode == StepMode::Plan && r.vs_bf16.0 > 1.0)
            .count();
        let counts: Vec<String> = disagree.iter().map(|(e, t)| format!("{e} {t}")).collect();
        say(&format!(
            "{at}: the model and the step disagree beyond 3% and the noise at {} count(s) ({}; the model's plan measured slower than BF16 at {slower}); timing them again",
            disagree.len(),
            counts.join(", ")
        ));
    }
    if !behind.is_empty() {
        say(&format!(
            "{at}: the model's plan measured behind all-FP8 at {} count(s); timing them again",
            behind.len()
        ));
    }
    let off: BTreeSet<(Execution, u64)> = disagree.union(&behind).copied().collect();
    if !moved.is_empty() {
        let counts: Vec<String> = moved.iter().map(|(e, t, _)| format!("{e} {t}")).collect();
        say(&format!(
            "{at}: the check's all-BF16 and all-FP8 steps refit the model's overlap share and moved the policy's plan at {} count(s) ({}); timing the new plans",
            moved.len(),
            counts.join(", ")
        ));
    }
    let mut asked: Vec<(Execution, u64, Vec<String>)> = plans
        .iter()
        .filter(|(e, t, _)| off.contains(&(*e, *t)))
        .filter(|(e, t, _)| !moved.iter().any(|m| (m.0, m.1) == (*e, *t)))
        .cloned()
        .collect();
    asked.extend(moved);
    asked
}

/// How many rounds the re-timing runs at most: the refit of one round's steps can move a plan
/// again, and each round times the plans it moved.
const RETIME_ROUNDS: usize = 3;

/// The plans a refit of `docs` (the check, then the re-timing so far) moved: each count whose
/// policy plan is not the plan last timed there, with the new plan.
fn moved_again(lm: &LayoutModel, docs: &[StepInputs]) -> Vec<(Execution, u64, Vec<String>)> {
    // The policy as the timings so far leave it before a guard or a lift: refit and held.
    let mut probe = lm.clone();
    probe.refit_and_hold(&docs.iter().collect::<Vec<_>>());
    let mut last: std::collections::BTreeMap<(Execution, u64), &BTreeSet<String>> =
        Default::default();
    for s in docs.iter().flat_map(|d| &d.step_times) {
        if s.mode == StepMode::Plan {
            last.insert((s.execution, s.tokens), &s.fp8_groups);
        }
    }
    last.into_iter()
        .filter_map(|((e, t), timed)| {
            let now = probe.plan_at(e, t);
            (&now != timed).then(|| (e, t, now.into_iter().collect()))
        })
        .collect()
}

impl Layout<'_> {
    /// The re-timing ([`to_time_again`]), then up to [`RETIME_ROUNDS`] in all while the refit
    /// of what was timed moves a plan again: `[check, recheck, recheck2, ...]`, each round its
    /// own document (`fp8_report::step_inputs::check_round_word`), so a round never replaces
    /// what an earlier one measured (a plan measured ahead or behind stays in the evidence).
    fn retime(
        &self,
        lm: &LayoutModel,
        first: StepInputs,
        plans: &[(Execution, u64, Vec<String>)],
        say: &dyn Fn(&str),
        worker: &mut Worker,
        outcome: &mut GenOutcome,
    ) -> Result<Vec<StepInputs>, String> {
        let at = format!("{} {}", self.model, self.p);
        // The counts the check's worker timed (`timed_in_inputs`: not the inputs' own rounds).
        let timed: BTreeSet<(Execution, u64)> = timed_in_inputs(&lm.inputs, plans, self.job.anchor)
            .1
            .iter()
            .map(|(e, t, _)| (*e, *t))
            .collect();
        let mut asked = to_time_again(lm, &first, plans, &timed, &at, say);
        let mut docs = vec![first];
        for round in 1..=RETIME_ROUNDS {
            if asked.is_empty() {
                break;
            }
            let refs: Vec<&(Execution, u64, Vec<String>)> = asked.iter().collect();
            let word = fp8_report::step_inputs::check_round_word(round);
            let Some(again) = self.time_plans(&word, &refs, &lm.inputs, worker, outcome)? else {
                break;
            };
            outcome.reports.push(self.json(&format!("_{word}")));
            docs.push(again);
            asked = moved_again(lm, &docs);
            if !asked.is_empty() && round < RETIME_ROUNDS {
                let counts: Vec<String> =
                    asked.iter().map(|(e, t, _)| format!("{e} {t}")).collect();
                say(&format!(
                    "{at}: the re-timed steps refit the overlap share again and moved the policy's plan at {} count(s) ({}); timing the new plans (round {} of {RETIME_ROUNDS})",
                    asked.len(),
                    counts.join(", "),
                    round + 1
                ));
            }
        }
        Ok(docs)
    }

    /// One round of the check (`round`: its word, `check_round_word`): `asked` timed by the
    /// served worker into `<layout>_<round>_step.json`; `None` (with a note) where the time limit
    /// left no count of it. A worker this round starts (a resumed layout's) must run on the GPU
    /// that measured `inputs`.
    fn time_plans(
        &self,
        round: &str,
        asked: &[&(Execution, u64, Vec<String>)],
        inputs: &StepInputs,
        worker: &mut Worker,
        outcome: &mut GenOutcome,
    ) -> Result<Option<StepInputs>, String> {
        let at = format!("{} {}", self.model, self.p);
        if self.clock.out() {
            outcome.notes.push(format!("{at}: the {round} was skipped, the time limit ran out; the thresholds are the model's alone"));
            return Ok(None);
        }
        let plans_file = self.json(&format!("_{round}_plans"));
        write_plans(&plans_file, asked)?;
        let json = self.json(&format!("_{round}"));
        let starts = matches!(worker, Worker::Later(..));
        let end = worker.check(&plans_file, &json, self.clock)?;
        match read_step_inputs(&json) {
            Ok(d) => {
                if starts {
                    super::resume::same_gpu(inputs, &self.json("_inputs"), &d)?;
                }
                outcome.notes.extend(unsettled(&at, round, &d));
                Ok(Some(d))
            }
            Err(e) if end == WorkerEnd::Stopped => {
                outcome.notes.push(format!(
                    "{at}: the {round} stopped at the time limit before a count ended ({e})"
                ));
                Ok(None)
            }
            Err(e) => Err(e.to_string()),
        }
    }

    /// `--step-trainer megatron`: the layout's policy as it stands, judged in upstream
    /// `GPTModel` (the Megatron judge, through the hook and the native config) at the check's
    /// counts; a policy mode slower than BF16 there moves its keys above that count.
    fn judge(
        &self,
        lm: &mut LayoutModel,
        say: &dyn Fn(&str),
        outcome: &mut GenOutcome,
    ) -> Result<(), String> {
        let at = format!("{} {}", self.model, self.p);
        let draft = self.json("_draft");
        let policy =
            fp8_merge::model::model_policy(std::slice::from_ref(lm)).map_err(|e| e.to_string())?;
        policy.write(&draft).map_err(|e| e.to_string())?;
        let plans = lm.check_plans();
        let executions: Vec<Execution> = lm.fits.keys().copied().collect();
        for e in executions {
            let tokens: Vec<u64> = plans
                .iter()
                .filter(|(x, _, _)| *x == e)
                .map(|(_, t, _)| *t)
                .collect();
            if tokens.is_empty() {
                continue;
            }
            if self.clock.out() {
                outcome.notes.push(format!(
                    "{at}: the Megatron judge ({e}) was skipped, the time limit ran out"
                ));
                continue;
            }
            say(&format!(
                "{at}: the policy in megatron-core's GPTModel, {e}, at {} count(s)",
                tokens.len()
            ));
            let job = super::StepJob {
                tokens,
                executions: vec![e],
                ..self.job.clone()
            };
            let json = self.json(&format!("_judge_{e}"));
            let args = command(self.o, &job, self.config, self.p, &json, Some(&draft));
            let end = run_worker(&self.o.python, &args, self.clock, &json)?;
            let text = match fp8_io::read_to_string_limited(&json, fp8_merge::step::MAX_STEP_BYTES)
            {
                Ok(t) => t,
                Err(err) if end == WorkerEnd::Stopped => {
                    outcome.notes.push(format!("{at}: the Megatron judge ({e}) stopped at the time limit before a count ended ({err})"));
                    continue;
                }
                Err(err) => return Err(err.to_string()),
            };
            let rows = fp8_merge::step::judged_policies(&text, &json).map_err(|e| e.to_string())?;
            outcome.reports.push(json);
            let before = lm.guarded.len();
            lm.add_judged(rows);
            for (x, t) in &lm.guarded[before..] {
                outcome.notes.push(format!("{at}: {x} at {t}: the Megatron judge measured the policy slower than BF16; its keys are FP8 only above {t}"));
            }
        }
        Ok(())
    }
}

/// `--numerics`: the keys over the bound stay BF16 before the check (`LayoutModel::bound`); a
/// report of another recipe than the step's is refused (its errors are not this recipe's).
fn bound(
    lm: &mut LayoutModel,
    b: &fp8_merge::numerics::NumericsBound,
    at: &str,
    outcome: &mut GenOutcome,
) -> Result<(), String> {
    let measured = lm.inputs.fp8_recipe.parse::<fp8_policy::Recipe>().ok();
    if let (Some(r), Some(m)) = (b.report.recipe, measured)
        && r != m
    {
        return Err(format!(
            "{}: a numerics report of {r}, and the step measures {m}; fix: pass the report of {m} (python -m adaptive_fp8.bench.numerics --recipe {m})",
            b.report.file.display()
        ));
    }
    lm.bound(b);
    for o in lm.numerics.iter().flat_map(|n| &n.overruled) {
        outcome.notes.push(format!(
            "{at}: {} kept BF16 by the numerics bound: {}'s {} has relative RMS error {:.4} > {} (FP8 would start at {} by speed)",
            o.key, o.module, o.operand, o.error, b.max_quant_error, o.min_tokens
        ));
    }
    Ok(())
}

fn mode(m: StepMode) -> &'static str {
    match m {
        StepMode::Bf16 => "all-BF16",
        StepMode::Fp8 => "all-FP8",
        StepMode::Plan => "plan",
    }
}

/// The plans file the worker's `--check` reads.
fn write_plans(path: &Path, plans: &[&(Execution, u64, Vec<String>)]) -> Result<(), String> {
    let doc = StepPlans::new(
        plans
            .iter()
            .map(|(e, t, g)| PlannedStep {
                execution: *e,
                tokens: *t,
                fp8_groups: g.clone(),
            })
            .collect(),
    );
    fp8_io::write_atomic(path, doc.to_json().as_bytes()).map_err(|e| e.to_string())
}
