//! `fp8sel`'s commands as a library: each subcommand's flags (clap `Args`) and its `run`, so
//! that `cargo xtask gen-policy` is `fp8sel gen-policy` run on the repository's models, with
//! the same flags, names and defaults.
//!
//! Argument parsing, output and exit codes live here; every decision lives in `fp8-policy` and
//! `fp8-engine`, every measurement in `fp8-bench`.

pub mod cmd;
pub mod error;
