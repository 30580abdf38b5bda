//! The step model's per-module recipe choice: for each policy key, BF16 or one of several FP8
//! recipes, the plan the models predict fastest among the recipes each key's measured
//! quantization error allows (docs/POLICY.md, "Per-module recipes").
//!
//! One [`LayoutModel`] per recipe, each fitted on that recipe's inputs (the same layout, its
//! FP8 modules and whole steps measured with that recipe). A mixed plan `A` (unit -> recipe or
//! BF16) at `t` tokens is predicted as the base recipe's all-BF16 step plus each recipe's own
//! predicted change for the units it runs:
//!
//! ```text
//! Step(A, t) = Step_base(none, t) + sum_r [ Step_r(A_r, t) - Step_r(none, t) ]
//! ```
//!
//! (`A_r` the units `A` runs in recipe `r`), which is each recipe's model where `A` uses one
//! recipe. At each grid count a unit's candidates are BF16 and each allowed recipe whose own
//! threshold (the single-recipe choice, noise-pruned and guarded by its check) it has reached;
//! the plan is the least predicted step over every combination (coordinate descent above
//! [`EXHAUSTIVE`] combinations); then a unit on another recipe goes back to the base where the
//! base is a candidate and the other's gain is within `margin` of the step. So where a recipe
//! is chosen alone the plan is that recipe's policy, and a mix is chosen only where the models
//! predict it faster. Above the largest swept count a key FP8 at the top keeps its recipe (only
//! where FP8 starts is extrapolated). Each unit's recipe over the grid becomes its steps
//! (`fp8_policy::RecipeFrom`), in the key's own tokens.

use std::collections::{BTreeMap, BTreeSet};

use fp8_policy::{Execution, KeyRecipes, Recipe, RecipeFrom, RecipePlan, RuleKey};

use super::LayoutModel;
use super::choose::{Unit, grid};

/// Most combinations tried one by one at a count; above, coordinate descent.
pub const EXHAUSTIVE: usize = 6561;

/// Whether a key may run a recipe, by its measured quantization error.
pub trait Allowed {
    /// True when every module of `key` is within the bound under `recipe`.
    fn allows(&self, key: &RuleKey, recipe: Recipe) -> bool;
}

impl<F: Fn(&RuleKey, Recipe) -> bool> Allowed for F {
    fn allows(&self, key: &RuleKey, recipe: Recipe) -> bool {
        self(key, recipe)
    }
}

/// One layout's models, one per recipe, the base first.
pub struct RecipeModels<'a> {
    /// The recipe the policy's `rules` answer for.
    pub base: Recipe,
    /// Each recipe's model of the same layout.
    pub models: Vec<(Recipe, &'a LayoutModel)>,
}

/// One count's mixed plan: per unit (of the base model's units) its recipe, `None` for BF16.
#[derive(Debug, Clone, PartialEq)]
pub struct MixedChoice {
    /// The step's token count.
    pub tokens: u64,
    /// Per unit, its recipe.
    pub recipes: Vec<Option<Recipe>>,
    /// The predicted wall ms of the plan.
    pub predicted: f64,
    /// The best single-recipe plan's predicted wall ms (each recipe's own thresholds).
    pub best_single: f64,
}

