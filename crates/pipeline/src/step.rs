//! `gen-policy --backend step`: the policy from the training step itself. For each model and
//! layout, `python -m adaptive_fp8.bench.step_bench` sweeps the token counts in each execution asked
//! for and finds the per-group oracle at every count; `fp8_merge::refine` names the midpoints
//! to time next, where a threshold falls between two swept counts, and `fp8_merge::step` turns
//! the verdicts of every count into `min_tokens` (eager) and `min_tokens_graphed` (graphed).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use fp8_engine::ModelDesc;
use fp8_policy::Execution;

use crate::generate::{GenOptions, GenOutcome, default_layouts};

mod command;
mod committed;
mod lines;
mod mix;
mod model;
pub mod plot;
mod resume;
pub mod saved;
mod serve;
mod vision;
pub(crate) mod worker;
pub use command::{
    IMAGE_TOKENS, RecipeMix, StepJob, StepTuner, dense_layers_for, step_cannot_build,
};
use command::{command, gpus_error, list_counts, megatron_ranks};
pub use committed::step_policies;
pub use vision::add_vision;
use vision::{vision_job, vision_layouts};
use worker::{Clock, WorkerEnd, first_sentence, read_timed, run_worker};

/// Sweeps every layout of every model through the step worker and writes one policy per model
/// (`<out>/<model>.json`; a VLM's language model as `<model>.llm.json`, or with `o.component`
/// vit its vision encoder as `<model>.vit.json`), the worker's results under `<out>/reports/`
/// (or `<reports>/step/`). `say` gets a line per layout.
pub fn gen_policy_step(
    o: &GenOptions,
    job: &StepJob,
    say: &dyn Fn(&str),
) -> Result<GenOutcome, String> {
    let loaded = o
        .models
        .iter()
        .map(|c| crate::build::load_model(c, o.config_root.as_deref()).map(|m| (c.clone(), m)))
        .collect::<Result<Vec<_>, _>>()?;
    o.refuse_overwriting_configs(&loaded)?;
    let out = o.out.clone().unwrap_or_else(|| o.policies_dir.clone());
    let reports_dir = match &o.out {
        Some(d) => d.join("reports"),
        None => o.reports_base.join("step"),
    };
    fp8_io::create_parent_dir(&reports_dir.join("x")).map_err(|e| e.to_string())?;
    let clock = Clock::start(job.time_limit);
    let mut outcome = GenOutcome {
        estimated: false,
        reports: Vec::new(),
        files: Vec::new(),
        out: out.clone(),
        notes: Vec::new(),
        host: crate::host::HostSource::NotNeeded,
    };
    for config in &o.models {
        let model = crate::build::load_model(config, o.config_root.as_deref())?;
        outcome.notes.extend(model.notes.iter().cloned());
        let vit = o.vision_encoder();
        let (layouts, model_job) = layouts_and_job(o, job, &model, config, &mut outcome.notes)?;
        if let Some(n) = crate::generate::config_tp_note(&model, o.tp.as_deref()) {
            say(&n);
        }
        let first_ep = layouts.first().map_or(1, |p| p.ep);
        let mut runs = Vec::new();
        let mut models = Vec::new();
        let notes_before = outcome.notes.len();
        // What the layouts' files and lines are named by: a VLM's vision encoder
        // `<model>_vit` (its files beside its language model's).
        let stem = if vit {
            format!("{}_vit", model.name)
        } else {
            model.name.clone()
        };
        let mut mixed: Vec<(fp8_policy::Recipe, fp8_merge::model::LayoutModel)> = Vec::new();
        for p in layouts {
            if clock.out() {
                outcome.notes.push(format!(
                    "{} {p}: not measured, the time limit ran out before it",
                    model.name
                ));
                continue;
            }
            let ctx = Layout {
                o,
                job: &model_job,
                config,
                model: &stem,
                p,
                reports_dir: &reports_dir,
                clock: &clock,
                tag: String::new(),
            };
            match job.tuner {
                StepTuner::Oracle => runs.extend(ctx.sweep(say, &mut outcome)?),
                StepTuner::Model => {
                    models.extend(ctx.model(say, &mut outcome)?);
                    if let Some(m) = &model_job.mix {
                        mixed.extend(ctx.other_recipes(m, say, &mut outcome)?);
                    }
                }
            }
        }
        if runs.is_empty() && models.is_empty() {
            return Err(if clock.out() {
                format!(
                    "{}: the time limit ran out before the step finished one token count; fix: a \
                     larger time limit, or fewer token counts, executions or layouts",
                    config.display()
                )
            } else {
                format!(
                    "{}: the step timed no token count ({}); fix: see the worker's messages \
                     above",
                    config.display(),
                    outcome.notes[notes_before..].join("; ")
                )
            });
        }
        let policy = match (job.tuner, &model_job.mix) {
            (StepTuner::Oracle, _) => {
                fp8_merge::step::step_policy(&runs).map_err(|e| e.to_string())?
            }
            (StepTuner::Model, None) => {
                fp8_merge::model::model_policy(&models).map_err(|e| e.to_string())?
            }
            (StepTuner::Model, Some(m)) => {
                let probe = mix::Probe {
                    o,
                    job: &model_job,
                    config,
                    model: &stem,
                    ep: first_ep,
                    reports_dir: &reports_dir,
                    clock: &clock,
                };
                mix::mixed_policy(&probe, m, &models, mixed, say, &mut outcome)?
            }
        };
        write_policy(&out, &model, job, vit, &policy, &models, &mut outcome)?;
    }
    Ok(outcome)
}

