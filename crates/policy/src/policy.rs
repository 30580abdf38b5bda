//! The in-memory policy and its rules.

use std::collections::BTreeMap;

use crate::error::{PolicyError, Problem};
use crate::kind::{DenseKind, GroupedKind};
use crate::provenance::Provenance;
use crate::rule_key::RuleKey;
use crate::threshold::Threshold;

/// The only policy format version this library reads and writes.
pub const POLICY_VERSION: u32 = 1;

/// One rule's thresholds, whatever the shape of its key ([`Policy::rules`], [`Policy::insert`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Thresholds {
    /// Where FP8 starts in eager steps (`min_tokens`), in the key's own tokens (routed tokens
    /// for experts).
    pub eager: Threshold,
    /// The same in CUDA-graphed steps (`min_tokens_graphed`), where it differs.
    pub graphed: Option<Threshold>,
    /// The measured speedup at the threshold, where the maker recorded it.
    pub measured_speedup: Option<f64>,
}

/// A dense-kind rule: for `(kind, ub_name, tp)`, FP8 from `min_tokens` up.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DenseRule {
    /// Tensor-parallel size the rule applies to.
    pub tp: u32,
    /// Where FP8 starts in an eager step, in tokens (`seq_length * micro_batch_size`, or the
    /// override); the file's number ([`Threshold::to_wire`]).
    pub min_tokens: Threshold,
    /// The same for a CUDA-graphed step; `None`: `min_tokens` holds for both.
    pub min_tokens_graphed: Option<Threshold>,
    /// FP8/BF16 speedup measured at `min_tokens`. Informational; lookup ignores it.
    pub measured_speedup: Option<f64>,
}

/// A grouped-kind rule: for `(kind, etp, num_gemms)`, FP8 from `min_tokens` up.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GroupedRule {
    /// Expert tensor-parallel size.
    pub etp: u32,
    /// Experts per rank (`num_experts / ep`).
    pub num_gemms: u32,
    /// Where FP8 starts in an eager step, in routed tokens (tokens x topk).
    pub min_tokens: Threshold,
    /// The same for a CUDA-graphed step; `None`: `min_tokens` holds for both.
    pub min_tokens_graphed: Option<Threshold>,
    /// FP8/BF16 speedup measured at `min_tokens`. Informational; lookup ignores it.
    pub measured_speedup: Option<f64>,
}

/// An adaptive-FP8 policy (format version 1).
///
/// Rules are kept sorted (dense by `ub_name` then `tp`, grouped by `etp` then `num_gemms`), so
/// two policies with the same rules compare equal and serialize to the same bytes.
#[derive(Debug, Clone, PartialEq)]
pub struct Policy {
    pub(crate) speedup_threshold: f64,
    pub(crate) dense: [BTreeMap<String, Vec<DenseRule>>; 4],
    pub(crate) grouped: [Vec<GroupedRule>; 2],
    /// Where the policy came from, when it says so in our format.
    pub(crate) provenance: Option<Provenance>,
    /// The per-module recipe plan (top-level `recipes`), when the policy has one.
    pub(crate) recipes: Option<crate::RecipePlan>,
    /// Other top-level keys (and a `provenance` in another tool's form). The seed's loader
    /// ignores them; we keep them on a round trip.
    pub(crate) extra: BTreeMap<String, serde_json::Value>,
}

impl Policy {
    /// An empty policy (every module runs BF16) with the given threshold: the start of the
    /// builder. Rules are added with [`Policy::add_dense_rule`] and [`Policy::add_grouped_rule`],
    /// which refuse duplicates and invalid values, so a built policy is always valid.
    ///
    /// Fails when the threshold is not a finite number above zero.
    ///
    /// ```
    /// use fp8_policy::{DenseKind, DenseRule, Policy, Threshold};
    ///
    /// let mut p = Policy::new(1.0)?;
    /// let rule = DenseRule { tp: 8, min_tokens: Threshold::From(8192), min_tokens_graphed: None, measured_speedup: Some(1.12) };
    /// p.add_dense_rule(DenseKind::LayernormColumn, "fc1", rule)?;
    /// assert!(p.add_dense_rule(DenseKind::LayernormColumn, "fc1", rule).is_err(), "duplicate");
    /// assert!(Policy::new(f64::NAN).is_err());
    /// assert_eq!(p.rule_count(), 1);
    /// # Ok::<(), fp8_policy::PolicyError>(())
    /// ```
    pub fn new(speedup_threshold: f64) -> Result<Self, PolicyError> {
        check_ratio(speedup_threshold).map_err(|p| in_memory("speedup_threshold", p))?;
        Ok(Policy {
            speedup_threshold,
            dense: Default::default(),
            grouped: Default::default(),
            provenance: None,
            recipes: None,
            extra: BTreeMap::new(),
        })
    }

