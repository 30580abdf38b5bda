//! The step model's policy from saved measurements (`adaptive-fp8-step-inputs` documents: a
//! layout's inputs, and its check and re-check), as `fp8sel merge-policy --step-model` and the
//! shipped policies make it: the same fit, choice and guard `gen-policy` ran on the GPU.

use std::path::{Path, PathBuf};

use fp8_merge::model::{ChoiceOptions, LayoutModel};
use fp8_merge::numerics::NumericsBound;
use fp8_policy::{Execution, Policy, Recipe};
use fp8_report::step_inputs::{StepInputs, read_step_inputs};

/// The recipe a step-inputs document was measured with (its `fp8_recipe`, Megatron's name).
fn recipe_of(inputs: &StepInputs, file: &Path) -> Result<Recipe, String> {
    inputs.fp8_recipe.parse().map_err(|e| {
        format!(
            "{}: field `fp8_recipe`: {e}; fix: measure again with python -m adaptive_fp8.bench.step_inputs --recipe",
            file.display()
        )
    })
}

/// Each inputs file's layout model (its recipe beside it), bounded by the numerics report of
/// its recipe among `bounds` (a report that names no recipe bounds every layout), then with the
/// checks of the same layout and recipe added, as `gen-policy` bounds before it checks. Files
/// are read under `root` where one is given, and named as given (the policy's provenance then
/// holds repository paths, not this machine's).
pub fn layout_models(
    inputs: &[PathBuf],
    checks: &[PathBuf],
    root: Option<&Path>,
    bounds: &[NumericsBound],
) -> Result<Vec<(Recipe, LayoutModel)>, String> {
    let at = |f: &Path| root.map_or_else(|| f.to_path_buf(), |r| r.join(f));
    let read = |f: &Path| read_step_inputs(&at(f)).map_err(|e| e.to_string());
    let check_files = checks;
    let checks = checks
        .iter()
        .map(|f| read(f))
        .collect::<Result<Vec<_>, _>>()?;
    // A check is its inputs' when it timed the same component's steps at the same layout.
    let layout = |d: &StepInputs| (d.model_name.clone(), d.component.clone(), d.tp, d.ep, d.etp);
    let mut out = Vec::new();
    for f in inputs {
        let doc = read(f)?;
        let executions: Vec<Execution> = [Execution::Eager, Execution::Graphed]
            .into_iter()
            .filter(|e| doc.step_times.iter().any(|s| s.execution == *e))
            .collect();
        let mine = layout(&doc);
        let parallel =
            fp8_engine::Parallel::new(doc.tp, doc.ep.unwrap_or(1), doc.etp.unwrap_or(1), 1);
        let options = ChoiceOptions::on_layout(parallel.token_step());
        let recipe = recipe_of(&doc, f)?;
        let mut lm = LayoutModel::new(doc, f, &executions, options).map_err(|e| e.to_string())?;
        if let Some(b) = bounds
            .iter()
            .find(|b| b.report.recipe.is_none_or(|r| r == recipe))
        {
            lm.bound(b);
        }
        let fp8_recipe = lm.inputs.fp8_recipe.clone();
        let own: Vec<(&PathBuf, &StepInputs)> = check_files
            .iter()
            .zip(&checks)
            .filter(|(_, c)| layout(c) == mine && c.fp8_recipe == fp8_recipe)
            .collect();
        // A check timed with the collector on and inputs with it off (or the reverse) measure
        // different steps: the disagreement would be the collector's, not the model's.
        if let Some((c, _)) = own.iter().find(|(_, c)| c.manual_gc != lm.inputs.manual_gc) {
            let off = |b: bool| if b { "off (--manual-gc)" } else { "on" };
            return Err(format!(
                "{}: timed with Python's garbage collector {}, its inputs {} with it {}; fix: \
                 measure the inputs and the check the same way",
                c.display(),
                off(!lm.inputs.manual_gc),
                f.display(),
                off(lm.inputs.manual_gc)
            ));
        }
        // A check on another GPU times another machine's steps: it cannot judge these inputs.
        if let Some((c, d)) = own.iter().find(|(_, c)| c.device != lm.inputs.device) {
            return Err(format!(
                "{}: field `device`: timed on {}, its inputs {} on {}; fix: check the inputs on \
                 the GPU that measured them (fp8sel gen-policy measures both in one run)",
                c.display(),
                d.device,
                f.display(),
                lm.inputs.device
            ));
        }
        let own: Vec<&StepInputs> = own.into_iter().map(|(_, c)| c).collect();
        lm.add_checks(&own);
        out.push((recipe, lm));
    }
    Ok(out)
}

/// The policy of the layout models: one recipe's, or with several the base's rules and the
/// per-module plan over all under `bounds` (`fp8_merge::model::recipes::mixed_policy`).
pub fn saved_policy(
    layouts: &[(Recipe, LayoutModel)],
    bounds: &[NumericsBound],
) -> Result<Policy, String> {
    let mut components: Vec<&str> = layouts
        .iter()
        .map(|l| l.1.inputs.component.as_str())
        .collect();
    components.sort_unstable();
    components.dedup();
    if components.len() > 1 {
        return Err(format!(
            "the step model's inputs time the steps of {} components ({}); a policy is one \
             component's; fix: merge each component's inputs apart (a VLM's language model into \
             <model>.llm.json, its vision encoder into <model>.vit.json)",
            components.len(),
            components.join(", ")
        ));
    }
    if let Some(other) = layouts
        .iter()
        .find(|l| l.1.inputs.device != layouts[0].1.inputs.device)
    {
        return Err(format!(
            "{}: field `device`: measured on {}, {} on {}; a policy is one machine's; fix: merge \
             each GPU's inputs apart",
            other.1.file.display(),
            other.1.inputs.device,
            layouts[0].1.file.display(),
            layouts[0].1.inputs.device
        ));
    }
    let mut recipes: Vec<Recipe> = layouts.iter().map(|l| l.0).collect();
    recipes.sort();
    recipes.dedup();
    if recipes.len() > 1 {
        // Several recipes: rules from the base (blockwise where measured), the plan over all.
        let margin = ChoiceOptions::default().margin;
        fp8_merge::model::recipes::mixed_policy(recipes[0], layouts, bounds, margin)
            .map_err(|e| e.to_string())
    } else {
        let only: Vec<LayoutModel> = layouts.iter().map(|l| l.1.clone()).collect();
        fp8_merge::model::model_policy(&only).map_err(|e| e.to_string())
    }
}
