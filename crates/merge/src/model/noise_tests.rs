//! The choice's noise bar on synthetic timings: a group's host noise counts in full where the
//! step is host-bound and only by the overlap share where it is GPU-bound (and the reverse).

use std::collections::BTreeSet;

use fp8_policy::Execution;

use super::tests::{CAL, SWEPT, dense, model, small_gains};
use super::*;

/// The dense synthetic step with qkv's FP8 host rounds spread by `spread` ms either side (a
/// noisy host probe; the medians unchanged).
fn noisy_qkv(host_rest: f64, spread: f64) -> LayoutModel {
    let s = dense(host_rest);
    let mut inputs = s.inputs(&SWEPT, &CAL);
    for m in inputs.modules.iter_mut().filter(|m| m.group == "qkv") {
        let fp8 = m.fp8.as_mut().unwrap();
        for (i, h) in fp8.host_ms.iter_mut().enumerate() {
            *h += spread * (i as f64 - 2.0) / 2.0;
        }
    }
    LayoutModel::new(
        inputs,
        std::path::Path::new("synth.json"),
        &[Execution::Eager],
        ChoiceOptions::default(),
    )
    .unwrap()
}

#[test]
fn the_sensitivity_is_one_on_the_larger_side_and_the_overlap_on_the_other() {
    let p = |host, gpu| Prediction {
        host,
        gpu,
        wall: 0.0,
        overlap: 0.2,
    };
    assert_eq!(p(10.0, 40.0).sensitivity(), (0.2, 1.0));
    assert_eq!(p(40.0, 10.0).sensitivity(), (1.0, 0.2));
}

#[test]
fn host_noise_does_not_keep_a_gpu_bound_step_from_a_key_that_pays_on_the_gpu() {
    // GPU-bound (1 ms of host rest) at the top of the sweep: qkv saves about 1.8 ms of GPU time
    // a step, and its host probe is noisy (a bar of several ms if counted in full).
    let m = noisy_qkv(1.0, 3.0);
    let fit = &m.fits[&Execution::Eager];
    let qkv = m.units.iter().position(|u| u.groups == ["qkv"]).unwrap();
    let g = &fit.groups["qkv"];
    let full = g.noise(Execution::Eager, 16384.0, (1.0, 1.0));
    let all: BTreeSet<&str> = ["qkv", "fc1", "fc2"].into();
    let p = fit.predict(&all, 16384.0);
    assert!(p.gpu > p.host, "{p:?}");
    let without: BTreeSet<&str> = ["fc1", "fc2"].into();
    let gain = fit.predict(&without, 16384.0).wall - p.wall;
    assert!(
        full > gain,
        "the host noise in full ({full}) would drop qkv ({gain})"
    );
    let c = choose(fit, &m.units, 16384, &ChoiceOptions::default());
    assert!(c.fp8.contains(&qkv), "{c:?}");
    // Its bar in this step: the GPU noise in full, the host noise by the overlap share.
    assert!(g.noise(Execution::Eager, 16384.0, p.sensitivity()) < gain);
}

#[test]
fn host_noise_counts_in_full_where_the_step_is_host_bound() {
    let m = noisy_qkv(80.0, 3.0);
    let fit = &m.fits[&Execution::Eager];
    let p = fit.predict(&BTreeSet::new(), 4096.0);
    assert!(p.host > p.gpu, "{p:?}");
    let g = &fit.groups["qkv"];
    let bar = g.noise(Execution::Eager, 4096.0, p.sensitivity());
    let full = g.noise(Execution::Eager, 4096.0, (1.0, 1.0));
    assert!(
        bar >= g.instances * g.host_noise && bar <= full,
        "{bar} vs {full}"
    );
    assert!(g.host_noise > 1.0, "{}", g.host_noise);
}

#[test]
fn small_gains_each_under_the_bar_run_fp8_together_where_together_they_clear_it() {
    // Eight groups, each saving 5% of its GPU time: at 16384 tokens each gains about 0.3% of
    // the step, under the 0.5% margin alone; together about 2.4%.
    let m = model(&small_gains(8, 0.095), &SWEPT, &CAL);
    let fit = &m.fits[&Execution::Eager];
    let o = ChoiceOptions::default();
    let c = choose(fit, &m.units, 16384, &o);
    let one: BTreeSet<&str> = ["g0"].into();
    let alone = c.bf16.wall - fit.predict(&one, 16384.0).wall;
    assert!(alone < o.margin * c.bf16.wall, "{alone} vs {}", c.bf16.wall);
    assert_eq!(c.fp8.len(), 8, "{c:?}");
    assert!(c.predicted.wall < 0.98 * c.bf16.wall, "{c:?}");
    // Two groups saving 2% each fall short of one margin together: both stay BF16.
    let m = model(&small_gains(2, 0.098), &SWEPT, &CAL);
    let c = choose(&m.fits[&Execution::Eager], &m.units, 16384, &o);
    assert!(c.fp8.is_empty(), "{c:?}");
}

#[test]
fn a_crossing_above_the_sweep_needs_a_trend_that_beats_its_extrapolated_noise() {
    // Host-bound over the whole sweep: fc1's threshold lies above it, where its GPU gain grows.
    let quiet = model(&dense(80.0), &SWEPT, &CAL);
    let fc1 = quiet
        .units
        .iter()
        .position(|u| u.groups == ["fc1"])
        .unwrap();
    let from = |m: &LayoutModel| m.thresholds[&Execution::Eager][fc1].from;
    let q = from(&quiet).expect("fc1 FP8 somewhere above the sweep");
    assert!(q > 16384, "{q}");
    // The same medians, fc1's FP8 GPU rounds spread: the noise of its extrapolated difference
    // grows with the distance from the sweep, so the crossing moves up or away.
    let mut inputs = dense(80.0).inputs(&SWEPT, &CAL);
    for m in inputs.modules.iter_mut().filter(|m| m.group == "fc1") {
        let fp8 = m.fp8.as_mut().unwrap();
        let med = fp8.gpu_ms[2];
        for (i, g) in fp8.gpu_ms.iter_mut().enumerate() {
            *g += 0.9 * med * (i as f64 - 2.0) / 2.0;
        }
    }
    let noisy = LayoutModel::new(
        inputs,
        std::path::Path::new("synth.json"),
        &[Execution::Eager],
        ChoiceOptions::default(),
    )
    .unwrap();
    let g = &noisy.fits[&Execution::Eager].groups["fc1"];
    let (at_top, above) = (
        g.noise(Execution::Eager, 16384.0, (0.0, 1.0)),
        g.noise(Execution::Eager, 65536.0, (0.0, 1.0)),
    );
    // Not the noise curve's own line through the last two counts: the line's leverage.
    let line = g.instances * g.gpu_noise.at(65536.0);
    assert!(
        above > 1.5 * line && above > 3.0 * at_top,
        "{above} vs {line}, {at_top}"
    );
    assert!(
        from(&noisy).is_none_or(|n| n > q),
        "{:?} vs {q}",
        from(&noisy)
    );
}
