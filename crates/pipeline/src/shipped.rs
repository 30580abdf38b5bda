//! The shipped policies: how `policies/` is assembled from the repository's committed H200
//! reports (cuBLASLt GPU times, TE's eager times, the training step's results, the H200 host
//! profile), per recipe. `cargo xtask gen-policy --check` compares it with the committed files.

use std::path::{Path, PathBuf};

use fp8_merge::MergeOptions;

use crate::build::Files;
use crate::progress::Progress;

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

/// The shipped `policies/`, built from the repository's committed reports (`reports/h200`, and
/// `policies/<recipe>/` from each recipe's folder) into memory, keyed by their path under
/// `policies/`. Each default `policies/<model>.json` serves both executions: `min_tokens_graphed`
/// from cuBLASLt GPU time, `min_tokens` (eager, what the reference's loader reads) from
/// Transformer Engine's own eager step times where the TE reports measured a key, else from the
/// same cuBLASLt reports with the H200 host profile (`crate::fold`).
pub fn shipped_policies(root: &Path, progress: &dyn Progress) -> Result<Files, String> {
    let models = crate::generate::default_models(root);
    let h200 = root.join("reports/h200");
    let graphed = MergeOptions {
        trainer: Some(fp8_policy::Execution::Graphed),
        ..MergeOptions::default()
    };
    let eager = MergeOptions {
        trainer: Some(fp8_policy::Execution::Eager),
        host_profile: Some(h200_host_profile(root)?),
        ..MergeOptions::default()
    };
    let mut files = crate::fold::fold_files(
        &crate::generate::build_all(&models, &h200, &graphed, progress)?,
        &crate::generate::build_all(&models, &h200, &eager, progress)?,
        &te_policies(&models, &h200.join("te"))?,
        &crate::step::step_policies(&h200.join("step"), Path::new("reports/h200/step"))?,
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
        let folded = crate::fold::fold_files(
            &crate::generate::build_all(&mine, &dir, &graphed, progress)?,
            &crate::generate::build_all(&mine, &dir, &eager, progress)?,
            &Files::new(),
            &crate::step::step_policies(&dir.join("step"), &step_label)?,
        )?;
        for (rel, bytes) in folded {
            files.insert(Path::new(recipe).join(rel), bytes);
        }
    }
    Ok(files)
}

/// TE-measured policies for an eager trainer, from the TE reports that cover every module of a
/// model without activation recompute (the DeepSeek-V3 experts-only report and the recompute
/// variant are for the RESULTS tables, not a policy).
fn te_policies(models: &[PathBuf], dir: &Path) -> Result<Files, String> {
    let reports = crate::build::read_reports(dir)?;
    // A TP size measured over a real TP group (te_tp, `provenance.tp_comm`) is decided by that
    // report, not by one rank alone: the TP 2 step with communication judged both
    // (docs/RESULTS.md, "TP 2 with communication vs one rank alone").
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
        trainer: Some(fp8_policy::Execution::Eager),
        ..MergeOptions::default()
    };
    let mut files = Files::new();
    for config in models {
        let model = fp8_engine::load_model(config).map_err(|e| e.to_string())?;
        let mine: Vec<_> = usable
            .iter()
            .copied()
            .filter(|r| r.1.provenance.model == model.name)
            .collect();
        if !mine.is_empty() {
            files.extend(crate::build::build_model(&model, &mine, &opt)?.files);
        }
    }
    Ok(files)
}
