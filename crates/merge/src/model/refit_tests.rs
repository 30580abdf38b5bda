//! The refit: the check's all-BF16 and all-FP8 steps at counts the inputs did not calibrate
//! join the overlap share, and the choice is made again.

use std::collections::BTreeSet;

use fp8_policy::Execution;
use fp8_report::step_inputs::{StepInputs, StepMode};

use super::tests::{CAL, SWEPT, Synth, dense, model};
use super::*;

const E: Execution = Execution::Eager;

/// A check at `t` of all-BF16, all-FP8 and `plan`, each step's wall the synthetic truth plus
/// `unhidden` of the smaller of its host and GPU times (the synthetic model overlaps fully).
fn check_at(s: &Synth, t: u64, plan: &BTreeSet<&str>, unhidden: f64) -> StepInputs {
    let all: BTreeSet<&str> = ["qkv", "proj", "fc1", "fc2"].into();
    let mut doc = s.inputs(&[], &[]);
    doc.step_times = [
        (StepMode::Bf16, BTreeSet::new()),
        (StepMode::Fp8, all),
        (StepMode::Plan, plan.clone()),
    ]
    .into_iter()
    .map(|(mode, on)| {
        let mut r = s.step_row(E, t, mode, &on);
        let (h, g) = (r.host_ms.unwrap(), r.gpu_ms.unwrap());
        r.wall_ms.iter_mut().for_each(|w| *w += unhidden * h.min(g));
        r
    })
    .collect();
    doc
}

fn groups(v: &[String]) -> BTreeSet<&str> {
    v.iter().map(String::as_str).collect()
}

#[test]
fn a_checked_count_fixes_the_overlap_share_there_and_the_choice_is_made_again() {
    let s = dense(6.0);
    let fresh = model(&s, &SWEPT, &CAL);
    let plan = fresh.plan_at(E, 8192);
    let on: BTreeSet<&str> = plan.iter().map(String::as_str).collect();
    let fit = &fresh.fits[&E];
    assert!(
        fit.overlap.raw_at(8192.0) < 0.01,
        "the synthetic step overlaps fully"
    );
    // The step at 8192 hides only half of its smaller time.
    let mut m = fresh.clone();
    m.add_check(&check_at(&s, 8192, &on, 0.5));
    assert_eq!(m.refit.len(), 2, "{:?}", m.refit);
    for p in &m.refit {
        assert_eq!((p.execution, p.tokens), (E, 8192));
        assert!((p.overlap - 0.5).abs() < 1e-9, "{p:?}");
    }
    // The refit model reproduces the checked all-BF16 and all-FP8 steps; the rows keep the first
    // model's prediction (held out when it chose).
    for r in m.check.iter().filter(|r| r.mode != StepMode::Plan) {
        let refit = m.fits[&E].predict(
            &groups(&r.fp8_groups.iter().cloned().collect::<Vec<_>>()),
            8192.0,
        );
        assert!(
            (refit.wall / r.measured_ms - 1.0).abs() < 1e-6,
            "{r:?}: {refit:?}"
        );
        assert!(r.error < -0.03, "the first model missed it: {r:?}");
        // One count checked: left out, the refit is the first model.
        assert!((r.refit_error.unwrap() - r.error).abs() < 1e-12, "{r:?}");
    }
    // The thresholds and choices are those of the refit fits.
    let (want, _) = thresholds(&m.fits[&E], &m.units, &m.swept, &m.options);
    assert_eq!(m.thresholds[&E], want);
    assert_ne!(m.fits[&E], fresh.fits[&E]);
    // Provenance and the summary say so.
    let p = model_policy(std::slice::from_ref(&m)).unwrap();
    let v: serde_json::Value = serde_json::from_str(&p.to_json()).unwrap();
    let refit = &v["provenance"]["step"]["model"][0]["refit"];
    assert_eq!(refit.as_array().unwrap().len(), 2, "{refit}");
    assert_eq!(refit[0]["tokens"], 8192);
    let md = summary_markdown("synth", std::slice::from_ref(&m));
    assert!(
        md.contains("steps at 1 count(s) joined the overlap share's calibration"),
        "{md}"
    );
    // Turned off: the first model's fits and thresholds, no refit error.
    let mut off = fresh.clone();
    off.options.refit = false;
    off.add_check(&check_at(&s, 8192, &on, 0.5));
    assert!(off.refit.is_empty());
    assert_eq!(off.fits, fresh.fits);
    assert_eq!(off.thresholds, fresh.thresholds);
    assert!(off.check.iter().all(|r| r.refit_error.is_none()));
}

