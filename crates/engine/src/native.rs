//! Megatron-core's own per-module precision config: the YAML that `--te-precision-config-file`
//! reads (`TransformerConfig.quant_recipe`), made from a [`Plan`].
//!
//! Megatron matches every TE wrapper's module path (`decoder.layers.3.mlp.linear_fc1`) against
//! ordered glob matchers; the first enabled match names a config, and a config whose
//! `training_recipe` names no FP8 recipe runs that module BF16. This module turns each planned
//! module group into one matcher, with `*` in place of the layer index, and ends with a BF16
//! catch-all, so every TE module is matched and nothing depends on the outer FP8 region.
//!
//! Why no layer ranges: a policy key (format version 1) carries no layer, so every layer of a
//! module group gets the same answer, and dense and MoE layers already differ by path
//! (`mlp.linear_fc1` vs `mlp.experts.linear_fc1`). A `*` index also stays right under pipeline
//! parallelism, where Megatron numbers `decoder.layers.N` per stage.
//!
//! It only builds and renders; the CLI writes the file and Python hands the same content to
//! Megatron as a dict.

use std::fmt::Write;

use fp8_policy::{Execution, Fp8Format as Format, Recipe};
use serde_json::{Value, json};

use crate::model::Role;
use crate::plan::{Plan, PlannedModule};

/// The FP8 region the trainer launches with: what Megatron's `config.fp8` (`--fp8-format`) says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Region {
    /// No global FP8 (`config.fp8` unset): BF16 modules cost nothing, FP8 modules enter FP8
    /// themselves.
    Bf16,
    /// The global FP8 region (`--fp8-format`): BF16 modules leave it. Needed where a
    /// [`Fp8Need`] says so.
    Fp8,
}

/// Why a plan with FP8 modules needs the global FP8 region (`config.fp8` set).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Fp8Need {
    /// A routed expert runs FP8: Megatron pads the experts' token counts to FP8's alignment
    /// only when `config.fp8` is set.
    RoutedExperts,
    /// The steps are CUDA-graphed: megatron-core's graphs re-arm TE's FP8 weight cache (the
    /// skip-weight-update flag, flipped on a step's first micro-batch) only when `config.fp8`
    /// is set, so outside the region every replay reuses the FP8 weights of the step that was
    /// captured (measured: the judge's look for stale FP8 weights, megatron-core 0.19.2).
    GraphedWeights,
}

impl Fp8Need {
    /// Why, in one clause, for a launch line or an error.
    pub const fn why(self) -> &'static str {
        match self {
            Fp8Need::RoutedExperts => {
                "routed experts run FP8, and Megatron pads their token counts only with --fp8-format set"
            }
            Fp8Need::GraphedWeights => {
                "the steps are CUDA-graphed, and megatron-core's graphs quantize the FP8 modules' weights again after an optimizer step only with --fp8-format set (without it every replay reuses the captured step's FP8 weights)"
            }
        }
    }
}

/// Why Megatron's per-module config writes a plan's FP8 modules BF16 (the plain BF16 model).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Bf16Because {
    /// The steps are CUDA-graphed, so the FP8 modules need the global FP8 region
    /// ([`Fp8Need::GraphedWeights`]), and the routed experts run BF16: in that region Megatron
    /// copies every expert's tokens padded to FP8's alignment, a cost of the step that no
    /// module's own timing holds. Measured larger than the FP8 modules' gain (graphed MoE
    /// layers, docs/PERFORMANCE.md); the hook keeps them FP8 outside the region.
    PaddedExperts,
}

impl Bf16Because {
    /// Why, in one clause, for a note or a matcher's reason.
    pub const fn why(self) -> &'static str {
        match self {
            Bf16Because::PaddedExperts => {
                "in CUDA-graphed steps the FP8 modules need the global FP8 region, where Megatron pads the BF16 routed experts' tokens to FP8's alignment, a cost measured larger than these modules' gain; the hook (adaptive_fp8.megatron.enable) keeps them FP8 without that region"
            }
        }
    }
}

