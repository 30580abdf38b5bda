//! Answering "FP8 or BF16?" for one module, with the reason.

use std::fmt;

use crate::threshold::Threshold;

use crate::execution::Execution;
use crate::kind::{DenseKind, GroupedKind};
use crate::policy::{DenseRule, GroupedRule, Policy};
use crate::rule_key::RuleKey;

/// What a module looks up: the seed's key for its kind family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lookup<'a> {
    /// A dense module: `(kind, ub_name, tp)`. `ub_name` is the TE tp-comm buffer name; a
    /// module without one can never match a rule.
    Dense {
        /// Module kind.
        kind: DenseKind,
        /// TE tp-comm buffer name (`qkv`, `proj`, `fc1`, `fc2`, ...).
        ub_name: Option<&'a str>,
        /// Tensor-parallel size.
        tp: u32,
    },
    /// An MoE expert module: `(kind, etp, num_gemms)`. There is deliberately no default for
    /// `num_gemms`: the reference defaulted it to 1, so expert rules never matched.
    Grouped {
        /// Module kind.
        kind: GroupedKind,
        /// Expert tensor-parallel size.
        etp: u32,
        /// Experts per rank (`num_experts / ep`).
        num_gemms: u32,
    },
}

impl Lookup<'_> {
    /// The rule key this lookup matches: `None` for a dense module without `ub_name` (it can
    /// match no rule).
    pub fn key(&self) -> Option<RuleKey> {
        match *self {
            Lookup::Dense { kind, ub_name, tp } => ub_name.map(|ub| RuleKey::Dense {
                kind,
                ub_name: ub.to_owned(),
                tp,
            }),
            Lookup::Grouped {
                kind,
                etp,
                num_gemms,
            } => Some(RuleKey::Grouped {
                kind,
                etp,
                num_gemms,
            }),
        }
    }
}

/// The rule a lookup found.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum MatchedRule {
    /// A dense rule.
    Dense(DenseRule),
    /// A grouped rule.
    Grouped(GroupedRule),
}

impl MatchedRule {
    /// The rule's eager token threshold (`min_tokens`).
    pub fn min_tokens(&self) -> Threshold {
        match self {
            MatchedRule::Dense(r) => r.min_tokens,
            MatchedRule::Grouped(r) => r.min_tokens,
        }
    }

    /// The threshold for `execution` and the field it comes from: `min_tokens_graphed` for a
    /// graphed step when the rule has one, else `min_tokens`.
    pub fn threshold(&self, execution: Execution) -> (Threshold, &'static str) {
        match (execution, self.graphed()) {
            (Execution::Graphed, Some(g)) => (g, "min_tokens_graphed"),
            _ => (self.min_tokens(), "min_tokens"),
        }
    }

    /// The rule's own graphed threshold (`min_tokens_graphed`), where it has one.
    fn graphed(&self) -> Option<Threshold> {
        match self {
            MatchedRule::Dense(r) => r.min_tokens_graphed,
            MatchedRule::Grouped(r) => r.min_tokens_graphed,
        }
    }

    /// The speedup recorded with the rule, if any.
    pub fn measured_speedup(&self) -> Option<f64> {
        match self {
            MatchedRule::Dense(r) => r.measured_speedup,
            MatchedRule::Grouped(r) => r.measured_speedup,
        }
    }

    /// The rule as the JSON object the policy file holds.
    pub fn to_json_value(&self) -> serde_json::Value {
        // Both rule types serialize to plain objects of integers and finite floats.
        match self {
            MatchedRule::Dense(r) => serde_json::to_value(r),
            MatchedRule::Grouped(r) => serde_json::to_value(r),
        }
        .unwrap_or(serde_json::Value::Null)
    }
}

/// Why a module got the precision it got.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Reason {
    /// A rule matched and the tokens reach its threshold for the execution.
    AtOrAboveThreshold {
        /// The matched rule.
        rule: MatchedRule,
        /// The token count that was compared.
        num_tokens: u64,
        /// The policy is a cost-model estimate: its speedups were estimated, not measured.
        estimated: bool,
        /// The execution whose threshold was compared.
        execution: Execution,
    },
    /// A rule matched but the tokens are below its threshold for the execution.
    BelowThreshold {
        /// The matched rule.
        rule: MatchedRule,
        /// The token count that was compared.
        num_tokens: u64,
        /// The policy is a cost-model estimate.
        estimated: bool,
        /// The execution whose threshold was compared.
        execution: Execution,
    },
    /// The policy has no rule for this key: conservative BF16.
    NoRule {
        /// The key that was looked up.
        key: RuleKey,
    },
    /// A dense module without a `ub_name` cannot match any rule.
    NoUbName {
        /// The module kind.
        kind: DenseKind,
        /// Tensor-parallel size.
        tp: u32,
    },
}

