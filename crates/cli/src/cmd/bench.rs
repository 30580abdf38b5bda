//! `fp8sel bench`: the BF16 vs FP8 sweep of every module of a model, into a report.

use std::path::{Path, PathBuf};

use fp8_bench::backend::{BackendError, BackendKind, BackendSpec, Chosen};
use fp8_bench::cuda::MeasureOptions;
use fp8_bench::driver;
use fp8_bench::job::SweepJob;
use fp8_bench::runner::Backend;
use fp8_bench::shard::{RankEnv, rank_report_path};
use fp8_bench::sweep::{BenchPoint, SplitMode, parse_shape_sweep};
use fp8_engine::Role;
use fp8_pipeline::layout::{LayoutError, LayoutJob, bench_layout, layout_points};

use super::bench_output::{Bar, print_json, print_summary, write_report};
use crate::error::{CliError, CliResult};

/// Measure BF16 vs FP8 for every TE module of a model, forward + backward, in the trainer's recipe.
///
/// Each module is measured at its per-rank shapes under --tp/--ep/--etp on this one GPU (TP/EP
/// communication is not timed; see docs/BENCHMARK.md), at token counts from 256 up to
/// --max-tokens (powers of two) plus the configured run. Every kernel and GEMM is checked
/// against a host reference on the point's data before it is timed.
///
/// The seed's environment variables work too, so scripts written for the reference tool can call
/// this instead: TE_LAYER_PERF_OMNI_CONFIG_PATH, _TP_SIZE, _EP_SIZE, _ETP_SIZE, _PRECISIONS,
/// _FP8_RECIPE, _WARMUP, _ITERS, _REPORT_PATH, _SHAPE_SWEEP, _FP8_POLICY_PATH,
/// _SPEEDUP_THRESHOLD.
///
/// Examples:
///   fp8sel bench --model fixtures/models/qwen2_5_72b.yaml --tp 4 --report out/report_tp4.json
///   fp8sel bench --model fixtures/models/qwen2_5_72b.yaml --tp 4 --recipe delayed \
///       --fp8-format hybrid --amax-history-len 1024 --report out/report_tp4_delayed.json
///   TE_LAYER_PERF_OMNI_CONFIG_PATH=fixtures/models/deepseek_v3.yaml TE_LAYER_PERF_TP_SIZE=1 \
///     TE_LAYER_PERF_EP_SIZE=8 TE_LAYER_PERF_REPORT_PATH=out/ds_ep8.json fp8sel bench
#[derive(Debug, clap::Args)]
#[command(verbatim_doc_comment)]
pub struct Args {
    /// Model config (Megatron YAML, or HF config.json or its checkout's directory).
    #[arg(long, env = "TE_LAYER_PERF_OMNI_CONFIG_PATH", value_name = "CONFIG")]
    pub model: PathBuf,
    /// Directory that Hydra `defaults` entries may reach [default: the config's directory].
    #[arg(long, value_name = "DIR")]
    pub config_root: Option<PathBuf>,
    /// Only this component of a VLM (llm or vit) [default: all].
    #[arg(long)]
    pub component: Option<Role>,
    // --tp, --ep, --etp; sweep_job falls back to the reference tool's TE_LAYER_PERF_*_SIZE.
    /// The layout (--tp/--ep/--etp).
    #[command(flatten)]
    pub layout: super::layout_args::LayoutArgs,
    /// Precisions to measure.
    #[arg(
        long,
        env = "TE_LAYER_PERF_PRECISIONS",
        default_value = "bf16,fp8",
        value_name = "LIST"
    )]
    pub precisions: String,
    /// The FP8 recipe and its options.
    #[command(flatten)]
    pub recipe: super::recipe_args::RecipeArgs,
    /// Token counts as seq x mbs, e.g. `1024x1,4096x2` [default: powers of two from 256 to
    /// --max-tokens, plus the configured run].
    #[arg(long, env = "TE_LAYER_PERF_SHAPE_SWEEP", value_name = "S")]
    pub shape_sweep: Option<String>,
    /// Largest dense token count of the default sweep.
    #[arg(long, default_value_t = 32768, value_name = "T", value_parser = clap::value_parser!(u64).range(256..=(1u64 << 32)))]
    pub max_tokens: u64,
    /// Points per doubling of the token count in the default sweep: 1 is powers of two; 2 adds
    /// the points in between (x1.41). See docs/BENCHMARK.md before raising it: more points also
    /// mean more chances for one noisy point to push a rule up.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=8))]
    pub points_per_doubling: u32,
    /// Sequence length of the configured run (added to the sweep) [default: the config's].
    #[arg(long, value_name = "S", value_parser = clap::value_parser!(u64).range(1..=(1u64 << 32)))]
    pub seq_length: Option<u64>,
    /// Micro-batch size of the configured run [default: the config's, else 1].
    #[arg(long, value_name = "B", value_parser = clap::value_parser!(u64).range(1..=4096))]
    pub micro_batch_size: Option<u64>,
    /// Untimed steps per point.
    #[arg(long, env = "TE_LAYER_PERF_WARMUP", default_value_t = fp8_bench::cuda::DEFAULT_WARMUP)]
    pub warmup: u32,
    /// Timed steps per point (median, p10, p90 reported).
    #[arg(long, env = "TE_LAYER_PERF_ITERS", default_value_t = fp8_bench::cuda::DEFAULT_ITERS, value_parser = clap::value_parser!(u32).range(1..))]
    pub iters: u32,
    /// Where to write the report.
    #[arg(long, env = "TE_LAYER_PERF_REPORT_PATH", value_name = "OUT.json")]
    pub report: PathBuf,
    /// Count the weight cast in every step (weights not kept as FP8 params).
    #[arg(long)]
    pub no_fp8_param: bool,
    /// Scale rounding: pow2 (TE's default) or fp32.
    #[arg(long, default_value = "pow2", value_parser = ["pow2", "fp32"])]
    pub scales: String,
    /// Pad multiple of FP8 token counts and expert splits (TE asserts 16).
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u64).range(1..=128))]
    pub fp8_pad: u64,
    /// Expert split modes for grouped modules.
    #[arg(long, default_value = "uniform,zipf", value_name = "LIST")]
    pub splits: String,
    /// Only modules whose name contains this text.
    #[arg(long, value_name = "TEXT")]
    pub modules: Option<String>,
    /// CUDA device ordinal.
    #[arg(long, default_value_t = 0)]
    pub device: usize,
    /// `cuda` measures our cuBLASLt/NVRTC implementation of the recipe (GPU time); `te` times
    /// Transformer Engine itself through `python -m adaptive_fp8.bench.te_worker` (eager step time,
    /// host included, and GPU time beside it); `model` estimates with the offline cost model (no
    /// GPU needed; the report is marked estimated).
    #[arg(long, default_value = "cuda", value_parser = ["cuda", "te", "model"])]
    pub backend: String,
    /// The TE worker's interpreter and settings.
    #[command(flatten)]
    pub te: super::te_args::TeArgs,
    /// With --backend te: the torchrun mode. Times the dense modules as TE tensor-parallel
    /// modules over a real TP group of --tp GPUs of this node, sequence parallel, so the
    /// all-gathers and reduce-scatters are in the times (`python -m torch.distributed.run -m
    /// adaptive_fp8.bench.te_tp`). The report is marked `tp_comm`; merge-policy never mixes it with
    /// one-GPU reports of TP > 1. Expert modules are left out (all-to-all, not TP).
    #[arg(long)]
    pub tp_comm: bool,
    /// Device profile of the cost model: h200 (calibrated on measured H200 reports), h100, b200.
    #[arg(long, default_value = "h200")]
    pub device_profile: String,
    /// Also merge the report into a policy here, as the seed's tool does with
    /// TE_LAYER_PERF_FP8_POLICY_PATH (a VLM gets `<stem>.llm.json` and `<stem>.vit.json`).
    #[arg(
        long,
        env = "TE_LAYER_PERF_FP8_POLICY_PATH",
        value_name = "POLICY.json"
    )]
    pub policy_out: Option<PathBuf>,
    /// Shard the sweep over these GPUs of this node (`all`, or `0,1,...`), one worker per
    /// device, balanced by estimated cost; one report. Under torchrun/Slurm (RANK/WORLD_SIZE or
    /// SLURM_PROCID/SLURM_NTASKS set) each process instead measures its share on LOCAL_RANK and
    /// writes `<report>.rank<N>.json`.
    #[arg(long, value_name = "LIST")]
    pub devices: Option<String>,
    /// Keep the points an earlier run already wrote to the report (or rank report) and measure
    /// only the missing ones (for example those of a device that failed).
    #[arg(long)]
    pub resume: bool,
    /// Speedup threshold for --policy-out.
    #[arg(long, env = "TE_LAYER_PERF_SPEEDUP_THRESHOLD", default_value_t = 1.0)]
    pub speedup_threshold: f64,
    /// cuBLASLt candidates timed per GEMM shape.
    #[arg(long, default_value_t = 8)]
    pub candidates: usize,
    /// Errors and the final summary line only: no progress bar, no notes, no table.
    #[arg(long)]
    pub quiet: bool,
    /// Print one JSON object instead of the table: the report path, the counts, and every point
    /// (module, split, tokens, BF16/FP8 median ms, speedup, status). Implies no progress bar.
    #[arg(long)]
    pub json: bool,
}

