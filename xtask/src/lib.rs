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

pub mod e2e_results;
pub mod recipe_results;
pub mod results;
pub mod standing;
pub mod written;

pub use fp8_pipeline::{build, eval, generate, plot};

use std::path::{Path, PathBuf};

/// The automation's notes (a model without reports, say) on stderr.
struct Stderr;

impl fp8_bench::driver::Progress for Stderr {
    fn note(&self, message: &str) {
        eprintln!("{message}");
    }
}

impl generate::Progress for Stderr {}

/// The repository root.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default()
}

/// The environment variable that makes the checks rewrite stale outputs instead of failing.
pub const UPDATE_ENV: &str = "FP8_UPDATE_POLICIES";

pub use fp8_pipeline::shipped::{H200_HOST_PROFILE, RECIPE_DIRS, h200_host_profile};

/// Rebuilds `policies/` from the committed reports (`fp8_pipeline::shipped`) and returns what
/// is stale; with `update`, writes the fresh files instead.
pub fn check_policies(root: &Path, update: bool) -> Result<Vec<String>, String> {
    let files = fp8_pipeline::shipped::shipped_policies(root, &Stderr)?;
    let out = root.join("policies");
    if update {
        generate::write_files(&out, &files)?;
        // What the sources no longer make (a fold's plots once the step model makes the file).
        for rel in generate::orphans(&out, &files) {
            std::fs::remove_file(out.join(&rel))
                .map_err(|e| format!("{}: {e}", out.join(&rel).display()))?;
        }
        return Ok(Vec::new());
    }
    Ok(generate::stale(&out, &files))
}

/// Whether a measuring run of `gen-policy` refreshed the shipped H200 reports: every report it
/// wrote is a blockwise cuBLASLt report directly under `reports/h200/` (its defaults on an
/// H200). Then `policies/` is rebuilt the way it ships ([`check_policies`]: the fresh GPU times
/// folded with the committed TE, step and host-profile sources), not from the GPU times alone,
/// whose single threshold would serve eager trainers too.
pub fn refreshed_shipped_reports(root: &Path, reports: &[PathBuf]) -> bool {
    let h200 = root.join("reports/h200");
    !reports.is_empty() && reports.iter().all(|r| r.parent() == Some(h200.as_path()))
}

/// Renders docs/RESULTS.md (the rendered sections, then the written ones of
/// [`written::WRITTEN_RESULTS`]) and returns whether the committed one is stale; with `update`, writes it.
pub fn check_results(root: &Path, update: bool) -> Result<bool, String> {
    let mut text = results::render(root)?;
    let (section, plots) = recipe_results::render(root)?;
    text.push_str(&section);
    text.push('\n');
    let (e2e, e2e_plots) = e2e_results::render(root)?;
    text.push_str(&e2e);
    text.push_str(&written::render(root)?);
    let path = root.join("docs/RESULTS.md");
    let plot_dir = root.join(recipe_results::PLOT_DIR);
    let e2e_dir = root.join(e2e_results::PLOT_DIR);
    if update {
        fp8_io::write_atomic(&path, text.as_bytes()).map_err(|e| e.to_string())?;
        generate::write_files(&plot_dir, &plots)?;
        generate::write_files(&e2e_dir, &e2e_plots)?;
        return Ok(false);
    }
    let text_stale = std::fs::read_to_string(&path).map_or(true, |have| have != text);
    Ok(text_stale
        || !generate::stale(&plot_dir, &plots).is_empty()
        || !generate::stale(&e2e_dir, &e2e_plots).is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_run_that_rewrote_the_shipped_h200_reports_rebuilds_policies_as_shipped() {
        let root = Path::new("/repo");
        let h200 = |f: &str| root.join("reports/h200").join(f);
        assert!(refreshed_shipped_reports(
            root,
            &[h200("llama3_2_1b_tp1.json"), h200("qwen2_5_72b_tp8.json")]
        ));
        // Another GPU, the TE backend's folder, another recipe's, or nothing measured: no.
        for other in [
            root.join("reports/h100/llama3_2_1b_tp1.json"),
            h200("te/llama3_2_1b_tp1.json"),
            h200("tensorwise/llama3_2_1b_tp1.json"),
        ] {
            assert!(!refreshed_shipped_reports(
                root,
                &[h200("qwen2_5_72b_tp8.json"), other]
            ));
        }
        assert!(!refreshed_shipped_reports(root, &[]));
    }
}
