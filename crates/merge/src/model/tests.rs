//! The step model on synthetic timings: a made-up step whose host and GPU times follow known
//! rules, measured as the worker would, fitted and predicted.

use std::collections::BTreeSet;
use std::path::Path;

use fp8_policy::{DenseKind, Execution, RuleKey};
use fp8_report::step_inputs::{
    GroupInfo, ModuleTimes, Rounds, STEP_INPUTS_FORMAT, STEP_INPUTS_VERSION, StepInputs, StepMode,
    StepTimes,
};

use super::*;

/// A group of the synthetic step: GPU ms per module = `a + b t/1000` (BF16) and `a8 + b8 t/1000`
/// (FP8); host ms per module `h` and `h8`.
#[derive(Clone, Copy)]
pub(super) struct G {
    pub(super) name: &'static str,
    pub(super) gpu: (f64, f64),
    pub(super) gpu8: (f64, f64),
    pub(super) host: f64,
    pub(super) host8: f64,
    pub(super) segment: usize,
}

pub(super) struct Synth {
    pub(super) groups: Vec<G>,
    n: u32,
    /// GPU ms of the rest per segment: `a + b t/1000 + c (t/1000)^2`.
    rest: Vec<(f64, f64, f64)>,
    /// Host ms of the rest per segment.
    rest_host: Vec<f64>,
    /// Extra GPU and host ms of any FP8 plan.
    region: (f64, f64),
}

impl Synth {
    fn gpu_of(g: &G, fp8: bool, t: f64) -> f64 {
        let (a, b) = if fp8 { g.gpu8 } else { g.gpu };
        a + b * t / 1000.0
    }

    /// The true step: per segment, host and GPU; the wall is the sum of each segment's larger.
    fn truth(&self, fp8: &BTreeSet<&str>, t: f64) -> (f64, f64, f64) {
        let any = !fp8.is_empty();
        let (mut wall, mut host, mut gpu) = (0.0, 0.0, 0.0);
        for s in 0..self.rest.len() {
            let (a, b, c) = self.rest[s];
            let x = t / 1000.0;
            let mut gs = a + b * x + c * x * x;
            let mut hs = self.rest_host[s];
            if any && s == 0 {
                gs += self.region.0;
                hs += self.region.1;
            }
            for g in self.groups.iter().filter(|g| g.segment == s) {
                let on = fp8.contains(g.name);
                gs += f64::from(self.n) * Synth::gpu_of(g, on, t);
                hs += f64::from(self.n) * if on { g.host8 } else { g.host };
            }
            wall += gs.max(hs);
            host += hs;
            gpu += gs;
        }
        (wall, host, gpu)
    }

    pub(super) fn inputs(&self, swept: &[u64], calibrate: &[u64]) -> StepInputs {
        let r = 5usize;
        let jitter = |i: usize| 1.0 + 0.002 * (i as f64 - 2.0);
        let mut modules = Vec::new();
        for &t in swept {
            for g in &self.groups {
                let rounds = |fp8: bool| Rounds {
                    host_ms: (0..r)
                        .map(|i| if fp8 { g.host8 } else { g.host } * jitter(i))
                        .collect(),
                    gpu_ms: (0..r)
                        .map(|i| Synth::gpu_of(g, fp8, t as f64) * jitter(i))
                        .collect(),
                };
                modules.push(ModuleTimes {
                    tokens: t,
                    group: g.name.into(),
                    bf16: rounds(false),
                    fp8: Some(rounds(true)),
                });
            }
        }
        let all: BTreeSet<&str> = self.groups.iter().map(|g| g.name).collect();
        let mut step_times = Vec::new();
        for &t in calibrate {
            for (mode, on) in [
                (StepMode::Bf16, BTreeSet::new()),
                (StepMode::Fp8, all.clone()),
            ] {
                step_times.push(self.step_row(Execution::Eager, t, mode, &on));
            }
        }
        StepInputs {
            format: STEP_INPUTS_FORMAT.into(),
            version: STEP_INPUTS_VERSION,
            model: "synth.json".into(),
            model_name: "synth".into(),
            component: "llm".into(),
            recipe: "Float8BlockScaling".into(),
            fp8_recipe: "blockwise".into(),
            fp8_format: Some("e4m3".into()),
            amax_history_len: None,
            amax_compute_algo: None,
            fp8_param: Some(false),
            device: "synthetic".into(),
            host: None,
            te_version: "none".into(),
            tp: 1,
            ep: None,
            etp: None,
            layers: self.n,
            layer_types: vec!["dense".into(); self.n as usize],
            grad_accum: 1,
            steps: 5,
            rounds: r as u32,
            manual_gc: false,
            settle_s: None,
            settled: None,
            groups: self
                .groups
                .iter()
                .map(|g| GroupInfo {
                    group: g.name.into(),
                    key: RuleKey::Dense {
                        kind: DenseKind::Row,
                        ub_name: g.name.into(),
                        tp: 1,
                    },
                    scale: 1,
                    instances: self.n,
                    in_features: 1024,
                    out_features: 1024,
                    graphed: true,
                    fp8_capable: true,
                })
                .collect(),
            modules,
            step_times,
            failed: Vec::new(),
            notes: Vec::new(),
            complete: true,
        }
    }

