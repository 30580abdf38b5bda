//! The sound merge: measured (tokens, speedup) curves to `min_tokens` thresholds.
//!
//! For each rule key, `min_tokens` is the smallest measured count from which every measured count
//! upwards clears `threshold + margin` (and, where the report has p10/p90, the pessimistic ratio
//! `bf16 p10 / fp8 p90` clears `threshold`) for every curve that shares the key. The reference
//! took the first count that beat the threshold and ignored the rest.

use std::collections::{BTreeMap, BTreeSet};

use fp8_policy::Policy;

use crate::checks::{check_mixed, check_shards};
use crate::error::MergeError;
use crate::merge_provenance::{measured_bf16, measured_shapes, provenance};
use crate::options::{MergeOptions, SharedKey, for_trainer};
use crate::sample::{GroupKey, Loaded, ParKey, Sample, by_key};
pub use crate::sample::{RuleOutcome, rule_key};
use fp8_report::Stat;

/// The result of a merge.
#[derive(Debug, Clone)]
pub struct Merged {
    /// One policy per component (`llm`, `vit`).
    pub policies: BTreeMap<String, Policy>,
    /// Every key and what it got.
    pub outcomes: Vec<RuleOutcome>,
    /// Warnings: duplicates combined, non-monotone curves, unpaired and skipped points.
    pub warnings: Vec<String>,
}