/// The layouts `o` asks for of `model` (its vision encoder's, where `o` asks for that) and the
/// job that times them; refused where a layout cannot be timed here.
fn layouts_and_job(
    o: &GenOptions,
    job: &StepJob,
    model: &ModelDesc,
    config: &Path,
    notes: &mut Vec<String>,
) -> Result<(Vec<fp8_engine::Parallel>, StepJob), String> {
    let (tps, eps, etps) = (o.tp.as_deref(), o.ep.as_deref(), o.etp.as_deref());
    let mut layouts = default_layouts(model, tps, eps, etps);
    let left_out = crate::generate::layouts_left_out(model, tps, eps, etps);
    let model_job = if o.vision_encoder() {
        layouts = vision_layouts(&layouts);
        vision_job(job, &model.name, notes)
    } else {
        StepJob {
            dense_layers: job.dense_layers.or(dense_layers_for(model, job.layers)),
            ..job.clone()
        }
    };
    if let Some(tp) = megatron_ranks(&model_job, &layouts) {
        let have = fp8_bench::cuda::device_count().map_err(|e| {
            format!("--step-trainer megatron at TP {tp} needs {tp} GPUs, and counting them failed ({e}); fix: --tp 1 here, or run on a node with {tp} GPUs")
        })?;
        if have < tp as usize {
            return Err(gpus_error(tp, have));
        }
    }
    if layouts.is_empty() {
        return Err(crate::generate::no_layout(config, &left_out));
    }
    notes.extend(left_out);
    for p in &layouts {
        off_the_token_step(&job.tokens, p)?;
    }
    Ok((layouts, model_job))
}

/// The model's policy (`<model>.json`; a VLM's language model `<model>.llm.json`, with `vit` its
/// vision encoder `<model>.vit.json`) and, from the step model, its summary `<model>.md` and
/// pictures (`plots/<model>/[vit-]step-*.svg`), into `out`.
fn write_policy(
    out: &Path,
    model: &ModelDesc,
    job: &StepJob,
    vit: bool,
    policy: &fp8_policy::Policy,
    models: &[fp8_merge::model::LayoutModel],
    outcome: &mut GenOutcome,
) -> Result<(), String> {
    let name = match (vit, model.components.len() > 1) {
        (true, _) => format!("{}.vit.json", model.name),
        (false, true) => format!("{}.llm.json", model.name),
        (false, false) => format!("{}.json", model.name),
    };
    let target = out.join(name);
    fp8_io::create_parent_dir(&target).map_err(|e| e.to_string())?;
    policy.write(&target).map_err(|e| e.to_string())?;
    outcome.files.push(target);
    if job.tuner == StepTuner::Model {
        let md = out.join(format!("{}.md", model.name));
        let title = if vit {
            format!("{}'s vision encoder", model.name)
        } else {
            model.name.clone()
        };
        let mut text = fp8_merge::model::summary_markdown(&title, models);
        if let Some(plan) = policy.recipe_plan() {
            text.push_str(&fp8_merge::module_recipes::plan_markdown(plan));
        }
        fp8_io::write_atomic(&md, text.as_bytes()).map_err(|e| e.to_string())?;
        outcome.files.push(md);
        let plots = plot::step_plots(&model.name, models)?;
        crate::generate::write_files(out, &plots)?;
        outcome.files.extend(plots.keys().map(|rel| out.join(rel)));
    }
    Ok(())
}

/// One layout's sweep and refinements.
struct Layout<'a> {
    o: &'a GenOptions,
    job: &'a StepJob,
    config: &'a Path,
    model: &'a str,
    p: fp8_engine::Parallel,
    reports_dir: &'a Path,
    clock: &'a Clock,
    /// Beside the model's name in the files' names: `_<recipe>` for a recipe other than the
    /// base of a per-module recipe choice, else empty.
    tag: String,
}

