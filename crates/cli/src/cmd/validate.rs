//! `fp8sel validate POLICY`

use std::path::PathBuf;

use fp8_policy::Policy;

use crate::error::CliResult;

/// Check that a policy file is valid.
///
/// Prints `ok: N rules` (and whether the policy is a cost-model estimate, and the models it was
/// made for) and exits 0, or prints the error (file, JSON path, fix) on stderr and exits 2.
///
/// Examples:
///   fp8sel validate policies/qwen2_5_72b.json
///   fp8sel validate policies/qwen2_5_72b.json --json
#[derive(Debug, clap::Args)]
#[command(verbatim_doc_comment)]
pub struct Args {
    /// The policy JSON to check.
    pub policy: PathBuf,
    /// Print one JSON object: {"ok", "file", "rules", "estimated", "models"}.
    #[arg(long)]
    pub json: bool,
}

/// Runs the command.
pub fn run(args: &Args) -> CliResult {
    let p = Policy::load(&args.policy)?;
    let n = p.rule_count();
    let models = p.provenance().map(|v| v.models.clone()).unwrap_or_default();
    if args.json {
        let out = serde_json::json!({
            "ok": true, "file": args.policy, "rules": n, "estimated": p.estimated(), "models": models,
        });
        println!("{out}");
        return Ok(());
    }
    let est = if p.estimated() {
        " (ESTIMATED from the cost model, not measured)"
    } else {
        ""
    };
    let made_for = if models.is_empty() {
        String::new()
    } else {
        format!("; made for {}", models.join(", "))
    };
    println!(
        "ok: {n} rule{}{est}{made_for}",
        if n == 1 { "" } else { "s" }
    );
    Ok(())
}