fn effective(s: &Stat, floor: Option<f64>) -> Stat {
    match floor {
        Some(f) => Stat {
            median: s.median.max(f),
            p10: s.p10.max(f),
            p90: s.p90.max(f),
        },
        None => *s,
    }
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Combines duplicate samples (same key, curve and token count) by the median.
fn dedup(samples: Vec<&Sample>, warnings: &mut Vec<String>) -> Vec<Sample> {
    let mut by: BTreeMap<(String, u64), Vec<&Sample>> = BTreeMap::new();
    for s in samples {
        by.entry((s.curve.clone(), s.tokens)).or_default().push(s);
    }
    by.into_iter()
        .map(|((curve, tokens), v)| {
            // Copies of one measurement (a shape measured once and reused by several layouts)
            // are one sample, not repeats to combine.
            if v.len() == 1 || v.iter().all(|s| s.bf16 == v[0].bf16 && s.fp8 == v[0].fp8) {
                return v[0].clone();
            }
            warnings.push(format!(
                "{curve} at {tokens} tokens measured {} times: combined by the median",
                v.len()
            ));
            let med = |f: &dyn Fn(&Sample) -> f64| {
                median(&mut v.iter().map(|s| f(s)).collect::<Vec<_>>())
            };
            Sample {
                key: v[0].key.clone(),
                curve,
                tokens,
                bf16: Stat {
                    median: med(&|s| s.bf16.median),
                    p10: med(&|s| s.bf16.p10),
                    p90: med(&|s| s.bf16.p90),
                },
                fp8: Stat {
                    median: med(&|s| s.fp8.median),
                    p10: med(&|s| s.fp8.p10),
                    p90: med(&|s| s.fp8.p90),
                },
                launches: v[0].launches,
                has_spread: v.iter().all(|s| s.has_spread),
                // Combined samples are thresholded as they are; the trainer's figure was chosen
                // before (`for_trainer`).
                gpu: None,
                instances: v[0].instances,
                shape: v[0].shape,
            }
        })
        .collect()
}

/// The host floors of one sample's module: the profile's for its kind and local experts, else
/// the one pair of `--host-floor-ms`, else none.
fn floors(s: &Sample, opt: &MergeOptions) -> (Option<f64>, Option<f64>) {
    if let Some(p) = &opt.host_profile {
        let experts = match s.key.par {
            ParKey::Grouped(_, g) => g,
            ParKey::Tp(_) => 1,
        };
        return match p.floors(s.key.kind, experts) {
            Some((b, f)) => (Some(b), Some(f)),
            None => (None, None),
        };
    }
    match opt.host_floor_ms {
        Some((b, f)) => (Some(b), Some(f)),
        None => (None, None),
    }
}

/// Whether one sample clears the bar, and its speedup.
pub fn clears(s: &Sample, opt: &MergeOptions) -> (bool, f64) {
    let (fb, ff) = floors(s, opt);
    let (b, f) = (effective(&s.bf16, fb), effective(&s.fp8, ff));
    let speedup = b.median / f.median;
    let mut ok = speedup >= opt.threshold + opt.margin;
    if s.has_spread {
        ok &= b.p10 / f.p90 >= opt.threshold;
    }
    (ok, speedup)
}

/// The module a curve measures (`experts.linear_fc1 [zipf1.2]` -> `experts.linear_fc1`) and
/// its expert split (`zipf1.2`, or "" for dense modules).
pub fn module_of(curve: &str) -> (&str, &str) {
    match curve.split_once(" [") {
        Some((m, split)) => (m, split.trim_end_matches(']')),
        None => (curve, ""),
    }
}

/// Distinct modules among samples.
fn modules(samples: &[Sample]) -> BTreeSet<&str> {
    samples.iter().map(|s| module_of(&s.curve).0).collect()
}

/// The step verdict at one count: for each expert split seen (dense modules join every split),
/// the instance-weighted sums of BF16 and FP8 time must clear the bar. `None` when a module of
/// the key has no sample at this count.
fn step_clears(
    at_t: &[&Sample],
    all_modules: &BTreeSet<&str>,
    opt: &MergeOptions,
) -> Option<(bool, f64)> {
    let present: BTreeSet<&str> = at_t.iter().map(|s| module_of(&s.curve).0).collect();
    if present != *all_modules {
        return None;
    }
    let splits: BTreeSet<&str> = at_t
        .iter()
        .map(|s| module_of(&s.curve).1)
        .filter(|sp| !sp.is_empty())
        .collect();
    let scenarios: Vec<&str> = if splits.is_empty() {
        vec![""]
    } else {
        splits.into_iter().collect()
    };
    let mut ok = true;
    let mut worst = f64::INFINITY;
    for sc in scenarios {
        let (mut b, mut f, mut b10, mut f90, mut spread) = (0.0, 0.0, 0.0, 0.0, true);
        for s in at_t.iter().filter(|s| {
            let sp = module_of(&s.curve).1;
            sp.is_empty() || sp == sc
        }) {
            let w = s.instances.unwrap_or(1) as f64;
            let (fb, ff) = floors(s, opt);
            let (bs, fs) = (effective(&s.bf16, fb), effective(&s.fp8, ff));
            b += w * bs.median;
            f += w * fs.median;
            b10 += w * bs.p10;
            f90 += w * fs.p90;
            spread &= s.has_spread;
        }
        let sp = b / f;
        let mut c = sp >= opt.threshold + opt.margin;
        if spread {
            c &= b10 / f90 >= opt.threshold;
        }
        ok &= c;
        worst = worst.min(sp);
    }
    Some((ok, worst))
}

/// Computes the rule of one key from its (deduplicated) samples: `(min_tokens, speedup at it)`,
/// and whether the curve is non-monotone (wins somewhere, loses at a larger count).
///
/// With [`SharedKey::AllWin`] (and for any key whose samples lack instance counts), every curve
/// measured at a count must clear the bar there. With [`SharedKey::Step`] a key shared by several
/// modules clears a count when the instance-weighted sum of its modules' times does
/// (`step_clears`); a count where one of its modules was not measured does not clear.
pub fn threshold_of(
    samples: &[Sample],
    opt: &MergeOptions,
) -> (Option<(u64, f64)>, bool, Vec<u64>) {
    let (counts, pass, speed) = judged(samples, opt);
    // Smallest index from which everything above passes.
    let mut start = counts.len();
    while start > 0 && pass[start - 1] {
        start -= 1;
    }
    let non_monotone = pass[..start].iter().any(|p| *p);
    let rule =
        (start < counts.len()).then(|| (counts[start], (speed[start] * 1000.0).round() / 1000.0));
    (rule, non_monotone, counts)
}

/// Per measured count of a key (ascending): the count, and the speedup [`threshold_of`] judges
/// it by (the slowest curve's, or the summed step's; NaN where a shared key's module was not
/// measured there).
pub fn speeds_of(samples: &[Sample], opt: &MergeOptions) -> Vec<(u64, f64)> {
    let (counts, _, speed) = judged(samples, opt);
    counts.into_iter().zip(speed).collect()
}

/// The key's counts, whether it clears the bar at each, and the speedup it is judged by.
fn judged(samples: &[Sample], opt: &MergeOptions) -> (Vec<u64>, Vec<bool>, Vec<f64>) {
    let counts: BTreeSet<u64> = samples.iter().map(|s| s.tokens).collect();
    let counts: Vec<u64> = counts.into_iter().collect();
    let all_modules = modules(samples);
    let step = opt.shared_key == SharedKey::Step
        && all_modules.len() > 1
        && samples.iter().all(|s| s.instances.is_some());
    let mut pass = Vec::with_capacity(counts.len());
    let mut speed = Vec::with_capacity(counts.len());
    for &t in &counts {
        let at_t: Vec<&Sample> = samples.iter().filter(|s| s.tokens == t).collect();
        if step {
            let (ok, sp) = step_clears(&at_t, &all_modules, opt).unwrap_or((false, f64::NAN));
            pass.push(ok);
            speed.push(sp);
            continue;
        }
        let mut ok = true;
        let mut worst = f64::INFINITY;
        for s in at_t {
            let (c, sp) = clears(s, opt);
            ok &= c;
            worst = worst.min(sp);
        }
        pass.push(ok);
        speed.push(worst);
    }
    (counts, pass, speed)
}

/// What each module sharing a key would get on its own, beside the key's rule: the per-module
/// verdicts a shared key's provenance records.
fn shared_verdict(
    key: &GroupKey,
    samples: &[Sample],
    rule: Option<(u64, f64)>,
    opt: &MergeOptions,
    warnings: &mut Vec<String>,
) -> Option<fp8_policy::SharedKeyVerdict> {
    let mods = modules(samples);
    if mods.len() < 2 {
        return None;
    }
    let rk = rule_key(key)?;
    let known = samples.iter().all(|s| s.instances.is_some());
    let used = if opt.shared_key == SharedKey::Step && known {
        SharedKey::Step
    } else {
        if opt.shared_key == SharedKey::Step {
            warnings.push(format!(
                "{}: shared by {} modules, but the reports carry no instance counts (measured before fp8sel recorded them): decided with --shared-key all-win",
                describe(key),
                mods.len()
            ));
        }
        SharedKey::AllWin
    };
    let alone = MergeOptions {
        shared_key: SharedKey::AllWin,
        ..opt.clone()
    };
    let modules = mods
        .iter()
        .map(|m| {
            let own: Vec<Sample> = samples
                .iter()
                .filter(|s| module_of(&s.curve).0 == *m)
                .cloned()
                .collect();
            let (r, _, _) = threshold_of(&own, &alone);
            fp8_policy::ModuleVerdict {
                module: (*m).to_owned(),
                instances: own.first().and_then(|s| s.instances),
                min_tokens: r.map(|x| x.0),
            }
        })
        .collect();
    Some(fp8_policy::SharedKeyVerdict {
        key: rk,
        rule: used.as_str().to_owned(),
        min_tokens: rule.map(|r| r.0),
        modules,
    })
}

/// The module over the numerics bound on `key`, if a bound is set: `(module, operand, error)`.
fn overrule<'a>(opt: &'a MergeOptions, key: &GroupKey) -> Option<(&'a str, &'a str, f64)> {
    let bound = opt.numerics.as_ref()?;
    bound.overrule(&key.component, &rule_key(key)?)
}