impl RecipeModels<'_> {
    fn base_model(&self) -> &LayoutModel {
        self.models
            .iter()
            .find(|(r, _)| *r == self.base)
            .map_or(self.models[0].1, |m| m.1)
    }

    /// Unit `i` of the base model in recipe `r`'s model: the same key.
    fn unit_in(&self, m: &LayoutModel, u: &Unit) -> Option<usize> {
        m.units.iter().position(|v| v.key == u.key)
    }

    /// The predicted wall ms of `plan` at `t` (the module formula).
    fn predict(&self, e: Execution, plan: &[Option<Recipe>], t: u64) -> Option<f64> {
        let base = self.base_model();
        let tf = t as f64;
        let none = BTreeSet::new();
        let mut wall = base.fits.get(&e)?.predict(&none, tf).wall;
        for (r, m) in &self.models {
            let on: BTreeSet<&str> = base
                .units
                .iter()
                .zip(plan)
                .filter(|(_, p)| **p == Some(*r))
                .filter_map(|(u, _)| self.unit_in(m, u).map(|j| &m.units[j]))
                .flat_map(|u| u.groups.iter().map(String::as_str))
                .collect();
            if on.is_empty() {
                continue;
            }
            let fit = m.fits.get(&e)?;
            wall += fit.predict(&on, tf).wall - fit.predict(&none, tf).wall;
        }
        Some(wall)
    }

    /// Unit `i`'s candidates at `t`: BF16, and each allowed recipe whose own threshold for it
    /// lies at or below `t`.
    fn candidates(
        &self,
        e: Execution,
        i: usize,
        t: u64,
        allowed: &dyn Allowed,
    ) -> Vec<Option<Recipe>> {
        let u = &self.base_model().units[i];
        let mut out = vec![None];
        for (r, m) in &self.models {
            let Some(j) = self.unit_in(m, u) else {
                continue;
            };
            let from = m.thresholds.get(&e).and_then(|th| th[j].from);
            if from.is_some_and(|f| f <= t) && allowed.allows(&u.key, *r) {
                out.push(Some(*r));
            }
        }
        out
    }

    /// The mixed plan at `t` in execution `e`.
    pub fn choose(
        &self,
        e: Execution,
        t: u64,
        margin: f64,
        allowed: &dyn Allowed,
    ) -> Option<MixedChoice> {
        let n = self.base_model().units.len();
        let cands: Vec<Vec<Option<Recipe>>> =
            (0..n).map(|i| self.candidates(e, i, t, allowed)).collect();
        let wall = |p: &[Option<Recipe>]| self.predict(e, p, t).unwrap_or(f64::INFINITY);
        // Each recipe's own plan (its thresholds, within the bound), as a start and a bar.
        let singles: Vec<Vec<Option<Recipe>>> = self
            .models
            .iter()
            .map(|(r, _)| {
                cands
                    .iter()
                    .map(|c| c.iter().copied().find(|x| *x == Some(*r)))
                    .map(Option::flatten)
                    .collect()
            })
            .collect();
        let best_single = singles
            .iter()
            .map(|p| wall(p))
            .fold(wall(&vec![None; n]), f64::min);
        let combos = cands.iter().try_fold(1usize, |a, c| a.checked_mul(c.len()));
        let mut best: Vec<Option<Recipe>> = singles
            .iter()
            .min_by(|a, b| wall(a).total_cmp(&wall(b)))
            .cloned()
            .unwrap_or_else(|| vec![None; n]);
        if combos.is_some_and(|c| c <= EXHAUSTIVE) {
            let mut idx = vec![0usize; n];
            loop {
                let p: Vec<Option<Recipe>> = idx.iter().zip(&cands).map(|(&k, c)| c[k]).collect();
                if wall(&p) < wall(&best) {
                    best = p;
                }
                let Some(d) = (0..n).find(|&d| idx[d] + 1 < cands[d].len()) else {
                    break;
                };
                idx[d] += 1;
                idx[..d].iter_mut().for_each(|k| *k = 0);
            }
        } else {
            // Coordinate descent: each unit its best candidate given the others, until stable.
            for _ in 0..8 {
                let before = best.clone();
                for i in 0..n {
                    for &c in &cands[i] {
                        let mut p = best.clone();
                        p[i] = c;
                        if wall(&p) < wall(&best) {
                            best = p;
                        }
                    }
                }
                if best == before {
                    break;
                }
            }
        }
        // Ties go to the base recipe.
        for i in 0..n {
            if best[i].is_some_and(|r| r != self.base) && cands[i].contains(&Some(self.base)) {
                let mut p = best.clone();
                p[i] = Some(self.base);
                if wall(&p) - wall(&best) <= margin * wall(&best) {
                    best = p;
                }
            }
        }
        let predicted = wall(&best);
        predicted.is_finite().then_some(MixedChoice {
            tokens: t,
            recipes: best,
            predicted,
            best_single,
        })
    }

    /// Each unit's steps over the grid in every execution the models share, and the choices.
    pub fn plan(
        &self,
        margin: f64,
        allowed: &dyn Allowed,
    ) -> (Vec<KeyRecipes>, BTreeMap<Execution, Vec<MixedChoice>>) {
        let base = self.base_model();
        let counts = grid(&base.swept, &base.options);
        let mut choices = BTreeMap::new();
        for &e in base.fits.keys() {
            if self.models.iter().all(|(_, m)| m.fits.contains_key(&e)) {
                let mut c: Vec<MixedChoice> = counts
                    .iter()
                    .filter_map(|&t| self.choose(e, t, margin, allowed))
                    .collect();
                hold_above_the_sweep(&mut c, base.swept.last().copied().unwrap_or(0));
                choices.insert(e, c);
            }
        }
        let keys = base
            .units
            .iter()
            .enumerate()
            .map(|(i, u)| {
                let steps = |e: Execution| {
                    steps_of(choices.get(&e).map_or(&[][..], Vec::as_slice), i, u.scale)
                };
                KeyRecipes {
                    key: u.key.clone(),
                    eager: steps(Execution::Eager),
                    graphed: steps(Execution::Graphed),
                }
            })
            .collect();
        (keys, choices)
    }
}

