//! `fp8sel merge-policy`: reports in, policy out.

use std::path::{Path, PathBuf};

use fp8_merge::{MergeOptions, Merged};
use fp8_pipeline::outputs::{
    BothError, Destination, OutputError, merge_both, merge_reports, write_policies,
};

use crate::error::{CliError, CliResult};

/// Merge benchmark reports into a policy with sound thresholds.
///
/// For each (component, kind, ub_name, tp) or (component, kind, etp, num_gemms), min_tokens is
/// the smallest measured token count from which EVERY larger measured count clears
/// threshold + margin (and bf16 p10 / fp8 p90 >= threshold when the report has percentiles), for
/// every module sharing the key. Where FP8 never wins, no rule is written (BF16). Reports of the
/// reference Python tool are accepted too; their padded FP8 token counts are paired with the
/// logical BF16 counts.
///
/// Examples:
///   fp8sel merge-policy --reports out/report_tp1.json out/report_tp2.json \
///       --output policies/qwen2_5_72b.json --speedup-threshold 1.0
///   fp8sel merge-policy --reports out/vlm_*.json --output-dir policies --name qwen3_vl_235b_a22b
///
/// From the training step instead (`python -m adaptive_fp8.bench.step_bench --json`, with its oracle):
/// each key FP8 from the smallest swept count from which the oracle kept it FP8 at every larger
/// count; an eager sweep sets min_tokens, a graphed one min_tokens_graphed:
///   fp8sel merge-policy --step step_eager_graphed.json --output policies/my_model.json
#[derive(Debug, clap::Args)]
#[command(verbatim_doc_comment)]
pub struct Args {
    /// Reports to merge (ours or the reference tool's).
    #[arg(long, num_args = 1.., required_unless_present_any = ["step", "step_model"], value_name = "REPORT")]
    pub reports: Vec<PathBuf>,
    /// The step model's measurements to make the policy from (`python -m
    /// adaptive_fp8.bench.step_inputs --json`, one per layout; what `gen-policy --backend step`
    /// writes as <model>_tp*_inputs_step.json): fitted and chosen again, without a GPU.
    /// The per-module merge's settings (--margin, --trainer, --host-profile, ...) do not apply:
    /// the step model keeps a key FP8 where its gain beats its measured noise, in the
    /// executions its inputs timed.
    #[arg(long, num_args = 1.., conflicts_with_all = ["reports", "output_dir", "step", "margin", "trainer", "host_floor_ms", "fp8_pad", "host_profile", "shared_key", "component", "allow_mixed"], requires = "output", value_name = "INPUTS")]
    pub step_model: Vec<PathBuf>,
    /// With --step-model: the step model's checks of those layouts, each layout's rounds in order
    /// (<model>_tp*_check_step.json, then its re-timings *_recheck_step.json, *_recheck2_step.json,
    /// ...), compared with the model again; a plan they measured slower than BF16 moves its keys
    /// above that count.
    #[arg(long, num_args = 1.., requires = "step_model", value_name = "CHECK")]
    pub step_check: Vec<PathBuf>,
    /// Step benchmark results to make the policy from instead of reports (`python -m
    /// adaptive_fp8.bench.step_bench --json`, oracle on; eager and graphed sweeps in one file or two).
    #[arg(long, num_args = 1.., conflicts_with_all = ["reports", "output_dir"], requires = "output", value_name = "RESULTS")]
    pub step: Vec<PathBuf>,
    /// Output policy (one component).
    #[arg(
        long,
        value_name = "POLICY.json",
        conflicts_with = "output_dir",
        required_unless_present = "output_dir"
    )]
    pub output: Option<PathBuf>,
    /// Output directory: `<name>.json`, or `<name>.llm.json` and `<name>.vit.json` for a VLM.
    #[arg(long, value_name = "DIR")]
    pub output_dir: Option<PathBuf>,
    /// Base name for --output-dir [default: the model name in the reports].
    #[arg(long)]
    pub name: Option<String>,
    /// Speedup FP8 must reach.
    #[arg(long, default_value_t = 1.0, env = "TE_LAYER_PERF_SPEEDUP_THRESHOLD")]
    pub speedup_threshold: f64,
    /// Noise margin added to the threshold.
    #[arg(long, default_value_t = 0.02)]
    pub margin: f64,
    /// Merge only this component (llm or vit).
    #[arg(long)]
    pub component: Option<String>,
    /// Allow reports from different devices or recipes.
    #[arg(long)]
    pub allow_mixed: bool,
    /// For host-bound (eager) trainers: per-module host floors "BF16_MS,FP8_MS" (for example
    /// 0.7,1.15 from TE on an H200); each time becomes max(gpu, floor).
    #[arg(long, value_name = "BF16,FP8")]
    pub host_floor_ms: Option<String>,
    /// Pad multiple of the reference tool's FP8 token counts.
    #[arg(long, default_value_t = 16)]
    pub fp8_pad: u64,
    /// The trainer the policy is for: `graphed` thresholds GPU time (CUDA graphs, or a trainer
    /// that keeps the GPU fed); `eager` thresholds the eager step, host included (needs reports
    /// of `fp8sel bench --backend te`, which carry both figures, or --host-profile); `both`
    /// writes the eager thresholds as min_tokens and the graphed ones as min_tokens_graphed in
    /// one policy (--host-profile then applies to the eager side only). Default: each report's
    /// own times. Recorded in the policy's provenance.
    #[arg(long, value_parser = ["graphed", "eager", "both"])]
    pub trainer: Option<String>,
    /// The merge objective (--shared-key, --host-profile, --numerics).
    #[command(flatten)]
    pub objective: super::objective_args::ObjectiveArgs,
    /// Print one JSON object instead of the summary: {"written", "estimated", "rules" (each with
    /// its typed key and min_tokens, or null where FP8 never won), "warnings"}.
    #[arg(long)]
    pub json: bool,
}