/// Executions as a line says them: `eager and graphed`.
fn spoken(executions: &[Execution]) -> String {
    executions
        .iter()
        .map(|e| e.name())
        .collect::<Vec<_>>()
        .join(" and ")
}

impl Layout<'_> {
    fn json(&self, tail: &str) -> PathBuf {
        let p = self.p;
        self.reports_dir.join(format!(
            "{}_tp{}_ep{}_etp{}{}{tail}_step.json",
            self.model, p.tp, p.ep, p.etp, self.tag
        ))
    }

    /// The sweep, then each refinement round: the oracle's verdicts of every count timed.
    fn sweep(
        &self,
        say: &dyn Fn(&str),
        outcome: &mut GenOutcome,
    ) -> Result<Vec<fp8_merge::step::StepRun>, String> {
        let (job, p, model) = (self.job, self.p, self.model);
        let json = self.json("");
        say(&format!(
            "{model} {p}: the step over {} token count(s), {}",
            job.tokens.len(),
            spoken(&job.executions)
        ));
        let end = run_worker(
            &self.o.python,
            &command(self.o, job, self.config, p, &json, None),
            self.clock,
            &json,
        )?;
        let (mut layout, failed) = match end {
            WorkerEnd::Finished => read_timed(&json)?,
            // What it finished is saved; nothing finished is no verdict.
            WorkerEnd::Stopped => read_timed(&json).unwrap_or_default(),
        };
        if end == WorkerEnd::Finished || !layout.is_empty() {
            outcome.reports.push(json);
        }
        let mut unverdicted = BTreeSet::new();
        self.retry_alone(job, &failed, &mut layout, &mut unverdicted, say, outcome);
        if end == WorkerEnd::Stopped {
            outcome.notes.push(self.stopped_note(&layout));
            return Ok(layout);
        }
        self.refine(&mut layout, &mut unverdicted, say, outcome);
        Ok(layout)
    }

    /// The counts a run of `job` could not time: each one that ran out of memory after other
    /// counts in that process is timed again alone, in a fresh worker (in one process the
    /// Megatron judge's graphed counts leave memory behind; alone such a count can finish).
    /// Every count left without a verdict gets a note and joins `unverdicted`.
    fn retry_alone(
        &self,
        job: &StepJob,
        failed: &[fp8_merge::step::FailedCount],
        layout: &mut Vec<fp8_merge::step::StepRun>,
        unverdicted: &mut BTreeSet<(Execution, u64)>,
        say: &dyn Fn(&str),
        outcome: &mut GenOutcome,
    ) {
        let (p, model) = (self.p, self.model);
        let shared = job.tokens.len() * job.executions.len() > 1;
        for f in failed {
            unverdicted.insert((f.execution, f.tokens));
            let at = format!("{model} {p}: {} at {}", f.execution.name(), f.tokens);
            let why = first_sentence(&f.error);
            if !(f.out_of_memory() && shared) {
                outcome
                    .notes
                    .push(format!("{at}: no verdict, the step failed there: {why}"));
                continue;
            }
            if self.clock.out() {
                outcome.notes.push(format!(
                    "{at}: no verdict, it ran out of memory ({why}) and the time limit left no \
                     time to time it alone"
                ));
                continue;
            }
            say(&format!(
                "{at} ran out of memory after other counts; timing it alone in a fresh worker"
            ));
            let json = self.json(&format!("_alone{}_{}", f.tokens, f.execution.name()));
            let one = StepJob {
                tokens: vec![f.tokens],
                executions: vec![f.execution],
                ..job.clone()
            };
            let args = command(self.o, &one, self.config, p, &json, None);
            let note = match run_worker(&self.o.python, &args, self.clock, &json).and_then(|end| {
                match end {
                    WorkerEnd::Finished => read_timed(&json),
                    WorkerEnd::Stopped => Err("stopped at the time limit".to_owned()),
                }
            }) {
                Ok((runs, _)) if !runs.is_empty() => {
                    unverdicted.remove(&(f.execution, f.tokens));
                    layout.extend(runs);
                    outcome.reports.push(json);
                    format!(
                        "{at}: ran out of memory after other counts in one process ({why}); \
                         timed alone in a fresh one"
                    )
                }
                Ok((_, again)) => format!(
                    "{at}: no verdict, it ran out of memory after other counts and alone too ({})",
                    again.first().map_or(why, |a| first_sentence(&a.error))
                ),
                Err(e) => format!(
                    "{at}: no verdict, it ran out of memory ({why}) and timing it alone failed: {e}"
                ),
            };
            outcome.notes.push(note);
        }
    }

    /// What a sweep stopped at the time limit timed, and which executions it never reached.
    fn stopped_note(&self, layout: &[fp8_merge::step::StepRun]) -> String {
        let (job, p, model) = (self.job, self.p, self.model);
        let unreached: Vec<&str> = job
            .executions
            .iter()
            .filter(|e| !layout.iter().any(|r| r.execution == **e))
            .map(|e| e.name())
            .collect();
        let unreached = if unreached.is_empty() {
            String::new()
        } else {
            format!(
                " ({} not reached: no threshold of its own, the policy's min_tokens serves it)",
                unreached.join(", ")
            )
        };
        format!(
            "{model} {p}: stopped at the time limit with {} of {} count(s) timed; the \
             thresholds come from those{unreached}",
            layout.iter().map(|r| r.counts.len()).sum::<usize>(),
            job.tokens.len() * job.executions.len()
        )
    }

    /// Each refinement round: the midpoints `fp8_merge::refine` asks for, timed and added to
    /// `layout`, but for the counts already tried without a verdict (`unverdicted`). A
    /// refinement only sharpens the sweep's thresholds: its failure (or the time limit) keeps
    /// them, with a note.
    fn refine(
        &self,
        layout: &mut Vec<fp8_merge::step::StepRun>,
        unverdicted: &mut BTreeSet<(Execution, u64)>,
        say: &dyn Fn(&str),
        outcome: &mut GenOutcome,
    ) {
        let (job, p, model) = (self.job, self.p, self.model);
        for round in 1..=job.refine {
            let mut asked = fp8_merge::refine::refinements(layout, p.token_step());
            for (execution, counts) in &mut asked {
                counts.retain(|t| !unverdicted.contains(&(*execution, *t)));
            }
            asked.retain(|_, counts| !counts.is_empty());
            if asked.is_empty() {
                break;
            }
            for (execution, counts) in asked {
                if self.clock.out() {
                    outcome.notes.push(format!(
                        "{model} {p}: refinement {round} ({}) skipped, the time limit ran out; \
                         the thresholds keep the counts timed before it",
                        execution.name()
                    ));
                    continue;
                }
                let json = self.json(&format!("_refine{round}_{}", execution.name()));
                let more = StepJob {
                    tokens: counts.into_iter().collect(),
                    executions: vec![execution],
                    ..job.clone()
                };
                say(&format!(
                    "{model} {p}: refinement {round}, {} at {}",
                    execution.name(),
                    list_counts(&more.tokens)
                ));
                let args = command(self.o, &more, self.config, p, &json, None);
                match run_worker(&self.o.python, &args, self.clock, &json).and_then(|end| match end
                {
                    WorkerEnd::Finished => read_timed(&json),
                    WorkerEnd::Stopped => Err("stopped at the time limit".to_owned()),
                }) {
                    Ok((runs, failed)) => {
                        if !runs.is_empty() {
                            layout.extend(runs);
                            outcome.reports.push(json);
                        }
                        self.retry_alone(&more, &failed, layout, unverdicted, say, outcome);
                    }
                    Err(e) => outcome.notes.push(format!(
                        "{model} {p}: refinement {round} ({}) failed, the thresholds keep the \
                         counts timed before it: {e}",
                        execution.name()
                    )),
                }
            }
        }
    }
}

