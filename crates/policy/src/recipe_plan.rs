//! A per-module recipe plan: for some keys, which recipe (or BF16) runs from which token count,
//! per execution. The policy's `rules` stay the base recipe's FP8-or-BF16 answer, so the
//! reference's loader (which reads `rules` and ignores other top-level keys) reads a file with a
//! plan as the base recipe's policy; this crate's lookups and the integrations read the plan.
//!
//! In the file (top-level `recipes`, docs/POLICY.md "Per-module recipes"):
//!
//! ```json
//! "recipes": {"base": "blockwise", "max_quant_error": 0.06, "keys": [
//!   {"key": {"kind": "row", "ub_name": "fc2", "tp": 1},
//!    "eager": [{"from": 2048, "recipe": "tensorwise"}, {"from": 16384, "recipe": "blockwise"}],
//!    "graphed": [{"from": 512, "recipe": "tensorwise"}]}]}
//! ```
//!
//! A key's steps rise in `from`; the last step at or below the count gives the recipe (`bf16`
//! runs the module in BF16); below the first step the module runs BF16. A key the plan does not
//! list follows `rules` under the base recipe.

use serde_json::{Map, Value};

use crate::execution::Execution;
use crate::recipe::Recipe;
use crate::rule_key::RuleKey;

/// The recipes a per-module plan may use: those Megatron's per-module precision config takes
/// (delayed scaling is "not in scope of te per-module quantization config" there).
pub const PLAN_RECIPES: [Recipe; 4] = [
    Recipe::Blockwise,
    Recipe::Tensorwise,
    Recipe::Mxfp8,
    Recipe::Nvfp4,
];

/// From one count up, one recipe (`None`: BF16).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecipeFrom {
    /// The smallest count (the key's own tokens) this step holds from.
    pub from: u64,
    /// The recipe, or `None` for BF16.
    pub recipe: Option<Recipe>,
}

/// One key's steps per execution.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyRecipes {
    /// The key.
    pub key: RuleKey,
    /// Its steps in an eager step, rising in `from`.
    pub eager: Vec<RecipeFrom>,
    /// Its steps in a CUDA-graphed step.
    pub graphed: Vec<RecipeFrom>,
}

impl KeyRecipes {
    /// The recipe at `tokens` in `execution` (`None`: BF16).
    pub fn at(&self, tokens: u64, execution: Execution) -> Option<Recipe> {
        let steps = match execution {
            Execution::Eager => &self.eager,
            Execution::Graphed => &self.graphed,
        };
        steps.iter().rev().find(|s| s.from <= tokens)?.recipe
    }

    /// The steps in one execution in words: `bf16 below 2048, tensorwise from 2048, blockwise
    /// from 16384`.
    pub fn steps_in_words(&self, execution: Execution) -> String {
        let steps = match execution {
            Execution::Eager => &self.eager,
            Execution::Graphed => &self.graphed,
        };
        let Some(first) = steps.first() else {
            return "bf16 at every count".to_owned();
        };
        let mut words = vec![format!("bf16 below {}", first.from)];
        words.extend(
            steps
                .iter()
                .map(|s| format!("{} from {}", s.recipe.map_or("bf16", Recipe::name), s.from)),
        );
        words.join(", ")
    }

    /// Every recipe the key runs at some count.
    pub fn recipes(&self) -> impl Iterator<Item = Recipe> + '_ {
        self.eager
            .iter()
            .chain(&self.graphed)
            .filter_map(|s| s.recipe)
    }
}

/// A policy's per-module recipe plan.
#[derive(Debug, Clone, PartialEq)]
pub struct RecipePlan {
    /// The recipe `rules` answer for (the reference loader's FP8 is this one).
    pub base: Recipe,
    /// The quantization-error bound the choice applied (relative RMS), when it applied one.
    pub max_quant_error: Option<f64>,
    /// The keys with a plan, sorted by key.
    pub keys: Vec<KeyRecipes>,
}

impl RecipePlan {
    /// The plan's steps for `key`, when it lists it.
    pub fn key(&self, key: &RuleKey) -> Option<&KeyRecipes> {
        self.keys
            .binary_search_by(|k| k.key.cmp(key))
            .ok()
            .map(|i| &self.keys[i])
    }

    /// Every recipe the plan runs somewhere, the base first.
    pub fn recipes(&self) -> Vec<Recipe> {
        let mut v: Vec<Recipe> = self.keys.iter().flat_map(KeyRecipes::recipes).collect();
        v.sort();
        v.dedup();
        v.retain(|r| *r != self.base);
        v.insert(0, self.base);
        v
    }

    /// Checks the plan: recipes a per-module plan may use, steps rising, keys distinct. The
    /// message names the JSON path under `recipes`.
    pub fn validate(&self) -> Result<(), (String, String)> {
        let ok = |r: Recipe, path: &str| {
            if PLAN_RECIPES.contains(&r) {
                Ok(())
            } else {
                Err((
                    path.to_owned(),
                    format!(
                        "recipe `{r}` cannot run per module (Megatron's per-module config takes blockwise, tensorwise, mxfp8 or nvfp4)"
                    ),
                ))
            }
        };
        ok(self.base, "recipes.base")?;
        if let Some(e) = self.max_quant_error
            && !(e.is_finite() && e > 0.0)
        {
            return Err((
                "recipes.max_quant_error".into(),
                format!("expected a finite number above 0, found {e}"),
            ));
        }
        for (i, k) in self.keys.iter().enumerate() {
            if i > 0 && self.keys[i - 1].key >= k.key {
                return Err((
                    format!("recipes.keys[{i}].key"),
                    format!(
                        "{} is listed twice or out of order (keys sorted, each once)",
                        k.key
                    ),
                ));
            }
            for (e, steps) in [("eager", &k.eager), ("graphed", &k.graphed)] {
                for (j, s) in steps.iter().enumerate() {
                    let path = format!("recipes.keys[{i}].{e}[{j}]");
                    if let Some(r) = s.recipe {
                        ok(r, &format!("{path}.recipe"))?;
                    }
                    if j > 0 && steps[j - 1].from >= s.from {
                        return Err((
                            format!("{path}.from"),
                            format!(
                                "{} does not rise above the step before ({})",
                                s.from,
                                steps[j - 1].from
                            ),
                        ));
                    }
                }
            }
        }
        Ok(())
    }

