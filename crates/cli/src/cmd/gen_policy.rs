//! `fp8sel gen-policy`: the whole job for your own model, in one command.

use fp8_bench::cuda::{DEFAULT_ITERS, DEFAULT_WARMUP, MeasureOptions};
use fp8_pipeline::generate::{GenOptions, GenOutcome, TermProgress, gen_policy};

use crate::error::{CliError, CliResult};

pub use super::gen_policy_args::Args;

/// Runs the command.
pub fn run(args: &Args) -> CliResult {
    let progress = TermProgress::new(args.quiet || args.json);
    let done = job(args, &progress)?;
    super::gen_policy_output::report(args.quiet, args.json, &done);
    Ok(())
}

/// The job these flags ask for, its progress to `progress`; what it wrote comes back.
pub fn job(args: &Args, progress: &TermProgress) -> CliResult<GenOutcome> {
    if args.models.is_empty() {
        return Err(CliError::input(
            "no model: give --model CONFIG (a Megatron/LoongForge YAML or a HuggingFace config.json)",
        ));
    }
    super::gen_policy_output::folders(&[
        ("--out", &args.out),
        ("--reports-dir", &args.reports_dir),
    ])?;
    args.objective
        .check_bound_has_reports(!args.recipes.is_empty())?;
    let told = args.recipe.recipe.is_some() || !args.recipes.is_empty();
    let (trained, given) =
        super::recipe_args::configs_fp8(told, &args.models, args.config_root.as_deref())?;
    let (recipe, recipe_notes) = super::recipe_args::base_recipe(
        &args.recipe,
        &args.recipes,
        trained.map(|t| t.recipe),
        &given,
    )?;
    numerics_of_this_recipe(args, recipe.recipe())?;
    if let Some(c) = args.component {
        super::model_args::each_a_vlm(
            &args.models,
            args.config_root.as_deref(),
            &format!("--component {c}"),
        )?;
    }
    if args.image_tokens != fp8_pipeline::step::IMAGE_TOKENS {
        super::model_args::some_vlm(
            &args.models,
            args.config_root.as_deref(),
            &format!("--image-tokens {}", args.image_tokens),
        )?;
    }
    let whose = match trained {
        Some(t) if t.by_default => {
            " (the one the config trains with: FP8 on without fp8_recipe, Megatron's default)"
        }
        Some(_) => " (the one the config trains with: its fp8_recipe)",
        None => "",
    };
    progress.say(&format!(
        "gen-policy: {} model(s), backend {}, recipe {recipe}{whose}; reading configs and planning the sweeps...",
        args.models.len(),
        args.backend
    ));
    for n in &recipe_notes {
        progress.say(&format!("note: {n}"));
    }
    let mut o = GenOptions {
        models: args.models.clone(),
        config_root: args.config_root.clone(),
        tp: args.tp.as_deref().map(once_each),
        ep: args.ep.as_deref().map(once_each),
        etp: args.etp.as_deref().map(once_each),
        merge: merge_objective(args).merge_options(
            args.speedup_threshold,
            args.margin,
            args.trainer.as_deref(),
        )?,
        backend: args.backend.clone(),
        python: args.te.python.clone(),
        recompute: args.te.recompute,
        device_profile: args.device_profile.clone(),
        probe_host: !args.no_host_probe,
        measure: MeasureOptions {
            warmup: args.warmup,
            iters: args.iters,
            recipe,
            ..MeasureOptions::default()
        },
        policies_dir: args.policies_dir.clone(),
        reports_base: super::gen_policy_output::reports_base(&args.reports_dir, &args.out),
        out: args.out.clone(),
        recipes: None,
        component: args.component,
    };
    let backend = resolve_backend(args, progress)?;
    if args.resume && args.step_tuner != "model" {
        return Err(CliError::input(
            "--resume reuses the step model's inputs, and the oracle measures none; fix: leave \
             out --resume or --step-tuner oracle",
        ));
    }
    if !args.recipes.is_empty() && backend == "step" && args.step_tuner != "model" {
        return Err(CliError::input(
            "--recipes chooses each module's recipe with the step model, not the oracle; fix: \
             leave out --step-tuner oracle, or measure one recipe with --recipe",
        ));
    }
    let step_only = step_flags(args);
    if backend != "step" && !step_only.is_empty() && args.backend != "auto" {
        return Err(CliError::input(format!(
            "{}: the step model's settings, and --backend {backend} measures per module; fix: leave them out, or use --backend step",
            step_only.join(", ")
        )));
    }
    if backend != "step" {
        // The per-module backends choose from per-module speedups (fp8_pipeline::module_mix).
        o.recipes = recipe_mix(args)?;
    }
    let done = if backend == "step" {
        step_job(args, &o, recipe.recipe(), progress)?
    } else {
        let mut done =
            gen_policy(&o, progress).map_err(|e| super::recipe_args::whence(e, trained))?;
        if !step_only.is_empty() {
            done.notes.push(format!(
                "{}: the step model's settings, not read: --backend auto measured per module here (the step model needs a GPU where adaptive_fp8 and Transformer Engine are installed)",
                step_only.join(", ")
            ));
        }
        done
    };
    progress.finish();
    Ok(done)
}

