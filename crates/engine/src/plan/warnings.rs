//! The plan's warnings: what TE or Megatron would refuse at the run's start, and what a
//! component's policy and config make worth saying.

use std::collections::BTreeMap;

use fp8_policy::Policy;

use super::{Plan, PlannedModule};
use crate::model::{ModelDesc, Role};
use crate::parallel::Parallel;
use crate::tokens::TokenConfig;

/// What TE or Megatron would refuse when the run starts, for the language model: FP8 modules
/// at a token count whose per-rank rows TE's FP8 casts cannot take (multiples of 16 on every
/// rank: [`Parallel::token_step`]; routed experts' rows Megatron pads for FP8 itself), and under
/// sequence parallelism a sequence (per CP rank) that does not split evenly over TP (Megatron
/// splits its first dimension evenly).
pub(super) fn shape_warnings(
    modules: &[PlannedModule],
    parallel: Parallel,
    tokens: &BTreeMap<Role, TokenConfig>,
) -> Vec<String> {
    let mut out = Vec::new();
    let Some(t) = tokens
        .get(&Role::Llm)
        .filter(|t| t.fp8_dynamic_num_tokens.is_none())
    else {
        return out;
    };
    let (tp, cp) = (u64::from(parallel.tp), u64::from(parallel.cp.max(1)));
    // The micro-batch's tokens: the step counts the CP and SP splits itself.
    let n = t.seq_length.saturating_mul(t.micro_batch_size);
    let step = parallel.token_step();
    let fp8 = modules
        .iter()
        .filter(|m| m.spec.component == Role::Llm && m.use_fp8 && !m.spec.is_expert)
        .count();
    if fp8 > 0 && n % step != 0 {
        out.push(format!(
            "llm: {fp8} FP8 module group(s) at {n} tokens, off this layout's step of {step}: \
             TE's FP8 casts need each rank's rows in multiples of 16 and stop with \"Caller must \
             pad\"; fix: a sequence length that is a multiple of {step}"
        ));
    }
    if parallel.sequence_parallel && tp > 1 && (t.seq_length / cp) % tp != 0 {
        out.push(format!(
            "llm: sequence parallelism splits each sequence over TP {tp}, and seq_length {} / \
             cp {cp} is not a multiple of {tp}: Megatron cannot split it evenly and stops at \
             the first step; fix: a sequence length that is a multiple of {}",
            t.seq_length,
            tp * cp
        ));
    }
    out
}

/// What a component's policy and config make worth saying: an estimated policy, an MoE config
/// without its router top-k.
pub(super) fn policy_warnings(
    c: &crate::model::Component,
    policy: Option<&Policy>,
    topk_given: bool,
) -> Vec<String> {
    let mut out = Vec::new();
    if policy.is_some_and(Policy::estimated) {
        out.push(format!(
            "the {} policy is an ESTIMATE from the cost model, not a measurement: measure on \
             a GPU (fp8sel gen-policy there) before training with it",
            c.role
        ));
    }
    if c.arch.moe.is_some()
        && !topk_given
        && c.defaults_applied
            .iter()
            .any(|d| d.starts_with("moe_router_topk absent"))
    {
        out.push(format!(
            "{}: the config has no moe_router_topk, so Megatron's default of 2 is used and \
             expert token counts are tokens x 2; if your launcher passes --moe-router-topk, \
             pass the same value here (--topk)",
            c.role
        ));
    }
    out
}

/// A launch that decides modules with Megatron's own per-module config
/// (`--te-precision-config-file`) but leaves the global FP8 region off (no `--fp8-format`) where
/// the plan needs it ([`crate::native::Region::fp8_need`]: FP8 routed experts, or FP8 modules in
/// CUDA-graphed steps): the run would start and train wrong (unpadded experts, or the captured
/// step's FP8 weights in every replay), so it is said.
pub(super) fn native_launch_warning(model: &ModelDesc, plan: &Plan) -> Option<String> {
    let c = model.component(Role::Llm)?;
    let file = c.fp8.native_config.as_deref()?;
    if c.fp8.format.is_some() {
        return None;
    }
    let need = crate::native::Region::fp8_need(plan)?;
    if crate::native::Region::native_bf16_because(plan).is_some() {
        return None; // the file made for this plan runs no module FP8
    }
    Some(format!(
        "llm: the launch passes --te-precision-config-file {file} without --fp8-format, but the \
         plan needs the global FP8 region: {}; fix: launch with --fp8-format and --fp8-recipe, \
         as the file's own launch lines say when it is made for this execution",
        need.why()
    ))
}
