//! `cargo xtask`: repository automation, run through the alias in `.cargo/config.toml`.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use fp8_bench::cuda::MeasureOptions;
use fp8_merge::MergeOptions;
use xtask::{
    H200_HOST_PROFILE, UPDATE_ENV, check_policies, check_results, generate as gen_mod,
    h200_host_profile, refreshed_shipped_reports, root,
};

/// Repository automation for the adaptive FP8 toolkit.
#[derive(Debug, Parser)]
#[command(name = "cargo xtask")]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Generate policies: benchmark every layout of every model (GPU, or the cost model without
    /// one), merge, and write the policy, plots and a summary per model.
    ///
    /// Examples:
    ///   cargo xtask gen-policy                      # every model in fixtures/models/
    ///   cargo xtask gen-policy --model fixtures/models/qwen2_5_72b.yaml --tp 1,2,4,8
    ///   cargo xtask gen-policy --backend model --device-profile h100
    ///   cargo xtask gen-policy --check              # policies/ up to date with the committed reports?
    #[command(verbatim_doc_comment)]
    GenPolicy(GenArgs),
    /// Regenerate docs/RESULTS.md from the committed H200 reports (or check it with --check).
    Results {
        /// Fail when docs/RESULTS.md is stale instead of writing it.
        #[arg(long)]
        check: bool,
    },
}

#[derive(Debug, clap::Args)]
struct GenArgs {
    /// Model configs [default: each model in fixtures/models/].
    #[arg(long = "model", value_name = "CONFIG")]
    models: Vec<PathBuf>,
    /// TP sizes [default: 1,2,4,8, those that divide the model].
    #[arg(long, value_delimiter = ',')]
    tp: Option<Vec<u32>>,
    /// EP sizes [default: the config's for MoE models, else 1].
    #[arg(long, value_delimiter = ',')]
    ep: Option<Vec<u32>>,
    /// ETP sizes [default: the config's expert_tensor_parallel_size, else each TP, as Megatron].
    #[arg(long, value_delimiter = ',')]
    etp: Option<Vec<u32>>,
    /// Speedup threshold.
    #[arg(long, default_value_t = 1.0)]
    threshold: f64,
    /// Noise margin.
    #[arg(long, default_value_t = 0.02)]
    margin: f64,
    /// auto: the GPU when one is present, else the cost model.
    #[arg(long, default_value = "auto", value_parser = ["auto", "cuda", "model"])]
    backend: String,
    /// Cost-model device profile (h200, h100, b200).
    #[arg(long, default_value = "h200")]
    device_profile: String,
    /// Output directory [default: policies/ when measuring; policies/estimated/<profile>/ for
    /// estimates, so an estimate never overwrites a measured policy].
    #[arg(long)]
    out: Option<PathBuf>,
    /// Timed steps per point.
    #[arg(long, default_value_t = fp8_bench::cuda::DEFAULT_ITERS)]
    iters: u32,
    /// Untimed steps per point (the same default as `fp8sel bench`).
    #[arg(long, default_value_t = fp8_bench::cuda::DEFAULT_WARMUP)]
    warmup: u32,
    /// Rebuild policies/ from the committed reports and fail if it is stale
    /// (set FP8_UPDATE_POLICIES=1 to rewrite it).
    #[arg(long)]
    check: bool,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let r = match cli.command {
        Cmd::GenPolicy(a) => gen_policy(a),
        Cmd::Results { check } => results(check),
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(1)
        }
    }
}

fn update() -> bool {
    std::env::var_os(UPDATE_ENV).is_some_and(|v| v == "1")
}

fn results(check: bool) -> Result<(), String> {
    let root = root();
    if check && !update() {
        if check_results(&root, false)? {
            return Err(format!(
                "docs/RESULTS.md is stale; run `cargo xtask results` (or set {UPDATE_ENV}=1)"
            ));
        }
        println!("docs/RESULTS.md is up to date");
    } else {
        check_results(&root, true)?;
        println!("wrote docs/RESULTS.md");
    }
    Ok(())
}

/// What `python -m adaptive_fp8.bench.standing` writes: it reads the shipped policies.
const STANDING: &str = "docs/device-logs/trainer_loop/standing.json";

fn gen_policy(a: GenArgs) -> Result<(), String> {
    let root = root();
    if a.check {
        let stale = check_policies(&root, update())?;
        if update() {
            println!("rewrote policies/ from reports/h200");
            // The end-to-end runs' reading depends on the policies; its test names the command
            // too, but the hint saves a CI round.
            eprintln!(
                "then refresh {STANDING} (python -m adaptive_fp8.bench.standing --json {STANDING}) and docs/RESULTS.md (cargo xtask results)"
            );
            return Ok(());
        }
        if stale.is_empty() {
            println!("policies/ is up to date with reports/h200");
            return Ok(());
        }
        return Err(format!(
            "policies/ is stale:\n  {}\nrun `{UPDATE_ENV}=1 cargo xtask gen-policy --check`",
            stale.join("\n  ")
        ));
    }
    let models = if a.models.is_empty() {
        gen_mod::default_models(&root)
    } else {
        a.models.clone()
    };
    let progress = gen_mod::TermProgress::new(false);
    progress.say(&format!(
        "gen-policy: {} model(s), backend {} (same job as `fp8sel gen-policy`)",
        models.len(),
        a.backend
    ));
    let o = gen_mod::GenOptions {
        models,
        config_root: None,
        tp: a.tp.clone(),
        ep: a.ep.clone(),
        etp: a.etp.clone(),
        // The eager thresholds (min_tokens) as the shipped policies have them where no TE or
        // step source measured a key: the GPU times with the H200 host profile. Without it the
        // one GPU-time threshold would serve eager trainers too.
        merge: MergeOptions {
            threshold: a.threshold,
            margin: a.margin,
            host_profile: Some(h200_host_profile(&root)?),
            ..MergeOptions::default()
        },
        backend: a.backend.clone(),
        python: "python3".to_owned(),
        recompute: false,
        device_profile: a.device_profile.clone(),
        measure: MeasureOptions {
            warmup: a.warmup,
            iters: a.iters,
            ..MeasureOptions::default()
        },
        policies_dir: root.join("policies"),
        reports_base: root.join("reports"),
        out: a.out.clone(),
    };
    progress.say(&format!(
        "gen-policy: min_tokens (eager) from the GPU times with the host profile {H200_HOST_PROFILE}; \
         measure this machine's with `python -m adaptive_fp8.bench.probe_host`"
    ));
    let done = gen_mod::gen_policy(&o, &progress)?;
    progress.finish();
    if !done.estimated && a.out.is_none() && refreshed_shipped_reports(&root, &done.reports) {
        check_policies(&root, true)?;
        println!(
            "rebuilt policies/ from reports/h200 as shipped: the fresh GPU times for \
             min_tokens_graphed, the committed TE, step and host-profile sources for min_tokens"
        );
    }
    if done.estimated {
        eprintln!(
            "warning: gen-policy is ESTIMATING with the cost model ({}); these are not measurements",
            a.device_profile
        );
    }
    for f in done.documents() {
        println!("wrote {}", f.display());
    }
    println!("{}", done.summary());
    if done.estimated {
        eprintln!(
            "warning: these policies are ESTIMATES (marked \"estimated\": true in their provenance)"
        );
    }
    Ok(())
}
