//! The per-module recipe choice from per-module timings (the cuBLASLt, TE or cost-model
//! backends), where no whole step is measured: for each key and execution, at each measured
//! count, BF16 or the recipe with the largest speedup among those whose own threshold it has
//! reached and whose quantization error is within the bound (docs/POLICY.md, "Per-module
//! recipes"). The step model's choice (`model::recipes`) predicts the whole step instead; this
//! one is the proxy the per-module backends give, and where they are the cost model's
//! estimates (MXFP8 on Blackwell) the policy says so in its provenance.
//!
//! A recipe other than the base wins a count only where its speedup beats the base's by more
//! than `margin` of it: ties go to the base, as in the step model's choice. Above the largest
//! measured count each key keeps the recipe it has there (the thresholds hold FP8 upward).

use std::collections::{BTreeMap, BTreeSet};

use fp8_policy::{Execution, KeyRecipes, Recipe, RecipeFrom, RecipePlan, RuleKey};

use crate::numerics::{NumericsBound, per_recipe};
use crate::{MergeError, Merged, RuleOutcome, rule_key};

/// One recipe's merge of its per-module reports in one execution's objective.
pub struct RecipeMerge<'a> {
    /// The recipe the reports measured.
    pub recipe: Recipe,
    /// The execution whose thresholds the merge made (`MergeOptions::trainer`).
    pub execution: Execution,
    /// The merge.
    pub merged: &'a Merged,
}

/// The plan over the keys of `component` that the base recipe's merges hold. `bounds` holds
/// each recipe's numerics report: a recipe other than the base without one is refused (its error
/// is unknown), and so is a report that measured none of a key's modules.
pub fn module_recipe_plan(
    base: Recipe,
    merges: &[RecipeMerge],
    component: &str,
    bounds: &[NumericsBound],
    margin: f64,
) -> Result<RecipePlan, MergeError> {
    let recipes: BTreeSet<Recipe> = merges.iter().map(|m| m.recipe).collect();
    if !recipes.contains(&base) {
        return Err(MergeError::Options(format!(
            "the per-module recipe choice has no reports of its base recipe {base}"
        )));
    }
    if recipes.len() < 2 {
        return Err(MergeError::Options(format!(
            "the per-module recipe choice needs reports of two recipes or more (only {base})"
        )));
    }
    let listed: Vec<Recipe> = recipes.iter().copied().collect();
    per_recipe::require(base, &listed, bounds, "the reports of")?;
    // Per execution, per recipe: each key's outcome.
    let mut by: BTreeMap<(Execution, Recipe), BTreeMap<RuleKey, &RuleOutcome>> = BTreeMap::new();
    for m in merges {
        let keys = by.entry((m.execution, m.recipe)).or_default();
        for o in m
            .merged
            .outcomes
            .iter()
            .filter(|o| o.key.component == component)
        {
            if let Some(k) = rule_key(&o.key) {
                keys.insert(k, o);
            }
        }
    }
    let keys: BTreeSet<RuleKey> = by
        .iter()
        .filter(|((_, r), _)| *r == base)
        .flat_map(|(_, ks)| ks.keys().cloned())
        .collect();
    for key in &keys {
        for r in &recipes {
            per_recipe::covers(bounds, *r, component, key, "")?;
        }
    }
    let allowed = |key: &RuleKey, r: Recipe| per_recipe::allows(bounds, component, key, r);
    let steps = |key: &RuleKey, e: Execution| {
        let outcomes: Vec<(Recipe, &RuleOutcome)> = recipes
            .iter()
            .filter_map(|r| {
                by.get(&(e, *r))
                    .and_then(|ks| ks.get(key))
                    .map(|o| (*r, *o))
            })
            .filter(|(r, _)| allowed(key, *r))
            .collect();
        choose_steps(base, &outcomes, margin)
    };
    let keys = keys
        .iter()
        .map(|k| KeyRecipes {
            key: k.clone(),
            eager: steps(k, Execution::Eager),
            graphed: steps(k, Execution::Graphed),
        })
        .collect();
    let bound = bounds.iter().map(|b| b.max_quant_error).reduce(f64::max);
    Ok(RecipePlan {
        base,
        max_quant_error: bound,
        keys,
    })
}

/// One key's recipe over its measured counts, as steps: at each count the recipes whose own
/// threshold it has reached compete by speedup, a recipe beside `base` winning only by more
/// than `margin` of the base's speedup.
pub fn choose_steps(
    base: Recipe,
    outcomes: &[(Recipe, &RuleOutcome)],
    margin: f64,
) -> Vec<RecipeFrom> {
    let counts: BTreeSet<u64> = outcomes
        .iter()
        .flat_map(|(_, o)| o.counts.iter().copied())
        .collect();
    let speed = |o: &RuleOutcome, t: u64| {
        o.counts
            .iter()
            .position(|c| *c == t)
            .and_then(|i| o.speeds.get(i).copied())
            .filter(|s| s.is_finite())
    };
    let mut out: Vec<RecipeFrom> = Vec::new();
    for t in counts {
        let cands: Vec<(Recipe, f64)> = outcomes
            .iter()
            .filter(|(_, o)| o.rule.is_some_and(|(from, _)| from <= t))
            .filter_map(|(r, o)| speed(o, t).map(|s| (*r, s)))
            .collect();
        let best = cands.iter().copied().max_by(|a, b| a.1.total_cmp(&b.1));
        let pick = match (best, cands.iter().find(|(r, _)| *r == base)) {
            (Some((_, s)), Some(&(b, sb))) if sb * (1.0 + margin) >= s => Some(b),
            (Some((r, _)), _) => Some(r),
            (None, _) => None,
        };
        let last = out.last().and_then(|s| s.recipe);
        if (out.is_empty() && pick.is_some()) || (!out.is_empty() && pick != last) {
            out.push(RecipeFrom {
                from: t,
                recipe: pick,
            });
        }
    }
    out
}

/// The plan for people, appended to a policy's `<model>.md`: each key's recipe per execution.
pub fn plan_markdown(plan: &RecipePlan) -> String {
    let mut s = format!(
        "\n## Recipes per module\n\nThe policy's `recipes` plan (docs/POLICY.md, \"Per-module recipes\"): `rules` are the base recipe's \
         ({}, what the reference's loader reads); each key below runs its own recipe per count. Bound on a module's quantization \
         error: {}.\n\n| key | eager | graphed |\n|---|---|---|\n",
        plan.base,
        plan.max_quant_error
            .map_or_else(|| "none".to_owned(), |b| format!("{b}"))
    );
    for k in &plan.keys {
        s.push_str(&format!(
            "| {} | {} | {} |\n",
            k.key,
            k.steps_in_words(Execution::Eager),
            k.steps_in_words(Execution::Graphed)
        ));
    }
    s
}