/// Runs the command.
pub fn run(args: &Args) -> CliResult {
    let (trained, given) = super::recipe_args::configs_fp8(
        args.recipe.recipe.is_some(),
        std::slice::from_ref(&args.model),
        args.config_root.as_deref(),
    )?;
    let (recipe, recipe_notes) = args.recipe.options(trained.map(|t| t.recipe), &given)?;
    if args.backend == "model" {
        // Fail before the sweep: a profile that cannot run the recipe would skip every point.
        let dev = fp8_report::DeviceInfo {
            name: format!("model:{}", args.device_profile.to_lowercase()),
            ..fp8_report::DeviceInfo::default()
        };
        fp8_bench::recipe::check_device(recipe.recipe(), &dev).map_err(CliError::input)?;
    }
    let (bf16, fp8) = parse_precisions(&args.precisions)?;
    fp8_bench::te::check_recompute(&args.backend, args.te.recompute).map_err(CliError::input)?;
    let model = super::model_args::load_config(&args.model, args.config_root.as_deref())?;
    if !args.quiet {
        for n in model.notes.iter().chain(&recipe_notes) {
            eprintln!("note: {n}");
        }
    }
    let job = sweep_job(args, &model)?;
    warn_default_topk(&model);
    let points = layout_points(&model, &job).map_err(layout_error)?;
    if args.tp_comm {
        return run_tp_comm(args, &job, &points, recipe.recipe().name());
    }
    if job.parallel.tp > 1 && args.backend != "model" && !args.quiet && !args.json {
        eprintln!("note: {}", super::tp_comm::one_rank_note(job.parallel.tp));
    }
    let opt = MeasureOptions {
        warmup: args.warmup,
        iters: args.iters,
        fp8_param: !args.no_fp8_param,
        pow2_scales: args.scales == "pow2",
        pad: args.fp8_pad,
        candidates: args.candidates.max(1),
        bf16,
        fp8,
        recipe,
        ..MeasureOptions::default()
    };
    let (rank, report_path, devices) = placement(args)?;
    let make = |dev: usize| make_backend(args, &opt, dev);
    let progress = Bar::new(args.quiet || args.json);
    let config = args.model.display().to_string();
    let layout = LayoutJob {
        model: &model,
        config: &config,
        job: &job,
        opt: &opt,
        scales: &args.scales,
        recompute: args.te.recompute,
        rank,
        resume_from: args.resume.then_some(report_path.as_path()),
    };
    let workers = driver::Workers::Devices {
        make: &make,
        devices: &devices,
    };
    let report = bench_layout(&layout, &points, workers, &progress).map_err(layout_error)?;
    progress.0.finish_and_clear();
    write_report(&report, &report_path)?;
    if args.json {
        print_json(&report, &report_path);
    } else {
        // The table is rank 0's to print (the torchrun/Slurm convention); every rank says its line.
        print_summary(&report, args.quiet || rank.is_some_and(|r| r.rank > 0));
    }
    if rank.is_some() {
        if !(args.quiet || args.json) {
            println!(
                "wrote {} (merge all ranks with: fp8sel merge-policy --reports {})",
                report_path.display(),
                rank_report_path(&args.report, 0)
                    .display()
                    .to_string()
                    .replace(".rank0.", ".rank*.")
            );
        }
        return Ok(());
    }
    if let Some(out) = &args.policy_out {
        write_policy(args, out, &model.name)?;
    }
    Ok(())
}

