//! The check's plans already timed by the inputs: a calibrated count's all-BF16 or all-FP8 plan.

use fp8_policy::Execution;
use fp8_report::step_inputs::StepMode;

use super::check::{CheckPlan, anchor, timed_in_inputs};
use super::tests::{CAL, SWEPT, dense, model};

#[test]
fn a_calibrated_counts_all_bf16_or_all_fp8_plan_is_not_timed_again() {
    let s = dense(1.0);
    let mut m = model(&s, &SWEPT, &CAL);
    let all: Vec<String> = m
        .inputs
        .step_times
        .iter()
        .find(|r| r.mode == StepMode::Fp8)
        .unwrap()
        .fp8_groups
        .iter()
        .cloned()
        .collect();
    let (e, g) = (Execution::Eager, Execution::Graphed);
    let plans: Vec<CheckPlan> = vec![
        (e, 4096, vec![]),                 // calibrated, all-BF16: from the inputs
        (e, 16384, all.clone()),           // calibrated, all-FP8: from the inputs
        (g, 4096, vec![all[0].clone()]),   // calibrated, a mix: timed
        (e, 2048, vec![]),                 // not calibrated: timed
        (g, 1024, vec!["no_such".into()]), // not all-FP8: timed
        (e, 1024, vec![]),                 // the anchor, all-BF16: timed again
    ];
    let (known, left) = timed_in_inputs(&m.inputs, &plans, true);
    assert_eq!(left, plans[2..].to_vec());
    // Without the anchor its plan is the inputs' own rounds too.
    let (_, without) = timed_in_inputs(&m.inputs, &plans, false);
    assert_eq!(without, plans[2..5].to_vec());
    assert!(known.modules.is_empty() && known.failed.is_empty());
    let rows: Vec<(Execution, u64, StepMode)> = known
        .step_times
        .iter()
        .map(|r| (r.execution, r.tokens, r.mode))
        .collect();
    use StepMode::{Bf16, Fp8, Plan};
    assert_eq!(
        rows,
        [
            (e, 4096, Bf16),
            (e, 4096, Fp8),
            (e, 4096, Plan),
            (e, 16384, Bf16),
            (e, 16384, Fp8),
            (e, 16384, Plan)
        ]
    );
    // The plan row is its twin's rounds, named as the plan (no host or GPU time of its own).
    let plan = &known.step_times[5];
    assert_eq!(plan.wall_ms, known.step_times[4].wall_ms);
    assert!(plan.host_ms.is_none() && plan.gpu_ms.is_none());
    assert_eq!(plan.fp8_groups.iter().cloned().collect::<Vec<_>>(), all);
    // Checked as any check's rows: calibrated, the BF16 twin exactly 1 x BF16, never a loss.
    m.add_check(&known);
    let bf16_plan = m
        .check
        .iter()
        .find(|r| r.mode == Plan && r.tokens == 4096)
        .unwrap();
    assert!(bf16_plan.calibrated && bf16_plan.vs_bf16 == (1.0, 1.0, 1.0) && !bf16_plan.loses());
}

#[test]
fn the_anchor_is_the_smallest_count_with_both_modes_in_its_execution() {
    let s = dense(1.0);
    let mut m = model(&s, &SWEPT, &CAL);
    assert_eq!(anchor(&m.inputs, Execution::Eager), Some(1024));
    // An execution the inputs did not time has none.
    assert_eq!(anchor(&m.inputs, Execution::Graphed), None);
    // Without all-FP8 at 1024 in eager (a count whose FP8 step failed), the next count anchors.
    m.inputs.step_times.retain(|r| {
        !(r.execution == Execution::Eager && r.tokens == 1024 && r.mode == StepMode::Fp8)
    });
    assert_eq!(anchor(&m.inputs, Execution::Eager), Some(4096));
    m.inputs.step_times.clear();
    assert_eq!(anchor(&m.inputs, Execution::Eager), None);
}

