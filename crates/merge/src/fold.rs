//! One fold from evidence to a policy of both executions.
//!
//! Evidence is what one source says of one key in one execution ([`Evidence`]): a threshold
//! ("never" for a measured BF16 answer), the speedup at it, and for the training step the counts
//! it swept. A [`Source`] is one policy's evidence: a single-execution policy for the execution
//! it was made for ([`Source::of_policy`]), or a training-step policy for the executions and
//! counts it swept ([`Source::of_step`]). [`fold`] reads the sources in the order given, most
//! trusted first, and for each key and execution (docs/POLICY.md, "How sources fold"):
//!
//! 1. The first source with evidence gives the threshold.
//! 2. The step's evidence yields to the answer of the sources after it where the step has no
//!    verdict against that answer: the step kept the key BF16 up to its largest swept count and
//!    the later threshold lies above that count, or the step ran it FP8 from its smallest swept
//!    count and the later threshold lies below that count.
//! 3. No source has evidence: BF16 ("never") in that execution.
//! 4. BF16 in both executions: no rule; a measured BF16 key where both executions had evidence.
//! 5. `measured_speedup` is that of the evidence the eager threshold came from, or the graphed
//!    one's where the key is BF16 eager.
//! 6. Provenance: the first source that is not the step gives the base; every source's timing,
//!    reports, devices and shapes are added, the step's record, and `sources` says which source
//!    gave each key's threshold in each execution.
//!
//! This module reads no prose: where a threshold came from is [`ThresholdSource`], from each
//! policy's `eager_source`.

use std::collections::{BTreeMap, BTreeSet};

use fp8_policy::{
    Execution, KeySources, Policy, PolicyError, Provenance, RuleKey, Threshold, ThresholdSource,
    Thresholds,
};

/// The counts the training step swept for one key and execution, in the key's own tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Swept {
    /// Its smallest count.
    pub from: u64,
    /// Its largest count.
    pub to: u64,
}

/// What one source says of one key in one execution.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Evidence {
    /// Where FP8 starts; `Never` for a measured BF16 answer.
    pub threshold: Threshold,
    /// The speedup measured at the threshold, where the source recorded it.
    pub measured_speedup: Option<f64>,
    /// The counts the training step swept (rule 2); `None` for every other source.
    pub swept: Option<Swept>,
}

/// One policy's evidence, per key and execution.
#[derive(Debug, Clone, Default)]
pub struct Source {
    /// What its thresholds were made from (`None`: the policy did not say).
    pub made_from: Option<ThresholdSource>,
    /// Its evidence: per key, eager then graphed.
    pub evidence: BTreeMap<RuleKey, [Option<Evidence>; 2]>,
    /// Its provenance, for the folded policy's.
    pub provenance: Option<Provenance>,
}

const fn slot(e: Execution) -> usize {
    match e {
        Execution::Eager => 0,
        Execution::Graphed => 1,
    }
}

/// A rule's threshold in one execution: `min_tokens_graphed` for graphed where it has one.
fn in_execution(t: &Thresholds, e: Execution) -> Threshold {
    match e {
        Execution::Graphed => t.graphed.unwrap_or(t.eager),
        Execution::Eager => t.eager,
    }
}

impl Source {
    /// A policy made for one execution, as evidence for that execution: each rule's threshold,
    /// and "never" for each measured BF16 key.
    pub fn of_policy(p: &Policy, execution: Execution) -> Source {
        let mut evidence: BTreeMap<RuleKey, [Option<Evidence>; 2]> = BTreeMap::new();
        for (key, t) in p.rules() {
            evidence.entry(key).or_default()[slot(execution)] = Some(Evidence {
                threshold: in_execution(&t, execution),
                measured_speedup: t.measured_speedup,
                swept: None,
            });
        }
        for key in p
            .provenance()
            .map(|v| v.measured_bf16_keys.as_slice())
            .unwrap_or_default()
        {
            evidence.entry(key.clone()).or_default()[slot(execution)].get_or_insert(Evidence {
                threshold: Threshold::Never,
                measured_speedup: None,
                swept: None,
            });
        }
        Source {
            made_from: p.provenance().and_then(|v| v.eager_source),
            evidence,
            provenance: p.provenance().cloned(),
        }
    }