#[test]
fn each_count_left_out_is_predicted_by_the_others() {
    let s = dense(6.0);
    let mut m = model(&s, &SWEPT, &CAL);
    let none = BTreeSet::new();
    // Two held-out counts between the same calibrated ones (4096, 16384), with the same
    // unhidden share: each predicted from the other's.
    m.add_checks(&[
        &check_at(&s, 8192, &none, 0.3),
        &check_at(&s, 11584, &none, 0.3),
    ]);
    assert_eq!(m.refit.len(), 4);
    for r in m.check.iter().filter(|r| r.mode == StepMode::Bf16) {
        let left_out = r.refit_error.unwrap();
        assert!(r.error < -0.03, "{r:?}");
        assert!(left_out.abs() < r.error.abs(), "{r:?}");
    }
    // A calibrated count adds no point and gets no refit error.
    let mut c = model(&s, &SWEPT, &CAL);
    c.add_check(&check_at(&s, 4096, &none, 0.3));
    assert!(c.refit.is_empty());
    assert!(
        c.check
            .iter()
            .all(|r| r.calibrated && r.refit_error.is_none())
    );
}

#[test]
fn a_re_timing_replaces_its_counts_points_and_earlier_moves_are_kept() {
    let s = dense(6.0);
    let mut m = model(&s, &SWEPT, &CAL);
    let all: BTreeSet<&str> = ["qkv", "proj", "fc1", "fc2"].into();
    // A first check at 8192 measures the plan (all-FP8 here) 15% slower than BF16: guarded.
    let mut lose = check_at(&s, 8192, &all, 0.0);
    let base = lose.step_times[0].wall_ms.clone();
    lose.step_times[2].wall_ms = base.iter().map(|w| w * 1.15).collect();
    m.add_check(&lose);
    assert_eq!(m.guarded, vec![(E, 8192)]);
    let guarded = m.thresholds[&E].clone();
    // A later check at 2048 (of all-FP8: no plan behind it to lift) refits; the guard at 8192
    // holds in the choice made again.
    m.add_check(&check_at(&s, 2048, &all, 0.4));
    assert!(m.refit.iter().any(|p| p.tokens == 2048));
    assert!(m.refit.iter().any(|p| p.tokens == 8192));
    for (t, before) in m.thresholds[&E].iter().zip(&guarded) {
        assert!(t.from.is_none_or(|f| f > 8192), "{t:?} (before {before:?})");
    }
    // Timed again at 2048: its points are the later check's.
    m.add_check(&check_at(&s, 2048, &all, 0.1));
    let at: Vec<f64> = m
        .refit
        .iter()
        .filter(|p| p.tokens == 2048)
        .map(|p| p.overlap)
        .collect();
    assert_eq!(at.len(), 2);
    assert!(at.iter().all(|k| (k - 0.1).abs() < 1e-9), "{at:?}");
}

#[test]
fn a_key_the_numerics_bound_keeps_bf16_stays_so_in_the_choice_made_again() {
    use crate::numerics::{NumericsBound, parse_numerics};
    let s = dense(6.0);
    let mut m = model(&s, &SWEPT, &CAL);
    let text = r#"{"format": "fp8sel-numerics", "version": 1, "recipe": "blockwise", "modules": [{"component": "llm", "name": "decoder.layers.x.fc2", "key": {"kind": "row", "ub_name": "fc2", "tp": 1}, "operands": {"input": {"rel_rms": 0.08}}}]}"#;
    m.bound(&NumericsBound {
        report: parse_numerics(text, std::path::Path::new("n.json")).unwrap(),
        max_quant_error: 0.05,
    });
    let fc2 = m.units.iter().position(|u| u.groups == ["fc2"]).unwrap();
    assert_eq!(m.thresholds[&E][fc2].from, None);
    m.add_check(&check_at(&s, 8192, &BTreeSet::new(), 0.5));
    assert!(!m.refit.is_empty());
    assert_eq!(m.thresholds[&E][fc2].from, None, "{:?}", m.thresholds[&E]);
    let (free, _) = thresholds(&m.fits[&E], &m.units, &m.swept, &m.options);
    assert!(
        free[fc2].from.is_some(),
        "by speed alone fc2 is FP8 somewhere"
    );
}
