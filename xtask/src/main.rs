//! `cargo xtask`: repository automation, run through the alias in `.cargo/config.toml`.

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use xtask::{
    UPDATE_ENV, check_policies, check_results, generate as gen_mod, refreshed_shipped_reports, root,
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
    GenPolicy(Box<GenArgs>),
    /// Regenerate docs/RESULTS.md from the committed H200 reports (or check it with --check).
    Results {
        /// Fail when docs/RESULTS.md is stale instead of writing it.
        #[arg(long)]
        check: bool,
    },
}

/// `fp8sel gen-policy`'s own flags, names and defaults, on the repository's models unless
/// `--model` names others; and `--check`.
#[derive(Debug, clap::Args)]
struct GenArgs {
    #[command(flatten)]
    job: fp8sel::cmd::gen_policy::Args,
    /// Rebuild policies/ from the committed reports and fail if it is stale
    /// (set FP8_UPDATE_POLICIES=1 to rewrite it).
    #[arg(long)]
    check: bool,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let r = match cli.command {
        Cmd::GenPolicy(a) => gen_policy(*a),
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

/// What `python scripts/upkeep/standing.py` writes: it reads the shipped policies.
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
                "then refresh {STANDING} (python scripts/upkeep/standing.py --json {STANDING}) and docs/RESULTS.md (cargo xtask results)"
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
    let mut g = a.job;
    if g.models.is_empty() {
        g.models = gen_mod::default_models(&root);
    }
    // The defaults are relative to where fp8sel runs; here, to the repository.
    let reports = g
        .reports_dir
        .get_or_insert_with(|| std::path::PathBuf::from("reports"));
    if reports.is_relative() {
        *reports = root.join(&*reports);
    }
    if g.policies_dir.is_relative() {
        g.policies_dir = root.join(&g.policies_dir);
    }
    let progress = gen_mod::TermProgress::new(g.quiet || g.json);
    let done = fp8sel::cmd::gen_policy::job(&g, &progress).map_err(|e| e.message)?;
    if !done.estimated && g.out.is_none() && refreshed_shipped_reports(&root, &done.reports) {
        check_policies(&root, true)?;
        println!(
            "rebuilt policies/ from reports/h200 as shipped: the fresh GPU times for \
             min_tokens_graphed, the committed TE, step and host-profile sources for min_tokens"
        );
    }
    fp8sel::cmd::gen_policy_output::report(g.quiet, g.json, &done);
    if done.estimated {
        eprintln!(
            "warning: these policies are ESTIMATES from the cost model ({}), not measurements (\"estimated\": true in their provenance)",
            g.device_profile
        );
    }
    Ok(())
}