    /// The per-module recipe plan, when the policy has one (docs/POLICY.md, "Per-module
    /// recipes").
    pub fn recipe_plan(&self) -> Option<&crate::RecipePlan> {
        self.recipes.as_ref()
    }

    /// Sets the per-module recipe plan, checked ([`crate::RecipePlan::validate`]).
    pub fn set_recipe_plan(&mut self, plan: crate::RecipePlan) -> Result<(), PolicyError> {
        plan.validate()
            .map_err(|(path, m)| in_memory(&path, Problem::RecipePlan(m)))?;
        self.extra.remove("recipes");
        self.recipes = Some(plan);
        Ok(())
    }

    /// How the policy was made, when it records that in our format.
    pub fn provenance(&self) -> Option<&Provenance> {
        self.provenance.as_ref()
    }

    /// Records how the policy was made (written as the top-level `provenance` object, which the
    /// seed's loader ignores).
    pub fn set_provenance(&mut self, provenance: Provenance) {
        self.extra.remove("provenance");
        self.provenance = Some(provenance);
    }

    /// True when the policy comes from cost-model estimates rather than measurements. Every
    /// command that reads such a policy must say so.
    pub fn estimated(&self) -> bool {
        self.provenance.as_ref().is_some_and(|p| p.estimated)
    }

    /// The FP8 recipes the policy's measurements used (from `provenance.recipe`); empty when
    /// the policy does not say (the seed's policies, hand-written ones).
    pub fn recipes(&self) -> Vec<crate::Recipe> {
        let mut v: Vec<crate::Recipe> = self
            .provenance
            .as_ref()
            .map(|p| {
                p.recipe
                    .iter()
                    .filter_map(|l| crate::Recipe::from_label(l))
                    .collect()
            })
            .unwrap_or_default();
        v.sort();
        v.dedup();
        v
    }

    /// What a trainer running `recipe` should hear about this policy: `None` when the policy was
    /// made for that recipe or does not say, or carries a per-module recipe plan (the plan gives
    /// every FP8 module its recipe, whatever the trainer's), else a warning that names both and
    /// the fix.
    ///
    /// ```
    /// use fp8_policy::{Policy, Provenance, Recipe};
    ///
    /// let mut p = Policy::new(1.0)?;
    /// let mut prov = Provenance::default();
    /// prov.recipe = vec!["blockwise".into()];
    /// p.set_provenance(prov);
    /// assert!(p.recipe_warning(Recipe::Blockwise).is_none());
    /// assert!(p.recipe_warning(Recipe::Tensorwise).unwrap().contains("--recipe tensorwise"));
    /// # Ok::<(), fp8_policy::PolicyError>(())
    /// ```
    pub fn recipe_warning(&self, recipe: crate::Recipe) -> Option<String> {
        let made = self.recipes();
        if made.is_empty() || made.contains(&recipe) || self.recipes.is_some() {
            return None;
        }
        let names: Vec<&str> = made.iter().map(|r| r.name()).collect();
        Some(format!(
            "this policy was measured with the {} recipe, but the trainer uses {recipe} ({}): \
             crossovers differ per recipe; make a policy for it with \
             `fp8sel gen-policy --recipe {recipe} ...`",
            names.join(" and "),
            recipe.te_class()
        ))
    }

