//! Deciding every module of a model: the plan, its summary, and the rules it is missing.

use std::collections::BTreeMap;

use fp8_policy::{Decision, Execution, KindFamily, Lookup, ModuleKind, Policy, Reason, RuleKey};
use serde::Serialize;

use crate::inventory::{LayoutError, ModuleSpec, inventory};
use crate::model::{Arch, ModelDesc, Role};
use crate::parallel::Parallel;
use crate::tokens::{TokenConfig, TokenOverflow, TokenSource};

mod warnings;
use warnings::{native_launch_warning, policy_warnings, shape_warnings};

/// A module's precision decision, with the token count it compared.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ModuleDecision {
    /// Tokens compared against `min_tokens` (x topk for experts).
    pub num_tokens: u64,
    /// The policy's answer; `None` when the component has no policy (BF16).
    pub decision: Option<Decision>,
}

impl ModuleDecision {
    /// True when the module runs FP8.
    pub fn use_fp8(&self) -> bool {
        self.decision.as_ref().is_some_and(|d| d.use_fp8)
    }

    /// The reason in words.
    pub fn reason(&self) -> String {
        match &self.decision {
            Some(d) => d.reason.to_string(),
            None => "no policy for this component: BF16".to_owned(),
        }
    }
}

/// One TE module as the build-time callback sees it: its (promoted) kind and lookup sizes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModuleQuery<'a> {
    /// The kind the policy is looked up with (experts already promoted to grouped kinds).
    pub kind: ModuleKind,
    /// TE tp-comm buffer name (dense kinds match on it).
    pub ub_name: Option<&'a str>,
    /// Tensor-parallel size.
    pub tp: u32,
    /// Expert tensor-parallel size.
    pub etp: u32,
    /// Local experts (`num_experts / ep`); required for grouped kinds, never defaulted.
    pub num_gemms: Option<u32>,
    /// The trainer's execution: which of a rule's thresholds applies.
    pub execution: Execution,
}

impl<'a> ModuleQuery<'a> {
    /// The policy lookup this query makes; `None` for an expert kind without `num_gemms`.
    pub fn lookup(&self) -> Option<Lookup<'a>> {
        match self.kind.family() {
            KindFamily::Dense(kind) => Some(Lookup::Dense {
                kind,
                ub_name: self.ub_name,
                tp: self.tp,
            }),
            KindFamily::Grouped(kind) => self.num_gemms.map(|num_gemms| Lookup::Grouped {
                kind,
                etp: self.etp,
                num_gemms,
            }),
        }
    }
}

/// Why one module could not be decided.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DecideError {
    /// A grouped kind without `num_gemms`: a default of 1 is why the reference never matched an
    /// expert rule.
    #[error("{0} is an expert kind: give num_gemms (num_experts / ep); it has no default")]
    NoNumGemms(ModuleKind),
    /// A grouped kind without `moe_router_topk`.
    #[error("{0} is an expert kind: give topk (moe_router_topk) so tokens can be scaled")]
    NoTopk(ModuleKind),
    /// The token count overflows.
    #[error(transparent)]
    Tokens(#[from] TokenOverflow),
}

/// Decides one module by the seed's rule: dense kinds look up `(kind, ub_name, tp)` with
/// `seq x mbs / cp` (or the override) tokens; grouped kinds look up `(kind, etp, num_gemms)`
/// with that count times `topk`. No policy means BF16.
pub fn decide_module(
    q: &ModuleQuery<'_>,
    tokens: &TokenConfig,
    topk: Option<u64>,
    policy: Option<&Policy>,
) -> Result<ModuleDecision, DecideError> {
    let lookup = q.lookup().ok_or(DecideError::NoNumGemms(q.kind))?;
    let num_tokens = match q.kind.family() {
        KindFamily::Dense(_) => tokens.dense_tokens()?.0,
        KindFamily::Grouped(_) => tokens.expert_tokens(topk.ok_or(DecideError::NoTopk(q.kind))?)?,
    };
    Ok(ModuleDecision {
        num_tokens,
        decision: policy.map(|p| p.decide_in(lookup, num_tokens, q.execution)),
    })
}

