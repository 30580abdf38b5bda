//! The policy of one or more layouts' step models.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use fp8_policy::{Execution, Policy, Provenance, RuleKey};
use serde_json::json;

use super::LayoutModel;
use crate::error::MergeError;
use crate::step::{NEVER, add_rule};

/// Each key's `min_tokens` (eager) and `min_tokens_graphed` (graphed) from the layouts' models:
/// the threshold times the key's token scale; a key FP8 in one execution only gets "never"
/// (2^53) in the other; in neither, it is a measured BF16 key. A key two layouts share takes
/// the larger threshold (none if either has none). Layouts must agree on model and recipe.
pub fn model_policy(layouts: &[LayoutModel]) -> Result<Policy, MergeError> {
    let first = layouts.first().ok_or_else(|| MergeError::Empty {
        file: PathBuf::from("(no step model)"),
        problem: "no layout was modelled".into(),
    })?;
    for l in layouts {
        for (what, a, b) in [
            ("model", &first.inputs.model_name, &l.inputs.model_name),
            ("recipe", &first.inputs.fp8_recipe, &l.inputs.fp8_recipe),
        ] {
            crate::step::agree(what, (a, &first.file), (b, &l.file))?;
        }
    }
    // (key, execution) -> threshold in the key's tokens (None: never FP8).
    let mut per: BTreeMap<(RuleKey, Execution), Option<u64>> = BTreeMap::new();
    for l in layouts {
        for (&e, ts) in &l.thresholds {
            for (u, t) in l.units.iter().zip(ts) {
                let mine = t.from.map(|f| f.saturating_mul(u.scale));
                per.entry((u.key.clone(), e))
                    .and_modify(|have| *have = have.zip(mine).map(|(a, b)| a.max(b)))
                    .or_insert(mine);
            }
        }
    }
    let executions: BTreeSet<Execution> = per.keys().map(|(_, e)| *e).collect();
    let keys: BTreeSet<RuleKey> = per.keys().map(|(k, _)| k.clone()).collect();
    let mut policy = Policy::new(1.0).map_err(|e| format_err(first, e))?;
    let mut bf16 = Vec::new();
    let numerics = bound_applied(layouts);
    let overruled = |k: &RuleKey| {
        numerics
            .as_ref()
            .is_some_and(|n| n.overruled.iter().any(|o| &o.key == k))
    };
    for key in keys {
        let get = |e| per.get(&(key.clone(), e)).copied().flatten();
        let (eager, graphed) = (get(Execution::Eager), get(Execution::Graphed));
        if eager.is_none() && graphed.is_none() {
            // A key the numerics bound kept BF16 is named there, not as one FP8 never won.
            if !overruled(&key) {
                bf16.push(key);
            }
            continue;
        }
        let min_tokens = eager.unwrap_or(NEVER);
        let min_tokens_graphed = executions
            .contains(&Execution::Graphed)
            .then(|| graphed.unwrap_or(NEVER));
        add_rule(&mut policy, &key, min_tokens, min_tokens_graphed)
            .map_err(|e| format_err(first, e))?;
    }
    let mut prov = Provenance::default();
    prov.tool = format!(
        "fp8sel gen-policy --backend step {}",
        env!("CARGO_PKG_VERSION")
    );
    prov.component = first.inputs.component.clone();
    prov.models = vec![first.inputs.model_name.clone()];
    prov.device = layouts
        .iter()
        .map(|l| l.inputs.device.clone())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    prov.recipe = vec![first.inputs.fp8_recipe.clone()];
    prov.reports = layouts
        .iter()
        .map(|l| l.file.display().to_string())
        .collect();
    prov.rule = "each key FP8 from the smallest count from which the step model (per-group host and GPU times, calibrated on all-BF16 and all-FP8 real steps; docs/POLICY.md) chooses it at every larger count of its grid, its gain beyond its measured noise; keys of a plan the check measured slower than BF16 moved above that count".into();
    prov.timing = executions
        .iter()
        .map(|e| format!("step-model-{e}"))
        .collect();
    prov.measured_bf16_keys = bf16;
    prov.numerics = numerics;
    prov.shapes = shapes(layouts);
    prov.eager_source = executions
        .contains(&Execution::Eager)
        .then_some(fp8_policy::ThresholdSource::Step);
    prov.step = Some(json!({ "model": layouts.iter().map(record).collect::<Vec<_>>() }));
    policy.set_provenance(prov);
    Ok(policy)
}