/// `--backend step`: the step model (or its oracle) over every layout, then a VLM's vision
/// encoder with what the time limit left.
fn step_job(
    args: &Args,
    o: &GenOptions,
    recipe: fp8_policy::Recipe,
    progress: &TermProgress,
) -> CliResult<GenOutcome> {
    blackwell_recipes_on_this_gpu(recipe, &args.recipes)?;
    let tuner = match args.step_tuner.as_str() {
        "oracle" => fp8_pipeline::step::StepTuner::Oracle,
        _ => fp8_pipeline::step::StepTuner::Model,
    };
    if let Some(d) = args.dense_layers.filter(|d| *d > args.layers) {
        return Err(CliError::input(format!(
            "--dense-layers {d} is more than --layers {}; fix: at most --layers",
            args.layers
        )));
    }
    let job = fp8_pipeline::step::StepJob {
        tuner,
        tokens: args.tokens.clone(),
        executions: args.execution.clone(),
        grad_accum: args.grad_accum,
        trainer: args.step_trainer.clone(),
        layers: args.layers,
        dense_layers: args.dense_layers,
        refine: args.refine,
        time_limit: args.time_limit.map(std::time::Duration::from_secs),
        mix: recipe_mix(args)?,
        manual_gc: args.manual_gc,
        image_tokens: args.image_tokens,
        anchor: args.check_anchor,
        resume: args.resume,
    };
    let started = std::time::Instant::now();
    let say = |line: &str| progress.say(line);
    let mut done = fp8_pipeline::step::gen_policy_step(o, &job, &say).map_err(CliError::input)?;
    if args.component.is_none() {
        fp8_pipeline::step::add_vision(o, &job, started, &mut done, &say)
            .map_err(CliError::input)?;
    }
    let unused = per_module_flags(args);
    if !unused.is_empty() {
        done.notes.push(format!(
            "{}: per-module settings; the step model's choice does not read them, it keeps a key FP8 only where its gain beats its measured noise (docs/POLICY.md, \"The choice\")",
            unused.join(", ")
        ));
    }
    Ok(done)
}

/// The step model's flags given away from their defaults: a per-module run reads none of them.
fn step_flags(args: &Args) -> Vec<String> {
    use fp8_policy::Execution::{Eager, Graphed};
    [
        (args.step_tuner != "model", "--step-tuner"),
        (args.tokens != [1024, 2048, 4096, 8192, 16384], "--tokens"),
        (args.execution != [Eager, Graphed], "--execution"),
        (args.grad_accum != 1, "--grad-accum"),
        (args.step_trainer != "te", "--step-trainer"),
        (args.refine != 1, "--refine"),
        (args.layers != 2, "--layers"),
        (args.dense_layers.is_some(), "--dense-layers"),
        (args.time_limit.is_some(), "--time-limit"),
        (args.manual_gc, "--manual-gc"),
        (args.check_anchor, "--check-anchor"),
        (args.resume, "--resume"),
        (
            args.image_tokens != fp8_pipeline::step::IMAGE_TOKENS,
            "--image-tokens",
        ),
    ]
    .into_iter()
    .filter(|(given, _)| *given)
    .map(|(_, flag)| flag.to_owned())
    .collect()
}

/// Before anything is measured: with one recipe, a numerics report of another bounds nothing
/// of this one, so it is refused.
fn numerics_of_this_recipe(args: &Args, measured: fp8_policy::Recipe) -> CliResult<()> {
    if !args.recipes.is_empty() {
        return Ok(());
    }
    for b in args.objective.numerics_bounds()? {
        if let Some(r) = b.report.recipe.filter(|r| *r != measured) {
            return Err(CliError::input(format!(
                "--numerics {}: a report of {r}, and this run measures {measured}; fix: pass the report of {measured} (python -m adaptive_fp8.bench.numerics --recipe {measured}), or --recipe {r}",
                b.report.file.display()
            )));
        }
    }
    Ok(())
}