#[test]
fn the_same_step_timed_again_by_the_check_measures_the_steps_repeatability() {
    let s = dense(1.0);
    let mut m = model(&s, &SWEPT, &CAL);
    // The inputs' own rounds (a plan the inputs timed) are the same measurement: no repeat.
    let plans: Vec<CheckPlan> = vec![(Execution::Eager, 16384, vec![])];
    let (known, _) = timed_in_inputs(&m.inputs, &plans, true);
    m.add_check(&known);
    assert!(m.repeats.is_empty() && m.repeatability().is_none());
    // A check that timed all-BF16 at 4096 again, 5% slower, and a plan beside it.
    let mut again = known.clone();
    let mut bf16 = m
        .inputs
        .step_times
        .iter()
        .find(|r| r.execution == Execution::Eager && r.tokens == 4096 && r.mode == StepMode::Bf16)
        .unwrap()
        .clone();
    bf16.wall_ms = bf16.wall_ms.iter().map(|w| w * 1.05).collect();
    let mut plan = bf16.clone();
    plan.mode = StepMode::Plan;
    again.step_times = vec![bf16, plan];
    m.add_check(&again);
    assert_eq!(m.repeats.len(), 1, "{:?}", m.repeats);
    let r = &m.repeats[0];
    assert_eq!((r.tokens, r.mode), (4096, StepMode::Bf16));
    assert!((r.change - 0.05).abs() < 1e-9, "{r:?}");
    let (med, worst) = m.repeatability().unwrap();
    assert!((med - 0.05).abs() < 1e-9 && (worst - 0.05).abs() < 1e-9);
    // Timed once more, the later timing replaces the earlier.
    m.add_check(&again);
    assert_eq!(m.repeats.len(), 1);
}

#[test]
fn a_loss_the_recheck_times_again_guards_only_if_the_recheck_confirms_it() {
    let s = dense(1.0);
    let fresh = model(&s, &SWEPT, &CAL);
    let groups = eager_fp8_plan_at_16384(&fresh);
    let on: std::collections::BTreeSet<&str> = groups.iter().map(String::as_str).collect();
    let step = |slower: f64| {
        let mut doc = s.inputs(&[], &[]);
        let base = s.step_row(Execution::Eager, 16384, StepMode::Bf16, &Default::default());
        let mut plan = s.step_row(Execution::Eager, 16384, StepMode::Plan, &on);
        plan.wall_ms = base.wall_ms.iter().map(|w| w * slower).collect();
        doc.step_times = vec![base, plan];
        doc
    };
    let (lost, fine) = (step(1.15), step(0.9));
    // The check lost there; the re-timing did not: no guard, the re-timing's rows stand.
    let mut m = fresh.clone();
    m.add_checks(&[&lost, &fine]);
    assert!(m.guarded.is_empty(), "{:?}", m.guarded);
    assert_eq!(m.thresholds, fresh.thresholds);
    assert!(m.check.iter().all(|r| !r.loses()));
    // Confirmed by the re-timing: guarded once.
    let mut m = fresh.clone();
    m.add_checks(&[&lost, &lost]);
    assert_eq!(m.guarded, vec![(Execution::Eager, 16384)]);
    // Not timed again: guarded.
    let mut m = fresh.clone();
    m.add_checks(&[&lost]);
    assert_eq!(m.guarded, vec![(Execution::Eager, 16384)]);
}

#[test]
fn a_plan_is_behind_all_fp8_only_with_the_bands_apart_and_more_than_the_slack() {
    use super::check::{CheckRow, behind_fp8, trails_fp8};
    // DeepSeek-V3 TP 2's 16384 eager: 0.935 (0.931-0.938) against 0.898 (0.893-0.902).
    assert!(trails_fp8((0.935, 0.931, 0.938), (0.898, 0.893, 0.902)));
    // Bands overlapping: a tie.
    assert!(!trails_fp8((0.935, 0.900, 0.940), (0.898, 0.893, 0.902)));
    // Bands apart but within 1%: within the bar.
    assert!(!trails_fp8((0.905, 0.9035, 0.906), (0.898, 0.896, 0.9030)));
    let row = |mode, groups: &[&str], vs: (f64, f64, f64)| CheckRow {
        execution: Execution::Eager,
        tokens: 16384,
        mode,
        fp8_groups: groups.iter().map(|g| g.to_string()).collect(),
        predicted_ms: 1.0,
        predicted_host_ms: 0.4,
        predicted_gpu_ms: 0.9,
        measured_ms: 1.0,
        error: 0.0,
        noise: 0.0,
        vs_bf16: vs,
        calibrated: false,
        disagrees: false,
        refit_error: None,
    };
    let fp8 = row(StepMode::Fp8, &["fc1", "qkv"], (0.898, 0.893, 0.902));
    let plan = row(StepMode::Plan, &["fc1"], (0.935, 0.931, 0.938));
    let rows = vec![fp8.clone(), plan.clone()];
    let behind = behind_fp8(&rows);
    assert_eq!(behind, vec![(&plan, &fp8)]);
    // The plan that is all-FP8 trails nothing; a plan at a count without all-FP8 neither.
    let same = row(StepMode::Plan, &["fc1", "qkv"], (0.935, 0.931, 0.938));
    assert!(behind_fp8(&[fp8.clone(), same]).is_empty());
    let mut elsewhere = plan;
    elsewhere.tokens = 8192;
    assert!(behind_fp8(&[fp8, elsewhere]).is_empty());
}

