//! `fp8sel`: adaptive FP8 for Transformer Engine trainers.
//!
//! Thin front end over the workspace's libraries: argument parsing, output formatting and exit
//! codes live here; every decision lives in `fp8-policy` and `fp8-engine`.

use fp8sel::cmd;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Adaptive (selective) FP8 for Transformer Engine trainers.
///
/// Measures where FP8 beats BF16 module by module, writes that down as a policy file, and
/// answers "FP8 or BF16 for this module?" the way the trainer will at build time.
///
/// Exit codes: 0 success, 2 invalid input or usage, 1 any other failure.
#[derive(Debug, Parser)]
#[command(name = "fp8sel", version, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    Validate(cmd::validate::Args),
    Decide(cmd::decide::Args),
    Explain(cmd::explain::ExplainArgs),
    Check(cmd::explain::CheckArgs),
    TePrecisionConfig(cmd::te_precision::Args),
    Bench(cmd::bench::Args),
    MergePolicy(cmd::merge_policy::Args),
    GenPolicy(cmd::gen_policy::Args),
    BenchKernels(cmd::bench_kernels::Args),
    Diff(cmd::diff::Args),
}

fn main() -> ExitCode {
    // Behave like other Unix tools when the reader goes away (`fp8sel explain ... | head`):
    // end quietly instead of panicking on a broken pipe in `println!`.
    #[cfg(unix)]
    // SAFETY: restoring the default disposition of one signal before any thread starts.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    // An interrupted write must not leave a `.fp8-tmp-*` file behind (the target is never damaged
    // either way: it is replaced by a rename).
    if let Err(e) = fp8_io::clean_up_on_signals() {
        eprintln!(
            "warning: cannot watch for SIGINT/SIGTERM ({e}); an interrupted write may leave a temp file"
        );
    }
    let cli = Cli::parse();
    let result = match &cli.command {
        Command::Validate(a) => cmd::validate::run(a),
        Command::Decide(a) => cmd::decide::run(a),
        Command::Explain(a) => cmd::explain::explain(a),
        Command::Check(a) => cmd::explain::check(a),
        Command::TePrecisionConfig(a) => cmd::te_precision::run(a),
        Command::Bench(a) => cmd::bench::run(a),
        Command::MergePolicy(a) => cmd::merge_policy::run(a),
        Command::GenPolicy(a) => cmd::gen_policy::run(a),
        Command::BenchKernels(a) => cmd::bench_kernels::run(a),
        Command::Diff(a) => cmd::diff::run(a),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // An empty message: the command's own output said why (`diff`'s exit 1).
            if !e.message.is_empty() {
                eprintln!("error: {}", e.message);
            }
            ExitCode::from(e.code)
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::Cli;

    /// A command's summary in `fp8sel --help` is its doc's first paragraph; under
    /// `verbatim_doc_comment` a paragraph over two source lines keeps its break and the list
    /// wraps mid-sentence. Each summary is one line, one sentence.
    #[test]
    fn every_command_summary_is_one_line() {
        let cli = Cli::command();
        for c in cli.get_subcommands() {
            let about = c.get_about().map(|a| a.to_string()).unwrap_or_default();
            assert!(
                !about.is_empty() && !about.contains('\n') && about.ends_with('.'),
                "{}: {about:?}",
                c.get_name()
            );
        }
    }
}
