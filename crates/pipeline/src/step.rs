//! `gen-policy --backend step`: the policy from the training step itself. For each model and
//! layout, `python -m adaptive_fp8.bench.step_bench` sweeps the token counts in each execution asked
//! for and finds the per-group oracle at every count; `fp8_merge::refine` names the midpoints
//! to time next, where a threshold falls between two swept counts, and `fp8_merge::step` turns
//! the verdicts of every count into `min_tokens` (eager) and `min_tokens_graphed` (graphed).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use fp8_engine::ModelDesc;
use fp8_policy::Execution;

use crate::generate::{GenOptions, GenOutcome, default_layouts};

mod worker;
use worker::{Clock, WorkerEnd, first_sentence, read_timed, run_worker};

/// What the step worker runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepJob {
    /// Token counts to sweep (sequence length at micro-batch 1).
    pub tokens: Vec<u64>,
    /// Executions to sweep.
    pub executions: Vec<Execution>,
    /// Micro-batches per optimizer step.
    pub grad_accum: u32,
    /// `te` (the toolkit's TE blocks) or `megatron` (upstream GPTModel, its oracle's candidates
    /// each a model build; graphed in Megatron's own CUDA graphs).
    pub trainer: String,
    /// Transformer layers per step.
    pub layers: u32,
    /// Of `layers`, how many have a dense MLP (an MoE model with dense layers, DeepSeek-V3);
    /// `None`: the worker's default. [`gen_policy_step`] sets it per model
    /// ([`dense_layers_for`]).
    pub dense_layers: Option<u32>,
    /// Rounds of refinement: each times the midpoints `fp8_merge::refine` asks for, so a
    /// threshold can land between the sweep's counts; 0 is the sweep alone.
    pub refine: u32,
    /// The whole run's wall-clock bound: at it the worker is stopped and the policy is written
    /// from the counts it finished (each one saved as it ends); refinements and layouts not
    /// begun by then are skipped, with a note. `None`: unbounded.
    pub time_limit: Option<Duration>,
}

/// The worker's command line for one layout, writing `json`.
fn command(
    o: &GenOptions,
    job: &StepJob,
    config: &Path,
    p: fp8_engine::Parallel,
    json: &Path,
) -> Vec<String> {
    let list = |v: Vec<String>| v.join(",");
    // The Megatron judge at TP > 1 is one process per TP rank (its world is the TP group);
    // the TE blocks time one rank's GEMMs in one process.
    let mut a = if job.trainer == "megatron" && p.tp > 1 {
        vec![
            "-m".to_owned(),
            "torch.distributed.run".to_owned(),
            "--standalone".to_owned(),
            format!("--nproc-per-node={}", p.tp),
        ]
    } else {
        Vec::new()
    };
    a.extend([
        "-m".to_owned(),
        "adaptive_fp8.bench.step_bench".to_owned(),
        "--model".to_owned(),
        config.display().to_string(),
        "--tp".to_owned(),
        p.tp.to_string(),
        "--ep".to_owned(),
        p.ep.to_string(),
        "--etp".to_owned(),
        p.etp.to_string(),
        "--tokens".to_owned(),
        list_counts(&job.tokens),
        "--execution".to_owned(),
        list(job.executions.iter().map(|e| e.name().to_owned()).collect()),
        "--grad-accum".to_owned(),
        job.grad_accum.to_string(),
        "--trainer".to_owned(),
        job.trainer.clone(),
        "--layers".to_owned(),
        job.layers.to_string(),
    ]);
    if let Some(d) = job.dense_layers {
        a.extend(["--dense-layers".to_owned(), d.to_string()]);
    }
    a.extend([
        // The oracle is what the thresholds come from; the Megatron judge skips it by default.
        "--oracle".to_owned(),
        "greedy".to_owned(),
        "--recipe".to_owned(),
        o.measure.recipe.recipe().name().to_owned(),
        "--json".to_owned(),
        json.display().to_string(),
    ]);
    if let Some(r) = &o.config_root {
        a.extend(["--config-root".to_owned(), r.display().to_string()]);
    }
    a
}

/// The most processes a layout's Megatron judge runs (its TP), where that is more than one:
/// each rank takes a GPU. `None` for the TE blocks, or at TP 1.
fn megatron_ranks(job: &StepJob, layouts: &[fp8_engine::Parallel]) -> Option<u32> {
    (job.trainer == "megatron")
        .then(|| layouts.iter().map(|p| p.tp).max())
        .flatten()
        .filter(|&tp| tp > 1)
}

fn gpus_error(tp: u32, have: usize) -> String {
    format!(
        "--step-trainer megatron runs each layout over TP processes, one GPU each; TP {tp} needs \
         {tp} GPUs and this machine has {have}; fix: --tp with the sizes its GPUs allow (--tp 1 \
         on one GPU), or run on a node with {tp} GPUs"
    )
}

