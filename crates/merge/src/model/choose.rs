//! The step model's choice: at each count the plan it predicts fastest, each policy key FP8 only
//! where its predicted gain beats its measured noise; and each key's threshold over a grid of
//! counts that reaches past the sweep.

use std::collections::{BTreeMap, BTreeSet};

use fp8_policy::{Execution, RuleKey};
use fp8_report::step_inputs::StepInputs;

use super::fit::{Fit, Prediction};

/// What a policy switches together: the FP8-capable groups that share one key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unit {
    /// The policy key.
    pub key: RuleKey,
    /// Its groups in the step.
    pub groups: Vec<String>,
    /// The key's tokens per step token (`moe_router_topk` for routed experts).
    pub scale: u64,
}

/// The units of a document: one per key, over the groups the fit can run in FP8.
pub fn units(inputs: &StepInputs, fit: &Fit) -> Vec<Unit> {
    let capable = fit.capable();
    let mut by_key: BTreeMap<&RuleKey, Unit> = BTreeMap::new();
    for g in &inputs.groups {
        if !capable.contains(g.group.as_str()) {
            continue;
        }
        by_key
            .entry(&g.key)
            .or_insert_with(|| Unit {
                key: g.key.clone(),
                groups: Vec::new(),
                scale: g.scale,
            })
            .groups
            .push(g.group.clone());
    }
    by_key.into_values().collect()
}

/// How the choice is made.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ChoiceOptions {
    /// A key is FP8 only where its predicted gain exceeds its noise plus this share of the
    /// predicted step (the model's own error).
    pub margin: f64,
    /// The grid reaches this many times the largest swept count.
    pub reach: u64,
    /// Grid counts per doubling of tokens.
    pub per_octave: u32,
    /// Largest number of keys searched exhaustively (2^n plans); above it, greedy.
    pub exhaustive_up_to: usize,
    /// The step every count the check times is a multiple of: the layout's
    /// (`fp8_engine::Parallel::token_step`), so each rank's FP8 GEMMs stay aligned.
    pub token_step: u64,
    /// Whether the check's all-BF16 and all-FP8 steps refit the overlap share and the choice
    /// is made again (the refit, `fp8_merge::model::refit`).
    pub refit: bool,
}

/// The grain of the sequence lengths the check times: on the H200, graphed `GPTModel` steps at
/// counts off a multiple of 128 ran 1.3-10x slower in every mode alike (BF16, all-FP8 and the
/// plan: docs/RESULTS.md, "The step model, on the H200"), a cost of that length that no plan
/// changes and no trainer's usual sequence length meets.
pub const SEQUENCE_GRAIN: u64 = 128;

impl ChoiceOptions {
    /// The defaults on a layout whose token step is `token_step`
    /// (`fp8_engine::Parallel::token_step`): the check's counts on both that step and
    /// [`SEQUENCE_GRAIN`].
    pub fn on_layout(token_step: u64) -> Self {
        let (a, b) = (token_step.max(1), SEQUENCE_GRAIN);
        let gcd = |mut x: u64, mut y: u64| {
            while y != 0 {
                (x, y) = (y, x % y);
            }
            x
        };
        ChoiceOptions {
            token_step: a / gcd(a, b) * b,
            ..ChoiceOptions::default()
        }
    }
}

impl Default for ChoiceOptions {
    fn default() -> Self {
        ChoiceOptions {
            margin: 0.005,
            reach: 64,
            per_octave: 4,
            exhaustive_up_to: 14,
            token_step: 16,
            refit: true,
        }
    }
}

/// The model's plan at one count.
#[derive(Debug, Clone, PartialEq)]
pub struct Choice {
    /// The step's token count.
    pub tokens: u64,
    /// Indices of the units FP8.
    pub fp8: BTreeSet<usize>,
    /// The plan's prediction.
    pub predicted: Prediction,
    /// All-BF16's.
    pub bf16: Prediction,
    /// All-FP8's.
    pub all_fp8: Prediction,
}

impl Choice {
    /// The FP8 groups of the plan.
    pub fn groups<'a>(&self, units: &'a [Unit]) -> BTreeSet<&'a str> {
        groups_of(units, &self.fp8)
    }
}