fn describe(k: &GroupKey) -> String {
    match (&k.ub_name, k.par) {
        (Some(ub), ParKey::Tp(tp)) => format!("{} {}/{ub} tp={tp}", k.component, k.kind),
        (None, ParKey::Tp(tp)) => format!("{} {} (no ub_name) tp={tp}", k.component, k.kind),
        (_, ParKey::Grouped(etp, g)) => {
            format!("{} {} etp={etp} num_gemms={g}", k.component, k.kind)
        }
    }
}

/// Merges loaded reports into per-component policies.
pub fn merge(inputs: &[Loaded], opt: &MergeOptions) -> Result<Merged, MergeError> {
    opt.check()?;
    if inputs.is_empty() {
        return Err(MergeError::Options("no reports given".into()));
    }
    check_mixed(inputs, opt)?;
    check_shards(inputs)?;
    let mut warnings = Vec::new();
    let all = samples_for(inputs, opt, &mut warnings)?;
    let mut outcomes = Vec::new();
    let mut policies: BTreeMap<String, Policy> = BTreeMap::new();
    let mut shared: BTreeMap<String, Vec<fp8_policy::SharedKeyVerdict>> = BTreeMap::new();
    let mut overruled: BTreeMap<String, Vec<fp8_policy::NumericsOverrule>> = BTreeMap::new();
    for (key, samples) in by_key(&all) {
        let samples = dedup(samples, &mut warnings);
        let (rule, non_monotone, counts) = threshold_of(&samples, opt);
        let speeds = speeds_of(&samples, opt).into_iter().map(|x| x.1).collect();
        if let Some(v) = shared_verdict(&key, &samples, rule, opt, &mut warnings) {
            shared.entry(key.component.clone()).or_default().push(v);
        }
        if non_monotone {
            warnings.push(format!(
                "{}: non-monotone: FP8 wins at some token count and loses at a larger one; the rule starts above the last loss",
                describe(&key)
            ));
        }
        let policy = match policies.entry(key.component.clone()) {
            std::collections::btree_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::btree_map::Entry::Vacant(e) => e.insert(
                Policy::new(opt.threshold).map_err(|e| MergeError::Options(e.to_string()))?,
            ),
        };
        let rule = match (rule, overrule(opt, &key)) {
            (Some((min_tokens, _)), Some((module, operand, error))) => {
                warnings.push(format!(
                    "{}: kept BF16 by the numerics bound: {module}'s {operand} has relative RMS error {error:.4} > {} (FP8 would start at {min_tokens} by speed)",
                    describe(&key),
                    opt.numerics.as_ref().map_or(0.0, |n| n.max_quant_error)
                ));
                if let Some(k) = rule_key(&key) {
                    overruled.entry(key.component.clone()).or_default().push(
                        fp8_policy::NumericsOverrule {
                            key: k,
                            module: module.to_owned(),
                            operand: operand.to_owned(),
                            error,
                            min_tokens,
                        },
                    );
                }
                None
            }
            (rule, _) => rule,
        };
        if let Some((min_tokens, speedup)) = rule {
            add_rule(policy, &key, min_tokens, speedup, &mut warnings)?;
        }
        outcomes.push(RuleOutcome {
            key,
            rule,
            counts,
            speeds,
        });
    }
    let mut bf16_keys = measured_bf16(&outcomes, &overruled);
    let mut shapes = measured_shapes(&all);
    for (component, policy) in &mut policies {
        let mut p = provenance(component, inputs, opt);
        p.shapes = shapes.remove(component).unwrap_or_default();
        p.measured_bf16_keys = bf16_keys.remove(component).unwrap_or_default();
        p.shared_keys = shared.remove(component).unwrap_or_default();
        p.numerics = opt
            .numerics
            .as_ref()
            .map(|n| fp8_policy::NumericsBoundApplied {
                report: n.report.file.display().to_string(),
                max_quant_error: n.max_quant_error,
                overruled: overruled.remove(component).unwrap_or_default(),
            });
        policy.set_provenance(p);
    }
    warnings.sort();
    warnings.dedup();
    Ok(Merged {
        policies,
        outcomes,
        warnings,
    })
}