pub(super) fn merge_error(e: fp8_merge::MergeError) -> CliError {
    use fp8_merge::{MergeError, Setting};
    match e {
        MergeError::Report(r) if !r.is_user_input() => CliError::other(r),
        // The library names its settings; here they are flags.
        MergeError::Setting { setting, problem } => {
            let (flag, hint) = match setting {
                Setting::SpeedupThreshold => ("--speedup-threshold", ""),
                Setting::Margin => ("--margin", ""),
                Setting::HostFloors => ("--host-floor-ms", " (give it or --host-profile)"),
                Setting::HostProfile => (
                    "--host-profile",
                    "; use --trainer eager with it (or leave --host-profile out)",
                ),
                Setting::Trainer => (
                    "--trainer",
                    " (the flags: fp8sel bench --backend te, or --host-profile FILE)",
                ),
                _ => ("a merge setting", ""),
            };
            CliError::input(format!("{flag}: {problem}{hint}"))
        }
        other => CliError::input(other),
    }
}

/// The output errors in the flags' words.
pub(super) fn output_error(e: OutputError) -> CliError {
    match e {
        OutputError::SeveralComponents(_) => {
            CliError::input(format!("{e}: pass --component or --output-dir"))
        }
        OutputError::Overwrite(e) => CliError::input(e),
        OutputError::Folder(e) => e.into(),
        OutputError::Write(e) => e.into(),
        other => CliError::input(other),
    }
}

fn both_error(e: BothError) -> CliError {
    match e {
        BothError::Merge(e) => merge_error(e),
        other => CliError::input(other),
    }
}

/// Prints the per-rule summary and the warnings.
pub fn print_summary(merged: &Merged) {
    let speedup = if merged.policies.values().any(fp8_policy::Policy::estimated) {
        "estimated speedup"
    } else {
        "measured speedup"
    };
    for o in &merged.outcomes {
        let k = &o.key;
        let key = match (&k.ub_name, k.par) {
            (Some(ub), fp8_merge::ParKey::Tp(tp)) => {
                format!("{} {}/{ub} tp={tp}", k.component, k.kind)
            }
            (None, fp8_merge::ParKey::Tp(tp)) => format!("{} {} tp={tp}", k.component, k.kind),
            (_, fp8_merge::ParKey::Grouped(etp, g)) => {
                format!("{} {} etp={etp} num_gemms={g}", k.component, k.kind)
            }
        };
        match o.rule {
            Some((t, s)) => println!(
                "{key:<48} min_tokens {:>7}  {speedup} {s:.3}",
                fp8_policy::threshold_words(t)
            ),
            None => println!(
                "{key:<48} no rule: FP8 does not win at {:?} (BF16)",
                o.counts.last().map_or(0, |c| *c)
            ),
        }
    }
    for w in &merged.warnings {
        eprintln!("warning: {w}");
    }
}