/// Decides one module of an inventory (`topk` scales the tokens of experts) for `execution`.
pub fn decide(
    module: &ModuleSpec,
    tokens: &TokenConfig,
    topk: u64,
    policy: Option<&Policy>,
    execution: Execution,
) -> Result<ModuleDecision, DecideError> {
    decide_module(
        &ModuleQuery {
            kind: module.module_kind,
            ub_name: module.ub_name.as_deref(),
            tp: module.tp,
            etp: module.etp,
            num_gemms: Some(module.num_gemms),
            execution,
        },
        tokens,
        Some(topk),
        policy,
    )
}

/// Everything a plan needs besides the model.
#[derive(Debug, Clone)]
pub struct PlanConfig<'a> {
    /// The parallel layout.
    pub parallel: Parallel,
    /// Token settings per component (a VLM's ViT and LLM see different counts).
    pub tokens: BTreeMap<Role, TokenConfig>,
    /// `moe_router_topk` override; the model's value otherwise.
    pub topk: Option<u64>,
    /// Policy per component. A component without one runs BF16 throughout.
    pub policies: BTreeMap<Role, &'a Policy>,
    /// The trainer's execution (eager unless told): which threshold of each rule applies.
    pub execution: Execution,
}

/// One planned module (group).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct PlannedModule {
    /// The module.
    #[serde(flatten)]
    pub spec: ModuleSpec,
    /// Tokens the decision compared.
    pub num_tokens: u64,
    /// Rows of this rank's GEMM.
    pub gemm_rows: u64,
    /// The answer.
    pub use_fp8: bool,
    /// True when the component's policy is a cost-model estimate.
    pub estimated: bool,
    /// Why, in words.
    pub reason: String,
    /// The missing rule's key, when the answer is "no rule".
    #[serde(skip)]
    pub missing_key: Option<RuleKey>,
    /// Forward+backward GEMM FLOPs of all its layers in one step.
    pub step_flops: f64,
    /// The recipe it runs, where the policy has a per-module recipe plan (`None` there: BF16);
    /// absent without one (an FP8 module then runs the trainer's recipe).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recipe: Option<String>,
}

/// A missing rule and the modules that fell back to BF16 because of it.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct MissingRule {
    /// Component.
    pub component: Role,
    /// The key: `{"kind": "row", "ub_name": "fc2", "tp": 8}` in JSON, `(kind=row, ub_name=fc2,
    /// tp=8)` in words.
    pub key: RuleKey,
    /// The modules that needed it.
    pub modules: Vec<String>,
}

/// The token counts of one component.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct TokenCounts {
    /// What dense modules compare (`seq x mbs / cp`, or the override).
    pub dense: u64,
    /// What expert modules compare (dense x topk), for MoE components.
    pub experts: Option<u64>,
    /// The topk used, for MoE components.
    pub topk: Option<u64>,
}

