//! The provenance a merge writes beside its rules: where the reports came from, the settings,
//! the measured BF16 answers, each key's per-rank GEMM shapes and the eager thresholds' source.

use std::collections::{BTreeMap, BTreeSet};

use fp8_policy::Provenance;

use crate::options::{MergeOptions, SharedKey};
use crate::sample::{Loaded, RuleOutcome, Sample, rule_key};

/// Keys that were measured and got no rule: FP8 never won there. The format has no way to say
/// "measured, BF16" in `rules`, so provenance carries it; `fp8sel check` uses it to tell a
/// measured BF16 answer from a gap in the sweep. A key the numerics bound overruled is not "FP8
/// never won": provenance says why elsewhere.
pub(crate) fn measured_bf16(
    outcomes: &[RuleOutcome],
    overruled: &BTreeMap<String, Vec<fp8_policy::NumericsOverrule>>,
) -> BTreeMap<String, Vec<fp8_policy::RuleKey>> {
    let mut out: BTreeMap<String, Vec<fp8_policy::RuleKey>> = BTreeMap::new();
    for o in outcomes.iter().filter(|o| o.rule.is_none()) {
        if let Some(k) = rule_key(&o.key).filter(|k| {
            !overruled
                .get(&o.key.component)
                .is_some_and(|v| v.iter().any(|x| &x.key == k))
        }) {
            out.entry(o.key.component.clone()).or_default().push(k);
        }
    }
    out
}

/// Each component's keys with the per-rank GEMM shapes their samples measured (a key shared by
/// several modules has several), sorted: what tells this model from one of other shapes.
pub(crate) fn measured_shapes(samples: &[Sample]) -> BTreeMap<String, Vec<fp8_policy::KeyShapes>> {
    let mut by: BTreeMap<String, BTreeMap<fp8_policy::RuleKey, BTreeSet<fp8_policy::GemmShape>>> =
        BTreeMap::new();
    for s in samples {
        if let (Some(k), Some(shape)) = (rule_key(&s.key), s.shape) {
            by.entry(s.key.component.clone())
                .or_default()
                .entry(k)
                .or_default()
                .insert(shape);
        }
    }
    by.into_iter()
        .map(|(c, keys)| {
            let v = keys
                .into_iter()
                .map(|(key, shapes)| fp8_policy::KeyShapes {
                    key,
                    shapes: shapes.into_iter().collect(),
                })
                .collect();
            (c, v)
        })
        .collect()
}

/// What the eager thresholds of a merge with these settings are made from: an eager report's
/// own times, GPU times raised to a host model, or GPU times alone (a graphed policy, or one
/// of GPU times that an eager trainer would read as they are).
fn eager_source(inputs: &[Loaded], opt: &MergeOptions) -> fp8_policy::ThresholdSource {
    use fp8_policy::ThresholdSource;
    let eager_report = inputs
        .iter()
        .all(|l| matches!(l.origin.timing.as_str(), "te-eager" | "reference-eager"));
    let host = opt.host_profile.is_some() || opt.host_floor_ms.is_some();
    match opt.trainer {
        Some(fp8_policy::Execution::Graphed) => ThresholdSource::GpuTime,
        _ if eager_report => ThresholdSource::EagerStep,
        _ if host => ThresholdSource::HostProfile,
        _ => ThresholdSource::GpuTime,
    }
}

/// One component's provenance from the reports and the settings, identical whatever the input
/// order (the per-key lists are the caller's).
pub(crate) fn provenance(component: &str, inputs: &[Loaded], opt: &MergeOptions) -> Provenance {
    let mut files: Vec<String> = inputs
        .iter()
        .map(|l| l.file.display().to_string())
        .collect();
    files.sort();
    files.dedup();
    let distinct = |f: fn(&Loaded) -> &str| -> Vec<String> {
        let set: BTreeSet<&str> = inputs.iter().map(f).filter(|d| !d.is_empty()).collect();
        set.into_iter().map(str::to_owned).collect()
    };
    let mut p = Provenance::default();
    p.tool = format!("fp8sel merge-policy {}", env!("CARGO_PKG_VERSION"));
    p.component = component.to_owned();
    p.models = inputs
        .iter()
        .flat_map(|l| l.origin.models.get(component).into_iter().flatten())
        .filter(|m| !m.is_empty())
        .cloned()
        .collect::<BTreeSet<String>>()
        .into_iter()
        .collect();
    p.reports = files;
    p.device = distinct(|l| l.origin.device.as_str());
    p.recipe = distinct(|l| l.origin.recipe.as_str());
    p.timing = distinct(|l| l.origin.timing.as_str());
    p.speedup_threshold = Some(opt.threshold);
    p.margin = Some(opt.margin);
    p.host_profile = opt.host_profile.as_ref().map(|h| h.source.clone());
    p.eager_source = Some(eager_source(inputs, opt));
    p.host_floor_ms = opt
        .host_floor_ms
        .map(|(bf16, fp8)| fp8_policy::HostFloor { bf16, fp8 });
    p.estimated = inputs.iter().any(|l| l.origin.estimated);
    p.trainer = opt.trainer.map(|t| t.name().to_owned());
    p.tp_comm = inputs
        .iter()
        .filter(|l| l.origin.tp_comm == Some(true))
        .flat_map(|l| l.origin.tps.iter().copied())
        .collect::<BTreeSet<u32>>()
        .into_iter()
        .collect();
    p.rule = match opt.shared_key {
        SharedKey::AllWin => "min_tokens: smallest measured count from which every larger measured count clears threshold + margin (and bf16 p10 / fp8 p90 >= threshold) for every module sharing the key".to_owned(),
        SharedKey::Step => "min_tokens: smallest measured count from which every larger measured count clears threshold + margin (and bf16 p10 / fp8 p90 >= threshold); a key shared by several modules clears when the instance-weighted sum of their times does (shared_keys lists each module's own verdict)".to_owned(),
    };
    p
}
