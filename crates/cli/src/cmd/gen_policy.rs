//! `fp8sel gen-policy`: the whole job for your own model, in one command.

use std::path::PathBuf;

use fp8_bench::cuda::{DEFAULT_ITERS, DEFAULT_WARMUP, MeasureOptions};
use fp8_pipeline::generate::{GenOptions, GenOutcome, TermProgress, gen_policy};

use crate::error::{CliError, CliResult};

/// Make policies for your own model(s): measure each layout, write policies, plots, a summary.
///
/// On a GPU where this package and Transformer Engine are installed, the default (--backend auto) is
/// the step model (--backend step) for a language model: per layout, each module group's host
/// and GPU time alone, BF16 vs FP8, at --tokens; a few real training steps in all-BF16 and
/// all-FP8 that calibrate the model; the plan it predicts fastest at each count; that plan
/// checked in whole steps (a count where step and model disagree is timed again), whose
/// all-BF16 and all-FP8 steps then refit the model (a plan that moves is timed again) (results
/// under <reports-dir>/step/; docs/POLICY.md has the formula).
/// A VLM gets the step model twice: its language model (<model>.llm.json), then its vision
/// encoder from steps of its own layers (<model>.vit.json, in the TE blocks), one folder, one
/// summary.
///
/// Otherwise, for each model config (Megatron/LoongForge YAML, Megatron-LM launch script or HF
/// config.json) and each requested layout (every TP x EP x ETP that divides the model), every
/// TE module is measured at per-rank shapes on this GPU, BF16 vs FP8, forward + backward. Each
/// distinct per-rank shape is measured once and reused by the layouts that share it (the experts
/// of TP 1, 2, 4 under one EP/ETP); reports say which points were reused. Without a GPU (or with
/// --backend model) the cost model ESTIMATES instead, and the outputs go to
/// <policies-dir>/estimated/<profile>/ so an estimate never overwrites a measured policy.
///
/// Every rule gets both thresholds: min_tokens_graphed (CUDA-graphed steps) from the GPU times,
/// min_tokens (eager steps, Megatron's default) from eager times: the TE backend's own, else the
/// GPU times raised to a host profile: --host-profile FILE; else, on a GPU where this package
/// and Transformer Engine import, this machine's, measured first by the host probe (about 15 s,
/// written beside the reports; --no-host-probe skips it); else the shipped profile of the same
/// GPU (H200), or of the cost model's --device-profile. With none (another GPU without TE) the
/// eager thresholds are GPU time alone: provenance says so (eager_source: gpu_time) and every
/// command that reads the policy for eager steps warns.
///
/// Writes: <reports-dir>/<gpu>/<model>_tp<T>[_ep<E>].json (the reports),
/// <policies-dir>/<model>.json (or <model>.llm.json and <model>.vit.json for a VLM),
/// <policies-dir>/<model>.md (rules, warnings, the step time of the module set) and
/// <policies-dir>/plots/*.svg (speedup against tokens per module, threshold and min_tokens).
/// A recipe other than blockwise gets its own folders (<policies-dir>/<recipe>/,
/// <reports-dir>/<gpu>/<recipe>/): policies of different recipes never overwrite each other.
///
/// Examples:
///   fp8sel gen-policy --model my_model.yaml --tp 1,2,4 --ep 8
///   fp8sel gen-policy --model config.json --tensor-model-parallel-size 8 --backend model
///   fp8sel gen-policy --model my_model.yaml --tp 8 --backend te --trainer eager
///   fp8sel gen-policy --model my_model.yaml --tp 1,2,4,8 --recipe tensorwise
///   fp8sel gen-policy --model my_model.yaml --tp 8 --tokens 1024,4096,16384   (on a GPU with TE)
///   fp8sel gen-policy --model my_model.yaml --tp 8 --backend cuda           (GEMMs + host profile)
#[derive(Debug, clap::Args)]
#[command(verbatim_doc_comment)]
pub struct Args {
    /// Model configs (repeat for several): a Megatron/LoongForge/NeMo YAML, a Megatron-LM or
    /// LoongForge launch script (`.sh`), or a HuggingFace config.json or its checkout's directory.
    /// Its policy is `<name>.json`: the file's name, else (a `config.json`, or a script named for
    /// how it runs, as `train.sh`) its folder's. [`cargo xtask gen-policy`: the repository's models]
    #[arg(long = "model", value_name = "CONFIG")]
    pub models: Vec<PathBuf>,
    /// Hydra's search path, tried after each config's own directory [default: the nearest
    /// ancestor named `configs`, else the checkout's root, else the config's directory].
    #[arg(long, value_name = "DIR")]
    pub config_root: Option<PathBuf>,
    /// Only this part of a VLM: llm (its language model, <model>.llm.json) or vit (its vision
    /// encoder, <model>.vit.json), e.g. to make one part again [default: both].
    #[arg(long)]
    pub component: Option<fp8_engine::Role>,
    /// TP sizes [default: the config's tensor_model_parallel_size (a launch script's
    /// --tensor-model-parallel-size, the layout it trains) first, then the others of 1,2,4,8
    /// that divide the model].
    #[arg(
        long,
        alias = "tensor-model-parallel-size",
        value_delimiter = ',',
        value_name = "LIST",
        value_parser = clap::value_parser!(u32).range(1..)
    )]
    pub tp: Option<Vec<u32>>,
    /// EP sizes [default: the config's for MoE models (else 1, as Megatron), 1 for dense models].
    #[arg(
        long,
        alias = "expert-model-parallel-size",
        value_delimiter = ',',
        value_name = "LIST",
        value_parser = clap::value_parser!(u32).range(1..)
    )]
    pub ep: Option<Vec<u32>>,
    /// ETP sizes [default: the config's expert_tensor_parallel_size, else each TP, as Megatron].
    #[arg(
        long,
        alias = "expert-tensor-parallel-size",
        value_delimiter = ',',
        value_name = "LIST",
        value_parser = clap::value_parser!(u32).range(1..)
    )]
    pub etp: Option<Vec<u32>>,
    /// Speedup FP8 must reach.
    #[arg(long, alias = "threshold", default_value_t = 1.0)]
    pub speedup_threshold: f64,
    /// Noise margin added to the threshold.
    #[arg(long, default_value_t = 0.02)]
    pub margin: f64,
    /// The trainer the policies are for (graphed: GPU time; eager: the eager step, which needs
    /// TE-backend reports or --host-profile) [default: both in one file, min_tokens eager and
    /// min_tokens_graphed graphed, where the backend gives an eager objective (te, or
    /// --host-profile); else GPU time].
    #[arg(long, value_parser = ["graphed", "eager"])]
    pub trainer: Option<String>,
    /// The merge objective (--shared-key, --host-profile, --numerics).
    #[command(flatten)]
    pub objective: super::objective_args::ObjectiveArgs,
    /// auto: the GPU when one opens, else the cost model; cuda; model; te: Transformer Engine
    /// itself through `python -m adaptive_fp8.bench.te_worker` (reports to <reports-dir>/<gpu>/te/; the
    /// policy holds both executions: TE's eager step times as min_tokens, its GPU times as
    /// min_tokens_graphed, unless --trainer picks one; cuda does the same with --host-profile);
    /// step: the training step itself (--step-tuner model: each module group's host and GPU time
    /// alone, calibrated on a few real steps in all-BF16 and all-FP8 and checked in whole steps,
    /// through `python -m adaptive_fp8.bench.step_inputs`; eager sets min_tokens, graphed
    /// min_tokens_graphed; results under <reports-dir>/step/). auto picks step on a GPU where
    /// this package and Transformer Engine are installed (a VLM: step for its language model and
    /// its vision encoder; a model with Gated DeltaNet or gated attention, which the step does not
    /// build: per-module timing, said).
    #[arg(long, default_value = "auto", value_parser = ["auto", "cuda", "model", "te", "step"])]
    pub backend: String,
    /// --backend step: model (the step model, checked in the step) or oracle (step_bench's
    /// greedy per-group search by trying: slow and noisy at short steps, kept as a judge).
    #[arg(long, default_value = "model", value_parser = ["model", "oracle"])]
    pub step_tuner: String,
    /// --backend step: token counts to sweep (sequence length at micro-batch 1).
    #[arg(
        long,
        value_delimiter = ',',
        value_name = "LIST",
        default_value = "1024,2048,4096,8192,16384",
        value_parser = clap::value_parser!(u64).range(1..)
    )]
    pub tokens: Vec<u64>,
    /// --backend step: executions to sweep (eager, graphed).
    #[arg(
        long,
        value_delimiter = ',',
        value_name = "LIST",
        default_value = "eager,graphed"
    )]
    pub execution: Vec<fp8_policy::Execution>,
    /// --backend step: micro-batches per optimizer step.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub grad_accum: u32,
    /// --backend step: te (the toolkit's TE blocks, fast) or megatron (upstream GPTModel: with
    /// the step model, its policy judged there at the check's counts after the TE-block check,
    /// a key FP8 where the judge measured it slower than BF16 moved above that count; with the
    /// oracle, each candidate a model build; graphed in Megatron's own CUDA graphs; a layout at
    /// TP > 1 runs under torchrun, one process and one GPU per rank).
    #[arg(long, default_value = "te", value_parser = ["te", "megatron"])]
    pub step_trainer: String,
    /// --backend step: keep Python's garbage collector off while steps are timed, as
    /// Megatron-LM's --manual-gc does; give it where your trainer runs with --manual-gc. Without
    /// it the collector runs as in a default trainer, and the reports note full collections that
    /// ran inside timed rounds (on the H200 none did, and the spread was the same either way:
    /// docs/PERFORMANCE.md).
    #[arg(long)]
    pub manual_gc: bool,
    /// --backend step, a VLM's vision encoder: tokens of one image. The encoder attends within
    /// each image, so its attention grows with the image, not with the step's image tokens; give
    /// your data's typical image in patches (the default: 512 x 512 at patch 16).
    #[arg(long, value_name = "N", default_value_t = fp8_pipeline::step::IMAGE_TOKENS, value_parser = clap::value_parser!(u32).range(1..))]
    pub image_tokens: u32,
    /// --backend step --step-tuner oracle: rounds of refinement. Each times, per execution, the geometric midpoint
    /// (on the 16-token grid) of the two counts a key's threshold falls between, so a threshold
    /// can land between the counts of a coarse sweep; about one count per round and execution.
    /// 0: the sweep alone.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(0..=4))]
    pub refine: u32,
    /// --backend step: transformer layers per step. The step model is fitted on steps this
    /// deep, and a fixed host part weighs less in a deeper one; in upstream GPTModel on an H200,
    /// Llama-3.2-1B's plan fitted on 2 layers stayed at or ahead of all-FP8 at 4 and 8 layers
    /// (docs/RESULTS.md, "Depth"); more layers cost more time per step.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..))]
    pub layers: u32,
    /// --backend step: of --layers, how many have a dense MLP, for an MoE model with dense
    /// layers (DeepSeek-V3). [default: 1 where the model has both kinds and --layers >= 2, so
    /// the step measures the dense keys too]
    #[arg(long, value_name = "N")]
    pub dense_layers: Option<u32>,
    /// --backend step: the check also times the smallest calibrated count again (all-BF16 and
    /// all-FP8, each execution): how far the same step moved between the inputs and the check
    /// where steps are most host-bound, the floor under the model's error (`repeats` in the
    /// policy's provenance and <model>.md). About 10% more time (the 64-expert MoE: 11 s).
    #[arg(long)]
    pub check_anchor: bool,
    /// --backend step: a layout whose inputs an earlier run of this command left in the reports
    /// folder (stopped by --time-limit or cut while checking) reuses them and runs its check,
    /// instead of measuring them again; refused where they were measured otherwise (another
    /// sweep, layout, recipe or GPU). A layout without them is measured.
    #[arg(long)]
    pub resume: bool,
    /// --backend step: the run's wall-clock bound in seconds. At it the worker is stopped and
    /// the policy is written from the counts it finished (each saved as it ends); refinements
    /// and layouts not begun are skipped, with a note. [default: none]
    #[arg(long, value_name = "SECONDS", value_parser = clap::value_parser!(u64).range(1..))]
    pub time_limit: Option<u64>,
    /// The TE worker's interpreter and settings.
    #[command(flatten)]
    pub te: super::te_args::TeArgs,
    /// The FP8 recipe and its options.
    #[command(flatten)]
    pub recipe: super::recipe_args::RecipeArgs,
    /// Choose each module's recipe among these (blockwise, tensorwise, mxfp8, nvfp4). With the step
    /// model (a GPU where adaptive_fp8 and Transformer Engine are installed) each recipe is measured
    /// and checked in the step and probed for each module's quantization error (`python -m
    /// adaptive_fp8.bench.numerics`, unless --numerics gives its report), and a module runs the
    /// recipe the model predicts fastest within --max-quant-error. With a per-module backend
    /// (cuda, te, or model: the cost model's estimates, e.g. mxfp8 with --device-profile b200)
    /// each recipe's modules are timed alone, the fastest per module wins, and --numerics must
    /// give every recipe's report. The first is the base: the policy's rules are its (what the
    /// reference's loader reads), the plan (`recipes`) gives each module its own. Megatron
    /// applies it with `fp8sel te-precision-config`.
    #[arg(long, value_delimiter = ',', value_name = "LIST")]
    pub recipes: Vec<fp8_policy::Recipe>,
    /// Cost-model profile: h200 (calibrated on measured H200 reports), h100, b200.
    #[arg(long, default_value = "h200")]
    pub device_profile: String,
    /// Where policies, summaries and plots go.
    #[arg(long, default_value = "policies", value_name = "DIR")]
    pub policies_dir: PathBuf,
    /// Where measured reports go (one folder per GPU), and the earlier ones a model's policy is
    /// folded with [default: reports; with --out, <out>/reports].
    #[arg(long, value_name = "DIR")]
    pub reports_dir: Option<PathBuf>,
    /// Write everything here instead of --policies-dir (and its estimated/ folder).
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Timed steps per point.
    #[arg(long, default_value_t = DEFAULT_ITERS, value_parser = clap::value_parser!(u32).range(1..))]
    pub iters: u32,
    /// Untimed steps per point.
    #[arg(long, default_value_t = DEFAULT_WARMUP)]
    pub warmup: u32,
    /// On a GPU, use the shipped host profile of this GPU (if any) instead of measuring this
    /// machine's for the eager thresholds.
    #[arg(long)]
    pub no_host_probe: bool,
    /// Errors and the final summary line only.
    #[arg(long)]
    pub quiet: bool,
    /// Print one JSON object instead: {"estimated", "out", "reports", "files"}.
    #[arg(long)]
    pub json: bool,
}

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
    let trained =
        super::recipe_args::configs_recipe(told, &args.models, args.config_root.as_deref())?;
    let recipe = super::recipe_args::base_recipe(&args.recipe, &args.recipes, trained)?;
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
    let whose = if trained.is_some() {
        " (the one the config trains with: its fp8_recipe)"
    } else {
        ""
    };
    progress.say(&format!(
        "gen-policy: {} model(s), backend {}, recipe {recipe}{whose}; reading configs and planning the sweeps...",
        args.models.len(),
        args.backend
    ));
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