fn parse_floor(s: &str) -> CliResult<(f64, f64)> {
    let v: Vec<f64> = s
        .split(',')
        .map(|x| x.trim().parse::<f64>())
        .collect::<Result<_, _>>()
        .map_err(|_| CliError::input(format!("--host-floor-ms `{s}`: expected BF16_MS,FP8_MS")))?;
    match v[..] {
        [b, f] if b >= 0.0 && f >= 0.0 && b.is_finite() && f.is_finite() => Ok((b, f)),
        _ => Err(CliError::input(format!(
            "--host-floor-ms `{s}`: expected two non-negative numbers BF16_MS,FP8_MS"
        ))),
    }
}

/// Runs the command.
pub fn run(args: &Args) -> CliResult {
    args.objective.check_bound_has_reports(false)?;
    if !args.step.is_empty() {
        return run_step(args);
    }
    if !args.step_model.is_empty() {
        return run_step_model(args);
    }
    let opt = MergeOptions {
        component: args.component.clone(),
        allow_mixed: args.allow_mixed,
        host_floor_ms: args.host_floor_ms.as_deref().map(parse_floor).transpose()?,
        ..args.objective.merge_options(
            args.speedup_threshold,
            args.margin,
            args.trainer.as_deref(),
        )?
    };
    let (loaded, merged) = if args.trainer.as_deref() == Some("both") {
        merge_both(&args.reports, opt, args.fp8_pad).map_err(both_error)?
    } else {
        merge_reports(&args.reports, &opt, args.fp8_pad).map_err(merge_error)?
    };
    let name = args
        .name
        .clone()
        .or_else(|| {
            loaded
                .iter()
                .map(|l| l.origin.model.clone())
                .find(|m| !m.is_empty())
        })
        .unwrap_or_else(|| "policy".to_owned());
    let inputs: Vec<&Path> = args.reports.iter().map(PathBuf::as_path).collect();
    let dest = match (&args.output, &args.output_dir) {
        (Some(out), _) => Destination::File(out.clone()),
        (None, Some(dir)) => Destination::Dir {
            dir: dir.clone(),
            name,
        },
        (None, None) => return Err(CliError::input("give --output or --output-dir")),
    };
    let written = write_policies(&merged, &dest, &inputs).map_err(output_error)?;
    let estimated = loaded.iter().any(|l| l.origin.estimated);
    if args.json {
        let rules: Vec<serde_json::Value> = merged
            .outcomes
            .iter()
            .map(|o| {
                serde_json::json!({
                    "component": o.key.component,
                    "key": fp8_merge::rule_key(&o.key),
                    "min_tokens": o.rule.map(|r| r.0),
                    "measured_speedup": o.rule.map(|r| r.1),
                    "measured_counts": o.counts,
                })
            })
            .collect();
        let out = serde_json::json!({
            "written": written, "estimated": estimated, "rules": rules, "warnings": merged.warnings,
        });
        println!("{out:#}");
        return Ok(());
    }
    print_summary(&merged);
    if estimated {
        eprintln!(
            "warning: these policies come from COST-MODEL ESTIMATES, not measurements; re-run fp8sel bench on the GPU before training with them"
        );
    }
    for w in written {
        println!("wrote {}", w.display());
    }
    Ok(())
}

/// With one recipe's step model, a numerics report of another recipe bounds nothing: refused.
fn refuse_other_recipes(
    bounds: &[fp8_merge::numerics::NumericsBound],
    recipe: Option<fp8_policy::Recipe>,
) -> CliResult {
    if bounds.len() > 1 {
        return Err(CliError::input(
            "--numerics: several reports are for a choice among recipes (--step-model inputs of several recipes); one recipe's step model takes one",
        ));
    }
    match (bounds.first().and_then(|b| b.report.recipe), recipe) {
        (Some(r), Some(want)) if r != want => Err(CliError::input(format!(
            "{}: a numerics report of {r}, and the step model's inputs measured {want}; fix: probe {want} (python -m adaptive_fp8.bench.numerics --recipe {want})",
            bounds[0].report.file.display()
        ))),
        _ => Ok(()),
    }
}