impl Region {
    /// Why Megatron's per-module config for `plan` runs no module FP8 although the plan has FP8
    /// modules, if it does not: FP8 modules that need the FP8 region only for CUDA graphs, in a
    /// model whose routed experts run BF16 there.
    pub fn native_bf16_because(plan: &Plan) -> Option<Bf16Because> {
        let graphed_only = Region::fp8_need(plan) == Some(Fp8Need::GraphedWeights);
        (graphed_only && llm(plan).any(|m| m.spec.is_expert)).then_some(Bf16Because::PaddedExperts)
    }

    /// Why `plan` needs the global FP8 region, if it does: a routed expert in FP8 first, then
    /// any LLM module in FP8 in a CUDA-graphed plan.
    pub fn fp8_need(plan: &Plan) -> Option<Fp8Need> {
        if llm(plan).any(|m| m.use_fp8 && m.spec.is_expert) {
            Some(Fp8Need::RoutedExperts)
        } else if plan.execution == Execution::Graphed && llm(plan).any(|m| m.use_fp8) {
            Some(Fp8Need::GraphedWeights)
        } else {
            None
        }
    }

    /// The region Megatron's per-module config launches `plan`'s LLM in: the cheaper one that
    /// is still correct, BF16 unless [`Region::fp8_need`] names a need, and BF16 where the config
    /// writes every module BF16 ([`Region::native_bf16_because`]). With no FP8 module at all this
    /// is the plain BF16 model.
    pub fn for_plan(plan: &Plan) -> Region {
        match Region::fp8_need(plan) {
            Some(_) if Region::native_bf16_because(plan).is_none() => Region::Fp8,
            _ => Region::Bf16,
        }
    }

    /// `bf16` or `fp8`.
    pub const fn name(self) -> &'static str {
        match self {
            Region::Bf16 => "bf16",
            Region::Fp8 => "fp8",
        }
    }
}

/// Why a plan cannot be exported.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ExportError {
    /// Megatron's per-module config refuses delayed scaling.
    #[error(
        "Megatron's per-module precision config refuses delayed scaling (\"not in scope of te per-module quantization config\"); fix: train with blockwise or tensorwise, or keep delayed scaling and decide modules with the build-time hook (adaptive_fp8.megatron.enable)"
    )]
    Delayed,
    /// The plan has no LLM component (a lone vision encoder).
    #[error(
        "the model has no language-model component: Megatron's per-module config matches GPTModel's decoder paths; fix: decide a vision encoder with the build-time hook"
    )]
    NoLlm,
}

/// One glob matcher and what it decides.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Matcher {
    /// The matcher's key in the YAML (unique, from the module path).
    pub name: String,
    /// The glob Megatron compares the module path with (`fnmatch`).
    pub pattern: String,
    /// FP8 or BF16.
    pub fp8: bool,
    /// The recipe an FP8 matcher runs: the config's, or its module's under a per-module recipe
    /// plan.
    pub recipe: Recipe,
    /// The engine's reason, written beside the matcher.
    pub reason: String,
    /// Module instances it matches (layers of the group).
    pub instances: u64,
}

/// The per-module precision config for one plan.
#[derive(Debug, Clone, PartialEq)]
pub struct NativeConfig {
    /// Comment lines the file opens with.
    pub header: Vec<String>,
    /// The matchers in order, the catch-all last.
    pub matchers: Vec<Matcher>,
    /// The region to launch with.
    pub region: Region,
    /// Why that region is FP8 (None in the BF16 region).
    pub fp8_need: Option<Fp8Need>,
    /// Why the plan's FP8 modules are written BF16, if they are, and how many instances.
    pub bf16_because: Option<(Bf16Because, u64)>,
    /// Module instances that run FP8.
    pub fp8_instances: u64,
    /// The recipe FP8 modules run.
    pub recipe: Recipe,
    /// Their format.
    pub format: Format,
}

fn llm(plan: &Plan) -> impl Iterator<Item = &PlannedModule> {
    plan.modules
        .iter()
        .filter(|m| m.spec.component == Role::Llm)
}

