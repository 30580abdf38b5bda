//! `fp8sel bench-kernels`: device ceilings and kernel rates for docs/PERFORMANCE.md.

use std::path::PathBuf;

use fp8_bench::cuda::perf::{Figure, copy_bandwidth, gemm_throughput, quant_bandwidth};
use fp8_bench::cuda::{AlgoSearch, Gpu};

use crate::error::{CliError, CliResult};

/// Measure the device's ceilings: copy bandwidth, GEMM throughput, the FP8 casts' bandwidth.
///
/// The copy bandwidth; BF16 vs FP8 (blockwise and tensorwise) GEMM throughput on the anchor
/// shapes; the cast kernels' bandwidth (blockwise, current and delayed scaling) as a share of the
/// copy bandwidth.
///
/// GEMM algorithms are searched exhaustively by default: every cuBLASLt algorithm id and
/// configuration (tile, stages, swizzle, cluster shape) that cublasLtMatmulAlgoCheck accepts is
/// timed, for BF16 and FP8 alike, and a winner that is not the heuristic's choice must reproduce
/// its output. `--search heuristic` times only the heuristic's top `--candidates`, as
/// `fp8sel bench` does (TE runs the heuristic's first choice).
///
/// Examples:
///   fp8sel bench-kernels --json out/kernels.json
///   fp8sel bench-kernels --gemm-only --shapes 4096x2048x2048 --search heuristic
///   fp8sel bench-kernels --anchors ../shared/anchors/h200_gemm_ceiling.json
#[derive(Debug, clap::Args)]
#[command(verbatim_doc_comment)]
pub struct Args {
    /// Also write the figures as JSON here.
    #[arg(long, value_name = "OUT.json")]
    pub json: Option<PathBuf>,
    /// GEMM shapes as MxKxN, comma separated [default: the H200 anchor shapes].
    #[arg(long, value_name = "LIST")]
    pub shapes: Option<String>,
    /// CUDA device ordinal.
    #[arg(long, default_value_t = 0)]
    pub device: usize,
    /// How GEMM algorithms are chosen: `exhaustive` or `heuristic`.
    #[arg(long, default_value = "exhaustive", value_parser = ["exhaustive", "heuristic"])]
    pub search: String,
    /// cuBLASLt heuristic candidates timed per GEMM shape (with `--search heuristic`).
    #[arg(long, default_value_t = 16)]
    pub candidates: usize,
    /// Only the GEMMs (skip the copy and cast figures).
    #[arg(long)]
    pub gemm_only: bool,
    /// Anchor file (JSON list of {M, K, N, fp8_tensorwise_tflops}, e.g. PyTorch `_scaled_mm`
    /// measurements): each tensorwise GEMM on an anchor shape is held to it, and the verdict
    /// printed with the figure.
    #[arg(long, value_name = "ANCHORS.json")]
    pub anchors: Option<PathBuf>,
}

/// One anchor: a shape and the tensorwise TFLOP/s it must reach.
#[derive(Debug, serde::Deserialize)]
struct Anchor {
    #[serde(rename = "M")]
    m: u64,
    #[serde(rename = "K")]
    k: u64,
    #[serde(rename = "N")]
    n: u64,
    fp8_tensorwise_tflops: f64,
}

fn read_anchors(p: &std::path::Path) -> CliResult<Vec<Anchor>> {
    let text =
        fp8_io::read_limited(p, 1 << 20).map_err(|e| CliError::input(format!("--anchors: {e}")))?;
    serde_json::from_slice(&text).map_err(|e| {
        CliError::input(format!(
            "--anchors {}: {e}; expected a JSON list of {{\"M\", \"K\", \"N\", \"fp8_tensorwise_tflops\"}}",
            p.display()
        ))
    })
}

const ANCHORS: &[(u64, u64, u64)] = &[
    (256, 8192, 8192),
    (1024, 8192, 8192),
    (2048, 8192, 8192),
    (4096, 8192, 8192),
    (16384, 8192, 8192),
    (16384, 8192, 10240),
    (4096, 8192, 1280),
    (16384, 8192, 1280),
    (4096, 1024, 8192),
    (4096, 2048, 7168),
    (4096, 7168, 4096),
    (1024, 7168, 4096),
    (256, 7168, 4096),
    (4096, 2048, 2048),
];