/// The check's eager plan at 16384 (the synthetic dense model runs FP8 there).
fn eager_fp8_plan_at_16384(m: &super::LayoutModel) -> Vec<String> {
    let (_, _, groups) = m
        .check_plans()
        .into_iter()
        .find(|(e, t, g)| *e == Execution::Eager && *t == 16384 && !g.is_empty())
        .expect("FP8 at 16384");
    groups
}

/// Unit `g`'s eager threshold (a unit of one group).
fn eager_from(m: &super::LayoutModel, g: &str) -> Option<u64> {
    let i = m.units.iter().position(|u| u.groups == [g]).unwrap();
    m.thresholds[&Execution::Eager][i].from
}

#[test]
fn a_plan_behind_all_fp8_moves_down_only_the_crossings_the_model_has_above_its_count() {
    use std::collections::BTreeSet;
    // Host-bound at small counts: fc1 FP8 from about 2048, fc2 and qkv from about 2896.
    let s = dense(6.0);
    let mut fresh = model(&s, &SWEPT, &CAL);
    let e = Execution::Eager;
    let set = |m: &mut super::LayoutModel, g: &str, from: Option<u64>| {
        let i = m.units.iter().position(|u| u.groups == [g]).unwrap();
        m.thresholds.get_mut(&e).unwrap()[i].from = from;
    };
    let (_, _, chosen) = fresh
        .check_plans()
        .into_iter()
        .find(|(x, t, _)| *x == e && *t == 2048)
        .unwrap();
    assert!(chosen == ["fc1"], "{chosen:?}");
    assert!(
        eager_from(&fresh, "qkv").unwrap() > 2048,
        "{:?}",
        fresh.thresholds
    );
    // As if proj (slower alone in both GPU and host time) had a crossing at 8192; fc2 as if BF16
    // to the grid's top.
    set(&mut fresh, "proj", Some(8192));
    set(&mut fresh, "fc2", None);
    // The premise is set by hand: the refit would make the choice again over it.
    fresh.options.refit = false;
    // At 2048 the plan ran 0.95 x BF16; all-FP8 0.90 (`fp8`: its band).
    let step = |plan: &[String], plan_vs: f64, fp8: (f64, f64)| {
        let mut doc = s.inputs(&[], &[]);
        let all: BTreeSet<&str> = ["fc1", "fc2", "proj", "qkv"].into();
        let on: BTreeSet<&str> = plan.iter().map(String::as_str).collect();
        let base = s.step_row(e, 2048, StepMode::Bf16, &BTreeSet::new());
        let mut f = s.step_row(e, 2048, StepMode::Fp8, &all);
        let mut p = s.step_row(e, 2048, StepMode::Plan, &on);
        let spread = |lo: f64, hi: f64| (0..5).map(move |i| lo + (hi - lo) * i as f64 / 4.0);
        f.wall_ms = base
            .wall_ms
            .iter()
            .zip(spread(fp8.0, fp8.1))
            .map(|(w, r)| w * r)
            .collect();
        p.wall_ms = base.wall_ms.iter().map(|w| w * plan_vs).collect();
        doc.step_times = vec![base, f, p];
        doc
    };
    let behind = step(&chosen, 0.95, (0.89, 0.91));
    let mut m = fresh.clone();
    m.add_checks(&[&behind]);
    assert_eq!(m.lifted, vec![(e, 2048, vec!["qkv".to_owned()])]);
    assert_eq!(
        eager_from(&m, "qkv"),
        Some(2048),
        "the step says qkv's crossing lies lower"
    );
    assert_eq!(
        eager_from(&m, "proj"),
        Some(8192),
        "slower alone in both: never lifted"
    );
    assert_eq!(
        eager_from(&m, "fc2"),
        None,
        "BF16 to the grid's top: one count is no crossing"
    );
    assert_eq!(eager_from(&m, "fc1"), eager_from(&fresh, "fc1"));
    let summary = super::summary_markdown("synth", std::slice::from_ref(&m));
    assert!(
        summary.contains("eager at 2048: the plan measured behind all-FP8 (more than 1%, the bands apart); qkv (BF16 in it"),
        "{summary}"
    );
    // A re-timing that measured a tie decides: nothing moves.
    let unchanged = |checks: &[&fp8_report::step_inputs::StepInputs]| {
        let mut m = fresh.clone();
        m.add_checks(checks);
        m.lifted.is_empty() && m.thresholds == fresh.thresholds
    };
    assert!(unchanged(&[&behind, &step(&chosen, 0.905, (0.89, 0.91))]));
    // All-FP8 not ahead of BF16 beyond the noise (its band reaches 1).
    assert!(unchanged(&[&step(&chosen, 1.0, (0.90, 1.02))]));
    // A plan other than today's choice there (a check of an earlier tool's choice).
    assert!(unchanged(&[&step(&[], 0.95, (0.89, 0.91))]));
}