/// Totals over a plan.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct Summary {
    /// Module instances (module groups x layers).
    pub modules: u64,
    /// Module instances that run FP8.
    pub fp8_modules: u64,
    /// Share of forward+backward GEMM FLOPs that run FP8.
    pub fp8_flop_share: f64,
    /// Rules the policy lacks for this layout.
    pub missing_rules: Vec<MissingRule>,
    /// Components planned without any policy.
    pub components_without_policy: Vec<Role>,
    /// Token counts per component and how they were derived, in words.
    pub tokens: BTreeMap<Role, String>,
    /// The token counts per component as numbers: what dense modules and experts compare.
    pub token_counts: BTreeMap<Role, TokenCounts>,
    /// Defaults applied while reading the config.
    pub defaults_applied: Vec<String>,
    /// Components whose policy is a cost-model estimate, not a measurement.
    pub estimated_policies: Vec<Role>,
    /// Things the user must hear: a policy made for another model, an estimate, a default that
    /// changes decisions.
    pub warnings: Vec<String>,
    /// Why a component's policy belongs to another model, one sentence each: the per-rank GEMM
    /// shapes the policy recorded differ from this model's on a key, or (where it recorded none)
    /// its model name differs. `fp8sel check` fails on any.
    pub other_model: Vec<String>,
    /// Components whose policy's eager thresholds are GPU time alone, when the plan is for
    /// eager steps: FP8 there may lose to the host's extra launches and casts.
    pub eager_from_gpu_time: Vec<Role>,
    /// What reading the config left aside (resolvers kept as written), once each.
    pub notes: Vec<String>,
    /// What the config's launch gets wrong for this plan, one sentence each (also among the
    /// warnings): Megatron's per-module config without the FP8 region the plan needs. `fp8sel
    /// check` fails on any.
    pub launch_problems: Vec<String>,
}

/// A decision for every module of a model.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct Plan {
    /// The model's name (what policies and reports call it).
    pub model: String,
    /// The modules, LLM first, in build order.
    pub modules: Vec<PlannedModule>,
    /// Totals.
    pub summary: Summary,
    /// Each component's architecture as the inventory read it (what a step benchmark needs to
    /// build the layers: experts, top-k, MLA ranks).
    pub architectures: BTreeMap<Role, Arch>,
    /// The execution the plan was decided for (which threshold of each rule applied).
    pub execution: Execution,
}

/// Why a plan could not be made.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum PlanError {
    /// The layout does not divide the model.
    #[error(transparent)]
    Layout(#[from] LayoutError),
    /// A module could not be decided (a token count overflows).
    #[error("{component}: {source}")]
    Decide {
        /// The component.
        component: Role,
        /// Why.
        source: DecideError,
    },
    /// No token settings for a component.
    #[error(
        "no token settings for the {0} component; fix: give its sequence length and micro-batch size, or a token count override"
    )]
    NoTokens(Role),
}

