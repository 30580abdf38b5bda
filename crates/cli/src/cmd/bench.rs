//! `fp8sel bench`: the BF16 vs FP8 sweep of every module of a model, into a report.

use std::path::PathBuf;

use fp8_bench::cuda::{Gpu, MeasureOptions};
use fp8_bench::job::{SweepJob, layout, points, provenance};
use fp8_bench::runner::{Backend, CudaBackend, run_sweep, status_counts};
use fp8_bench::sweep::{SplitMode, parse_shape_sweep};
use fp8_engine::{Role, load_model};
use fp8_merge::report::{Provenance, Report, Status};
use indicatif::{ProgressBar, ProgressStyle};

use crate::error::{CliError, CliResult};

/// Measure BF16 vs FP8 (blockwise) for every TE module of a model, forward + backward.
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
///   TE_LAYER_PERF_OMNI_CONFIG_PATH=fixtures/models/deepseek_v3.yaml TE_LAYER_PERF_TP_SIZE=1 \
///     TE_LAYER_PERF_EP_SIZE=8 TE_LAYER_PERF_REPORT_PATH=out/ds_ep8.json fp8sel bench
#[derive(Debug, clap::Args)]
#[command(verbatim_doc_comment)]
pub struct Args {
    /// Model config (Megatron YAML or HF config.json).
    #[arg(long, env = "TE_LAYER_PERF_OMNI_CONFIG_PATH", value_name = "CONFIG")]
    pub model: PathBuf,
    /// Only this component of a VLM (llm or vit) [default: all].
    #[arg(long)]
    pub component: Option<Role>,
    /// Tensor-parallel size [default: the config's, else 1].
    #[arg(long, env = "TE_LAYER_PERF_TP_SIZE", value_parser = clap::value_parser!(u32).range(1..))]
    pub tp: Option<u32>,
    /// Expert-parallel size [default: the config's, else 1].
    #[arg(long, env = "TE_LAYER_PERF_EP_SIZE", value_parser = clap::value_parser!(u32).range(1..))]
    pub ep: Option<u32>,
    /// Expert tensor-parallel size [default: the config's, else --tp].
    #[arg(long, env = "TE_LAYER_PERF_ETP_SIZE", value_parser = clap::value_parser!(u32).range(1..))]
    pub etp: Option<u32>,
    /// Precisions to measure.
    #[arg(
        long,
        env = "TE_LAYER_PERF_PRECISIONS",
        default_value = "bf16,fp8",
        value_name = "LIST"
    )]
    pub precisions: String,
    /// FP8 recipe; only `blockwise` (TE's Float8BlockScaling) is implemented.
    #[arg(long, env = "TE_LAYER_PERF_FP8_RECIPE", default_value = "blockwise")]
    pub recipe: String,
    /// Token counts as seq x mbs, e.g. `1024x1,4096x2` [default: powers of two from 256 to
    /// --max-tokens, plus the configured run].
    #[arg(long, env = "TE_LAYER_PERF_SHAPE_SWEEP", value_name = "S")]
    pub shape_sweep: Option<String>,
    /// Largest dense token count of the default sweep.
    #[arg(long, default_value_t = 32768, value_name = "T")]
    pub max_tokens: u64,
    /// Sequence length of the configured run (added to the sweep) [default: the config's].
    #[arg(long, value_name = "S")]
    pub seq_length: Option<u64>,
    /// Micro-batch size of the configured run [default: the config's, else 1].
    #[arg(long, value_name = "B")]
    pub micro_batch_size: Option<u64>,
    /// Untimed steps per point.
    #[arg(long, env = "TE_LAYER_PERF_WARMUP", default_value_t = 10)]
    pub warmup: u32,
    /// Timed steps per point (median, p10, p90 reported).
    #[arg(long, env = "TE_LAYER_PERF_ITERS", default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..))]
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
    /// `cuda` measures on the GPU; `model` estimates with the offline cost model (no GPU needed;
    /// the report is marked estimated).
    #[arg(long, default_value = "cuda", value_parser = ["cuda", "model"])]
    pub backend: String,
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
    /// Speedup threshold for --policy-out.
    #[arg(long, env = "TE_LAYER_PERF_SPEEDUP_THRESHOLD", default_value_t = 1.0)]
    pub speedup_threshold: f64,
    /// cuBLASLt candidates timed per GEMM shape.
    #[arg(long, default_value_t = 8)]
    pub candidates: usize,
    /// No progress bar.
    #[arg(long)]
    pub quiet: bool,
}