#[test]
fn the_check_times_the_policys_plan_not_the_choice_between_grid_counts() {
    use std::collections::BTreeSet;
    let s = dense(6.0);
    let mut m = model(&s, &SWEPT, &CAL);
    let e = Execution::Eager;
    // The choice at 1024 (host-bound) keeps qkv BF16; a policy that has it FP8 from 1024 (as a
    // guard or a lift can make one) is what a trainer runs, so that is what the check times.
    let fit = &m.fits[&e];
    let chosen = super::choose(fit, &m.units, 1024, &m.options);
    assert!(!chosen.groups(&m.units).contains("qkv"), "{chosen:?}");
    let i = m.units.iter().position(|u| u.groups == ["qkv"]).unwrap();
    m.thresholds.get_mut(&e).unwrap()[i].from = Some(1024);
    let plans = m.check_plans();
    let (_, _, at_1024) = plans.iter().find(|(_, t, _)| *t == 1024).unwrap();
    assert!(at_1024.iter().any(|g| g == "qkv"), "{at_1024:?}");
    for (x, t, groups) in &plans {
        let want: Vec<String> = m.plan_at(*x, *t).into_iter().collect();
        assert_eq!(groups, &want, "{x} at {t}");
    }
    // A check of the choice there (an earlier tool's) is named in the provenance as not the
    // policy's plan; the policy's own plan is not.
    let on = |g: &BTreeSet<&str>| {
        let mut doc = s.inputs(&[], &[]);
        let base = s.step_row(e, 1024, StepMode::Bf16, &BTreeSet::new());
        // Measured 1% ahead of BF16: no loss, so no guard moves the plan it checks.
        let mut plan = s.step_row(e, 1024, StepMode::Plan, g);
        plan.wall_ms = base.wall_ms.iter().map(|w| w * 0.99).collect();
        doc.step_times = vec![base, plan];
        doc
    };
    let named = |m: &super::LayoutModel| {
        let p = super::model_policy(std::slice::from_ref(m)).unwrap();
        let v: serde_json::Value = serde_json::from_str(&p.to_json()).unwrap();
        v["provenance"]["step"]["model"][0]["not_the_policy"].clone()
    };
    let mut checked = m.clone();
    checked.add_check(&on(&chosen.groups(&m.units)));
    assert_eq!(
        named(&checked),
        serde_json::json!([{"execution": "eager", "tokens": 1024}])
    );
    let summary = super::summary_markdown("synth", std::slice::from_ref(&checked));
    assert!(
        summary
            .contains("- 1 checked plan(s) are not this policy's plan at their count (eager 1024)"),
        "{summary}"
    );
    let policy_plan = m.plan_at(e, 1024);
    checked.add_check(&on(&policy_plan.iter().map(String::as_str).collect()));
    assert_eq!(named(&checked), serde_json::json!([]));
}