/// The layout errors in the flags' words.
fn layout_error(e: LayoutError) -> CliError {
    match e {
        LayoutError::NoPoints => {
            CliError::input("nothing to measure: no module matched --modules/--component")
        }
        LayoutError::Driver(driver::DriverError::NoDevice(m)) => CliError::input(m),
        other => CliError::input(other),
    }
}

/// The sweep the flags ask for.
fn sweep_job(args: &Args, model: &fp8_engine::ModelDesc) -> CliResult<SweepJob> {
    Ok(SweepJob {
        component: args.component,
        parallel: {
            let l = args.layout.or_reference_env(|k| std::env::var(k).ok())?;
            model.layout(l.tp, l.ep, l.etp, None)
        },
        tokens: args
            .shape_sweep
            .as_deref()
            .map(parse_shape_sweep)
            .transpose()
            .map_err(|e| CliError::input(format!("--shape-sweep: {e}")))?,
        max_tokens: args.max_tokens,
        per_doubling: args.points_per_doubling,
        seq_length: args.seq_length,
        micro_batch_size: args.micro_batch_size,
        splits: parse_splits(&args.splits)?,
        modules: args.modules.clone(),
    })
}

/// An MoE config without `moe_router_topk` gets Megatron's default of 2: say so, since it sets
/// every expert token count.
fn warn_default_topk(model: &fp8_engine::ModelDesc) {
    for c in &model.components {
        if c.arch.moe.is_some()
            && c.defaults_applied
                .iter()
                .any(|d| d.starts_with("moe_router_topk absent"))
        {
            eprintln!(
                "warning: {}: the config has no moe_router_topk, so Megatron's default of 2 sets \
                 the expert token counts; set moe_router_topk in the config to the value your \
                 launcher passes (--moe-router-topk)",
                c.role
            );
        }
    }
}