/// Runs the command.
pub fn run(args: &Args) -> CliResult {
    if args.recipe != "blockwise" {
        return Err(CliError::input(format!(
            "--recipe {}: only `blockwise` (TE's Float8BlockScaling) is implemented",
            args.recipe
        )));
    }
    let (bf16, fp8) = parse_precisions(&args.precisions)?;
    let model = load_model(&args.model).map_err(CliError::input)?;
    let job = SweepJob {
        component: args.component,
        parallel: layout(&model, args.tp, args.ep, args.etp),
        tokens: args
            .shape_sweep
            .as_deref()
            .map(parse_shape_sweep)
            .transpose()
            .map_err(|e| CliError::input(format!("--shape-sweep: {e}")))?,
        max_tokens: args.max_tokens,
        seq_length: args.seq_length,
        micro_batch_size: args.micro_batch_size,
        splits: parse_splits(&args.splits)?,
        modules: args.modules.clone(),
    };
    let points = points(&model, &job).map_err(CliError::input)?;
    if points.is_empty() {
        return Err(CliError::input(
            "nothing to measure: no module matched --modules/--component",
        ));
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
        ..MeasureOptions::default()
    };
    let mut backend = open_backend(&args.backend, &args.device_profile, args.device)?;
    let provenance = provenance(
        &model,
        &args.model.display().to_string(),
        &job,
        &opt,
        &args.scales,
    );
    let report = sweep(backend.as_mut(), &points, &opt, provenance, args.quiet);
    write_report(&report, &args.report)?;
    print_summary(&report);
    if let Some(out) = &args.policy_out {
        let opt = fp8_merge::MergeOptions {
            threshold: args.speedup_threshold,
            ..Default::default()
        };
        let (_, merged) = super::merge_policy::merge_reports(
            std::slice::from_ref(&args.report),
            &opt,
            args.fp8_pad,
        )?;
        let written = if merged.policies.len() > 1 {
            let dir = out.parent().unwrap_or(std::path::Path::new("."));
            let stem = out
                .file_stem()
                .map_or_else(|| model.name.clone(), |s| s.to_string_lossy().into_owned());
            super::merge_policy::write_outputs(&merged, None, Some(dir), &stem)?
        } else {
            super::merge_policy::write_outputs(&merged, Some(out), None, &model.name)?
        };
        for w in written {
            println!("wrote {}", w.display());
        }
    }
    Ok(())
}

/// Opens the measuring backend: the GPU, or the cost model (with a loud warning).
pub fn open_backend(kind: &str, profile: &str, device: usize) -> CliResult<Box<dyn Backend>> {
    if kind == "model" {
        let p = fp8_bench::costmodel::profile(profile).ok_or_else(|| {
            let names: Vec<&str> = fp8_bench::costmodel::profiles()
                .iter()
                .map(|p| p.name)
                .collect();
            CliError::input(format!(
                "--device-profile {profile}: unknown profile; known: {}",
                names.join(", ")
            ))
        })?;
        eprintln!(
            "warning: --backend model: these are ESTIMATES from the cost model ({}), not measurements",
            p.name
        );
        return Ok(Box::new(fp8_bench::costmodel::ModelBackend(p)));
    }
    let gpu = Gpu::open(device).map_err(|e| {
        CliError::input(format!(
            "{e}\n  (fp8sel bench needs an NVIDIA Hopper GPU with the CUDA 13 driver, cuBLASLt and NVRTC; \
             without one, estimate with the cost model: fp8sel bench --backend model)"
        ))
    })?;
    Ok(Box::new(CudaBackend(gpu)))
}

/// Runs the sweep with a progress bar on stderr.
pub fn sweep(
    backend: &mut dyn Backend,
    points: &[fp8_bench::sweep::BenchPoint],
    opt: &MeasureOptions,
    provenance: Provenance,
    quiet: bool,
) -> Report {
    let bar = if quiet {
        ProgressBar::hidden()
    } else {
        ProgressBar::new(points.len() as u64)
    };
    bar.set_style(
        ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {pos}/{len} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    let report = run_sweep(backend, points, opt, provenance, &mut |_, p, r| {
        let sp = r.speedup.map_or_else(
            || format!("{:?}", r.status).to_lowercase(),
            |s| format!("{s:.3}x"),
        );
        bar.set_message(format!(
            "{} @ {} tokens: {sp}",
            p.spec.name.rsplit('.').next().unwrap_or(""),
            p.tokens
        ));
        bar.inc(1);
    });
    bar.finish_and_clear();
    report
}

/// Writes a report atomically.
pub fn write_report(report: &Report, path: &std::path::Path) -> CliResult {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| CliError {
            code: 1,
            message: format!("{}: {e}", dir.display()),
        })?;
    }
    fp8_policy::write_atomic(path, report.to_json().as_bytes()).map_err(|e| CliError {
        code: 1,
        message: e.to_string(),
    })
}

/// Prints the end-of-sweep table.
pub fn print_summary(report: &Report) {
    println!(
        "{:<48} {:>8} {:>8} {:>10} {:>10} {:>8}  status",
        "module", "gemms", "tokens", "bf16 ms", "fp8 ms", "speedup"
    );
    for p in &report.points {
        let name = format!(
            "{}{}",
            p.module
                .trim_start_matches("decoder.layers.")
                .trim_start_matches("image_encoder.layers."),
            p.split_mode
                .as_deref()
                .map(|s| format!(" [{s}]"))
                .unwrap_or_default()
        );
        let f = |t: Option<fp8_merge::report::Timing>| {
            t.map_or_else(|| "-".to_owned(), |t| format!("{:.3}", t.total_ms.median))
        };
        let status = match p.status {
            Status::Ok => "ok".to_owned(),
            _ => format!("{:?}: {}", p.status, p.reason.clone().unwrap_or_default()).to_lowercase(),
        };
        println!(
            "{:<48} {:>8} {:>8} {:>10} {:>10} {:>8}  {}",
            name,
            p.num_gemms,
            p.tokens,
            f(p.bf16),
            f(p.fp8),
            p.speedup
                .map_or_else(|| "-".to_owned(), |s| format!("{s:.3}")),
            status
        );
    }
    let (ok, failed, skipped) = status_counts(report);
    println!(
        "{ok} ok, {failed} failed, {skipped} skipped; device {}",
        report.provenance.device.name
    );
    if report.estimated {
        println!("warning: these are ESTIMATES from the cost model, not measurements");
    }
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
