//! `gen-policy --backend step`: the policy from the training step itself. For each model and
//! layout, `python -m adaptive_fp8.bench.step_bench` sweeps the token counts in each execution asked
//! for and finds the per-group oracle at every count; `fp8_merge::refine` names the midpoints
//! to time next, where a threshold falls between two swept counts, and `fp8_merge::step` turns
//! the verdicts of every count into `min_tokens` (eager) and `min_tokens_graphed` (graphed).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use fp8_engine::ModelDesc;
use fp8_policy::Execution;

use crate::generate::{GenOptions, GenOutcome, default_layouts};

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
    /// Rounds of refinement: each times the midpoints `fp8_merge::refine` asks for, so a
    /// threshold can land between the sweep's counts; 0 is the sweep alone.
    pub refine: u32,
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
    let mut a = vec![
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
        // The oracle is what the thresholds come from; the Megatron judge skips it by default.
        "--oracle".to_owned(),
        "greedy".to_owned(),
        "--recipe".to_owned(),
        o.measure.recipe.recipe().name().to_owned(),
        "--json".to_owned(),
        json.display().to_string(),
    ];
    if let Some(r) = &o.config_root {
        a.extend(["--config-root".to_owned(), r.display().to_string()]);
    }
    a
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
        if layouts.is_empty() {
            return Err(format!(
                "{}: no requested layout divides the model",
                config.display()
            ));
        }
        let mut runs = Vec::new();
        for p in layouts {
            let json = reports_dir.join(format!(
                "{}_tp{}_ep{}_etp{}_step.json",
                model.name, p.tp, p.ep, p.etp
            ));
            let args = command(o, job, config, p, &json);
            say(&format!(
                "{} {p}: the step over {} token count(s), {}",
                model.name,
                job.tokens.len(),
                job.executions
                    .iter()
                    .map(|e| e.name())
                    .collect::<Vec<_>>()
                    .join(" and ")
            ));
            run_worker(&o.python, &args)?;
            let mut layout = read_runs(&json)?;
            outcome.reports.push(json);
            for round in 1..=job.refine {
                let asked = fp8_merge::refine::refinements(&layout);
                if asked.is_empty() {
                    break;
                }
                for (execution, counts) in asked {
                    let json = reports_dir.join(format!(
                        "{}_tp{}_ep{}_etp{}_refine{round}_{}_step.json",
                        model.name,
                        p.tp,
                        p.ep,
                        p.etp,
                        execution.name()
                    ));
                    let more = StepJob {
                        tokens: counts.into_iter().collect(),
                        executions: vec![execution],
                        ..job.clone()
                    };
                    say(&format!(
                        "{} {p}: refinement {round}, {} at {}",
                        model.name,
                        execution.name(),
                        list_counts(&more.tokens)
                    ));
                    // A refinement only sharpens the sweep's thresholds: its failure keeps them.
                    match run_worker(&o.python, &command(o, &more, config, p, &json))
                        .and_then(|()| read_runs(&json))
                    {
                        Ok(more) => {
                            layout.extend(more);
                            outcome.reports.push(json);
                        }
                        Err(e) => outcome.notes.push(format!(
                            "{} {p}: refinement {round} ({}) failed, the thresholds keep the \
                             counts timed before it: {e}",
                            model.name,
                            execution.name()
                        )),
                    }
                }
            }
            runs.extend(layout);
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

fn read_runs(json: &Path) -> Result<Vec<fp8_merge::step::StepRun>, String> {
    let text = fp8_io::read_to_string_limited(json, fp8_merge::step::MAX_STEP_BYTES)
        .map_err(|e| e.to_string())?;
    fp8_merge::step::parse_results(&text, json).map_err(|e| e.to_string())
}

fn list_counts(tokens: &[u64]) -> String {
    tokens
        .iter()
        .map(u64::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

/// Runs `python args...`; the worker's progress goes to stderr, its tables are not needed (the
/// results are in the JSON it writes).
fn run_worker(python: &str, args: &[String]) -> Result<(), String> {
    let shown = format!("{python} {}", args.join(" "));
    let status = Command::new(python)
        .args(args)
        .stdout(Stdio::null())
        .status()
        .map_err(|e| format!("cannot start `{shown}`: {e}; fix: pass --python with an interpreter that has torch, transformer_engine and adaptive_fp8"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!(
            "the step worker failed ({status}): `{shown}`; its messages are above"
        ))
    }
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
            refine: 1,
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
    }
}