/// `--step-model`: the policy of the step model, fitted again from saved measurements.
fn run_step_model(args: &Args) -> CliResult {
    use fp8_pipeline::step::saved::{layout_models, saved_policy};
    let out = args
        .output
        .as_deref()
        .ok_or_else(|| CliError::input("--step-model needs --output"))?;
    // One recipe: its numerics report bounds the step model's keys before the checks are read
    // (as gen-policy bounds before it checks, and --numerics bounds a per-module merge);
    // several: one report per recipe, for the choice among them.
    let bounds = args.objective.numerics_bounds()?;
    let mut layouts =
        layout_models(&args.step_model, &args.step_check, None, &[]).map_err(CliError::input)?;
    let several = layouts.iter().any(|l| l.0 != layouts[0].0);
    if !several && !bounds.is_empty() {
        refuse_other_recipes(&bounds, layouts.first().map(|l| l.0))?;
        layouts = layout_models(&args.step_model, &args.step_check, None, &bounds)
            .map_err(CliError::input)?;
    }
    let policy =
        saved_policy(&layouts, if several { &bounds } else { &[] }).map_err(CliError::input)?;
    let layouts: Vec<fp8_merge::model::LayoutModel> = layouts.into_iter().map(|l| l.1).collect();
    let inputs: Vec<&Path> = args
        .step_model
        .iter()
        .chain(&args.step_check)
        .map(PathBuf::as_path)
        .collect();
    fp8_io::refuse_same_file(out, inputs).map_err(CliError::input)?;
    fp8_io::create_parent_dir(out)?;
    policy.write(out)?;
    for l in &layouts {
        let held = l.held_out_errors();
        let worst = held.iter().copied().fold(0.0, f64::max);
        eprintln!(
            "{}: {} checked step(s), {} held out of the calibration, worst |error| {:.1}%, {} disagreement(s)",
            l.file.display(),
            l.check.len(),
            held.len(),
            100.0 * worst,
            l.check.iter().filter(|r| r.disagrees).count()
        );
    }
    println!(
        "wrote {} from the step model: {} rule(s), {} key(s) BF16 in every execution",
        out.display(),
        policy.rule_count(),
        policy.measured_bf16_keys().len()
    );
    if let Some(plan) = policy.recipe_plan() {
        let names: Vec<&str> = plan.recipes().iter().map(|r| r.name()).collect();
        println!(
            "per-module recipes: {} key(s) planned over {} (rules: {}, the base, for the reference's loader; bound {})",
            plan.keys.len(),
            names.join(", "),
            plan.base,
            plan.max_quant_error
                .map_or("none".to_owned(), |e| e.to_string())
        );
    }
    Ok(())
}

/// `--step`: the policy from the step benchmark's oracle verdicts.
fn run_step(args: &Args) -> CliResult {
    let mut runs = Vec::new();
    for f in &args.step {
        let text = fp8_io::read_to_string_limited(f, fp8_merge::step::MAX_STEP_BYTES)?;
        runs.extend(fp8_merge::step::parse_results(&text, f).map_err(merge_error)?);
    }
    let policy = fp8_merge::step::step_policy(&runs).map_err(merge_error)?;
    let out = args
        .output
        .as_deref()
        .ok_or_else(|| CliError::input("--step needs --output"))?;
    let inputs: Vec<&Path> = args.step.iter().map(PathBuf::as_path).collect();
    fp8_io::refuse_same_file(out, inputs).map_err(CliError::input)?;
    fp8_io::create_parent_dir(out)?;
    policy.write(out)?;
    let executions: Vec<&str> = runs.iter().map(|r| r.execution.name()).collect();
    if args.json {
        let v = serde_json::json!({"written": [out], "executions": executions,
            "rules": serde_json::from_str::<serde_json::Value>(&policy.to_json()).ok().and_then(|p| p.get("rules").cloned())});
        println!("{v:#}");
    } else {
        println!(
            "wrote {} from the step ({}): {} rule(s), {} key(s) BF16 at every swept count",
            out.display(),
            executions.join(", "),
            policy.rule_count(),
            policy.measured_bf16_keys().len()
        );
    }
    Ok(())
}
