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

use fp8_merge::MergeOptions;

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

/// The recipes besides blockwise with measured H200 reports in `reports/h200/<recipe>/`;
/// their policies go to `policies/<recipe>/`.
pub const RECIPE_DIRS: [&str; 2] = ["tensorwise", "delayed"];

/// The host profile measured on the H200 by `python -m adaptive_fp8.bench.probe_host` (TE 2.20.2,
/// blockwise): what the default policies' eager thresholds model an eager trainer's host with
/// where the TE reports did not measure a key.
pub const H200_HOST_PROFILE: &str = "fixtures/host/h200_te2.20.2_blockwise.json";

/// The committed H200 host profile ([`H200_HOST_PROFILE`]), parsed.
pub fn h200_host_profile(root: &Path) -> Result<fp8_merge::host::HostProfile, String> {
    let text = std::fs::read_to_string(root.join(H200_HOST_PROFILE))
        .map_err(|e| format!("{H200_HOST_PROFILE}: {e}"))?;
    fp8_merge::host::HostProfile::parse(&text, H200_HOST_PROFILE).map_err(|e| e.to_string())
}

/// Rebuilds `policies/` from `reports/h200` (and `policies/<recipe>/` from each
/// recipe's folder) into memory and returns what is stale; with `update`, writes the fresh files
/// instead. Each default `policies/<model>.json` serves both executions: `min_tokens_graphed`
/// from cuBLASLt GPU time, `min_tokens` (eager, what the reference's loader reads) from
/// Transformer Engine's own eager step times where the TE reports measured a key, else from the
/// same cuBLASLt reports with the H200 host profile (`fp8_pipeline::fold`).
pub fn check_policies(root: &Path, update: bool) -> Result<Vec<String>, String> {
    let models = generate::default_models(root);
    let h200 = root.join("reports/h200");
    let graphed = MergeOptions {
        trainer: Some(fp8_merge::Trainer::Graphed),
        ..MergeOptions::default()
    };
    let eager = MergeOptions {
        trainer: Some(fp8_merge::Trainer::Eager),
        host_profile: Some(h200_host_profile(root)?),
        ..MergeOptions::default()
    };
    let mut files = fp8_pipeline::fold::fold_files(
        &generate::build_all(&models, &h200, &graphed, &Stderr)?,
        &generate::build_all(&models, &h200, &eager, &Stderr)?,
        &te_policies(&models, &h200.join("te"))?,
        &fp8_pipeline::step::step_policies(&h200.join("step"), Path::new("reports/h200/step"))?,
    )?;
    for recipe in RECIPE_DIRS {
        let dir = h200.join(recipe);
        let Ok(rd) = std::fs::read_dir(&dir) else {
            continue;
        };
        let names: Vec<String> = rd
            .filter_map(Result::ok)
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        // Only the models this recipe has reports for.
        let mine: Vec<_> = models
            .iter()
            .filter(|m| {
                let stem = m
                    .file_stem()
                    .map(|s| s.to_string_lossy().into_owned())
                    .unwrap_or_default();
                names.iter().any(|n| n.starts_with(&format!("{stem}_tp")))
            })
            .cloned()
            .collect();
        // One file for both executions, as the blockwise defaults: GPU time graphed, the same
        // times with the host profile eager (measured with blockwise: the launches and casts of
        // a module step; the provenance names it), and this recipe's step results
        // (`<recipe>/step/`) first where they measured a key.
        let step_label = Path::new("reports/h200").join(recipe).join("step");
        let folded = fp8_pipeline::fold::fold_files(
            &generate::build_all(&mine, &dir, &graphed, &Stderr)?,
            &generate::build_all(&mine, &dir, &eager, &Stderr)?,
            &build::Files::new(),
            &fp8_pipeline::step::step_policies(&dir.join("step"), &step_label)?,
        )?;
        for (rel, bytes) in folded {
            files.insert(Path::new(recipe).join(rel), bytes);
        }
    }
    let out = root.join("policies");
    if update {
        generate::write_files(&out, &files)?;
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

/// TE-measured policies for an eager trainer, from the TE reports that cover every module of a
/// model without activation recompute (the DeepSeek-V3 experts-only report and the recompute
/// variant are for the RESULTS tables, not a policy).
fn te_policies(models: &[PathBuf], dir: &Path) -> Result<build::Files, String> {
    let reports = build::read_reports(dir)?;
    // A TP size measured over a real TP group (te_tp, `provenance.tp_comm`) is decided by that
    // report, not by one rank alone: the TP 2 step with communication judged both
    // (docs/RESULTS.md, "TP 2 with communication, end to end").
    let comm: std::collections::BTreeSet<(&str, u32)> = reports
        .iter()
        .filter(|(_, r, _)| r.provenance.tp_comm)
        .map(|(_, r, _)| (r.provenance.model.as_str(), r.provenance.parallel.tp))
        .collect();
    let usable: Vec<_> = reports
        .iter()
        .filter(|(f, r, _)| !r.provenance.recompute && !f.to_string_lossy().contains("_experts"))
        .filter(|(_, r, _)| {
            r.provenance.tp_comm
                || !comm.contains(&(r.provenance.model.as_str(), r.provenance.parallel.tp))
        })
        .collect();
    let opt = MergeOptions {
        trainer: Some(fp8_merge::Trainer::Eager),
        ..MergeOptions::default()
    };
    let mut files = build::Files::new();
    for config in models {
        let model = fp8_engine::load_model(config).map_err(|e| e.to_string())?;
        let mine: Vec<_> = usable
            .iter()
            .copied()
            .filter(|r| r.1.provenance.model == model.name)
            .collect();
        if !mine.is_empty() {
            files.extend(build::build_model(&model, &mine, &opt)?.files);
        }
    }
    Ok(files)
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