    /// A policy from the training step (`step::step_policy`), as evidence for each key in each
    /// execution its record says it swept, with the counts swept. A step policy without a
    /// record is evidence in both executions, without counts. A record that does not read is
    /// refused.
    pub fn of_step(p: &Policy) -> Result<Source, crate::MergeError> {
        let record = match crate::step::StepRecord::of(p) {
            Some(Ok(r)) => Some(r),
            Some(Err(e)) => {
                return Err(crate::MergeError::Record(format!("the step policy's {e}")));
            }
            None => None,
        };
        let mut keys: BTreeMap<RuleKey, Thresholds> = p.rules().into_iter().collect();
        for key in p
            .provenance()
            .map(|v| v.measured_bf16_keys.as_slice())
            .unwrap_or_default()
        {
            keys.entry(key.clone()).or_insert(Thresholds {
                eager: Threshold::Never,
                graphed: None,
                measured_speedup: None,
            });
        }
        let mut evidence = BTreeMap::new();
        for (key, t) in keys {
            let mut both = [None, None];
            for e in [Execution::Eager, Execution::Graphed] {
                let swept = match &record {
                    Some(r) => match r.swept(&key, e) {
                        Some((from, to)) => Some(Swept { from, to }),
                        None => continue,
                    },
                    None => None,
                };
                both[slot(e)] = Some(Evidence {
                    threshold: in_execution(&t, e),
                    measured_speedup: t.measured_speedup,
                    swept,
                });
            }
            evidence.insert(key, both);
        }
        Ok(Source {
            made_from: Some(ThresholdSource::Step),
            evidence,
            provenance: p.provenance().cloned(),
        })
    }
}

/// One execution's answer for a key from `sources` (rules 1-3): the evidence and its source.
fn answer(
    sources: &[Source],
    key: &RuleKey,
    e: Execution,
) -> Option<(Evidence, Option<ThresholdSource>)> {
    let (i, ev) = sources.iter().enumerate().find_map(|(i, s)| {
        s.evidence
            .get(key)
            .and_then(|b| b[slot(e)])
            .map(|ev| (i, ev))
    })?;
    let mine = (ev, sources[i].made_from);
    let Some(s) = ev.swept else {
        return Some(mine);
    };
    let Some(rest) = answer(&sources[i + 1..], key, e) else {
        return Some(mine);
    };
    let yields = match ev.threshold {
        Threshold::Never => rest.0.threshold > Threshold::From(s.to),
        Threshold::From(t) => t == s.from && rest.0.threshold < Threshold::From(s.from),
    };
    Some(if yields { rest } else { mine })
}

fn union(a: &mut Vec<String>, b: &[String]) {
    let set: BTreeSet<String> = a.iter().chain(b).cloned().collect();
    *a = set.into_iter().collect();
}

/// Adds `theirs`' shapes to `mine`, key by key, each key's shapes sorted and distinct.
fn union_shapes(mine: &mut Vec<fp8_policy::KeyShapes>, theirs: &[fp8_policy::KeyShapes]) {
    let mut by: BTreeMap<RuleKey, BTreeSet<fp8_policy::GemmShape>> = BTreeMap::new();
    for k in mine.iter().chain(theirs) {
        by.entry(k.key.clone())
            .or_default()
            .extend(k.shapes.iter().copied());
    }
    *mine = by
        .into_iter()
        .map(|(key, shapes)| fp8_policy::KeyShapes {
            key,
            shapes: shapes.into_iter().collect(),
        })
        .collect();
}