/// Plans every module of `model` under `cfg`.
pub fn plan(model: &ModelDesc, cfg: &PlanConfig<'_>) -> Result<Plan, PlanError> {
    let mut modules = Vec::new();
    let mut token_words = BTreeMap::new();
    let mut defaults = Vec::new();
    let mut without = Vec::new();
    let mut estimated_roles = Vec::new();
    let mut token_counts = BTreeMap::new();
    let mut warnings = Vec::new();
    let mut architectures = BTreeMap::new();
    let (mut other, mut eager_gpu) = (Vec::new(), Vec::new());
    for c in &model.components {
        architectures.insert(c.role, c.arch.clone());
        let tokens = cfg.tokens.get(&c.role).ok_or(PlanError::NoTokens(c.role))?;
        let decide_err = |source| PlanError::Decide {
            component: c.role,
            source,
        };
        let (n, src) = tokens
            .dense_tokens()
            .map_err(|e| decide_err(DecideError::Tokens(e)))?;
        let topk = cfg.topk.or(c.arch.moe.map(|m| m.router_topk)).unwrap_or(1);
        token_words.insert(c.role, describe_tokens(n, src, c.arch.moe.map(|_| topk)));
        token_counts.insert(
            c.role,
            TokenCounts {
                dense: n,
                experts: c.arch.moe.map(|_| n.saturating_mul(topk)),
                topk: c.arch.moe.map(|_| topk),
            },
        );
        defaults.extend(
            c.defaults_applied
                .iter()
                .map(|d| format!("{}: {d}", c.role)),
        );
        let policy = cfg.policies.get(&c.role).copied();
        if policy.is_none() {
            without.push(c.role);
        }
        warnings.extend(c.warnings.iter().map(|w| format!("{}: {w}", c.role)));
        let estimated = policy.is_some_and(Policy::estimated);
        if estimated {
            estimated_roles.push(c.role);
        }
        warnings.extend(policy_warnings(c, policy, cfg.topk.is_some()));
        if policy.is_some_and(|p| {
            cfg.execution == Execution::Eager
                && p.provenance().is_some_and(|v| v.eager_from_gpu_time())
        }) {
            eager_gpu.push(c.role);
            warnings.push(format!(
                "{}: the policy's eager thresholds (min_tokens) are GPU time alone: in eager \
                 steps FP8 modules pay the host's extra launches and casts, so this plan may be \
                 slower than BF16. Make the policy with an eager source: fp8sel gen-policy on a \
                 GPU with Transformer Engine installed (it measures this machine's host), or \
                 --host-profile FILE (python -m adaptive_fp8.bench.probe_host)",
                c.role
            ));
        }
        let specs = inventory(c, cfg.parallel)?;
        if let Some(why) = policy.and_then(|p| crate::identity::other_model(p, &model.name, &specs))
        {
            warnings.push(format!("{}: {why}", c.role));
            other.push(format!("{}: {why}", c.role));
        }
        for spec in specs {
            let d = decide(&spec, tokens, topk, policy, cfg.execution).map_err(decide_err)?;
            let mut row = planned(spec, &d, policy, estimated);
            with_recipe(&mut row, policy, cfg.execution);
            modules.push(row);
        }
    }
    warnings.extend(shape_warnings(&modules, cfg.parallel, &cfg.tokens));
    let mut summary = summarize(&modules, without, token_words, defaults);
    summary.estimated_policies = estimated_roles;
    summary.token_counts = token_counts;
    summary.warnings = warnings;
    summary.other_model = other;
    summary.eager_from_gpu_time = eager_gpu;
    summary.notes = model.notes.clone();
    let mut plan = Plan {
        model: model.name.clone(),
        modules,
        summary,
        architectures,
        execution: cfg.execution,
    };
    if let Some(w) = native_launch_warning(model, &plan) {
        plan.summary.warnings.push(w.clone());
        plan.summary.launch_problems.push(w);
    }
    Ok(plan)
}

/// One module's row. A key without a rule is a gap in the sweep unless the policy says why it
/// has none (measured with FP8 never winning, or kept BF16 by the numerics bound) or TE cannot
/// run the module in FP8 at all (nothing to measure).
fn planned(
    spec: ModuleSpec,
    d: &ModuleDecision,
    policy: Option<&Policy>,
    estimated: bool,
) -> PlannedModule {
    let mut missing_key = match &d.decision {
        Some(Decision {
            reason: Reason::NoRule { key },
            ..
        }) => Some(key.clone()),
        _ => None,
    };
    let mut reason = d.reason();
    let measured_bf16 = policy.map_or(&[][..], Policy::measured_bf16_keys);
    if let Some(k) = &missing_key
        && measured_bf16.contains(k)
    {
        // An estimated policy's keys were modelled, not measured: it says which.
        let how = if estimated {
            "ESTIMATED by the cost model"
        } else {
            "measured"
        };
        reason = format!("no rule for {k}: {how}, FP8 never won (BF16)");
        missing_key = None;
    } else if let Some(k) = &missing_key
        && !spec.fp8_capable()
    {
        reason = format!(
            "no rule for {k}: TE cannot run it in FP8 ({} x {} on a rank, not multiples of 16; BF16)",
            spec.in_features, spec.out_features
        );
        missing_key = None;
    } else if let Some(k) = &missing_key
        && let Some((o, bound)) = policy.and_then(Policy::provenance).and_then(|p| {
            Some((
                p.numerics_overrule(k)?,
                p.numerics.as_ref()?.max_quant_error,
            ))
        })
    {
        reason = format!(
            "no rule for {k}: kept BF16 by the numerics bound ({}'s {} has relative RMS error {:.4} > {bound}; by speed FP8 from {})",
            o.module, o.operand, o.error, o.min_tokens
        );
        missing_key = None;
    }
    PlannedModule {
        gemm_rows: spec.gemm_rows(d.num_tokens),
        num_tokens: d.num_tokens,
        use_fp8: d.use_fp8(),
        estimated,
        reason,
        missing_key,
        step_flops: spec.step_flops(d.num_tokens) * spec.layers as f64,
        recipe: None,
        spec,
    }
}