/// Above the largest swept count the models are extrapolated, each recipe on its own line: a
/// key that runs an FP8 recipe at the top of the sweep keeps that recipe above it (a switch
/// between FP8 recipes there would rest on two extrapolations); a key BF16 there takes the
/// choice (where the models say FP8 starts).
pub(super) fn hold_above_the_sweep(choices: &mut [MixedChoice], top: u64) {
    let Some(at_top) = choices.iter().rposition(|c| c.tokens <= top) else {
        return;
    };
    let held = choices[at_top].recipes.clone();
    for c in &mut choices[at_top + 1..] {
        for (r, h) in c.recipes.iter_mut().zip(&held) {
            if h.is_some() {
                *r = *h;
            }
        }
    }
}

/// Unit `i`'s recipe over ascending choices as steps: one where the recipe changes, none for
/// the BF16 start; counts times `scale` (the key's own tokens).
fn steps_of(choices: &[MixedChoice], i: usize, scale: u64) -> Vec<RecipeFrom> {
    let mut out: Vec<RecipeFrom> = Vec::new();
    for c in choices {
        let r = c.recipes[i];
        let last = out.last().and_then(|s| s.recipe);
        if (out.is_empty() && r.is_some()) || (!out.is_empty() && r != last) {
            out.push(RecipeFrom {
                from: c.tokens.saturating_mul(scale.max(1)),
                recipe: r,
            });
        }
    }
    out
}

/// The plan of several layouts: their keys (a key two layouts share keeps the first), sorted.
pub fn recipe_plan(
    base: Recipe,
    max_quant_error: Option<f64>,
    layouts: Vec<Vec<KeyRecipes>>,
) -> RecipePlan {
    let mut by: BTreeMap<RuleKey, KeyRecipes> = BTreeMap::new();
    for k in layouts.into_iter().flatten() {
        by.entry(k.key.clone()).or_insert(k);
    }
    RecipePlan {
        base,
        max_quant_error,
        keys: by.into_values().collect(),
    }
}

/// The per-module recipe policy of the layouts measured in several recipes: `rules` from the
/// base recipe's models (`model_policy`, what the reference's loader reads), and the plan
/// over every layout the other recipes measured too. `bounds` holds each recipe's numerics
/// report; a recipe other than the base without one is refused (its error is unknown), and
/// under `max_quant_error` a key runs a recipe only where every module of it is within the bound.
pub fn mixed_policy(
    base: Recipe,
    layouts: &[(Recipe, LayoutModel)],
    bounds: &[crate::numerics::NumericsBound],
    margin: f64,
) -> Result<fp8_policy::Policy, crate::MergeError> {
    let of = |r: Recipe| layouts.iter().filter(move |(x, _)| *x == r).map(|(_, m)| m);
    let base_layouts: Vec<LayoutModel> = of(base).cloned().collect();
    let mut policy = super::model_policy(&base_layouts)?;
    let mut recipes: Vec<Recipe> = layouts.iter().map(|(r, _)| *r).collect();
    recipes.sort();
    recipes.dedup();
    crate::numerics::per_recipe::require(base, &recipes, bounds, "the step model's inputs of")?;
    let same = |a: &LayoutModel, b: &LayoutModel| {
        (&a.inputs.model_name, a.inputs.tp, a.inputs.ep, a.inputs.etp)
            == (&b.inputs.model_name, b.inputs.tp, b.inputs.ep, b.inputs.etp)
    };
    let mut keys = Vec::new();
    for b in &base_layouts {
        let mut models = vec![(base, b)];
        for (r, m) in layouts.iter().filter(|(r, m)| *r != base && same(b, m)) {
            models.push((*r, m));
        }
        if models.len() > 1 {
            let component = b.inputs.component.as_str();
            uncovered(bounds, &models, b, component)?;
            let allowed = |key: &RuleKey, r: Recipe| {
                crate::numerics::per_recipe::allows(bounds, component, key, r)
            };
            keys.push(RecipeModels { base, models }.plan(margin, &allowed).0);
        }
    }
    let bound = bounds.iter().map(|b| b.max_quant_error).reduce(f64::max);
    policy.set_recipe_plan(recipe_plan(base, bound, keys))?;
    Ok(policy)
}

/// A recipe's numerics report that measured none of a key's modules (a report of another
/// model): refused, or that key would run the recipe with its error unknown.
fn uncovered(
    bounds: &[crate::numerics::NumericsBound],
    models: &[(Recipe, &LayoutModel)],
    layout: &LayoutModel,
    component: &str,
) -> Result<(), crate::MergeError> {
    let of = format!(", a key of {}'s inputs", layout.file.display());
    for (r, _) in models {
        for u in &layout.units {
            crate::numerics::per_recipe::covers(bounds, *r, component, &u.key, &of)?;
        }
    }
    Ok(())
}