fn groups_of<'a>(units: &'a [Unit], on: &BTreeSet<usize>) -> BTreeSet<&'a str> {
    on.iter()
        .flat_map(|&i| units[i].groups.iter().map(String::as_str))
        .collect()
}

/// Whether a unit is faster alone in GPU time or in host time at `t`: a unit slower in both is
/// never FP8, whatever a sum of predictions says.
pub(super) fn pays_somewhere(fit: &Fit, u: &Unit, t: f64) -> bool {
    let (mut gpu, mut host) = (0.0, 0.0);
    for g in &u.groups {
        let c = &fit.groups[g];
        gpu += c.gpu_delta(t);
        host += c.host_delta(Execution::Eager);
    }
    gpu < 0.0 || host < 0.0
}

/// The plan the model predicts fastest at `t`, then pruned: each FP8 unit must gain (the
/// plan's step without it minus with it) more than its noise plus `margin` of the step.
pub fn choose(fit: &Fit, units: &[Unit], t: u64, o: &ChoiceOptions) -> Choice {
    let tf = t as f64;
    let wall = |on: &BTreeSet<usize>| fit.predict(&groups_of(units, on), tf).wall;
    let eligible: Vec<usize> = (0..units.len())
        .filter(|&i| pays_somewhere(fit, &units[i], tf))
        .collect();
    let mut best: BTreeSet<usize> = BTreeSet::new();
    if eligible.len() <= o.exhaustive_up_to {
        let mut best_wall = wall(&best);
        for mask in 1u64..(1u64 << eligible.len()) {
            let on: BTreeSet<usize> = eligible
                .iter()
                .enumerate()
                .filter(|(b, _)| mask >> b & 1 == 1)
                .map(|(_, &i)| i)
                .collect();
            let w = wall(&on);
            if w < best_wall {
                best_wall = w;
                best = on;
            }
        }
    } else {
        // Greedy: add the unit that helps most while one helps.
        loop {
            let now = wall(&best);
            let next = eligible
                .iter()
                .filter(|i| !best.contains(i))
                .map(|&i| {
                    let mut on = best.clone();
                    on.insert(i);
                    (wall(&on), i)
                })
                .min_by(|a, b| a.0.total_cmp(&b.0));
            match next {
                Some((w, i)) if w < now => {
                    best.insert(i);
                }
                _ => break,
            }
        }
    }
    // Prune: drop the unit whose gain falls shortest of its bar until every one clears it.
    let optimum = best.clone();
    loop {
        let now = wall(&best);
        let weights = fit.predict(&groups_of(units, &best), tf).sensitivity();
        let short = best
            .iter()
            .map(|&i| {
                let mut without = best.clone();
                without.remove(&i);
                let gain = wall(&without) - now;
                let noise: f64 = units[i]
                    .groups
                    .iter()
                    .map(|g| fit.groups[g].noise(fit.execution, tf, weights))
                    .sum();
                (gain - noise - o.margin * now, i)
            })
            .min_by(|a, b| a.0.total_cmp(&b.0));
        match short {
            Some((slack, i)) if slack <= 0.0 => {
                best.remove(&i);
            }
            _ => break,
        }
    }
    rejoin(fit, units, tf, o, &optimum, &mut best);
    let all: BTreeSet<usize> = (0..units.len()).collect();
    Choice {
        tokens: t,
        predicted: fit.predict(&groups_of(units, &best), tf),
        bf16: fit.predict(&BTreeSet::new(), tf),
        all_fp8: fit.predict(&groups_of(units, &all), tf),
        fp8: best,
    }
}