/// A precision decision for one module.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    /// True when the module should run FP8.
    pub use_fp8: bool,
    /// Why.
    pub reason: Reason,
}

impl Decision {
    /// The matched rule, when there was one.
    pub fn rule(&self) -> Option<&MatchedRule> {
        match &self.reason {
            Reason::AtOrAboveThreshold { rule, .. } | Reason::BelowThreshold { rule, .. } => {
                Some(rule)
            }
            Reason::NoRule { .. } | Reason::NoUbName { .. } => None,
        }
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The recorded speedup is the one at the eager threshold (`min_tokens`), not at the
        // module's count: said so, with the number where another threshold was compared.
        let speed = |r: &MatchedRule, estimated: bool, execution: Execution| {
            let at = match (execution, r.graphed()) {
                (Execution::Graphed, Some(_)) => format!(" at min_tokens {}", r.min_tokens()),
                _ => " at min_tokens".to_owned(),
            };
            match (r.measured_speedup(), estimated) {
                (Some(s), false) => format!(", measured speedup {s}{at}"),
                (Some(s), true) => {
                    format!(", ESTIMATED speedup {s}{at} (cost model, not measured)")
                }
                (None, true) => " (ESTIMATED policy: cost model, not measured)".to_owned(),
                (None, false) => String::new(),
            }
        };
        match self {
            Reason::AtOrAboveThreshold {
                rule,
                num_tokens,
                estimated,
                execution,
            } => {
                let (t, field) = rule.threshold(*execution);
                let s = speed(rule, *estimated, *execution);
                write!(f, "tokens {num_tokens} >= {field} {t}{s}")
            }
            Reason::BelowThreshold {
                rule,
                num_tokens,
                estimated,
                execution,
            } => {
                let (t, field) = rule.threshold(*execution);
                let s = speed(rule, *estimated, *execution);
                if t == Threshold::Never {
                    return write!(f, "{field} never: BF16 at every token count{s}");
                }
                write!(f, "tokens {num_tokens} < {field} {t}{s}")
            }
            Reason::NoRule { key } => write!(f, "no rule for {key}: BF16 by default"),
            Reason::NoUbName { kind, tp } => write!(
                f,
                "module has no ub_name, so no {kind} rule at tp={tp} can match: BF16 by default"
            ),
        }
    }
}

impl Policy {
    /// Decides one module: FP8 iff a rule matches its key and `num_tokens >= min_tokens`.
    ///
    /// `num_tokens` is the count the seed compares: `seq_length * micro_batch_size` (or the
    /// `fp8_dynamic_num_tokens` override) for dense modules, times `moe_router_topk` for experts.
    ///
    /// ```
    /// use fp8_policy::{GroupedKind, GroupedRule, Lookup, Policy, Reason, Threshold};
    ///
    /// let mut p = Policy::new(1.0)?;
    /// p.add_grouped_rule(
    ///     GroupedKind::ColumnGrouped,
    ///     GroupedRule { etp: 1, num_gemms: 32, min_tokens: Threshold::From(16384), min_tokens_graphed: None, measured_speedup: Some(1.1) },
    /// )?;
    /// // 4096 tokens x top-8 routing = 32768 routed tokens: FP8.
    /// let experts = Lookup::Grouped { kind: GroupedKind::ColumnGrouped, etp: 1, num_gemms: 32 };
    /// assert!(p.decide(experts, 4096 * 8).use_fp8);
    /// // Another expert count has no rule: BF16, and the reason says which key is missing.
    /// let other = Lookup::Grouped { kind: GroupedKind::ColumnGrouped, etp: 1, num_gemms: 16 };
    /// let d = p.decide(other, 4096 * 8);
    /// assert!(!d.use_fp8 && matches!(d.reason, Reason::NoRule { .. }));
    /// # Ok::<(), fp8_policy::PolicyError>(())
    /// ```
    pub fn decide(&self, lookup: Lookup<'_>, num_tokens: u64) -> Decision {
        self.decide_in(lookup, num_tokens, Execution::Eager)
    }