    /// What a trainer on the GPU named `device` (as the driver names it, e.g. `NVIDIA H100 80GB
    /// HBM3`) should hear about this policy: `None` when the policy was measured on that GPU or
    /// does not say where, else a warning that names both and the fix. Where FP8 starts to pay
    /// moves with the GPU's GEMM rates and host, so another GPU's thresholds may run FP8 where it
    /// does not pay here.
    ///
    /// ```
    /// use fp8_policy::{Policy, Provenance};
    ///
    /// let mut p = Policy::new(1.0)?;
    /// let mut prov = Provenance::default();
    /// prov.device = vec!["NVIDIA H200".into()];
    /// p.set_provenance(prov);
    /// assert!(p.device_warning("NVIDIA H200").is_none());
    /// assert!(p.device_warning("NVIDIA H100 80GB HBM3").unwrap().contains("fp8sel gen-policy"));
    /// # Ok::<(), fp8_policy::PolicyError>(())
    /// ```
    pub fn device_warning(&self, device: &str) -> Option<String> {
        let made: Vec<&str> = self.provenance.as_ref().map_or_else(Vec::new, |p| {
            p.device
                .iter()
                .map(|d| d.trim())
                .filter(|d| !d.is_empty())
                .collect()
        });
        let here = device.trim();
        if made.is_empty() || here.is_empty() || made.iter().any(|d| d.eq_ignore_ascii_case(here)) {
            return None;
        }
        Some(format!(
            "this policy was measured on {}, but this GPU is {here}: where FP8 starts to pay \
             differs per GPU; make this machine's policy with `fp8sel gen-policy` on it",
            made.join(" and ")
        ))
    }

    /// Keys the policy's maker measured and found no FP8 win for: for those, BF16 is a measured
    /// answer rather than a gap in the sweep.
    pub fn measured_bf16_keys(&self) -> &[RuleKey] {
        self.provenance
            .as_ref()
            .map_or(&[], |p| p.measured_bf16_keys.as_slice())
    }

    /// Speedup a module had to reach for FP8 to be enabled when the policy was built.
    pub fn speedup_threshold(&self) -> f64 {
        self.speedup_threshold
    }

    /// Adds a dense rule. Fails on a zero `tp`, a bad speedup, an empty `ub_name`, or a rule
    /// whose `(kind, ub_name, tp)` is already present.
    pub fn add_dense_rule(
        &mut self,
        kind: DenseKind,
        ub_name: &str,
        rule: DenseRule,
    ) -> Result<(), PolicyError> {
        let path = format!("rules.{kind}.{ub_name}");
        if ub_name.is_empty() {
            return Err(in_memory(&path, Problem::EmptyUbName));
        }
        if rule.tp == 0 {
            return Err(in_memory(&format!("{path}.tp"), Problem::Zero));
        }
        if let Some(s) = rule.measured_speedup {
            check_ratio(s).map_err(|p| in_memory(&format!("{path}.measured_speedup"), p))?;
        }
        let list = self.dense[kind.index()]
            .entry(ub_name.to_owned())
            .or_default();
        match list.binary_search_by_key(&rule.tp, |r| r.tp) {
            Ok(_) => Err(in_memory(
                &path,
                Problem::Duplicate {
                    key: RuleKey::Dense {
                        kind,
                        ub_name: ub_name.to_owned(),
                        tp: rule.tp,
                    }
                    .to_string(),
                    first: path.clone(),
                },
            )),
            Err(at) => {
                list.insert(at, rule);
                Ok(())
            }
        }
    }

    /// Adds a grouped rule. Fails on a zero `etp`/`num_gemms`, a bad speedup, or a rule whose
    /// `(kind, etp, num_gemms)` is already present.
    pub fn add_grouped_rule(
        &mut self,
        kind: GroupedKind,
        rule: GroupedRule,
    ) -> Result<(), PolicyError> {
        let path = format!("rules.{kind}");
        if rule.etp == 0 {
            return Err(in_memory(&format!("{path}.etp"), Problem::Zero));
        }
        if rule.num_gemms == 0 {
            return Err(in_memory(&format!("{path}.num_gemms"), Problem::Zero));
        }
        if let Some(s) = rule.measured_speedup {
            check_ratio(s).map_err(|p| in_memory(&format!("{path}.measured_speedup"), p))?;
        }
        let list = &mut self.grouped[kind.index()];
        match list.binary_search_by_key(&(rule.etp, rule.num_gemms), |r| (r.etp, r.num_gemms)) {
            Ok(_) => Err(in_memory(
                &path,
                Problem::Duplicate {
                    key: RuleKey::Grouped {
                        kind,
                        etp: rule.etp,
                        num_gemms: rule.num_gemms,
                    }
                    .to_string(),
                    first: path.clone(),
                },
            )),
            Err(at) => {
                list.insert(at, rule);
                Ok(())
            }
        }
    }