/// The numerics bound the layouts applied (one report and bound: `fp8sel` passes the same to
/// each), every key it kept BF16 once, at the smallest count speed gave it.
fn bound_applied(layouts: &[LayoutModel]) -> Option<fp8_policy::NumericsBoundApplied> {
    let mut out: Option<fp8_policy::NumericsBoundApplied> = None;
    for n in layouts.iter().filter_map(|l| l.numerics.as_ref()) {
        let all = out.get_or_insert_with(|| fp8_policy::NumericsBoundApplied {
            overruled: Vec::new(),
            ..n.clone()
        });
        for o in &n.overruled {
            match all.overruled.iter_mut().find(|x| x.key == o.key) {
                Some(x) => x.min_tokens = x.min_tokens.min(o.min_tokens),
                None => all.overruled.push(o.clone()),
            }
        }
    }
    out
}

/// Each key's per-rank GEMM shapes over the layouts (what `fp8sel check` tells models apart by).
fn shapes(layouts: &[LayoutModel]) -> Vec<fp8_policy::KeyShapes> {
    let mut by_key: BTreeMap<RuleKey, BTreeSet<fp8_policy::GemmShape>> = BTreeMap::new();
    for l in layouts {
        for g in &l.inputs.groups {
            by_key
                .entry(g.key.clone())
                .or_default()
                .insert(fp8_policy::GemmShape {
                    in_features: g.in_features,
                    out_features: g.out_features,
                });
        }
    }
    by_key
        .into_iter()
        .map(|(key, s)| fp8_policy::KeyShapes {
            key,
            shapes: s.into_iter().collect(),
        })
        .collect()
}

/// What provenance keeps of one layout: its fits, thresholds, check and disagreements.
fn record(l: &LayoutModel) -> serde_json::Value {
    let fits: serde_json::Map<String, serde_json::Value> = l
        .fits
        .iter()
        .map(|(e, f)| {
            (
                e.name().to_owned(),
                json!({"host_bf16_ms": f.host_bf16, "host_region_ms": f.host_region, "host_scale": f.host_scale,
                       "gpu_scale": f.calibrated_at.iter().map(|&t| f.gpu_scale.raw_at(t as f64)).collect::<Vec<_>>(), "gpu_rest_ms_poly_per_1k_tokens": f.gpu_rest.coef,
                       "gpu_region_ms_poly_per_1k_tokens": f.gpu_region.coef, "overlap_bf16": f.calibrated_at.iter().map(|&t| f.overlap.raw_at(t as f64)).collect::<Vec<_>>(), "overlap_fp8": f.calibrated_at.iter().map(|&t| f.overlap_fp8.raw_at(t as f64)).collect::<Vec<_>>(), "calibrated_at": f.calibrated_at}),
            )
        })
        .collect();
    let thresholds: serde_json::Map<String, serde_json::Value> = l
        .units
        .iter()
        .enumerate()
        .map(|(i, u)| {
            let per: serde_json::Map<String, serde_json::Value> = l
                .thresholds
                .iter()
                .map(|(e, ts)| (e.name().to_owned(), json!({"from_step_tokens": ts[i].from, "at_swept": ts[i].at_swept, "grid_reach": ts[i].reach})))
                .collect();
            (u.key.to_string(), json!({"groups": u.groups, "scale": u.scale, "executions": per}))
        })
        .collect();
    let held_out: Vec<&super::CheckRow> = l.check.iter().filter(|r| !r.calibrated).collect();
    let worst = held_out.iter().map(|r| r.error.abs()).fold(0.0, f64::max);
    let mut record = json!({
        "inputs": l.file.display().to_string(),
        "tp": l.inputs.tp, "ep": l.inputs.ep, "etp": l.inputs.etp, "layers": l.inputs.layers, "layer_types": l.inputs.layer_types,
        "fp8_param": l.inputs.fp8_weights(),
        "swept": l.swept, "fits": fits, "thresholds": thresholds,
        "check": l.check, "held_out_worst_error": worst, "repeats": l.repeats,
        "disagreements": l.check.iter().filter(|r| r.disagrees).collect::<Vec<_>>(),
        "judged": l.judged, "refit": l.refit,
        "guarded": l.guarded.iter().map(|(e, t)| json!({"execution": e.name(), "tokens": t})).collect::<Vec<_>>(),
        "lifted": l.lifted.iter().map(|(e, t, g)| json!({"execution": e.name(), "tokens": t, "groups": g})).collect::<Vec<_>>(),
        "held": l.held.iter().map(|(e, t, g)| json!({"execution": e.name(), "tokens": t, "groups": g})).collect::<Vec<_>>(),
        "not_the_policy": l.not_the_policy().iter().map(|r| json!({"execution": r.execution.name(), "tokens": r.tokens})).collect::<Vec<_>>(),
    });
    // The host the steps ran on, where the inputs name it (documents before the field do not).
    if let Some(h) = &l.inputs.host {
        record["host"] = json!(h);
    }
    record
}

fn format_err(l: &LayoutModel, e: fp8_policy::PolicyError) -> MergeError {
    MergeError::Format {
        file: l.file.clone(),
        message: e.to_string(),
    }
}