    /// [`Policy::decide`] for a trainer's execution: a graphed step compares the rule's
    /// `min_tokens_graphed` where it has one, an eager step (and every rule without it)
    /// `min_tokens`.
    ///
    /// ```
    /// use fp8_policy::{DenseKind, Execution, Lookup, Policy};
    ///
    /// let p = Policy::from_json_str(
    ///     r#"{"version": 1, "speedup_threshold": 1.0, "rules": {"row": {"fc2":
    ///         [{"tp": 1, "min_tokens": 8192, "min_tokens_graphed": 2048}]}}}"#,
    ///     "p.json",
    /// )?;
    /// let fc2 = Lookup::Dense { kind: DenseKind::Row, ub_name: Some("fc2"), tp: 1 };
    /// assert!(!p.decide_in(fc2, 4096, Execution::Eager).use_fp8);
    /// assert!(p.decide_in(fc2, 4096, Execution::Graphed).use_fp8);
    /// # Ok::<(), fp8_policy::PolicyError>(())
    /// ```
    pub fn decide_in(&self, lookup: Lookup<'_>, num_tokens: u64, execution: Execution) -> Decision {
        let rule = match lookup {
            Lookup::Dense { kind, ub_name, tp } => {
                let Some(ub) = ub_name else {
                    return Decision {
                        use_fp8: false,
                        reason: Reason::NoUbName { kind, tp },
                    };
                };
                self.dense_rules(kind)
                    .get(ub)
                    .and_then(|rules| rules.iter().find(|r| r.tp == tp))
                    .map(|r| MatchedRule::Dense(*r))
                    .ok_or_else(|| RuleKey::Dense {
                        kind,
                        ub_name: ub.to_owned(),
                        tp,
                    })
            }
            Lookup::Grouped {
                kind,
                etp,
                num_gemms,
            } => self
                .grouped_rules(kind)
                .iter()
                .find(|r| r.etp == etp && r.num_gemms == num_gemms)
                .map(|r| MatchedRule::Grouped(*r))
                .ok_or(RuleKey::Grouped {
                    kind,
                    etp,
                    num_gemms,
                }),
        };
        let estimated = self.estimated();
        match rule {
            Ok(rule) if rule.threshold(execution).0.allows(num_tokens) => Decision {
                use_fp8: true,
                reason: Reason::AtOrAboveThreshold {
                    rule,
                    num_tokens,
                    estimated,
                    execution,
                },
            },
            Ok(rule) => Decision {
                use_fp8: false,
                reason: Reason::BelowThreshold {
                    rule,
                    num_tokens,
                    estimated,
                    execution,
                },
            },
            Err(key) => Decision {
                use_fp8: false,
                reason: Reason::NoRule { key },
            },
        }
    }
}

impl Policy {
    /// The recipe one module runs (`None`: BF16). With a per-module plan
    /// ([`Policy::recipe_plan`]) a key it lists follows its steps, every other key `rules` under
    /// the plan's base recipe; without one, `rules` under `trainer_recipe`, the recipe the
    /// trainer runs.
    ///
    /// ```
    /// use fp8_policy::{DenseKind, Execution, Lookup, Policy, Recipe};
    ///
    /// let p = Policy::from_json_str(r#"{"version": 1, "speedup_threshold": 1.0,
    ///     "rules": {"row": {"fc2": [{"tp": 1, "min_tokens": 4096}], "proj": [{"tp": 1, "min_tokens": 4096}]}},
    ///     "recipes": {"base": "blockwise", "keys": [{"key": {"kind": "row", "ub_name": "fc2", "tp": 1},
    ///         "eager": [{"from": 2048, "recipe": "tensorwise"}, {"from": 16384, "recipe": "blockwise"}]}]}}"#,
    ///     "mixed.json")?;
    /// let fc2 = Lookup::Dense { kind: DenseKind::Row, ub_name: Some("fc2"), tp: 1 };
    /// let proj = Lookup::Dense { kind: DenseKind::Row, ub_name: Some("proj"), tp: 1 };
    /// let at = |l, t| p.recipe_in(l, t, Execution::Eager, Recipe::Blockwise);
    /// assert_eq!(at(fc2, 1024), None);
    /// assert_eq!(at(fc2, 4096), Some(Recipe::Tensorwise));
    /// assert_eq!(at(fc2, 16384), Some(Recipe::Blockwise));
    /// assert_eq!(at(proj, 4096), Some(Recipe::Blockwise));
    /// // The reference loader's answer, `rules`, is the base recipe's: fc2 BF16 at 2048.
    /// assert!(!p.decide(fc2, 2048).use_fp8);
    /// # Ok::<(), fp8_policy::PolicyError>(())
    /// ```
    pub fn recipe_in(
        &self,
        lookup: Lookup<'_>,
        num_tokens: u64,
        execution: Execution,
        trainer_recipe: crate::Recipe,
    ) -> Option<crate::Recipe> {
        let base = match &self.recipes {
            Some(plan) => {
                if let Some(k) = lookup.key().and_then(|k| plan.key(&k)) {
                    return k.at(num_tokens, execution);
                }
                plan.base
            }
            None => trainer_recipe,
        };
        self.decide_in(lookup, num_tokens, execution)
            .use_fp8
            .then_some(base)
    }
}