    /// The plan as the file's JSON value.
    pub fn to_value(&self) -> Value {
        let steps = |v: &[RecipeFrom]| -> Value {
            v.iter()
                .map(|s| {
                    serde_json::json!({
                        "from": s.from,
                        "recipe": s.recipe.map_or("bf16", Recipe::name),
                    })
                })
                .collect()
        };
        let keys: Vec<Value> = self
            .keys
            .iter()
            .map(|k| {
                serde_json::json!({
                    "key": serde_json::to_value(&k.key).unwrap_or(Value::Null),
                    "eager": steps(&k.eager),
                    "graphed": steps(&k.graphed),
                })
            })
            .collect();
        let mut m = Map::new();
        m.insert("base".into(), Value::from(self.base.name()));
        if let Some(e) = self.max_quant_error {
            m.insert("max_quant_error".into(), Value::from(e));
        }
        m.insert("keys".into(), Value::Array(keys));
        Value::Object(m)
    }

    /// Reads the file's `recipes` value; the error is `(JSON path, problem)`.
    pub fn from_value(v: &Value) -> Result<RecipePlan, (String, String)> {
        let at = |p: &str, m: String| (p.to_owned(), m);
        let obj = v
            .as_object()
            .ok_or_else(|| at("recipes", "expected an object".into()))?;
        for k in obj.keys() {
            if !["base", "max_quant_error", "keys"].contains(&k.as_str()) {
                return Err(at(&format!("recipes.{k}"), format!("unknown key `{k}`")));
            }
        }
        let recipe = |v: Option<&Value>, p: &str| -> Result<Option<Recipe>, (String, String)> {
            let s = v
                .and_then(Value::as_str)
                .ok_or_else(|| at(p, "expected a recipe name".into()))?;
            if s == "bf16" {
                return Ok(None);
            }
            s.parse()
                .map(Some)
                .map_err(|e: crate::UnknownRecipe| at(p, e.to_string()))
        };
        let base = recipe(obj.get("base"), "recipes.base")?
            .ok_or_else(|| at("recipes.base", "the base is an FP8 recipe, not bf16".into()))?;
        let max_quant_error = match obj.get("max_quant_error") {
            None => None,
            Some(x) => Some(x.as_f64().ok_or_else(|| {
                at(
                    "recipes.max_quant_error",
                    format!("expected a number, found {x}"),
                )
            })?),
        };
        let list = obj
            .get("keys")
            .and_then(Value::as_array)
            .ok_or_else(|| at("recipes.keys", "expected a list of keys".into()))?;
        let mut keys = Vec::with_capacity(list.len());
        for (i, k) in list.iter().enumerate() {
            let p = format!("recipes.keys[{i}]");
            let o = k
                .as_object()
                .ok_or_else(|| at(&p, "expected an object".into()))?;
            for name in o.keys() {
                if !["key", "eager", "graphed"].contains(&name.as_str()) {
                    return Err(at(&format!("{p}.{name}"), format!("unknown key `{name}`")));
                }
            }
            let key: RuleKey = o
                .get("key")
                .ok_or_else(|| at(&format!("{p}.key"), "missing".into()))
                .and_then(|v| {
                    serde_json::from_value(v.clone())
                        .map_err(|e| at(&format!("{p}.key"), e.to_string()))
                })?;
            let mut both = [Vec::new(), Vec::new()];
            for (slot, e) in both.iter_mut().zip(["eager", "graphed"]) {
                let Some(steps) = o.get(e) else { continue };
                let steps = steps
                    .as_array()
                    .ok_or_else(|| at(&format!("{p}.{e}"), "expected a list of steps".into()))?;
                for (j, s) in steps.iter().enumerate() {
                    let sp = format!("{p}.{e}[{j}]");
                    let so = s
                        .as_object()
                        .ok_or_else(|| at(&sp, "expected {from, recipe}".into()))?;
                    if so.len() != 2 {
                        return Err(at(&sp, "expected exactly {from, recipe}".into()));
                    }
                    let from = so.get("from").and_then(Value::as_u64).ok_or_else(|| {
                        at(
                            &format!("{sp}.from"),
                            "expected a whole, non-negative count".into(),
                        )
                    })?;
                    slot.push(RecipeFrom {
                        from,
                        recipe: recipe(so.get("recipe"), &format!("{sp}.recipe"))?,
                    });
                }
            }
            let [eager, graphed] = both;
            keys.push(KeyRecipes {
                key,
                eager,
                graphed,
            });
        }
        let plan = RecipePlan {
            base,
            max_quant_error,
            keys,
        };
        plan.validate()?;
        Ok(plan)
    }
}
