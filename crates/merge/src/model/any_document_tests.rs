//! Any document the reader accepts: the model is fitted or refused, never a panic, and its
//! predictions are finite.

use std::collections::BTreeSet;
use std::path::Path;

use fp8_policy::Execution;
use fp8_report::step_inputs::{ModuleTimes, Rounds, StepInputs, StepMode, StepTimes};

use super::tests::dense;
use super::*;
use proptest::prelude::*;

fn times() -> impl Strategy<Value = Vec<f64>> {
    prop::collection::vec(0.001f64..500.0, 3)
}

prop_compose! {
    fn document()(
        counts in prop::collection::btree_set(1u64..200_000, 0..5),
        calibrated in prop::collection::btree_set(1u64..200_000, 0..4),
        groups in 1usize..4,
        capable in prop::collection::vec(any::<bool>(), 4),
        t in prop::collection::vec((times(), times(), times(), times()), 40),
        w in prop::collection::vec((times(), 0.0f64..100.0, 0.001f64..500.0), 16),
        n in prop::collection::vec(0u32..8, 16),
    ) -> StepInputs {
        let s = dense(1.0);
        let mut d = s.inputs(&[], &[]);
        d.rounds = 3;
        d.groups.truncate(groups);
        for (i, g) in d.groups.iter_mut().enumerate() {
            g.fp8_capable = capable[i];
        }
        let mut k = 0;
        for &c in &counts {
            for g in d.groups.clone() {
                let (a, b, x, y) = t[k % t.len()].clone();
                k += 1;
                d.modules.push(ModuleTimes {
                    tokens: c,
                    group: g.group.clone(),
                    bf16: Rounds { host_ms: a, gpu_ms: b },
                    fp8: g.fp8_capable.then_some(Rounds { host_ms: x, gpu_ms: y }),
                });
            }
        }
        let all: BTreeSet<String> = d.groups.iter().filter(|g| g.fp8_capable).map(|g| g.group.clone()).collect();
        for (j, &c) in calibrated.iter().enumerate() {
            for (mode, on) in [(StepMode::Bf16, BTreeSet::new()), (StepMode::Fp8, all.clone())] {
                let (wall, host, gpu) = w[(2 * j + usize::from(mode == StepMode::Fp8)) % w.len()].clone();
                d.step_times.push(StepTimes {
                    execution: Execution::Eager,
                    tokens: c,
                    mode,
                    fp8_groups: on,
                    wall_ms: wall,
                    // A row's own steps a round: absent, or any count (above the document's refused).
                    steps: Some(n[j % n.len()]).filter(|n| *n > 0),
                    host_ms: Some(host.max(0.001)),
                    gpu_ms: Some(gpu),
                });
            }
        }
        d
    }
}

proptest! {
    #[test]
    fn the_model_fits_or_refuses_and_predicts_finite_times(d in document()) {
        let text = d.to_json();
        let Ok(d) = fp8_report::step_inputs::parse_step_inputs(&text, Path::new("any.json")) else {
            return Ok(());
        };
        if let Ok(m) = LayoutModel::new(d, Path::new("any.json"), &[Execution::Eager], ChoiceOptions::default()) {
            let fit = &m.fits[&Execution::Eager];
            for c in &m.choices[&Execution::Eager] {
                prop_assert!(c.predicted.wall.is_finite() && c.predicted.wall >= 0.0, "{:?}", c);
            }
            let all: BTreeSet<&str> = fit.groups.keys().map(String::as_str).collect();
            prop_assert!(fit.predict(&all, 1e7).wall.is_finite());
            let _ = m.check_plans();
            let _ = model_policy(std::slice::from_ref(&m));
        }
    }
}
