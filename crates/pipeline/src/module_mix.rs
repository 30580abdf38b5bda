//! Per-module recipes in `gen-policy` with a per-module backend (cuBLASLt, TE, or the cost
//! model's estimates, where Blackwell's MXFP8 has no GPU here): each further recipe's reports
//! beside the base's (`<reports>/<recipe>/`), then each policy file of the base recipe gets the
//! plan `fp8_merge::module_recipes` chooses from the per-module speedups of every recipe, in
//! each execution's objective, under the given numerics reports.

use std::path::{Path, PathBuf};

use fp8_merge::MergeOptions;
use fp8_merge::module_recipes::{RecipeMerge, module_recipe_plan};
use fp8_policy::{Execution, Policy, Recipe};

use crate::build::{Files, load_model, read_reports, with_instances};

/// Per-module recipes: the further recipes to measure beside the base (with the step model,
/// each in its inputs, its check and the numerics probe), and the bound on a module's
/// quantization error.
#[derive(Debug, Clone, PartialEq)]
pub struct RecipeMix {
    /// The recipes beside the base, in the order given.
    pub recipes: Vec<fp8_policy::Recipe>,
    /// Numerics reports given (one per recipe, each naming its recipe): a recipe with one is
    /// not probed again.
    pub numerics: Vec<fp8_merge::numerics::NumericsBound>,
    /// The largest relative RMS error a module may have and run a recipe.
    pub max_quant_error: f64,
}

/// Where recipe `r`'s reports go beside the base's.
pub fn recipe_reports(reports_dir: &Path, r: Recipe) -> PathBuf {
    reports_dir.join(r.name())
}

/// Every recipe of `mix` that lacks a numerics report: the per-module backends cannot probe
/// (the probe trains the model in TE), so the choice is refused before anything is measured.
pub fn check_numerics(base: Recipe, mix: &RecipeMix) -> Result<(), String> {
    let missing: Vec<String> = std::iter::once(base)
        .chain(mix.recipes.iter().copied())
        .filter(|r| !mix.numerics.iter().any(|b| b.report.recipe == Some(*r)))
        .filter(|r| *r != base)
        .map(|r| r.name().to_owned())
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    Err(format!(
        "the per-module recipe choice needs each recipe's quantization error, and this backend \
         cannot probe it: no numerics report of {}; fix: run `python -m \
         adaptive_fp8.bench.numerics --model ... --recipe R --out R.json` on a GPU with TE (it \
         emulates every recipe, mxfp8 included) and pass the reports with --numerics",
        missing.join(", ")
    ))
}

/// Each execution's merge options, as the base policy's files are made: graphed from GPU time,
/// eager from the eager source where one is known (`eager_known`), else GPU time too.
pub fn execution_objectives(merge: &MergeOptions, eager_known: bool) -> [MergeOptions; 2] {
    let graphed = MergeOptions {
        trainer: Some(Execution::Graphed),
        host_profile: None,
        host_floor_ms: None,
        ..merge.clone()
    };
    let eager = MergeOptions {
        trainer: eager_known.then_some(Execution::Eager),
        ..merge.clone()
    };
    [graphed, eager]
}

/// What [`attach_plans`] reads: the models, the base recipe's reports and merge settings.
pub struct PlanInputs<'a> {
    /// Model configs.
    pub configs: &'a [PathBuf],
    /// How far Hydra `defaults` may reach.
    pub config_root: Option<&'a Path>,
    /// The base recipe (its reports in `reports_dir`).
    pub base: Recipe,
    /// The base recipe's reports.
    pub reports_dir: &'a Path,
    /// The merge settings the policies were made with.
    pub merge: &'a MergeOptions,
    /// Whether the eager objective has a source (the TE backend's times, a host profile).
    pub eager_known: bool,
}

/// Puts the recipe plan into each policy file of `i.configs` in `files` (the base recipe's,
/// made from `i.reports_dir`), the other recipes' reports read from [`recipe_reports`].
pub fn attach_plans(files: &mut Files, i: &PlanInputs, mix: &RecipeMix) -> Result<(), String> {
    let (base, reports_dir) = (i.base, i.reports_dir);
    let dirs: Vec<(Recipe, PathBuf)> = std::iter::once((base, reports_dir.to_path_buf()))
        .chain(
            mix.recipes
                .iter()
                .map(|r| (*r, recipe_reports(reports_dir, *r))),
        )
        .collect();
    let reports: Vec<(Recipe, Vec<_>)> = dirs
        .iter()
        .map(|(r, d)| read_reports(d).map(|v| (*r, v)))
        .collect::<Result<_, _>>()?;
    let margin = i.merge.margin;
    for config in i.configs {
        let model = load_model(config, i.config_root)?;
        let mut merged = Vec::new();
        for (r, all) in &reports {
            let loaded: Vec<_> = all
                .iter()
                .filter(|x| x.1.provenance.model == model.name)
                .map(|x| with_instances(&model, x).2)
                .collect();
            if loaded.is_empty() {
                return Err(format!(
                    "{}: no {r} reports of {} for the per-module recipe choice",
                    config.display(),
                    model.name
                ));
            }
            let [graphed, eager] = execution_objectives(i.merge, i.eager_known);
            for (e, opt) in [(Execution::Graphed, graphed), (Execution::Eager, eager)] {
                // The choice bounds each recipe by its own report, not one merge by the bound.
                let opt = MergeOptions {
                    numerics: None,
                    ..opt
                };
                let m = fp8_merge::merge(&loaded, &opt).map_err(|e| e.to_string())?;
                merged.push((*r, e, m));
            }
        }
        let merges: Vec<RecipeMerge> = merged
            .iter()
            .map(|(r, e, m)| RecipeMerge {
                recipe: *r,
                execution: *e,
                merged: m,
            })
            .collect();
        let components: std::collections::BTreeSet<String> = merged
            .iter()
            .filter(|(r, _, _)| *r == base)
            .flat_map(|(_, _, m)| m.policies.keys().cloned())
            .collect();
        let single = components.len() == 1;
        for comp in &components {
            let name = PathBuf::from(if single {
                format!("{}.json", model.name)
            } else {
                format!("{}.{comp}.json", model.name)
            });
            let Some(bytes) = files.get(&name) else {
                continue;
            };
            let text = String::from_utf8_lossy(bytes).into_owned();
            let mut policy = Policy::from_json_str(&text, &name).map_err(|e| e.to_string())?;
            let plan = module_recipe_plan(base, &merges, comp, &mix.numerics, margin)
                .map_err(|e| format!("{}: {e}", name.display()))?;
            let words = fp8_merge::module_recipes::plan_markdown(&plan);
            policy.set_recipe_plan(plan).map_err(|e| e.to_string())?;
            files.insert(name, policy.to_json().into_bytes());
            if let Some(md) = files.get_mut(&PathBuf::from(format!("{}.md", model.name))) {
                md.extend_from_slice(words.as_bytes());
            }
        }
    }
    Ok(())
}
