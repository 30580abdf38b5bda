//! The sound merge: measured (tokens, speedup) curves to `min_tokens` thresholds.
//!
//! For each rule key, `min_tokens` is the smallest measured count from which every measured count
//! upwards clears `threshold + margin` (and, where the report has p10/p90, the pessimistic ratio
//! `bf16 p10 / fp8 p90` clears `threshold`) for every curve that shares the key. The reference
//! took the first count that beat the threshold and ignored the rest.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use fp8_policy::{DenseRule, GroupedRule, KindFamily, Policy, Provenance};

use crate::error::MergeError;
use crate::sample::{GroupKey, Loaded, ParKey, Sample, by_key};
use fp8_report::Stat;

/// Merge settings.
#[derive(Debug, Clone, PartialEq)]
pub struct MergeOptions {
    /// Speedup FP8 must reach (the policy's `speedup_threshold`).
    pub threshold: f64,
    /// Noise guard added to the threshold.
    pub margin: f64,
    /// Merge only this component.
    pub component: Option<String>,
    /// Accept reports from different devices or recipes.
    pub allow_mixed: bool,
    /// Host-bound trainers: per-module floors (BF16 ms, FP8 ms) applied as `max(gpu, floor)`.
    pub host_floor_ms: Option<(f64, f64)>,
    /// The trainer the policy is for; `None` thresholds each report's own `total_ms`.
    pub trainer: Option<Trainer>,
    /// How a key shared by several modules is decided.
    pub shared_key: SharedKey,
    /// Host-bound trainers: a measured host profile (per kind, precision and local expert),
    /// applied as `max(time, host)`; exclusive with `host_floor_ms`.
    pub host_profile: Option<crate::host::HostProfile>,
    /// Modules whose FP8 quantization error is over this bound run BF16, whatever their speedup.
    pub numerics: Option<crate::numerics::NumericsBound>,
}

/// How a rule key shared by several modules (DeepSeek-V3's `row/fc2` at one TP: the dense
/// layers' FC2 and the shared experts' FC2) gets its `min_tokens`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SharedKey {
    /// By the step: from the smallest count at which the summed time of every instance on the
    /// key (each module weighted by how many a rank builds) wins with the margin, and every
    /// larger count too. A key with one module is decided the same either way.
    #[default]
    Step,
    /// Every module sharing the key must win on its own (the rule before the step rule).
    AllWin,
}

impl SharedKey {
    /// `step` or `all-win`.
    pub const fn as_str(self) -> &'static str {
        match self {
            SharedKey::Step => "step",
            SharedKey::AllWin => "all-win",
        }
    }
}

impl std::str::FromStr for SharedKey {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "step" => Ok(SharedKey::Step),
            "all-win" => Ok(SharedKey::AllWin),
            other => Err(format!("unknown --shared-key `{other}` (step, all-win)")),
        }
    }
}

/// The step a policy optimizes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trainer {
    /// GPU time: CUDA graphs, or a trainer that keeps the GPU fed.
    Graphed,
    /// The eager step, host time included.
    Eager,
}

impl Trainer {
    /// `graphed` or `eager`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Trainer::Graphed => "graphed",
            Trainer::Eager => "eager",
        }
    }
}

impl std::str::FromStr for Trainer {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "graphed" => Ok(Trainer::Graphed),
            "eager" => Ok(Trainer::Eager),
            other => Err(format!("unknown trainer `{other}` (graphed, eager)")),
        }
    }
}

/// The samples of a report for a trainer: GPU time for a graphed trainer, the eager step for an
/// eager one. An eager trainer can also take GPU times with a host profile: the profile's
/// `max(gpu, host)` is then its model of the eager step. A report without the figure the trainer
/// needs is refused, naming the fix.
fn for_trainer(
    l: &Loaded,
    trainer: Trainer,
    host_modelled: bool,
) -> Result<Vec<Sample>, MergeError> {
    let eager_report = matches!(l.origin.timing.as_str(), "te-eager" | "reference-eager");
    l.samples
        .iter()
        .map(|s| match (trainer, eager_report, s.gpu) {
            (Trainer::Eager, true, _) | (Trainer::Graphed, false, _) => Ok(s.clone()),
            (Trainer::Eager, false, _) if host_modelled => Ok(s.clone()),
            (Trainer::Graphed, true, Some((bf16, fp8))) => Ok(Sample {
                bf16,
                fp8,
                ..s.clone()
            }),
            (Trainer::Graphed, true, None) => Err(MergeError::Options(format!(
                "{}: --trainer graphed needs GPU times, and this report has only eager times \
                 ({}); fix: measure with fp8sel bench --backend te (both figures) or --backend \
                 cuda (GPU time)",
                l.file.display(),
                l.origin.timing
            ))),
            (Trainer::Eager, false, _) => Err(MergeError::Options(format!(
                "{}: --trainer eager needs eager step times (host included), and this report \
                 has GPU times only ({}); fix: measure with fp8sel bench --backend te, or model \
                 the host with --host-profile (python -m adaptive_fp8.probe_host)",
                l.file.display(),
                l.origin.timing
            ))),
        })
        .collect()
}