    pub(super) fn step_row(
        &self,
        execution: Execution,
        t: u64,
        mode: StepMode,
        on: &BTreeSet<&str>,
    ) -> StepTimes {
        let (w, h, g) = self.truth(on, t as f64);
        let r = 5;
        StepTimes {
            execution,
            tokens: t,
            mode,
            fp8_groups: on.iter().map(|s| s.to_string()).collect(),
            wall_ms: vec![w; r],
            steps: None,
            host_ms: Some(h),
            gpu_ms: Some(g),
        }
    }
}

pub(super) const SWEPT: [u64; 5] = [1024, 2048, 4096, 8192, 16384];
pub(super) const CAL: [u64; 3] = [1024, 4096, 16384];

/// A dense layer: FP8 saves GPU time on fc1/fc2 (steeply) and qkv (mildly), costs host time on
/// every group; proj is slower in FP8 on the GPU at every count.
pub(super) fn dense(host_rest: f64) -> Synth {
    let g = |name, gpu, gpu8, host, host8| G {
        name,
        gpu,
        gpu8,
        host,
        host8,
        segment: 0,
    };
    Synth {
        groups: vec![
            g("qkv", (0.02, 0.10), (0.04, 0.07), 0.05, 0.09),
            g("proj", (0.02, 0.05), (0.05, 0.05), 0.04, 0.08),
            g("fc1", (0.03, 0.40), (0.06, 0.24), 0.05, 0.09),
            g("fc2", (0.03, 0.20), (0.05, 0.12), 0.04, 0.08),
        ],
        n: 4,
        rest: vec![(0.3, 0.2, 0.01)],
        rest_host: vec![host_rest],
        region: (0.0, 0.0),
    }
}

/// A GPU-bound step of `k` small groups beside a large rest: each saves `1 - fp8_slope / 0.1` of
/// its GPU time in FP8 and nothing on the host.
pub(super) fn small_gains(k: usize, fp8_slope: f64) -> Synth {
    const NAMES: [&str; 8] = ["g0", "g1", "g2", "g3", "g4", "g5", "g6", "g7"];
    Synth {
        groups: NAMES[..k]
            .iter()
            .map(|&name| G {
                name,
                gpu: (0.0, 0.1),
                gpu8: (0.0, fp8_slope),
                host: 0.05,
                host8: 0.05,
                segment: 0,
            })
            .collect(),
        n: 4,
        rest: vec![(0.3, 2.0, 0.1)],
        rest_host: vec![1.0],
        region: (0.0, 0.0),
    }
}

pub(super) fn model(s: &Synth, swept: &[u64], cal: &[u64]) -> LayoutModel {
    LayoutModel::new(
        s.inputs(swept, cal),
        Path::new("synth.json"),
        &[Execution::Eager],
        ChoiceOptions::default(),
    )
    .unwrap()
}

