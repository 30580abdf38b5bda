//! The shipped policies: how `policies/` is assembled from the repository's committed H200
//! reports (cuBLASLt GPU times, TE's eager times, the training step's results, the H200 host
//! profile), per recipe. `cargo xtask gen-policy --check` compares it with the committed files.

use std::path::{Path, PathBuf};

use fp8_merge::MergeOptions;
use fp8_policy::Recipe;

use crate::build::Files;
use crate::progress::Progress;

/// Where the step model's committed measurements of the shipped models live (what
/// `scripts/device/regen_shipped.sh` brings back: each layout's inputs, check and re-check, as
/// `fp8sel gen-policy` wrote them on the H200).
pub const STEP_MODEL_DIR: &str = "reports/h200/step_model";

/// The recipes besides blockwise with measured H200 reports in `reports/h200/<recipe>/`;
/// their policies go to `policies/<recipe>/`.
pub const RECIPE_DIRS: [Recipe; 2] = [Recipe::Tensorwise, Recipe::Delayed];

/// Where the step model's committed measurements of the shipped models in `recipe` live:
/// [`STEP_MODEL_DIR`] for blockwise (the defaults'), `reports/h200/<recipe>/step_model` for the
/// others (`fp8sel gen-policy --recipe <recipe>`'s reports, as `regen_shipped.sh` brings them back).
pub fn step_model_dir(recipe: Recipe) -> PathBuf {
    match recipe {
        Recipe::Blockwise => PathBuf::from(STEP_MODEL_DIR),
        r => Path::new("reports/h200").join(r.name()).join("step_model"),
    }
}

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
        &crate::build::build_all(&models, &h200, &graphed, progress)?,
        &crate::build::build_all(&models, &h200, &eager, progress)?,
        &te_policies(&models, &h200.join("te"))?,
        &crate::step::step_policies(&h200.join("step"), Path::new("reports/h200/step"))?,
    )?;
    step_model_files(root, Recipe::Blockwise, &models, &mut files, progress)?;
    for r in RECIPE_DIRS {
        let recipe = r.name();
        let dir = h200.join(recipe);
        let names = |d: &Path| -> Vec<String> {
            std::fs::read_dir(d)
                .into_iter()
                .flatten()
                .filter_map(Result::ok)
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        };
        let names = [names(&dir), names(&root.join(step_model_dir(r)))].concat();
        // Only the models this recipe has reports for (per module or of the step model).
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
        if mine.is_empty() {
            continue;
        }
        // One file for both executions, as the blockwise defaults: GPU time graphed, the same
        // times with the host profile eager (measured with blockwise: the launches and casts of
        // a module step; the provenance names it), and this recipe's step results
        // (`<recipe>/step/`) first where they measured a key.
        let step_label = Path::new("reports/h200").join(recipe).join("step");
        let mut folded = crate::fold::fold_files(
            &crate::build::build_all(&mine, &dir, &graphed, progress)?,
            &crate::build::build_all(&mine, &dir, &eager, progress)?,
            &Files::new(),
            &crate::step::step_policies(&dir.join("step"), &step_label)?,
        )?;
        // As the defaults: the step model's file of this recipe in place of the fold once its
        // reports cover every key the fold has.
        step_model_files(root, r, &mine, &mut folded, progress)?;
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

/// A model's step-model files in `dir` (under `root`): its base recipe's inputs, and its
/// checks and re-checks, as repository paths.
fn step_model_reports(root: &Path, dir: &Path, model: &str) -> (Vec<PathBuf>, Vec<PathBuf>) {
    let Ok(rd) = std::fs::read_dir(root.join(dir)) else {
        return (Vec::new(), Vec::new());
    };
    let mut names: Vec<String> = rd
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    let (mut inputs, mut checks) = (Vec::new(), Vec::new());
    for n in names {
        let Some(rest) = n.strip_prefix(&format!("{model}_tp")) else {
            continue;
        };
        // <tp>_ep<e>_etp<t>_<what>_step.json: another recipe's files carry one more word.
        let words: Vec<&str> = rest.trim_end_matches("_step.json").split('_').collect();
        match words.as_slice() {
            [_, ep, etp, "inputs"] if ep.starts_with("ep") && etp.starts_with("etp") => {
                inputs.push(dir.join(&n));
            }
            [tp, ep, etp, word] if ep.starts_with("ep") && etp.starts_with("etp") => {
                if let Some(round) = fp8_report::step_inputs::check_round(word) {
                    checks.push(((format!("{tp}_{ep}_{etp}"), round), dir.join(&n)));
                }
            }
            _ => {}
        }
    }
    // A layout's check rounds in round order (by name, `recheck2` would sort before `recheck`).
    checks.sort();
    (inputs, checks.into_iter().map(|(_, f)| f).collect())
}

/// Puts the step model's policy of each model whose layouts it measured in `recipe` (in
/// [`step_model_dir`]) in place of the folded one (a VLM: its language model's
/// `<model>.llm.json` from `<model>_tp...` reports, its vision encoder's `<model>.vit.json` from
/// `<model>_vit_tp...` ones), with its summary and pictures, once it covers every key the folded
/// file has a rule for; until then the folded file stays, and a note says what is missing. A
/// report measured in another recipe is an error: that folder's file ships as `recipe`'s.
pub fn step_model_files(
    root: &Path,
    recipe: Recipe,
    models: &[PathBuf],
    files: &mut Files,
    progress: &dyn Progress,
) -> Result<(), String> {
    let dir = &step_model_dir(recipe);
    for config in models {
        let model = fp8_engine::load_model(config).map_err(|e| e.to_string())?;
        let vlm = model.components.len() > 1;
        let part = |stem: String, file: String, title: String, files: &mut Files| {
            let part = Part {
                stem,
                file: PathBuf::from(file),
                title,
            };
            step_model_part(root, (dir, recipe), &model.name, &part, files, progress)
        };
        let llm_file = if vlm {
            format!("{}.llm.json", model.name)
        } else {
            format!("{}.json", model.name)
        };
        let llm = part(model.name.clone(), llm_file, model.name.clone(), files)?;
        let vit = if vlm {
            part(
                format!("{}_vit", model.name),
                format!("{}.vit.json", model.name),
                format!("{}'s vision encoder", model.name),
                files,
            )?
        } else {
            None
        };
        let md_name = PathBuf::from(format!("{}.md", model.name));
        let md = match (vlm, vit, llm) {
            // Both parts the step model's: the folded summary describes neither.
            (_, Some(v), Some(l)) => format!("{v}\n{l}").into_bytes(),
            // A VLM's summary keeps its folded part; the step model's follows.
            (true, v, l) => {
                let Some(new) = v.or(l) else { continue };
                let mut old = files.get(&md_name).cloned().unwrap_or_default();
                if !old.is_empty() {
                    old.extend_from_slice(b"\n");
                }
                old.extend_from_slice(new.as_bytes());
                old
            }
            (false, _, Some(l)) => l.into_bytes(),
            (false, _, None) => continue,
        };
        files.insert(md_name, md);
    }
    Ok(())
}

/// One part of a model under the step model: its reports' stem, its policy file, its summary's
/// title.
struct Part {
    stem: String,
    file: PathBuf,
    title: String,
}

/// `part`'s step-model policy and pictures into `files` in place of the folded ones, and its
/// summary; `None` where it has no reports or does not cover the folded file (said).
fn step_model_part(
    root: &Path,
    (dir, recipe): (&Path, Recipe),
    model: &str,
    part: &Part,
    files: &mut Files,
    progress: &dyn Progress,
) -> Result<Option<String>, String> {
    let (inputs, checks) = step_model_reports(root, dir, &part.stem);
    if inputs.is_empty() {
        return Ok(None);
    }
    let layouts = crate::step::saved::layout_models(&inputs, &checks, Some(root), &[])?;
    if let Some((r, lm)) = layouts.iter().find(|(r, _)| *r != recipe) {
        return Err(format!(
            "{}: field `fp8_recipe`: measured in {r}, in {}, whose reports make the shipped {recipe} policy; fix: \
             move it to {}",
            lm.file.display(),
            dir.display(),
            step_model_dir(*r).display()
        ));
    }
    // The folder is the H200's: another GPU's measurements would ship as the H200's policy.
    if let Some((_, lm)) = layouts
        .iter()
        .find(|(_, lm)| !lm.inputs.device.contains("H200"))
    {
        return Err(format!(
            "{}: field `device`: measured on {}, in {}, whose reports make the shipped (H200) \
             policy; fix: keep another GPU's reports out of reports/h200 (measure the shipped \
             models on an H200)",
            lm.file.display(),
            lm.inputs.device,
            dir.display()
        ));
    }
    let policy = crate::step::saved::saved_policy(&layouts, &[])?;
    let covered: std::collections::BTreeSet<fp8_policy::RuleKey> = policy
        .rule_keys()
        .into_iter()
        .chain(policy.measured_bf16_keys().iter().cloned())
        .collect();
    if let Some(bytes) = files.get(&part.file) {
        let folded = fp8_policy::Policy::from_json_str(&String::from_utf8_lossy(bytes), &part.file)
            .map_err(|e| e.to_string())?;
        let missing: Vec<String> = folded
            .rule_keys()
            .into_iter()
            .filter(|k| !covered.contains(k))
            .map(|k| k.to_string())
            .collect();
        if !missing.is_empty() {
            progress.note(&format!(
                "{}: the step model's reports in {} cover {} of the shipped file's keys; it stays the fold until they cover {}",
                part.file.display(),
                dir.display(),
                covered.len(),
                missing.join(", ")
            ));
            return Ok(None);
        }
    }
    let models: Vec<fp8_merge::model::LayoutModel> = layouts.into_iter().map(|l| l.1).collect();
    files.insert(part.file.clone(), policy.to_json().into_bytes());
    // The fold's per-module plots of this part describe thresholds that no longer ship; the step
    // model's pictures take their place (a VLM's fold draws `llm-*` and `vit-*`; the step model's
    // vision encoder `vit-step-*`, its language model `step-*`).
    let plots = PathBuf::from(format!("plots/{model}"));
    let fold = if part.stem == model { "llm-" } else { "vit-" };
    files.retain(|p, _| {
        !(p.starts_with(&plots)
            && p.file_name()
                .is_some_and(|f| f.to_string_lossy().starts_with(fold)))
    });
    files.extend(crate::step::plot::step_plots(model, &models)?);
    Ok(Some(fp8_merge::model::summary_markdown(
        &part.title,
        &models,
    )))
}