/// The glob of a module group: the engine's path with `*` where Megatron puts the layer index
/// (`decoder.layers.mlp.linear_fc1` -> `decoder.layers.*.mlp.linear_fc1`).
pub fn pattern(name: &str) -> String {
    match name.split_once("layers.") {
        Some((head, tail)) => format!("{head}layers.*.{tail}"),
        None => name.to_owned(),
    }
}

fn matcher_name(name: &str) -> String {
    name.trim_start_matches("decoder.layers.")
        .replace("layers.", "")
        .replace('.', "_")
}

/// Builds the config for `plan`'s language model (a VLM's vision encoder is not a GPTModel
/// path and falls to the catch-all). `header` lines (policy, layout, tokens) come first.
pub fn te_precision_config(
    plan: &Plan,
    recipe: Recipe,
    format: Format,
    header: Vec<String>,
) -> Result<NativeConfig, ExportError> {
    if recipe == Recipe::Delayed {
        return Err(ExportError::Delayed);
    }
    if llm(plan).next().is_none() {
        return Err(ExportError::NoLlm);
    }
    let because = Region::native_bf16_because(plan);
    let mut matchers: Vec<Matcher> = llm(plan)
        .map(|m| Matcher {
            name: matcher_name(&m.spec.name),
            pattern: pattern(&m.spec.name),
            fp8: m.use_fp8 && because.is_none(),
            recipe: m
                .recipe
                .as_deref()
                .and_then(|r| r.parse().ok())
                .unwrap_or(recipe),
            reason: match because {
                Some(b) if m.use_fp8 => format!("{}; written BF16: {}", m.reason, b.why()),
                _ => m.reason.clone(),
            },
            instances: m.spec.layers,
        })
        .collect();
    matchers.push(Matcher {
        name: "default".to_owned(),
        pattern: "*".to_owned(),
        fp8: false,
        recipe,
        reason: "any other TE module: BF16, as a missing rule is".to_owned(),
        instances: 0,
    });
    let planned_fp8: u64 = llm(plan).filter(|m| m.use_fp8).map(|m| m.spec.layers).sum();
    let region = Region::for_plan(plan);
    Ok(NativeConfig {
        header,
        fp8_instances: if because.is_some() { 0 } else { planned_fp8 },
        bf16_because: because.map(|b| (b, planned_fp8)),
        region,
        fp8_need: Region::fp8_need(plan).filter(|_| region == Region::Fp8),
        matchers,
        recipe,
        format,
    })
}

impl NativeConfig {
    /// The recipes FP8 matchers run: the config's first, then each other one a per-module
    /// recipe plan uses.
    pub fn recipes(&self) -> Vec<Recipe> {
        let mut v = vec![self.recipe];
        for m in self.matchers.iter().filter(|m| m.fp8) {
            if !v.contains(&m.recipe) {
                v.push(m.recipe);
            }
        }
        v
    }

    /// A recipe's config name: `fp8` for the config's recipe, `fp8_<recipe>` for another.
    fn recipe_config(&self, r: Recipe) -> String {
        if r == self.recipe {
            "fp8".to_owned()
        } else {
            format!("fp8_{}", r.name())
        }
    }

    /// The configs by name: `fp8` (the recipe, entering FP8 even outside an FP8 region), one
    /// `fp8_<recipe>` per other recipe of a per-module plan, and `bf16` (no recipe: BF16 even
    /// inside one).
    fn configs(&self) -> Value {
        let mut m = serde_json::Map::new();
        for r in self.recipes() {
            // An FP4 recipe is Megatron's `fp4_quantization_recipe` (no FP8 format).
            let training = if r.is_fp4() {
                json!({"fp4_quantization_recipe": r.name(), "override_nonquantized_autocast": true})
            } else {
                json!({
                    "fp8_quantization_recipe": r.name(),
                    "fp8_format": self.format.name(),
                    "override_nonquantized_autocast": true,
                })
            };
            m.insert(
                self.recipe_config(r),
                json!({"transformer_engine_config_type": "TEQuantizationParams", "training_recipe": training}),
            );
        }
        m.insert(
            "bf16".to_owned(),
            json!({"transformer_engine_config_type": "TEQuantizationParams", "training_recipe": {}}),
        );
        Value::Object(m)
    }