/// Every usable sample of the reports, in the trainer's times and of the asked component; the
/// reports' unpaired and unmeasured points become warnings.
fn samples_for(
    inputs: &[Loaded],
    opt: &MergeOptions,
    warnings: &mut Vec<String>,
) -> Result<Vec<Sample>, MergeError> {
    let mut all: Vec<Sample> = Vec::new();
    for l in inputs {
        let samples = match opt.trainer {
            Some(t) => for_trainer(l, t, opt.host_profile.is_some())?,
            None => l.samples.clone(),
        };
        all.extend(
            samples
                .into_iter()
                .filter(|s| opt.component.as_ref().is_none_or(|c| *c == s.key.component)),
        );
        for u in &l.unpaired {
            warnings.push(format!("{}: unpaired: {u}", l.file.display()));
        }
        for n in &l.not_ok {
            warnings.push(format!("{}: not measured: {n}", l.file.display()));
        }
    }
    if all.is_empty() {
        return Err(MergeError::Options(match &opt.component {
            Some(c) => format!("the reports hold no `{c}` points"),
            None => "the reports hold no usable points".into(),
        }));
    }
    Ok(all)
}

/// Writes the key's rule into its component's policy.
fn add_rule(
    policy: &mut Policy,
    key: &GroupKey,
    min_tokens: u64,
    speedup: f64,
    warnings: &mut Vec<String>,
) -> Result<(), MergeError> {
    let Some(rule_key) = crate::sample::rule_key(key) else {
        warnings.push(format!(
            "{}: no ub_name, so no rule can be written",
            describe(key)
        ));
        return Ok(());
    };
    let t = fp8_policy::Thresholds {
        eager: fp8_policy::Threshold::from_wire(min_tokens),
        graphed: None,
        measured_speedup: Some(speedup),
    };
    policy
        .insert(&rule_key, t)
        .map_err(|e| MergeError::Options(format!("{}: {e}", describe(key))))
}