/// `--tp-comm`: the TE backend's torchrun mode, its report checked and summarized.
fn run_tp_comm(args: &Args, job: &SweepJob, points: &[BenchPoint], recipe: &str) -> CliResult {
    if args.backend != "te" || args.te.recompute {
        return Err(CliError::input(
            "--tp-comm is the TE backend's torchrun mode: give --backend te, without --recompute",
        ));
    }
    check_outputs(args, &args.report)?;
    let report = super::tp_comm::run(
        &args.te.python,
        job.parallel.tp,
        &args.model,
        points,
        &args.report,
        recipe,
        args.warmup,
        args.iters,
        args.quiet,
    )?;
    if args.json {
        print_json(&report, &args.report);
    } else {
        print_summary(&report, args.quiet);
    }
    Ok(())
}

/// Where this process measures: its rank under torchrun/Slurm (unless `--devices` splits the
/// work itself), its report path, and its devices.
fn placement(args: &Args) -> CliResult<(Option<RankEnv>, PathBuf, Vec<usize>)> {
    let rank = RankEnv::detect(|k| std::env::var(k).ok())
        .map_err(|e| CliError::input(format!("launcher environment: {e}")))?;
    let devices = args.devices.as_deref().map(parse_devices).transpose()?;
    // Under torchrun/Slurm without --devices, this process measures its share on LOCAL_RANK.
    let rank = rank.filter(|_| devices.is_none());
    let report_path = match &rank {
        Some(r) => rank_report_path(&args.report, r.rank),
        None => args.report.clone(),
    };
    check_outputs(args, &report_path)?;
    let devices = match (&rank, devices) {
        (_, Some(d)) => d,
        (Some(r), None) if args.device == 0 => vec![r.local],
        _ => vec![args.device],
    };
    if let Some(r) = rank.as_ref().filter(|_| !args.quiet) {
        eprintln!(
            "{} rank {} of {} on device {}, report {}",
            r.launcher,
            r.rank,
            r.world,
            devices[0],
            report_path.display()
        );
    }
    Ok((rank, report_path, devices))
}