impl Default for MergeOptions {
    fn default() -> Self {
        MergeOptions {
            threshold: 1.0,
            margin: 0.02,
            component: None,
            allow_mixed: false,
            host_floor_ms: None,
            trainer: None,
            shared_key: SharedKey::Step,
            host_profile: None,
            numerics: None,
        }
    }
}

/// One rule that was written, or a key that got none.
#[derive(Debug, Clone, PartialEq)]
pub struct RuleOutcome {
    /// The key.
    pub key: GroupKey,
    /// `Some(min_tokens, measured_speedup)` when FP8 wins from some count up.
    pub rule: Option<(u64, f64)>,
    /// Measured token counts of the key.
    pub counts: Vec<u64>,
}

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
    let counts: BTreeSet<u64> = samples.iter().map(|s| s.tokens).collect();
    let counts: Vec<u64> = counts.into_iter().collect();
    let all_modules = modules(samples);
    let step = opt.shared_key == SharedKey::Step
        && all_modules.len() > 1
        && samples.iter().all(|s| s.instances.is_some());
    // pass[t]: the key clears at t; speed[t]: the speedup it is judged by (the slowest curve's,
    // or the summed step's).
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

/// The policy lookup key of a group, when it can carry a rule.
pub fn rule_key(k: &GroupKey) -> Option<fp8_policy::RuleKey> {
    match (k.kind.family(), k.par, &k.ub_name) {
        (KindFamily::Dense(kind), ParKey::Tp(tp), Some(ub)) => Some(fp8_policy::RuleKey::Dense {
            kind,
            ub_name: ub.clone(),
            tp,
        }),
        (KindFamily::Grouped(kind), ParKey::Grouped(etp, num_gemms), _) => {
            Some(fp8_policy::RuleKey::Grouped {
                kind,
                etp,
                num_gemms,
            })
        }
        _ => None,
    }
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

fn check_mixed(inputs: &[Loaded], opt: &MergeOptions) -> Result<(), MergeError> {
    if opt.allow_mixed {
        return Ok(());
    }
    let mut first: [Option<(&str, &PathBuf)>; 2] = [None, None];
    let mut est: Option<(bool, &PathBuf)> = None;
    let mut recompute: Option<(bool, &PathBuf)> = None;
    // Per TP size: the first report timed with communication, and the first timed one rank alone.
    let (mut comm, mut local_tp): (BTreeMap<u32, &PathBuf>, BTreeMap<u32, &PathBuf>) =
        (BTreeMap::new(), BTreeMap::new());
    let mut seen_models: BTreeMap<&str, (&str, &PathBuf)> = BTreeMap::new();
    for l in inputs {
        for (i, (what, v)) in [
            ("device", l.origin.device.as_str()),
            ("recipe", l.origin.recipe.as_str()),
        ]
        .into_iter()
        .enumerate()
        {
            if v.is_empty() {
                continue; // the reference format does not say
            }
            match first[i] {
                None => first[i] = Some((v, &l.file)),
                Some((a, fa)) if a != v => {
                    return Err(MergeError::Mixed {
                        what,
                        a: a.to_owned(),
                        file_a: fa.clone(),
                        b: v.to_owned(),
                        file_b: l.file.clone(),
                    });
                }
                _ => {}
            }
        }
        for (component, models) in &l.origin.models {
            for m in models.iter().filter(|m| !m.is_empty()) {
                match seen_models.get(component.as_str()) {
                    None => {
                        seen_models.insert(component.as_str(), (m.as_str(), &l.file));
                    }
                    Some((a, fa)) if a != m => {
                        return Err(MergeError::Mixed {
                            what: "model",
                            a: (*a).to_owned(),
                            file_a: (*fa).clone(),
                            b: m.clone(),
                            file_b: l.file.clone(),
                        });
                    }
                    Some(_) => {}
                }
            }
        }
        if let Some(rc) = l.origin.recompute {
            match recompute {
                None => recompute = Some((rc, &l.file)),
                Some((a, fa)) if a != rc => {
                    let word = |r: bool| {
                        if r {
                            "with recompute"
                        } else {
                            "without recompute"
                        }
                        .to_owned()
                    };
                    return Err(MergeError::Mixed {
                        what: "recompute",
                        a: word(a),
                        file_a: fa.clone(),
                        b: word(rc),
                        file_b: l.file.clone(),
                    });
                }
                Some(_) => {}
            }
        }
        // Two timings of one TP size would disagree about what a rule at that size means; a
        // te_tp report at TP 2 beside one-rank reports at TP 4 and 8 is fine (each TP size's
        // rules come from one kind of timing, and provenance names the sizes with communication).
        let own = if l.origin.tp_comm == Some(true) {
            &mut comm
        } else {
            &mut local_tp
        };
        for &t in &l.origin.tps {
            own.entry(t).or_insert(&l.file);
        }
        if let Some((&t, a)) = comm.iter().find(|(t, _)| local_tp.contains_key(t)) {
            return Err(MergeError::Mixed {
                what: "TP communication",
                a: format!("timed with TP communication at TP {t} (te_tp)"),
                file_a: (*a).clone(),
                b: format!("one rank alone at TP {t}"),
                file_b: local_tp[&t].clone(),
            });
        }
        match est {
            None => est = Some((l.origin.estimated, &l.file)),
            Some((a, fa)) if a != l.origin.estimated => {
                let word = |e: bool| if e { "estimated" } else { "measured" }.to_owned();
                return Err(MergeError::Mixed {
                    what: "estimated",
                    a: word(a),
                    file_a: fa.clone(),
                    b: word(l.origin.estimated),
                    file_b: l.file.clone(),
                });
            }
            _ => {}
        }
    }
    Ok(())
}

/// Checks that the shards of every sharded sweep are all present and complete.
fn check_shards(inputs: &[Loaded]) -> Result<(), MergeError> {
    let mut sweeps: BTreeMap<&str, (usize, BTreeMap<usize, &Loaded>)> = BTreeMap::new();
    for l in inputs {
        if let Some(s) = &l.shard {
            let e = sweeps
                .entry(s.digest.as_str())
                .or_insert((s.world, BTreeMap::new()));
            if e.0 != s.world {
                return Err(MergeError::Shards(format!(
                    "{}: world size {} but another shard of the sweep says {}",
                    l.file.display(),
                    s.world,
                    e.0
                )));
            }
            if let Some(prev) = e.1.insert(s.rank, l) {
                return Err(MergeError::Shards(format!(
                    "rank {} appears twice: {} and {}",
                    s.rank,
                    prev.file.display(),
                    l.file.display()
                )));
            }
            if !s.absent.is_empty() {
                return Err(MergeError::Shards(format!(
                    "{}: rank {} lacks {} of its points (first: {})",
                    l.file.display(),
                    s.rank,
                    s.absent.len(),
                    s.absent[0]
                )));
            }
        }
    }
    for (digest, (world, ranks)) in sweeps {
        let missing: Vec<String> = (0..world)
            .filter(|r| !ranks.contains_key(r))
            .map(|r| r.to_string())
            .collect();
        if !missing.is_empty() {
            let example = ranks
                .values()
                .next()
                .map(|l| l.file.display().to_string())
                .unwrap_or_default();
            return Err(MergeError::Shards(format!(
                "sweep {digest} (e.g. {example}) has {world} ranks but rank(s) {} are missing",
                missing.join(", ")
            )));
        }
    }
    Ok(())
}

/// Merges loaded reports into per-component policies.
pub fn merge(inputs: &[Loaded], opt: &MergeOptions) -> Result<Merged, MergeError> {
    if !(opt.threshold.is_finite() && opt.threshold > 0.0) {
        return Err(MergeError::Options(format!(
            "--speedup-threshold {} must be a positive number",
            opt.threshold
        )));
    }
    if !(opt.margin.is_finite() && opt.margin >= 0.0) {
        return Err(MergeError::Options(format!(
            "--margin {} must be a non-negative number",
            opt.margin
        )));
    }
    if inputs.is_empty() {
        return Err(MergeError::Options("no reports given".into()));
    }
    if opt.host_profile.is_some() && opt.host_floor_ms.is_some() {
        return Err(MergeError::Options(
            "--host-floor-ms and --host-profile both set host floors; give one (the profile is per kind, precision and expert)".into(),
        ));
    }
    if opt.host_profile.is_some() && opt.trainer == Some(Trainer::Graphed) {
        return Err(MergeError::Options(
            "--host-profile models an eager trainer's host, and --trainer graphed has none to model; \
             use --trainer eager with it (or leave --host-profile out)"
                .into(),
        ));
    }
    check_mixed(inputs, opt)?;
    check_shards(inputs)?;
    let mut warnings = Vec::new();
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
    let all_owned: Vec<Sample> = all;
    let mut outcomes = Vec::new();
    let mut policies: BTreeMap<String, Policy> = BTreeMap::new();
    let mut shared: BTreeMap<String, Vec<fp8_policy::SharedKeyVerdict>> = BTreeMap::new();
    let mut overruled: BTreeMap<String, Vec<fp8_policy::NumericsOverrule>> = BTreeMap::new();
    for (key, samples) in by_key(&all_owned) {
        let samples = dedup(samples, &mut warnings);
        let (rule, non_monotone, counts) = threshold_of(&samples, opt);
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
            let added = match (key.kind.family(), key.par, &key.ub_name) {
                (KindFamily::Dense(k), ParKey::Tp(tp), Some(ub)) => policy.add_dense_rule(
                    k,
                    ub,
                    DenseRule {
                        tp,
                        min_tokens,
                        min_tokens_graphed: None,
                        measured_speedup: Some(speedup),
                    },
                ),
                (KindFamily::Grouped(k), ParKey::Grouped(etp, num_gemms), _) => policy
                    .add_grouped_rule(
                        k,
                        GroupedRule {
                            etp,
                            num_gemms,
                            min_tokens,
                            min_tokens_graphed: None,
                            measured_speedup: Some(speedup),
                        },
                    ),
                _ => {
                    warnings.push(format!(
                        "{}: no ub_name, so no rule can be written",
                        describe(&key)
                    ));
                    Ok(())
                }
            };
            added.map_err(|e| MergeError::Options(format!("{}: {e}", describe(&key))))?;
        }
        outcomes.push(RuleOutcome { key, rule, counts });
    }
    // Provenance, identical whatever the input order.
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
    let estimated = inputs.iter().any(|l| l.origin.estimated);
    // Keys that were measured and got no rule: FP8 never won there. The format has no way to say
    // "measured, BF16" in `rules`, so provenance carries it; `fp8sel check` uses it to tell a
    // measured BF16 answer from a gap in the sweep.
    let mut bf16_keys: BTreeMap<String, Vec<fp8_policy::RuleKey>> = BTreeMap::new();
    for o in outcomes.iter().filter(|o| o.rule.is_none()) {
        if let Some(k) = rule_key(&o.key).filter(|k| {
            // A key the numerics bound overruled is not "FP8 never won": provenance says why.
            !overruled
                .get(&o.key.component)
                .is_some_and(|v| v.iter().any(|x| &x.key == k))
        }) {
            bf16_keys
                .entry(o.key.component.clone())
                .or_default()
                .push(k);
        }
    }
    for (component, policy) in &mut policies {
        let mut p = Provenance::default();
        p.tool = format!("fp8sel merge-policy {}", env!("CARGO_PKG_VERSION"));
        p.component.clone_from(component);
        p.models = inputs
            .iter()
            .flat_map(|l| {
                l.origin
                    .models
                    .get(component.as_str())
                    .into_iter()
                    .flatten()
            })
            .filter(|m| !m.is_empty())
            .cloned()
            .collect::<BTreeSet<String>>()
            .into_iter()
            .collect();
        p.reports.clone_from(&files);
        p.device = distinct(|l| l.origin.device.as_str());
        p.recipe = distinct(|l| l.origin.recipe.as_str());
        p.timing = distinct(|l| l.origin.timing.as_str());
        p.speedup_threshold = Some(opt.threshold);
        p.margin = Some(opt.margin);
        p.host_profile = opt.host_profile.as_ref().map(|h| h.source.clone());
        p.host_floor_ms = opt
            .host_floor_ms
            .map(|(bf16, fp8)| fp8_policy::HostFloor { bf16, fp8 });
        p.estimated = estimated;
        p.trainer = opt.trainer.map(|t| t.as_str().to_owned());
        p.tp_comm = inputs
            .iter()
            .filter(|l| l.origin.tp_comm == Some(true))
            .flat_map(|l| l.origin.tps.iter().copied())
            .collect::<BTreeSet<u32>>()
            .into_iter()
            .collect();
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
        p.rule = match opt.shared_key {
            SharedKey::AllWin => "min_tokens: smallest measured count from which every larger measured count clears threshold + margin (and bf16 p10 / fp8 p90 >= threshold) for every module sharing the key".to_owned(),
            SharedKey::Step => "min_tokens: smallest measured count from which every larger measured count clears threshold + margin (and bf16 p10 / fp8 p90 >= threshold); a key shared by several modules clears when the instance-weighted sum of their times does (shared_keys lists each module's own verdict)".to_owned(),
        };
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
