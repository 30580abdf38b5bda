//! `fp8sel validate POLICY`

use std::path::PathBuf;

use fp8_policy::Policy;

use crate::error::CliResult;

/// Check that a policy file is valid.
///
/// Prints `ok: N rules` and exits 0, or prints the error (file, JSON path, fix) on stderr and
/// exits 2.
///
/// Example:
///   fp8sel validate policies/qwen2_5_72b.json
#[derive(Debug, clap::Args)]
#[command(verbatim_doc_comment)]
pub struct Args {
    /// The policy JSON to check.
    pub policy: PathBuf,
}

/// Runs the command.
pub fn run(args: &Args) -> CliResult {
    let p = Policy::load(&args.policy)?;
    let n = p.rule_count();
    println!("ok: {n} rule{}", if n == 1 { "" } else { "s" });
    Ok(())
}