/// The provenance of the fold (rule 6), before its keys' lists.
fn base_provenance(sources: &[Source]) -> Provenance {
    let base = sources
        .iter()
        .position(|s| s.made_from != Some(ThresholdSource::Step))
        .unwrap_or(0);
    let mut prov = sources
        .get(base)
        .and_then(|s| s.provenance.clone())
        .unwrap_or_default();
    for (i, s) in sources.iter().enumerate() {
        let Some(sp) = s.provenance.as_ref().filter(|_| i != base) else {
            continue;
        };
        union(&mut prov.timing, &sp.timing);
        union(&mut prov.reports, &sp.reports);
        union(&mut prov.device, &sp.device);
        union_shapes(&mut prov.shapes, &sp.shapes);
        if prov.host_profile.is_none() {
            prov.host_profile.clone_from(&sp.host_profile);
        }
        if s.made_from == Some(ThresholdSource::Step) {
            prov.step.clone_from(&sp.step);
        }
    }
    prov
}

/// The one fold: a policy of both executions from `sources`, most trusted first (the module's
/// rules 1-6), with the given speedup threshold.
pub fn fold(sources: &[Source], speedup_threshold: f64) -> Result<Policy, PolicyError> {
    let keys: BTreeSet<&RuleKey> = sources.iter().flat_map(|s| s.evidence.keys()).collect();
    let mut out = Policy::new(speedup_threshold)?;
    let mut prov = base_provenance(sources);
    let (mut bf16, mut from) = (Vec::new(), Vec::new());
    for key in keys {
        let e = answer(sources, key, Execution::Eager);
        let g = answer(sources, key, Execution::Graphed);
        let th = |a: &Option<(Evidence, _)>| a.map_or(Threshold::Never, |a| a.0.threshold);
        let (te, tg) = (th(&e), th(&g));
        from.push(KeySources {
            key: key.clone(),
            eager: e.and_then(|a| a.1),
            graphed: g.and_then(|a| a.1),
        });
        if te == Threshold::Never && tg == Threshold::Never {
            if e.is_some() && g.is_some() {
                bf16.push(key.clone());
            } else {
                from.pop();
            }
            continue;
        }
        let measured_speedup =
            if te == Threshold::Never { g } else { e }.and_then(|a| a.0.measured_speedup);
        let t = Thresholds {
            eager: te,
            // Written even where it equals `min_tokens`: the file says both outright.
            graphed: Some(tg),
            measured_speedup,
        };
        out.insert(key, t)?;
    }
    let eager: BTreeSet<Option<ThresholdSource>> = from.iter().map(|k| k.eager).collect();
    prov.eager_source = match eager.into_iter().collect::<Vec<_>>()[..] {
        [one] => one,
        _ => None,
    };
    prov.measured_bf16_keys = bf16;
    prov.sources = from;
    prov.trainer = Some("eager+graphed".to_owned());
    out.set_provenance(prov);
    Ok(out)
}

/// An eager policy and a graphed one as one policy of both executions (`merge-policy
/// --trainer both`): [`fold`] of the two.
pub fn fold_pair(eager: &Policy, graphed: &Policy) -> Result<Policy, PolicyError> {
    fold(
        &[
            Source::of_policy(eager, Execution::Eager),
            Source::of_policy(graphed, Execution::Graphed),
        ],
        eager.speedup_threshold(),
    )
}

/// Every rule's key and both thresholds (`min_tokens`, `min_tokens_graphed`) and speedup.
pub type BothThresholds = BTreeMap<RuleKey, (Threshold, Option<Threshold>, Option<f64>)>;

/// Every rule of `p` by its key: `min_tokens`, `min_tokens_graphed` and `measured_speedup`.
pub fn both_thresholds(p: &Policy) -> BothThresholds {
    p.rules()
        .into_iter()
        .map(|(k, t)| (k, (t.eager, t.graphed, t.measured_speedup)))
        .collect()
}