/// The per-module flags given away from their defaults: a step-model run does not read them, so
/// they are said, not silently dropped.
fn per_module_flags(args: &Args) -> Vec<String> {
    let o = &args.objective;
    [
        (args.speedup_threshold != 1.0, "--speedup-threshold"),
        (args.margin != 0.02, "--margin"),
        (args.trainer.is_some(), "--trainer"),
        (o.shared_key != "step", "--shared-key"),
        (o.host_profile.is_some(), "--host-profile"),
        (args.iters != DEFAULT_ITERS, "--iters"),
        (args.warmup != DEFAULT_WARMUP, "--warmup"),
        (args.te.recompute, "--recompute"),
    ]
    .into_iter()
    .filter(|(given, _)| *given)
    .map(|(_, flag)| flag.to_owned())
    .collect()
}

/// The step runs on this machine's GPU: a Blackwell recipe (mxfp8, nvfp4) is refused on an
/// older one before any worker starts.
fn blackwell_recipes_on_this_gpu(
    base: fp8_policy::Recipe,
    others: &[fp8_policy::Recipe],
) -> CliResult<()> {
    let Some(r) = std::iter::once(&base)
        .chain(others)
        .find(|r| r.blackwell_only())
    else {
        return Ok(());
    };
    let gpu = fp8_bench::cuda::Gpu::open(0).map_err(|e| CliError::input(e.to_string()))?;
    fp8_bench::recipe::check_device(*r, &gpu.info).map_err(CliError::input)
}

/// A list flag's sizes, each once, in the order given (`--tp 1,1` is one layout).
fn once_each(v: &[u32]) -> Vec<u32> {
    let mut out = Vec::new();
    for &x in v {
        if !out.contains(&x) {
            out.push(x);
        }
    }
    out
}

/// The objective of the merge: with --recipes its --numerics reports are the choice's, one per
/// recipe, not a bound on one recipe's merge.
fn merge_objective(args: &Args) -> super::objective_args::ObjectiveArgs {
    let mut o = args.objective.clone();
    if !args.recipes.is_empty() {
        o.numerics.clear();
        o.max_quant_error = None;
    }
    o
}

/// With --recipes: the recipes beside the base, the given reports and the bound.
fn recipe_mix(args: &Args) -> CliResult<Option<fp8_pipeline::step::RecipeMix>> {
    if args.recipes.is_empty() {
        return Ok(None);
    }
    Ok(Some(fp8_pipeline::step::RecipeMix {
        recipes: args.recipes[1..].to_vec(),
        numerics: args.objective.numerics_bounds()?,
        max_quant_error: args
            .objective
            .max_quant_error
            .unwrap_or(fp8_merge::numerics::DEFAULT_MAX_QUANT_ERROR),
    }))
}

/// The backend the flags name; `auto` is the step on a GPU where this package and Transformer
/// Engine are installed (found, not imported: the worker's start imports them, and fails loudly
/// where they do not import; a VLM's vision encoder by the step model after its language model,
/// `fp8_pipeline::step::add_vision`), else the per-module `auto`.
fn resolve_backend(args: &Args, progress: &TermProgress) -> CliResult<String> {
    match args.backend.as_str() {
        "step" => {
            if let Some((m, why)) = step_cannot_build(args) {
                return Err(CliError::input(format!(
                    "{m}: its language model has {why}, which the step model's layers (attention \
                     or MLA, a dense or MoE MLP) do not build; fix: --backend cuda or te \
                     (per-module timing)"
                )));
            }
            return Ok("step".to_owned());
        }
        "auto" => {}
        other => return Ok(other.to_owned()),
    }
    let gpu = fp8_bench::cuda::device_count().is_ok_and(|n| n > 0);
    if !gpu || !fp8_pipeline::host::te_installed(&args.te.python) {
        return Ok("auto".to_owned());
    }
    if let Some((m, why)) = step_cannot_build(args) {
        progress.say(&format!(
            "backend auto: a GPU with Transformer Engine, but {m} has {why}, which the step model does not build: per-module timing"
        ));
        return Ok("auto".to_owned());
    }
    let vlm = args.models.iter().any(|m| {
        super::model_args::load_config(m, args.config_root.as_deref())
            .is_ok_and(|d| d.components.len() > 1)
    });
    if vlm {
        progress.say(
            "backend auto: a GPU with Transformer Engine and a VLM: the step model for the language model, then for the vision encoder (--backend cuda: per-module GEMM timing for both)",
        );
        return Ok("step".to_owned());
    }
    progress.say("backend auto: a GPU with Transformer Engine: the step model (--backend cuda for per-module GEMM timing)");
    Ok("step".to_owned())
}

/// The first model the step's workers cannot build, and why (`fp8_pipeline::step::step_cannot_build`);
/// a config that does not load is the job's to report.
fn step_cannot_build(args: &Args) -> Option<(String, &'static str)> {
    args.models.iter().find_map(|m| {
        let d = super::model_args::load_config(m, args.config_root.as_deref()).ok()?;
        fp8_pipeline::step::step_cannot_build(&d).map(|why| (m.display().to_string(), why))
    })
}