    /// Adds one rule under `key`, of either shape: [`Policy::add_dense_rule`] or
    /// [`Policy::add_grouped_rule`], with their checks.
    pub fn insert(&mut self, key: &RuleKey, t: Thresholds) -> Result<(), PolicyError> {
        match key {
            RuleKey::Dense { kind, ub_name, tp } => self.add_dense_rule(
                *kind,
                ub_name,
                DenseRule {
                    tp: *tp,
                    min_tokens: t.eager,
                    min_tokens_graphed: t.graphed,
                    measured_speedup: t.measured_speedup,
                },
            ),
            RuleKey::Grouped {
                kind,
                etp,
                num_gemms,
            } => self.add_grouped_rule(
                *kind,
                GroupedRule {
                    etp: *etp,
                    num_gemms: *num_gemms,
                    min_tokens: t.eager,
                    min_tokens_graphed: t.graphed,
                    measured_speedup: t.measured_speedup,
                },
            ),
        }
    }

    /// Every rule with its key, dense kinds first, in the file's order.
    pub fn rules(&self) -> Vec<(RuleKey, Thresholds)> {
        let mut out = Vec::with_capacity(self.rule_count());
        for kind in DenseKind::ALL {
            for (ub, rules) in self.dense_rules(kind) {
                for r in rules {
                    let key = RuleKey::Dense {
                        kind,
                        ub_name: ub.clone(),
                        tp: r.tp,
                    };
                    out.push((key, r.thresholds()));
                }
            }
        }
        for kind in GroupedKind::ALL {
            for r in self.grouped_rules(kind) {
                let key = RuleKey::Grouped {
                    kind,
                    etp: r.etp,
                    num_gemms: r.num_gemms,
                };
                out.push((key, r.thresholds()));
            }
        }
        out
    }

    /// The dense rules of one kind, by `ub_name`, each list sorted by `tp`.
    pub fn dense_rules(&self, kind: DenseKind) -> &BTreeMap<String, Vec<DenseRule>> {
        &self.dense[kind.index()]
    }

    /// The grouped rules of one kind, sorted by `(etp, num_gemms)`.
    pub fn grouped_rules(&self, kind: GroupedKind) -> &[GroupedRule] {
        &self.grouped[kind.index()]
    }

    /// Total number of rules.
    pub fn rule_count(&self) -> usize {
        let dense: usize = self
            .dense
            .iter()
            .flat_map(|m| m.values())
            .map(Vec::len)
            .sum();
        dense + self.grouped.iter().map(Vec::len).sum::<usize>()
    }

    /// Every rule's key, in canonical order.
    pub fn rule_keys(&self) -> Vec<RuleKey> {
        let mut keys = Vec::with_capacity(self.rule_count());
        for kind in DenseKind::ALL {
            for (ub, rules) in self.dense_rules(kind) {
                keys.extend(rules.iter().map(|r| RuleKey::Dense {
                    kind,
                    ub_name: ub.clone(),
                    tp: r.tp,
                }));
            }
        }
        for kind in GroupedKind::ALL {
            keys.extend(self.grouped_rules(kind).iter().map(|r| RuleKey::Grouped {
                kind,
                etp: r.etp,
                num_gemms: r.num_gemms,
            }));
        }
        keys
    }
}

pub(crate) fn check_ratio(x: f64) -> Result<(), Problem> {
    if x.is_finite() && x > 0.0 {
        Ok(())
    } else {
        Err(Problem::BadRatio(x.to_string()))
    }
}

fn in_memory(path: &str, problem: Problem) -> PolicyError {
    PolicyError::Invalid {
        file: "<memory>".into(),
        path: path.to_owned(),
        problem,
    }
}

impl DenseRule {
    /// Its thresholds.
    pub fn thresholds(&self) -> Thresholds {
        Thresholds {
            eager: self.min_tokens,
            graphed: self.min_tokens_graphed,
            measured_speedup: self.measured_speedup,
        }
    }
}

impl GroupedRule {
    /// Its thresholds.
    pub fn thresholds(&self) -> Thresholds {
        Thresholds {
            eager: self.min_tokens,
            graphed: self.min_tokens_graphed,
            measured_speedup: self.measured_speedup,
        }
    }
}