fn every_plan(names: &[&'static str]) -> Vec<BTreeSet<&'static str>> {
    (0..1u32 << names.len())
        .map(|m| {
            names
                .iter()
                .enumerate()
                .filter(|(i, _)| m >> i & 1 == 1)
                .map(|(_, n)| *n)
                .collect()
        })
        .collect()
}

#[test]
fn a_single_segment_step_is_predicted_exactly_host_bound_and_gpu_bound() {
    for host_rest in [1.0, 30.0] {
        let s = dense(host_rest);
        let m = model(&s, &SWEPT, &CAL);
        let fit = &m.fits[&Execution::Eager];
        assert!(
            fit.overlap.raw_at(4096.0) < 1e-9,
            "one segment overlaps fully"
        );
        for plan in every_plan(&["qkv", "proj", "fc1", "fc2"]) {
            for t in [1024.0, 3000.0, 8192.0, 12000.0] {
                let want = s.truth(&plan, t).0;
                let got = fit.predict(&plan, t).wall;
                assert!(
                    (got - want).abs() < 1e-3 * want,
                    "host rest {host_rest}, {plan:?} at {t}: {got} vs {want}"
                );
            }
        }
    }
}

#[test]
fn host_bound_steps_keep_fp8_off_where_it_only_adds_host_time() {
    // 80 ms of host work a step: every count swept is host-bound, FP8 adds host time.
    let m = model(&dense(80.0), &SWEPT, &CAL);
    let ts = &m.thresholds[&Execution::Eager];
    for (c, t) in m.choices[&Execution::Eager].iter().zip(0..) {
        if c.tokens <= 16384 {
            assert!(
                c.fp8.is_empty(),
                "count {} chose {:?} ({t})",
                c.tokens,
                c.fp8
            );
        }
    }
    // ...but the grid goes past the sweep, where the GPU time catches up: fc1 pays somewhere.
    let fc1 = m.units.iter().position(|u| u.groups == ["fc1"]).unwrap();
    let from = ts[fc1].from.expect("fc1 gets a threshold above the sweep");
    assert!(from > 16384, "{from}");
    // proj is slower alone on the GPU and in host time: never.
    let proj = m.units.iter().position(|u| u.groups == ["proj"]).unwrap();
    assert_eq!(ts[proj].from, None);
}

#[test]
fn the_choice_is_the_fastest_plan_of_the_true_step_where_the_model_is_exact() {
    let s = dense(1.0);
    let m = model(&s, &SWEPT, &CAL);
    let fit = &m.fits[&Execution::Eager];
    let names = ["qkv", "proj", "fc1", "fc2"];
    for t in [1024u64, 2048, 6000, 16384] {
        let c = choose(
            fit,
            &m.units,
            t,
            &ChoiceOptions {
                margin: 0.0,
                ..ChoiceOptions::default()
            },
        );
        let got = c.groups(&m.units);
        let best = every_plan(&names)
            .into_iter()
            .min_by(|a, b| s.truth(a, t as f64).0.total_cmp(&s.truth(b, t as f64).0))
            .unwrap();
        let (gw, bw) = (s.truth(&got, t as f64).0, s.truth(&best, t as f64).0);
        assert!(
            gw <= bw * (1.0 + 1e-9),
            "at {t}: chose {got:?} ({gw}), brute force {best:?} ({bw})"
        );
    }
}

#[test]
fn a_sync_in_the_middle_is_absorbed_by_the_overlap_term_within_the_tolerance() {
    // Two segments (attention | MLP after a token-count sync), each host-bound at small counts
    // and GPU-bound at large ones, at different counts.
    let g = |name, gpu, gpu8, host, host8, segment| G {
        name,
        gpu,
        gpu8,
        host,
        host8,
        segment,
    };
    let s = Synth {
        groups: vec![
            g("qkv", (0.02, 0.10), (0.04, 0.07), 0.05, 0.09, 0),
            g("proj", (0.02, 0.05), (0.05, 0.05), 0.04, 0.08, 0),
            g("fc1", (0.03, 0.40), (0.06, 0.24), 0.05, 0.09, 1),
            g("fc2", (0.03, 0.20), (0.05, 0.12), 0.04, 0.08, 1),
        ],
        n: 2,
        rest: vec![(0.2, 0.2, 0.01), (0.3, 0.05, 0.0)],
        rest_host: vec![8.0, 0.5],
        region: (0.0, 0.0),
    };
    let m = model(&s, &SWEPT, &CAL);
    let fit = &m.fits[&Execution::Eager];
    assert!(
        fit.overlap.raw_at(4096.0) > 0.0,
        "a sync makes the times add up in part"
    );
    let all: BTreeSet<&str> = ["qkv", "proj", "fc1", "fc2"].into();
    for plan in [BTreeSet::new(), all.clone()] {
        // Exact where it was calibrated...
        for t in CAL {
            let (want, got) = (
                s.truth(&plan, t as f64).0,
                fit.predict(&plan, t as f64).wall,
            );
            assert!(
                (got - want).abs() < 1e-6 * want,
                "{plan:?} at {t}: {got} vs {want}"
            );
        }
        // ...and between, closer than a model of full overlap (the step's larger time alone).
        for t in [2048.0, 8192.0] {
            let (want, p) = (s.truth(&plan, t).0, fit.predict(&plan, t));
            let full_overlap = p.host.max(p.gpu);
            assert!(
                (p.wall - want).abs() < (full_overlap - want).abs(),
                "{plan:?} at {t}: {} vs {want}",
                p.wall
            );
        }
    }
}

#[test]
fn the_check_flags_a_disagreement_and_guards_a_plan_slower_than_bf16() {
    let s = dense(1.0);
    let mut m = model(&s, &SWEPT, &CAL);
    let plans = m.check_plans();
    assert!(plans.iter().any(|(_, t, _)| !SWEPT.contains(t)) || plans.len() >= SWEPT.len());
    // The check measures the chosen plan at 16384 15% slower than BF16.
    let (_, _, groups) = plans
        .iter()
        .find(|(_, t, g)| *t == 16384 && !g.is_empty())
        .expect("FP8 at 16384");
    let on: BTreeSet<&str> = groups.iter().map(String::as_str).collect();
    let mut check = s.inputs(&[], &[]);
    let base = s.step_row(Execution::Eager, 16384, StepMode::Bf16, &BTreeSet::new());
    let mut plan = s.step_row(Execution::Eager, 16384, StepMode::Plan, &on);
    plan.wall_ms = base.wall_ms.iter().map(|w| w * 1.15).collect();
    check.step_times = vec![base, plan];
    m.add_check(&check);
    let row = m.check.iter().find(|r| r.mode == StepMode::Plan).unwrap();
    assert!(row.disagrees && row.loses(), "{row:?}");
    assert_eq!(m.guarded, vec![(Execution::Eager, 16384)]);
    for (u, t) in m.units.iter().zip(&m.thresholds[&Execution::Eager]) {
        if u.groups.iter().any(|g| on.contains(g.as_str())) {
            assert!(
                t.from.is_none_or(|f| f > 16384),
                "{:?}: {:?}",
                u.groups,
                t.from
            );
        }
    }
    // The policy records the disagreement.
    let p = model_policy(&[m]).unwrap();
    let step = p.provenance().unwrap().step.clone().unwrap();
    assert_eq!(
        step["model"][0]["disagreements"].as_array().unwrap().len(),
        1
    );
}

#[test]
fn the_policy_has_both_thresholds_in_key_tokens_and_never_only_past_the_grid() {
    let s = dense(1.0);
    let inputs = s.inputs(&SWEPT, &CAL);
    let mut graphed = inputs.clone();
    for r in &inputs.step_times {
        graphed.step_times.push(StepTimes {
            execution: Execution::Graphed,
            ..r.clone()
        });
    }
    let m = LayoutModel::new(
        graphed,
        Path::new("synth.json"),
        &[Execution::Eager, Execution::Graphed],
        ChoiceOptions::default(),
    )
    .unwrap();
    let p = model_policy(std::slice::from_ref(&m)).unwrap();
    let text = p.to_json();
    assert!(text.contains("min_tokens_graphed"), "{text}");
    for (u, t) in m.units.iter().zip(&m.thresholds[&Execution::Eager]) {
        if t.from.is_none() {
            assert!(
                !m.choices[&Execution::Eager]
                    .last()
                    .unwrap()
                    .fp8
                    .contains(&m.units.iter().position(|x| x == u).unwrap())
            );
        }
    }
}

#[test]
fn a_fixed_cost_of_any_fp8_plan_is_reproduced_at_all_bf16_and_all_fp8() {
    let mut s = dense(1.0);
    s.region = (0.3, 0.5);
    let m = model(&s, &SWEPT, &CAL);
    let fit = &m.fits[&Execution::Eager];
    let all: BTreeSet<&str> = ["qkv", "proj", "fc1", "fc2"].into();
    for t in CAL {
        for plan in [BTreeSet::new(), all.clone()] {
            let (want, got) = (
                s.truth(&plan, t as f64).0,
                fit.predict(&plan, t as f64).wall,
            );
            assert!(
                (got - want).abs() < 1e-6 * want,
                "{plan:?} at {t}: {got} vs {want}"
            );
        }
    }
}

#[test]
fn the_checks_counts_lie_on_the_layouts_token_step() {
    // At TP 8 with sequence parallelism each rank holds a count's eighth: a midpoint off the
    // 128-token step (1456 tokens: 182 rows a rank) fails in TE's FP8.
    let s = dense(1.0);
    for step in [16u64, 128, 256] {
        let options = ChoiceOptions {
            token_step: step,
            ..ChoiceOptions::default()
        };
        let m = LayoutModel::new(
            s.inputs(&SWEPT, &CAL),
            Path::new("synth.json"),
            &[Execution::Eager],
            options,
        )
        .unwrap();
        let plans = m.check_plans();
        assert!(plans.len() >= SWEPT.len());
        for (_, t, _) in &plans {
            assert_eq!(t % step, 0, "{t} is off the {step}-token step");
        }
    }
}

#[test]
fn the_checks_counts_lie_on_the_sequence_grain_too() {
    // Graphed steps at counts off a multiple of 128 ran 1.3-10x slower in every mode on the
    // H200: a layout's check times none of them, whatever its own token step.
    const SPARSE: [u64; 3] = [1024, 3072, 16384];
    for (layout, want) in [(16u64, 128u64), (128, 128), (256, 256), (48, 384)] {
        let options = ChoiceOptions::on_layout(layout);
        assert_eq!(options.token_step, want, "token step {layout}");
        let m = LayoutModel::new(
            dense(1.0).inputs(&SPARSE, &SPARSE),
            Path::new("synth.json"),
            &[Execution::Eager],
            options,
        )
        .unwrap();
        // The swept counts are the user's; the check adds its midpoints on the grain.
        let added: Vec<u64> = m
            .check_plans()
            .into_iter()
            .map(|p| p.1)
            .filter(|t| !SPARSE.contains(t))
            .collect();
        assert!(!added.is_empty());
        for t in added {
            assert_eq!(t % want, 0, "{t} is off the {want}-token grain");
        }
    }
    assert_eq!(ChoiceOptions::on_layout(0).token_step, SEQUENCE_GRAIN);
}

/// The synthetic dense layout's eager model with `edit` applied to its inputs: the policy it
/// makes, as JSON, and its summary.
fn policy_and_summary(edit: impl FnOnce(&mut StepInputs)) -> (serde_json::Value, String) {
    let mut inputs = dense(1.0).inputs(&SWEPT, &CAL);
    edit(&mut inputs);
    let m = LayoutModel::new(
        inputs,
        Path::new("synth.json"),
        &[Execution::Eager],
        ChoiceOptions::default(),
    )
    .unwrap();
    let p = model_policy(std::slice::from_ref(&m)).unwrap();
    let v: serde_json::Value = serde_json::from_str(&p.to_json()).unwrap();
    (
        v,
        super::summary_markdown("synth", std::slice::from_ref(&m)),
    )
}

#[test]
fn the_policy_and_its_summary_say_how_the_fp8_groups_held_their_weights() {
    for (field, fp8_weights, words) in [
        (Some(false), false, "blockwise with BF16 weights"),
        (Some(true), true, "blockwise with FP8 weights"),
        // A document before the field: its groups held FP8 weights.
        (None, true, "blockwise with FP8 weights"),
    ] {
        let (v, md) = policy_and_summary(|i| i.fp8_param = field);
        assert_eq!(
            v["provenance"]["step"]["model"][0]["fp8_param"], fp8_weights,
            "{field:?}"
        );
        assert!(md.contains(words), "{field:?}: {md}");
    }
}

#[test]
fn the_policy_and_its_summary_name_the_host_the_steps_ran_on() {
    for host in [Some("Some CPU, 64 CPUs"), None] {
        let (v, md) = policy_and_summary(|i| i.host = host.map(str::to_owned));
        // Absent, not null, where the inputs name no host (the shipped files' older reports).
        let record = &v["provenance"]["step"]["model"][0];
        assert_eq!(record.get("host").map(|h| h.as_str().unwrap()), host);
        assert_eq!(
            md.contains("on synthetic (host: Some CPU, 64 CPUs), TE"),
            host.is_some(),
            "{md}"
        );
        assert!(md.contains("on synthetic"), "{md}");
    }
}