    fn config_name(&self, m: &Matcher) -> String {
        if m.fp8 {
            self.recipe_config(m.recipe)
        } else {
            "bf16".to_owned()
        }
    }

    /// The content the YAML holds, with the matchers as a list in order (a JSON object's keys
    /// have no order): `{"configs": {...}, "matchers": [{name, type, pattern, config, enabled,
    /// reason}]}`. `RecipeConfig.from_config_dict` takes the matchers as a mapping from name to
    /// the rest, in this order.
    pub fn to_json(&self) -> Value {
        let matchers: Vec<Value> = self
            .matchers
            .iter()
            .map(|m| {
                json!({"name": m.name, "type": "glob", "pattern": m.pattern,
                       "config": self.config_name(m), "enabled": true, "reason": m.reason})
            })
            .collect();
        json!({"configs": self.configs(), "matchers": matchers})
    }

    /// The YAML file: the header, the configs, then one matcher per module group with the
    /// engine's reason as a comment, and the catch-all.
    pub fn to_yaml(&self) -> String {
        let mut s = String::new();
        for line in &self.header {
            let _ = writeln!(s, "# {line}");
        }
        s.push_str("configs:\n");
        for r in self.recipes() {
            let quant = if r.is_fp4() {
                format!("fp4_quantization_recipe: {}", r.name())
            } else {
                format!(
                    "fp8_quantization_recipe: {}\n      fp8_format: {}",
                    r.name(),
                    self.format.name()
                )
            };
            let _ = writeln!(
                s,
                "  {}:\n    transformer_engine_config_type: TEQuantizationParams\n    training_recipe:\n      {quant}\n      override_nonquantized_autocast: true",
                self.recipe_config(r),
            );
        }
        s.push_str("  bf16:\n    transformer_engine_config_type: TEQuantizationParams\n    training_recipe: {}\nmatchers:\n");
        for m in &self.matchers {
            let _ = writeln!(
                s,
                "  {}:  # {}: {}\n    type: glob\n    pattern: \"{}\"\n    config: {}\n    enabled: true",
                m.name,
                self.config_name(m),
                m.reason.replace('\n', " "),
                m.pattern,
                self.config_name(m)
            );
        }
        s
    }

    /// What to launch Megatron with, one line each.
    pub fn launch_flags(&self, file: &str) -> Vec<String> {
        let recipe = self.recipe.name();
        let format = self.format.name();
        match (self.region, self.fp8_instances, self.bf16_because) {
            (_, _, Some((b, n))) => vec![
                format!("the policy's {n} FP8 module instances are written BF16 ({}): launch the BF16 model, without --fp8-format, --fp8-recipe or --fp8-param-gather", b.why()),
                format!("--te-precision-config-file {file}"),
            ],
            (Region::Bf16, 0, None) => vec![
                "no module runs FP8 at this layout and token count: launch the BF16 model, without --fp8-format, --fp8-recipe or --fp8-param-gather (this file is then optional)".to_owned(),
                format!("--te-precision-config-file {file}"),
            ],
            (Region::Bf16, _, None) => vec![
                format!("--te-precision-config-file {file}"),
                "and no --fp8-format: the FP8 modules enter FP8 themselves (override_nonquantized_autocast), the BF16 modules cost nothing; eager steps only (with CUDA graphs the FP8 modules need the global FP8 region: make the file for graphed steps)".to_owned(),
            ],
            (Region::Fp8, _, None) => {
                let mut flags = vec![
                    format!("--te-precision-config-file {file} --fp8-format {format} --fp8-recipe {recipe}"),
                    format!(
                        "the global FP8 region is needed: {}",
                        self.fp8_need.unwrap_or(Fp8Need::RoutedExperts).why()
                    ),
                ];
                if !self.bf16_groups().is_empty() {
                    flags.push("without --fp8-param-gather: megatron-core 0.19 builds every module's weights in FP8 before this file reaches it (modules get their names after construction), so the BF16 modules would dequantize their weights in every forward; to keep FP8 weights, decide modules with the hook (adaptive_fp8.megatron.enable), which builds BF16 modules with BF16 weights".to_owned());
                }
                flags
            }
        }
    }