/// Under a per-module recipe plan, the module's recipe and why: the plan's steps for a key it
/// lists, `rules` under the plan's base recipe for the others.
fn with_recipe(row: &mut PlannedModule, policy: Option<&Policy>, execution: Execution) {
    let Some((p, plan)) = policy.and_then(|p| Some((p, p.recipe_plan()?))) else {
        return;
    };
    let q = ModuleQuery {
        kind: row.spec.module_kind,
        ub_name: row.spec.ub_name.as_deref(),
        tp: row.spec.tp,
        etp: row.spec.etp,
        num_gemms: Some(row.spec.num_gemms),
        execution,
    };
    let Some(lookup) = q.lookup() else { return };
    let recipe = p.recipe_in(lookup, row.num_tokens, execution, plan.base);
    row.use_fp8 = recipe.is_some();
    row.recipe = Some(recipe.map_or("bf16", fp8_policy::Recipe::name).to_owned());
    if let Some(k) = lookup.key().and_then(|k| plan.key(&k)) {
        row.reason = format!(
            "recipe plan: {} at {} tokens ({execution}: {}; bound {})",
            recipe.map_or("bf16", fp8_policy::Recipe::name),
            row.num_tokens,
            k.steps_in_words(execution),
            plan.max_quant_error
                .map_or("none".to_owned(), |e| e.to_string()),
        );
    } else if recipe.is_some() {
        row.reason = format!("{}; the plan's base recipe {}", row.reason, plan.base);
    }
}

fn describe_tokens(n: u64, src: TokenSource, topk: Option<u64>) -> String {
    match topk {
        Some(k) => format!("{n} ({src}); experts {} (x topk {k})", n.saturating_mul(k)),
        None => format!("{n} ({src})"),
    }
}

fn summarize(
    modules: &[PlannedModule],
    components_without_policy: Vec<Role>,
    tokens: BTreeMap<Role, String>,
    defaults_applied: Vec<String>,
) -> Summary {
    let total: u64 = modules.iter().map(|m| m.spec.layers).sum();
    let fp8: u64 = modules
        .iter()
        .filter(|m| m.use_fp8)
        .map(|m| m.spec.layers)
        .sum();
    // fold from +0.0: an empty f64 `sum()` is -0.0, which prints as "-0.0%".
    let flops = modules.iter().map(|m| m.step_flops).fold(0.0, |a, b| a + b);
    let fp8_flops = modules
        .iter()
        .filter(|m| m.use_fp8)
        .map(|m| m.step_flops)
        .fold(0.0, |a, b| a + b);
    let mut missing: BTreeMap<(Role, RuleKey), Vec<String>> = BTreeMap::new();
    for m in modules {
        if let Some(k) = &m.missing_key {
            missing
                .entry((m.spec.component, k.clone()))
                .or_default()
                .push(m.spec.name.clone());
        }
    }
    Summary {
        modules: total,
        fp8_modules: fp8,
        fp8_flop_share: if flops > 0.0 { fp8_flops / flops } else { 0.0 },
        missing_rules: missing
            .into_iter()
            .map(|((component, key), modules)| MissingRule {
                component,
                key,
                modules,
            })
            .collect(),
        components_without_policy,
        tokens,
        defaults_applied,
        estimated_policies: Vec::new(),
        warnings: Vec::new(),
        other_model: Vec::new(),
        launch_problems: Vec::new(),
        eager_from_gpu_time: Vec::new(),
        notes: Vec::new(),
        token_counts: BTreeMap::new(),
    }
}