#[test]
fn a_numerics_bound_keeps_its_keys_bf16_before_the_check_and_says_so() {
    use crate::numerics::{NumericsBound, parse_numerics};
    let s = dense(6.0);
    let mut m = model(&s, &SWEPT, &CAL);
    let fc2 = eager_from(&m, "fc2").expect("fc2 FP8 by speed");
    assert!(eager_from(&m, "proj").is_none());
    // fc2's input and proj's weight over 0.05; fc1 within.
    let module = |ub: &str, op: &str, err: f64| {
        format!(
            r#"{{"component": "llm", "name": "decoder.layers.x.{ub}", "key": {{"kind": "row", "ub_name": "{ub}", "tp": 1}}, "operands": {{"{op}": {{"rel_rms": {err}}}}}}}"#
        )
    };
    let text = format!(
        r#"{{"format": "fp8sel-numerics", "version": 1, "recipe": "blockwise", "modules": [{}, {}, {}]}}"#,
        module("fc2", "input", 0.08),
        module("proj", "weight", 0.09),
        module("fc1", "input", 0.02)
    );
    let b = NumericsBound {
        report: parse_numerics(&text, std::path::Path::new("n.json")).unwrap(),
        max_quant_error: 0.05,
    };
    m.bound(&b);
    assert_eq!(
        eager_from(&m, "fc2"),
        None,
        "over the bound: BF16 whatever its gain"
    );
    assert!(
        eager_from(&m, "fc1").is_some(),
        "within the bound: as speed gave it"
    );
    assert!(
        !m.check_plans()
            .iter()
            .any(|(_, _, g)| g.iter().any(|x| x == "fc2"))
    );
    // Recorded: fc2 with the count speed gave it; proj (BF16 by speed anyway) is not an overrule.
    let n = m.numerics.as_ref().unwrap();
    assert_eq!((n.report.as_str(), n.max_quant_error), ("n.json", 0.05));
    assert_eq!(n.overruled.len(), 1, "{n:?}");
    let o = &n.overruled[0];
    assert_eq!(
        (o.module.as_str(), o.operand.as_str(), o.min_tokens),
        ("decoder.layers.x.fc2", "input", fc2)
    );
    // The policy: no rule for fc2, named by the bound (not as a key FP8 never won); proj is one.
    let p = super::model_policy(std::slice::from_ref(&m)).unwrap();
    let prov = p.provenance().unwrap();
    assert_eq!(prov.numerics.as_ref(), Some(n));
    let names: Vec<String> = prov
        .measured_bf16_keys
        .iter()
        .map(|k| k.to_string())
        .collect();
    assert!(
        names.iter().any(|k| k.contains("proj")) && !names.iter().any(|k| k.contains("fc2")),
        "{names:?}"
    );
    assert!(prov.numerics_overrule(&o.key).is_some());
}

#[test]
fn a_checked_row_records_the_predicted_steps_host_and_gpu_time() {
    let s = dense(1.0);
    let m = model(&s, &SWEPT, &CAL);
    let fit = &m.fits[&Execution::Eager];
    let rows = super::check::compare(&m.fits, &m.inputs);
    assert!(!rows.is_empty());
    for r in &rows {
        let groups: std::collections::BTreeSet<&str> =
            r.fp8_groups.iter().map(String::as_str).collect();
        let p = fit.predict(&groups, r.tokens as f64);
        assert_eq!(
            (r.predicted_ms, r.predicted_host_ms, r.predicted_gpu_ms),
            (p.wall, p.host, p.gpu)
        );
        assert!(
            r.predicted_host_ms > 0.0 && r.predicted_gpu_ms > 0.0,
            "{r:?}"
        );
    }
    // Rows written before the two were recorded read back with 0.
    let mut v = serde_json::to_value(&rows[0]).unwrap();
    let o = v.as_object_mut().unwrap();
    o.remove("predicted_host_ms");
    o.remove("predicted_gpu_ms");
    let old: super::check::CheckRow = serde_json::from_value(v).unwrap();
    assert_eq!((old.predicted_host_ms, old.predicted_gpu_ms), (0.0, 0.0));
}