/// The units the prune dropped, judged together: each fell short of its own bar, but where
/// their joint gain (the optimum's step against the pruned plan's) beats the sum of their noise
/// plus one `margin` of the step, they are FP8 together. The margin is the model's own error,
/// a share of the step: counted once per unit it would keep many small gains BF16 that add up
/// to more than it (DeepSeek-V3 TP 2 at 16384 tokens: six keys, each under 0.5% of the step).
fn rejoin(
    fit: &Fit,
    units: &[Unit],
    tf: f64,
    o: &ChoiceOptions,
    optimum: &BTreeSet<usize>,
    best: &mut BTreeSet<usize>,
) {
    let dropped: Vec<usize> = optimum.difference(best).copied().collect();
    if dropped.len() < 2 {
        return;
    }
    let optimum_p = fit.predict(&groups_of(units, optimum), tf);
    let now = fit.predict(&groups_of(units, best), tf).wall;
    let weights = optimum_p.sensitivity();
    let noise: f64 = dropped
        .iter()
        .flat_map(|&i| &units[i].groups)
        .map(|g| fit.groups[g].noise(fit.execution, tf, weights))
        .sum();
    if now - optimum_p.wall > noise + o.margin * now {
        best.extend(dropped);
    }
}

/// The counts the thresholds are read over: the swept counts and a geometric grid
/// (`per_octave` per doubling, on the 16-token grid) from the smallest swept count to `reach`
/// times the largest.
pub fn grid(swept: &[u64], o: &ChoiceOptions) -> Vec<u64> {
    let (Some(&lo), Some(&hi)) = (swept.iter().min(), swept.iter().max()) else {
        return Vec::new();
    };
    let top = hi.saturating_mul(o.reach.max(1));
    let step = 2f64.powf(1.0 / f64::from(o.per_octave.max(1)));
    let mut out: BTreeSet<u64> = swept.iter().copied().collect();
    let mut t = lo as f64;
    while t <= top as f64 {
        let r = ((t / 16.0).round() as u64 * 16).max(16);
        if r >= lo && r <= top {
            out.insert(r);
        }
        t *= step;
    }
    out.insert(top);
    out.into_iter().collect()
}

/// One unit's threshold in one execution.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnitThreshold {
    /// From this step count FP8 at every grid count up (`None`: not at the grid's top).
    pub from: Option<u64>,
    /// `(swept count, FP8?)` at the swept counts.
    pub at_swept: Vec<(u64, bool)>,
    /// The grid's largest count.
    pub reach: u64,
}

/// Unit `i`'s threshold over `choices` (ascending grid counts) for a sweep up to `top`: where it
/// is FP8 at `top`, the smallest count from which it is FP8 at every grid count up to `top`;
/// else the first count above the sweep from which it stays FP8 for a doubling (where the model
/// says the crossing lies); else none. Above the sweep the model is extrapolated, so a key FP8
/// at the top of the sweep keeps its threshold there.
fn threshold_of(choices: &[Choice], i: usize, top: u64) -> Option<u64> {
    let within: Vec<&Choice> = choices.iter().filter(|c| c.tokens <= top).collect();
    if within.last().is_some_and(|c| c.fp8.contains(&i)) {
        let from = within
            .iter()
            .rposition(|c| !c.fp8.contains(&i))
            .map_or(0, |last| last + 1);
        return Some(within[from].tokens);
    }
    let above: Vec<&Choice> = choices.iter().filter(|c| c.tokens > top).collect();
    above.iter().enumerate().find_map(|(k, c)| {
        let held = above[k..]
            .iter()
            .take_while(|d| d.tokens <= c.tokens.saturating_mul(2))
            .all(|d| d.fp8.contains(&i));
        (c.fp8.contains(&i) && held).then_some(c.tokens)
    })
}

/// Each unit's threshold from the choice at every grid count, and the choices.
pub fn thresholds(
    fit: &Fit,
    units: &[Unit],
    swept: &[u64],
    o: &ChoiceOptions,
) -> (Vec<UnitThreshold>, Vec<Choice>) {
    let counts = grid(swept, o);
    let choices: Vec<Choice> = counts.iter().map(|&t| choose(fit, units, t, o)).collect();
    let reach = counts.last().copied().unwrap_or(0);
    let top = swept.iter().copied().max().unwrap_or(0);
    let out = (0..units.len())
        .map(|i| UnitThreshold {
            from: threshold_of(&choices, i, top),
            at_swept: choices
                .iter()
                .filter(|c| swept.contains(&c.tokens))
                .map(|c| (c.tokens, c.fp8.contains(&i)))
                .collect(),
            reach,
        })
        .collect();
    (out, choices)
}