    /// The matchers of planned module groups (not the catch-all) that run BF16: in the FP8
    /// region with FP8 weights, the modules that would hold FP8 weights they dequantize.
    pub fn bf16_groups(&self) -> Vec<&str> {
        self.matchers
            .iter()
            .filter(|m| !m.fp8 && m.instances > 0)
            .map(|m| m.name.as_str())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(region: Region, fp8: &[bool]) -> NativeConfig {
        let mut matchers: Vec<Matcher> = fp8
            .iter()
            .enumerate()
            .map(|(i, &fp8)| Matcher {
                name: format!("m{i}"),
                pattern: format!("decoder.layers.*.m{i}"),
                fp8,
                recipe: Recipe::Blockwise,
                reason: String::new(),
                instances: 2,
            })
            .collect();
        matchers.push(Matcher {
            name: "default".to_owned(),
            pattern: "*".to_owned(),
            fp8: false,
            recipe: Recipe::Blockwise,
            reason: String::new(),
            instances: 0,
        });
        NativeConfig {
            header: vec![],
            matchers,
            region,
            fp8_need: (region == Region::Fp8).then_some(Fp8Need::RoutedExperts),
            bf16_because: None,
            fp8_instances: 2 * fp8.iter().filter(|f| **f).count() as u64,
            recipe: Recipe::Blockwise,
            format: Format::E4m3,
        }
    }

    #[test]
    fn fp8_weights_are_advised_against_only_where_a_bf16_group_would_hold_them() {
        let said = |c: NativeConfig| c.launch_flags("f.yaml").join("\n");
        assert!(said(config(Region::Fp8, &[true, false])).contains("without --fp8-param-gather"));
        // Every planned group FP8 (the catch-all matches nothing planned): FP8 weights cost nothing.
        assert!(!said(config(Region::Fp8, &[true, true])).contains("--fp8-param-gather"));
        assert!(!said(config(Region::Bf16, &[true, false])).contains("--fp8-param-gather"));
    }

    #[test]
    fn the_fp8_region_says_why_it_is_needed() {
        let mut c = config(Region::Fp8, &[true, true]);
        assert!(c.launch_flags("f.yaml")[1].contains("routed experts run FP8"));
        c.fp8_need = Some(Fp8Need::GraphedWeights);
        let said = c.launch_flags("f.yaml");
        assert!(said[0].contains("--fp8-format e4m3 --fp8-recipe blockwise"));
        assert!(said[1].contains("CUDA-graphed") && !said[1].contains("routed experts"));
        let bf16 = config(Region::Bf16, &[true, false]).launch_flags("f.yaml");
        assert!(bf16[1].contains("eager steps only"));
        // FP8 modules written BF16: the BF16 model's launch, with why and how many.
        let mut c = config(Region::Bf16, &[false, false]);
        c.bf16_because = Some((Bf16Because::PaddedExperts, 6));
        let said = c.launch_flags("f.yaml");
        assert!(
            said[0].contains("6 FP8 module instances are written BF16")
                && said[0].contains("pads the BF16 routed experts")
        );
        assert!(
            said[0].contains("without --fp8-format")
                && !said.join(" ").contains("eager steps only")
        );
    }

    #[test]
    fn patterns_put_a_star_where_the_layer_index_goes() {
        assert_eq!(
            pattern("decoder.layers.mlp.experts.linear_fc1"),
            "decoder.layers.*.mlp.experts.linear_fc1"
        );
        assert_eq!(pattern("mtp.layers.eh_proj"), "mtp.layers.*.eh_proj");
        assert_eq!(
            pattern("mtp.layers.mtp_model_layer.self_attention.linear_qkv"),
            "mtp.layers.*.mtp_model_layer.self_attention.linear_qkv"
        );
        assert_eq!(
            matcher_name("mtp.layers.mtp_model_layer.mlp.linear_fc1"),
            "mtp_mtp_model_layer_mlp_linear_fc1"
        );
        assert_eq!(
            matcher_name("decoder.layers.self_attention.linear_qkv"),
            "self_attention_linear_qkv"
        );
    }
}