#[test]
fn a_plan_measured_faster_than_bf16_is_kept_where_a_refit_moved_it() {
    use std::collections::BTreeSet;
    // Host-bound at small counts: fc1 FP8 from about 2048.
    let s = dense(6.0);
    let mut fresh = model(&s, &SWEPT, &CAL);
    let e = Execution::Eager;
    assert!(eager_from(&fresh, "fc1").is_some_and(|f| f <= 2048));
    let set = |m: &mut super::LayoutModel, g: &str, from: Option<u64>| {
        let i = m.units.iter().position(|u| u.groups == [g]).unwrap();
        m.thresholds.get_mut(&e).unwrap()[i].from = from;
    };
    // As if a refit had moved fc1's crossing above 2048 (set by hand: no refit runs here).
    set(&mut fresh, "fc1", Some(4096));
    fresh.options.refit = false;
    // One count's steps: all-BF16 and a plan at `ratios` of it, round by round.
    let step = |t: u64, groups: &[&str], ratios: &[f64], mode: StepMode| {
        let mut doc = s.inputs(&[], &[]);
        let on: BTreeSet<&str> = groups.iter().copied().collect();
        let base = s.step_row(e, t, StepMode::Bf16, &BTreeSet::new());
        let mut p = s.step_row(e, t, mode, &on);
        let n = base.wall_ms.len();
        p.wall_ms = (0..n)
            .map(|i| base.wall_ms[i] * ratios[i % ratios.len()])
            .collect();
        doc.step_times = vec![base, p];
        doc
    };
    let win = step(2048, &["fc1"], &[0.95], StepMode::Plan);
    let mut m = fresh.clone();
    m.add_checks(&[&win]);
    assert_eq!(m.held, vec![(e, 2048, vec!["fc1".to_owned()])]);
    assert_eq!(eager_from(&m, "fc1"), Some(2048), "the step measured it");
    let summary = super::summary_markdown("synth", std::slice::from_ref(&m));
    assert!(
        summary.contains("eager at 2048: a plan measured faster than BF16 beyond the noise, which the refit had moved; fc1 FP8 from 2048 again."),
        "{summary}"
    );
    let p = super::model_policy(std::slice::from_ref(&m)).unwrap();
    let v: serde_json::Value = serde_json::from_str(&p.to_json()).unwrap();
    assert_eq!(
        v["provenance"]["step"]["model"][0]["held"],
        serde_json::json!([{"execution": "eager", "tokens": 2048, "groups": ["fc1"]}])
    );
    let kept = |checks: &[&fp8_report::step_inputs::StepInputs]| {
        let mut m = fresh.clone();
        m.add_checks(checks);
        !m.held.is_empty()
    };
    // A band that reaches 1 is a tie: nothing to keep.
    let tie = step(
        2048,
        &["fc1"],
        &[0.93, 0.96, 1.02, 1.03, 0.95],
        StepMode::Plan,
    );
    assert!(!kept(&[&tie]));
    // The same plan timed again there decides; another plan timed there does not undo it.
    assert!(!kept(&[&win, &tie]));
    let other = step(2048, &[], &[1.0], StepMode::Plan);
    assert!(kept(&[&win, &other]));
    // A measured loss of a plan running fc1 at that count or above keeps it BF16 there.
    let lost = step(4096, &["fc1"], &[1.1], StepMode::Plan);
    let mut m = fresh.clone();
    m.add_checks(&[&lost, &win]);
    assert!(m.held.is_empty(), "{:?}", m.held);
    assert!(eager_from(&m, "fc1").unwrap() > 4096);
    // What the re-timing reads (the refit and the holds, no guard): the win is kept, so its
    // count is not timed again for the plan a refit moved it to; a loss still blocks it.
    let mut probe = fresh.clone();
    probe.refit_and_hold(&[&win]);
    assert!(probe.plan_at(e, 2048).contains("fc1") && probe.guarded.is_empty());
    let mut probe = fresh.clone();
    probe.refit_and_hold(&[&lost, &win]);
    assert!(!probe.plan_at(e, 2048).contains("fc1"));
    // A unit BF16 up to the grid's top stays so: one count makes no crossing.
    let mut none = fresh.clone();
    set(&mut none, "fc1", None);
    none.add_checks(&[&win]);
    assert!(none.held.is_empty() && eager_from(&none, "fc1").is_none());
}

#[test]
fn a_loss_timed_again_with_another_plan_still_guards() {
    use std::collections::BTreeSet;
    let s = dense(1.0);
    let fresh = model(&s, &SWEPT, &CAL);
    let groups = eager_fp8_plan_at_16384(&fresh);
    let step = |on: &BTreeSet<&str>, ratio: f64| {
        let mut doc = s.inputs(&[], &[]);
        let base = s.step_row(Execution::Eager, 16384, StepMode::Bf16, &Default::default());
        let mut plan = s.step_row(Execution::Eager, 16384, StepMode::Plan, on);
        plan.wall_ms = base.wall_ms.iter().map(|w| w * ratio).collect();
        doc.step_times = vec![base, plan];
        doc
    };
    let on: BTreeSet<&str> = groups.iter().map(String::as_str).collect();
    // The guard's own plan (BF16 there) timed after the loss: the loss still stands.
    let (lost, bf16) = (step(&on, 1.15), step(&BTreeSet::new(), 1.0));
    let mut m = fresh.clone();
    m.add_checks(&[&lost, &bf16]);
    assert_eq!(m.guarded, vec![(Execution::Eager, 16384)]);
}
