//! Committed step results (`reports/h200/step/`, `reports/h200/<recipe>/step/`) as one policy
//! per model, for `cargo xtask gen-policy`.

use std::path::{Path, PathBuf};

/// The step policies of committed step results: every `<model>_tp*_step.json` in `dir` (the
/// files `gen-policy --backend step` writes), one policy per model, `<model>.json`. The
/// results are named in provenance as `label/<file>` (a repository path, not this machine's).
pub fn step_policies(dir: &Path, label: &Path) -> Result<crate::build::Files, String> {
    let mut by_model: std::collections::BTreeMap<String, Vec<fp8_merge::step::StepRun>> =
        std::collections::BTreeMap::new();
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Ok(crate::build::Files::new());
    };
    let mut names: Vec<String> = rd
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with("_step.json"))
        .collect();
    names.sort();
    for name in names {
        let Some((model, _)) = name.rsplit_once("_tp") else {
            return Err(format!(
                "{}: not a step result's name (<model>_tp<N>_ep<N>_etp<N>_step.json)",
                dir.join(&name).display()
            ));
        };
        let text =
            fp8_io::read_to_string_limited(&dir.join(&name), fp8_merge::step::MAX_STEP_BYTES)
                .map_err(|e| e.to_string())?;
        let runs =
            fp8_merge::step::parse_results(&text, &label.join(&name)).map_err(|e| e.to_string())?;
        by_model.entry(model.to_owned()).or_default().extend(runs);
    }
    let mut out = crate::build::Files::new();
    for (model, runs) in by_model {
        let policy = fp8_merge::step::step_policy(&runs).map_err(|e| format!("{model}: {e}"))?;
        out.insert(
            PathBuf::from(format!("{model}.json")),
            policy.to_json().into_bytes(),
        );
    }
    Ok(out)
}