/// The dense layers a step of `layers` builds for `model`: one, where its language model has
/// both dense-MLP and MoE layers and the step has room for both, so the oracle measures the
/// dense keys too (the workers' default follows the model's share: a 2-layer step of
/// DeepSeek-V3, 3 dense of 61 layers, would build no dense layer and leave its dense `fc1` and
/// `fc2` keys unmeasured); else the worker's default.
pub fn dense_layers_for(model: &ModelDesc, layers: u32) -> Option<u32> {
    let arch = &model.components.first()?.arch;
    let moe = arch.moe?;
    (moe.dense_layers > 0 && moe.dense_layers < arch.num_layers && layers >= 2).then_some(1)
}

fn load(config: &Path, root: Option<&Path>) -> Result<ModelDesc, String> {
    let opt = match root {
        Some(r) => fp8_engine::LoadOptions::with_config_root(r),
        None => fp8_engine::LoadOptions::default(),
    };
    fp8_engine::load_model_with(config, &opt).map_err(|e| e.to_string())
}

/// Sweeps every layout of every model through the step worker and writes one policy per model
/// (`<out>/<model>.json`; a VLM's language model as `<model>.llm.json`), the worker's results
/// under `<out>/reports/` (or `<reports>/step/`). `say` gets a line per layout.
pub fn gen_policy_step(
    o: &GenOptions,
    job: &StepJob,
    say: &dyn Fn(&str),
) -> Result<GenOutcome, String> {
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
    };
    for config in &o.models {
        let model = load(config, o.config_root.as_deref())?;
        outcome.notes.extend(model.notes.iter().cloned());
        let layouts = default_layouts(&model, o.tp.as_deref(), o.ep.as_deref(), o.etp.as_deref());
        if let Some(tp) = megatron_ranks(job, &layouts) {
            let have = fp8_bench::cuda::device_count().map_err(|e| {
                format!("--step-trainer megatron at TP {tp} needs {tp} GPUs, and counting them failed ({e}); fix: --tp 1 here, or run on a node with {tp} GPUs")
            })?;
            if have < tp as usize {
                return Err(gpus_error(tp, have));
            }
        }
        if layouts.is_empty() {
            return Err(format!(
                "{}: no requested layout divides the model",
                config.display()
            ));
        }
        let mut runs = Vec::new();
        let notes_before = outcome.notes.len();
        let model_job = StepJob {
            dense_layers: job.dense_layers.or(dense_layers_for(&model, job.layers)),
            ..job.clone()
        };
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
                model: &model.name,
                p,
                reports_dir: &reports_dir,
                clock: &clock,
            };
            runs.extend(ctx.sweep(say, &mut outcome)?);
        }
        if runs.is_empty() {
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
        let policy = fp8_merge::step::step_policy(&runs).map_err(|e| e.to_string())?;
        let name = if model.components.len() > 1 {
            format!("{}.llm.json", model.name)
        } else {
            format!("{}.json", model.name)
        };
        let target = out.join(name);
        fp8_io::create_parent_dir(&target).map_err(|e| e.to_string())?;
        policy.write(&target).map_err(|e| e.to_string())?;
        outcome.files.push(target);
    }
    Ok(outcome)
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
}

impl Layout<'_> {
    fn json(&self, tail: &str) -> PathBuf {
        let p = self.p;
        self.reports_dir.join(format!(
            "{}_tp{}_ep{}_etp{}{tail}_step.json",
            self.model, p.tp, p.ep, p.etp
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
            job.executions
                .iter()
                .map(|e| e.name())
                .collect::<Vec<_>>()
                .join(" and ")
        ));
        let end = run_worker(
            &self.o.python,
            &command(self.o, job, self.config, p, &json),
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
            let args = command(self.o, &one, self.config, p, &json);
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
            let mut asked = fp8_merge::refine::refinements(layout);
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
                let args = command(self.o, &more, self.config, p, &json);
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

/// The step policies of committed step results: every `<model>_tp*_step.json` in `dir` (the
/// files `gen-policy --backend step` writes), one policy per model, `<model>.json`. The
/// results are named in provenance as `label/<file>` (a repository path, not this machine's).
pub fn step_policies(dir: &Path, label: &Path) -> Result<crate::build::Files, String> {
    let mut by_model: std::collections::BTreeMap<String, Vec<fp8_merge::step::StepRun>> =
        std::collections::BTreeMap::new();
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Ok(crate::build::Files::new());
    };
    let mut names: Vec<String> = rd
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with("_step.json"))
        .collect();
    names.sort();
    for name in names {
        let Some((model, _)) = name.rsplit_once("_tp") else {
            return Err(format!(
                "{}: not a step result's name (<model>_tp<N>_ep<N>_etp<N>_step.json)",
                dir.join(&name).display()
            ));
        };
        let text =
            fp8_io::read_to_string_limited(&dir.join(&name), fp8_merge::step::MAX_STEP_BYTES)
                .map_err(|e| e.to_string())?;
        let runs =
            fp8_merge::step::parse_results(&text, &label.join(&name)).map_err(|e| e.to_string())?;
        by_model.entry(model.to_owned()).or_default().extend(runs);
    }
    let mut out = crate::build::Files::new();
    for (model, runs) in by_model {
        let policy = fp8_merge::step::step_policy(&runs).map_err(|e| format!("{model}: {e}"))?;
        out.insert(
            PathBuf::from(format!("{model}.json")),
            policy.to_json().into_bytes(),
        );
    }
    Ok(out)
}