/// One worker's backend on `dev` (`fp8_bench::backend` chooses; this adds the flags' words).
fn make_backend(args: &Args, opt: &MeasureOptions, dev: usize) -> Result<Box<dyn Backend>, String> {
    let kind: BackendKind = args
        .backend
        .parse()
        .map_err(|e: BackendError| e.to_string())?;
    if kind == BackendKind::Te && dev != 0 {
        return Err(format!(
            "--backend te measures on the worker's default device; run one process per \
             GPU with CUDA_VISIBLE_DEVICES instead of --devices (device {dev})"
        ));
    }
    let spec = BackendSpec {
        kind,
        device_profile: &args.device_profile,
        device: dev,
        python: &args.te.python,
        recompute: args.te.recompute,
    };
    let chosen = fp8_bench::backend::choose(&spec, &|_| {}).map_err(|e| match e {
        BackendError::UnknownProfile { profile, known } => {
            format!("--device-profile {profile}: unknown profile; known: {known}")
        }
        BackendError::Gpu(m) => format!(
            "{m}\n  (fp8sel bench needs an NVIDIA Hopper GPU with the CUDA 13 driver, cuBLASLt and NVRTC; \
             without one, estimate with the cost model: fp8sel bench --backend model)"
        ),
        other => other.to_string(),
    })?;
    if matches!(chosen, Chosen::Model(_)) && !args.quiet {
        eprintln!(
            "warning: --backend model: these are ESTIMATES from the cost model ({}), not measurements",
            args.device_profile.to_lowercase()
        );
    }
    let b = chosen.into_backend();
    if kind != BackendKind::Te {
        fp8_bench::recipe::check_device(opt.recipe.recipe(), &b.device())?;
    }
    Ok(b)
}

/// `--policy-out`: the report merged into a policy (one file per component for a VLM).
fn write_policy(args: &Args, out: &Path, model_name: &str) -> CliResult {
    use fp8_pipeline::outputs::{Destination, merge_reports, write_policies};

    let opt = fp8_merge::MergeOptions {
        threshold: args.speedup_threshold,
        ..Default::default()
    };
    let (_, merged) = merge_reports(std::slice::from_ref(&args.report), &opt, args.fp8_pad)
        .map_err(super::merge_policy::merge_error)?;
    let dest = Destination::beside(out, &merged, model_name);
    let written = write_policies(&merged, &dest, &[&args.report])
        .map_err(super::merge_policy::output_error)?;
    for w in written {
        println!("wrote {}", w.display());
    }
    Ok(())
}

/// Refuses a policy output that would overwrite the report (or the model config).
fn check_outputs(args: &Args, report: &Path) -> CliResult {
    fp8_io::refuse_same_file(report, [args.model.as_path()]).map_err(CliError::input)?;
    if let Some(out) = &args.policy_out {
        fp8_io::refuse_same_file(out, [report, args.report.as_path(), args.model.as_path()])
            .map_err(CliError::input)?;
    }
    Ok(())
}

fn parse_devices(s: &str) -> CliResult<Vec<usize>> {
    if s == "all" {
        let n = fp8_bench::cuda::device_count().map_err(CliError::input)?;
        return Ok((0..n).collect());
    }
    let v: Vec<usize> = s
        .split(',')
        .map(|d| {
            d.trim().parse::<usize>().map_err(|_| {
                CliError::input(format!(
                    "--devices `{s}`: expected `all` or a list like 0,1,2"
                ))
            })
        })
        .collect::<Result<_, _>>()?;
    if v.is_empty() {
        return Err(CliError::input("--devices: empty list"));
    }
    Ok(v)
}

fn parse_precisions(s: &str) -> CliResult<(bool, bool)> {
    let mut bf16 = false;
    let mut fp8 = false;
    for p in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        match p {
            "bf16" => bf16 = true,
            "fp8" => fp8 = true,
            other => {
                return Err(CliError::input(format!(
                    "--precisions: unknown precision `{other}` (use bf16,fp8)"
                )));
            }
        }
    }
    if !bf16 && !fp8 {
        return Err(CliError::input("--precisions: give bf16, fp8 or both"));
    }
    Ok((bf16, fp8))
}

fn parse_splits(s: &str) -> CliResult<Vec<SplitMode>> {
    s.split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(|p| match p {
            "uniform" => Ok(SplitMode::Uniform),
            "zipf" => Ok(SplitMode::Zipf(1.2)),
            other => other
                .strip_prefix("zipf")
                .and_then(|v| v.parse::<f64>().ok())
                .filter(|v| v.is_finite() && *v > 0.0)
                .map(SplitMode::Zipf)
                .ok_or_else(|| {
                    CliError::input(format!(
                        "--splits: unknown split `{other}` (uniform, zipf, zipf1.5)"
                    ))
                }),
        })
        .collect()
}