/// Refuses, before any work, a token count a layout's FP8 GEMMs cannot run: each rank holds
/// `tokens / token_step * 16` rows, which TE's FP8 needs in multiples of 16
/// (`fp8_engine::Parallel::token_step`).
fn off_the_token_step(tokens: &[u64], p: &fp8_engine::Parallel) -> Result<(), String> {
    let step = p.token_step();
    let off: Vec<u64> = tokens.iter().copied().filter(|t| t % step != 0).collect();
    if off.is_empty() {
        return Ok(());
    }
    let near: Vec<String> = off
        .iter()
        .map(|t| {
            ((t + step / 2) / step)
                .max(1)
                .saturating_mul(step)
                .to_string()
        })
        .collect();
    Err(format!(
        "token count(s) {} at {p}: each rank's FP8 GEMMs need counts in multiples of {step} \
         (16 x TP under sequence parallelism, x 2 CP), so TE would refuse them; fix: count(s) \
         such as {}",
        off.iter().map(u64::to_string).collect::<Vec<_>>().join(","),
        near.join(",")
    ))
}

#[cfg(test)]
mod token_step_tests {
    use super::off_the_token_step;

    #[test]
    fn counts_off_a_layouts_token_step_are_refused_with_near_ones() {
        let tp8 = fp8_engine::Parallel::tp(8);
        assert!(off_the_token_step(&[1024, 2048, 16384], &tp8).is_ok());
        let e = off_the_token_step(&[1024, 1456], &tp8).unwrap_err();
        assert!(
            e.contains("1456") && e.contains("128") && e.contains("1408"),
            "{e}"
        );
        assert!(off_the_token_step(&[1456], &fp8_engine::Parallel::tp(1)).is_ok());
    }
}