/// Runs the command.
pub fn run(args: &Args) -> CliResult {
    let shapes: Vec<(u64, u64, u64)> = match &args.shapes {
        None => ANCHORS.to_vec(),
        Some(s) => s
            .split(',')
            .map(|t| {
                let v: Vec<u64> = t.split('x').filter_map(|x| x.trim().parse().ok()).collect();
                match v[..] {
                    [m, k, n] if m > 0 && k > 0 && n > 0 => Ok((m, k, n)),
                    _ => Err(CliError::input(format!("--shapes: `{t}` is not MxKxN"))),
                }
            })
            .collect::<Result<_, _>>()?,
    };
    let anchors = args.anchors.as_deref().map(read_anchors).transpose()?;
    // Flags are checked before the device is opened, so a typo fails fast on any machine.
    let mut gpu = Gpu::open(args.device).map_err(CliError::input)?;
    let err = |e: fp8_bench::BenchError| CliError {
        code: 1,
        message: e.to_string(),
    };
    let mut figs: Vec<Figure> = Vec::new();
    let copy_tbs = if args.gemm_only {
        0.0
    } else {
        let copy = copy_bandwidth(&gpu).map_err(err)?;
        let r = copy.rate;
        figs.push(copy);
        r
    };
    let search = if args.search == "heuristic" {
        AlgoSearch::Heuristic(args.candidates.max(1))
    } else {
        AlgoSearch::Exhaustive
    };
    // Exhaustive tuning takes seconds per shape: show which one is running.
    let bar = indicatif::ProgressBar::new(shapes.len() as u64);
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{elapsed_precise} [{bar:30}] {pos}/{len} GEMM {msg}",
        )
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
        .progress_chars("=> "),
    );
    for &(m, k, n) in &shapes {
        bar.set_message(format!("{m}x{k}x{n}"));
        let mut got = gemm_throughput(&mut gpu, m, k, n, search).map_err(err)?;
        let anchor = anchors
            .iter()
            .flatten()
            .find(|a| (a.m, a.k, a.n) == (m, k, n));
        if let Some(a) = anchor {
            for f in got
                .iter_mut()
                .filter(|f| f.name.starts_with("fp8 tensorwise"))
            {
                let r = f.rate / a.fp8_tensorwise_tflops;
                f.target = Some(format!(
                    "{r:.3}x the anchor's {:.0} TFLOP/s (target >= 1): {}",
                    a.fp8_tensorwise_tflops,
                    if r >= 1.0 { "met" } else { "NOT met" }
                ));
            }
        }
        figs.extend(got);
        bar.inc(1);
    }
    bar.finish_and_clear();
    if !args.gemm_only {
        for &(m, k) in &[(16384u64, 8192u64), (8192, 7168), (4096, 2048)] {
            figs.extend(quant_bandwidth(&gpu, m, k, copy_tbs).map_err(err)?);
        }
    }
    println!(
        "device: {} (cc {}, driver {}, cuBLASLt {}, NVRTC {})",
        gpu.info.name,
        gpu.info.compute_capability,
        gpu.info.driver,
        gpu.info.cublaslt,
        gpu.info.nvrtc
    );
    println!(
        "{:<52} {:>10} {:>12} {:>10}",
        "figure", "ms", "rate", "relative"
    );
    for f in &figs {
        println!(
            "{:<52} {:>10.4} {:>8.1} {:<3} {:>10}",
            f.name,
            f.ms,
            f.rate,
            f.unit,
            f.relative.map_or_else(String::new, |r| format!("{r:.3}"))
        );
        if let Some(t) = &f.tuning {
            println!("    tuning: {t}");
        }
        if let Some(t) = &f.target {
            println!("    target: {t}");
        }
    }
    if let Some(p) = &args.json {
        let v = serde_json::json!({"device": gpu.info, "figures": figs});
        let text = format!("{v:#}\n");
        fp8_io::create_parent_dir(p)?;
        fp8_io::write_atomic(p, text.as_bytes())?;
    }
    Ok(())
}
