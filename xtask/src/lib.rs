//! `xtask`: the repository's automation, as a library so that `cargo test` can run the same
//! generation the command does and fail when committed outputs are stale.
//!
//! `cargo xtask gen-policy` measures (GPU) or estimates (cost model) every layout of every model
//! in `fixtures/models/`, merges, and writes policies, plots and summaries; `--check` rebuilds
//! `policies/` from the committed reports and compares. `cargo xtask results` writes
//! docs/RESULTS.md from the committed measured and held-out reports.
//!
//! It adds no measuring or merging logic of its own: that lives in the library crates
//! (`fp8-pipeline` is the job `fp8sel gen-policy` runs too).

pub mod results;

pub use fp8_pipeline::{build, eval, generate, plot};

use std::path::{Path, PathBuf};

use fp8_merge::MergeOptions;

/// The repository root.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default()
}

/// The environment variable that makes the checks rewrite stale outputs instead of failing.
pub const UPDATE_ENV: &str = "FP8_UPDATE_POLICIES";

/// Rebuilds `policies/` from `fixtures/reports/h200` into memory and returns what is stale; with
/// `update`, writes the fresh files instead.
pub fn check_policies(root: &Path, update: bool) -> Result<Vec<String>, String> {
    let files = generate::build_all(
        &generate::default_models(root),
        &root.join("fixtures/reports/h200"),
        &MergeOptions::default(),
    )?;
    let out = root.join("policies");
    if update {
        generate::write_files(&out, &files)?;
        return Ok(Vec::new());
    }
    Ok(generate::stale(&out, &files))
}

/// Renders docs/RESULTS.md and returns whether the committed one is stale; with `update`,
/// writes it.
pub fn check_results(root: &Path, update: bool) -> Result<bool, String> {
    let text = results::render(root)?;
    let path = root.join("docs/RESULTS.md");
    if update {
        fp8_io::write_atomic(&path, text.as_bytes()).map_err(|e| e.to_string())?;
        return Ok(false);
    }
    Ok(std::fs::read_to_string(&path).map_or(true, |have| have != text))
}