fn list_counts(tokens: &[u64]) -> String {
    tokens
        .iter()
        .map(u64::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_worker_gets_the_layout_the_sweep_and_the_recipe() {
        let o = GenOptions {
            models: vec![PathBuf::from("m.yaml")],
            config_root: Some(PathBuf::from("configs")),
            tp: None,
            ep: None,
            etp: None,
            merge: fp8_merge::MergeOptions::default(),
            backend: "step".into(),
            python: "python3".into(),
            recompute: false,
            device_profile: "h200".into(),
            measure: fp8_bench::cuda::MeasureOptions::default(),
            policies_dir: PathBuf::from("policies"),
            reports_base: PathBuf::from("reports"),
            out: None,
        };
        let job = StepJob {
            tokens: vec![1024, 4096],
            executions: vec![Execution::Eager, Execution::Graphed],
            grad_accum: 8,
            trainer: "te".into(),
            layers: 2,
            dense_layers: None,
            refine: 1,
            time_limit: None,
        };
        let a = command(
            &o,
            &job,
            Path::new("m.yaml"),
            fp8_engine::Parallel::new(2, 8, 1, 1),
            Path::new("r.json"),
        )
        .join(" ");
        assert_eq!(
            a,
            "-m adaptive_fp8.bench.step_bench --model m.yaml --tp 2 --ep 8 --etp 1 --tokens 1024,4096 \
             --execution eager,graphed --grad-accum 8 --trainer te --layers 2 --oracle greedy \
             --recipe blockwise --json r.json --config-root configs"
        );
        // The Megatron judge at TP 2: one process per rank, under torchrun; at TP 1 one process.
        let megatron = StepJob {
            trainer: "megatron".into(),
            ..job
        };
        let at = |tp| {
            command(
                &o,
                &megatron,
                Path::new("m.yaml"),
                fp8_engine::Parallel::new(tp, 1, tp, 1),
                Path::new("r.json"),
            )
            .join(" ")
        };
        assert!(
            at(2).starts_with(
                "-m torch.distributed.run --standalone --nproc-per-node=2 \
                 -m adaptive_fp8.bench.step_bench --model m.yaml --tp 2 "
            ),
            "{}",
            at(2)
        );
        assert!(
            at(1).starts_with("-m adaptive_fp8.bench.step_bench "),
            "{}",
            at(1)
        );
        let dense = StepJob {
            dense_layers: Some(1),
            ..megatron
        };
        let a = command(
            &o,
            &dense,
            Path::new("m.yaml"),
            fp8_engine::Parallel::new(1, 16, 1, 1),
            Path::new("r.json"),
        )
        .join(" ");
        assert!(
            a.contains("--layers 2 --dense-layers 1 --oracle greedy"),
            "{a}"
        );
    }

    #[test]
    fn a_step_of_an_moe_model_with_dense_layers_builds_one() {
        let fixture = |m: &str| {
            let p = Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../fixtures/models")
                .join(m);
            fp8_engine::load_model(&p).unwrap_or_else(|e| panic!("{e}"))
        };
        let dsv3 = fixture("deepseek_v3.yaml");
        assert_eq!(dense_layers_for(&dsv3, 2), Some(1));
        assert_eq!(dense_layers_for(&dsv3, 1), None, "no room for both kinds");
        assert_eq!(dense_layers_for(&fixture("llama3_2_1b.yaml"), 2), None);
    }

    #[test]
    fn the_megatron_judge_needs_a_gpu_per_tp_rank() {
        let job = |trainer: &str| StepJob {
            tokens: vec![1024],
            executions: vec![Execution::Eager],
            grad_accum: 1,
            trainer: trainer.into(),
            layers: 2,
            dense_layers: None,
            refine: 0,
            time_limit: None,
        };
        let layouts: Vec<_> = [1, 4, 2]
            .map(|tp| fp8_engine::Parallel::new(tp, 1, tp, 1))
            .into();
        assert_eq!(megatron_ranks(&job("megatron"), &layouts), Some(4));
        assert_eq!(megatron_ranks(&job("megatron"), &layouts[..1]), None);
        assert_eq!(megatron_ranks(&job("te"), &layouts), None);
        let e = gpus_error(4, 1);
        assert!(
            e.contains("TP 4 needs 4 GPUs and this machine has 1") && e.contains("fix: --tp"),
            "{e}"
        );
    }
}
