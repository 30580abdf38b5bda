//! The calibration's whole steps: a graphed step whose GPU time is the worker's stand-in.

use std::collections::BTreeSet;
use std::path::Path;

use fp8_policy::Execution;
use fp8_report::step_inputs::StepInputs;

use super::fit::Fit;
use super::tests::{CAL, SWEPT, dense};

/// The synthetic step's inputs with each eager calibration row also timed graphed; at `stand_in`
/// the graphed rows' GPU time is their wall time, as the worker writes it where the profiler
/// traced no graph kernels.
fn graphed_too(host_rest: f64, stand_in: u64, eager: bool) -> StepInputs {
    let mut d = dense(host_rest).inputs(&SWEPT, &CAL);
    let graphed: Vec<_> = d
        .step_times
        .iter()
        .cloned()
        .map(|mut s| {
            s.execution = Execution::Graphed;
            if s.tokens == stand_in {
                s.gpu_ms = Some(s.wall_ms[0]);
            }
            s
        })
        .collect();
    if !eager {
        d.step_times.clear();
    }
    d.step_times.extend(graphed);
    d
}

#[test]
fn a_graphed_step_timed_at_its_wall_takes_the_eager_steps_gpu_time() {
    // Host-bound at 1024 (the rest's host time is above its GPU time), GPU-bound at 16384.
    let d = graphed_too(6.0, 1024, true);
    let at = d.step_times.iter().find(|s| s.tokens == 1024).unwrap();
    assert!(
        at.host_ms.unwrap() > at.gpu_ms.unwrap() * 1.5,
        "not host-bound: {at:?}"
    );
    let eager = Fit::calibrate(&d, Execution::Eager, Path::new("d.json")).unwrap();
    let graphed = Fit::calibrate(&d, Execution::Graphed, Path::new("d.json")).unwrap();
    let all: BTreeSet<&str> = ["qkv", "proj", "fc1", "fc2"].into();
    for plan in [BTreeSet::new(), all] {
        for t in [1024.0, 2048.0, 8192.0] {
            let (e, g) = (eager.predict(&plan, t).gpu, graphed.predict(&plan, t).gpu);
            assert!((e - g).abs() < 1e-9 * e, "{plan:?} at {t}: {g} vs {e}");
        }
    }
    // Without the eager steps the stand-in is all there is: its host time bends the GPU curve.
    let alone = graphed_too(6.0, 1024, false);
    let bent = Fit::calibrate(&alone, Execution::Graphed, Path::new("d.json")).unwrap();
    let (e, g) = (
        eager.predict(&BTreeSet::new(), 2048.0).gpu,
        bent.predict(&BTreeSet::new(), 2048.0).gpu,
    );
    assert!(g > e * 1.05, "{g} vs {e}");
}

#[test]
fn a_graphed_step_whose_profiler_saw_its_kernels_keeps_its_own_gpu_time() {
    // No stand-in: each graphed step's wall is above its GPU time (a part of its host time not
    // hidden), so each keeps its own GPU time even where the eager one differs.
    let unhidden = |eager: bool| {
        let mut d = graphed_too(6.0, 0, eager);
        for s in &mut d.step_times {
            if s.execution == Execution::Graphed {
                s.wall_ms.iter_mut().for_each(|w| *w *= 1.1);
            } else {
                s.gpu_ms = s.gpu_ms.map(|g| g * 0.5);
            }
        }
        d
    };
    let fit = Fit::calibrate(&unhidden(true), Execution::Graphed, Path::new("d.json")).unwrap();
    let own = Fit::calibrate(&unhidden(false), Execution::Graphed, Path::new("d.json")).unwrap();
    assert_eq!(fit, own);
}
