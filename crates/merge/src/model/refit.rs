//! The check's all-BF16 and all-FP8 steps as calibration: where the check timed them at a count
//! the inputs did not calibrate, each step's overlap share (`(wall - max) / min` of the model's
//! host and GPU times, as the calibration measures it) joins the share's curve for its mode, and
//! the choice is made again. The share is the model's least certain part (it moves fastest where
//! a step crosses from host- to GPU-bound, between calibrated counts); the check times the
//! steps that fix it at the counts the thresholds lie between.
//!
//! The check's rows keep the first model's predictions (held out when it chose); each also gets
//! the refit model's error with its own count's steps left out (`CheckRow::refit_error`), so
//! the refit's accuracy is reported on steps it did not see.

use std::collections::{BTreeMap, BTreeSet};

use fp8_policy::Execution;
use fp8_report::step_inputs::StepMode;
use serde::Serialize;

use super::check::CheckRow;
use super::curve::Curve;
use super::fit::{Fit, share};

/// One overlap share the check measured (`provenance.step.model[].refit`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OverlapPoint {
    /// Eager or graphed.
    pub execution: Execution,
    /// The count.
    pub tokens: u64,
    /// All-BF16 or all-FP8.
    pub mode: StepMode,
    /// The share of the smaller of the model's host and GPU time that the step's wall did not
    /// hide, within 0..=1.
    pub overlap: f64,
}

/// The overlap points of the check's all-BF16 and all-FP8 rows at counts not calibrated, one per
/// execution, count and mode (a later row replaces an earlier one: a re-timing decides).
pub fn points(rows: &[CheckRow]) -> Vec<OverlapPoint> {
    let mut out: BTreeMap<(Execution, u64, bool), OverlapPoint> = BTreeMap::new();
    for r in rows.iter().filter(|r| !r.calibrated) {
        if !matches!(r.mode, StepMode::Bf16 | StepMode::Fp8) {
            continue;
        }
        out.insert(
            (r.execution, r.tokens, r.mode == StepMode::Fp8),
            OverlapPoint {
                execution: r.execution,
                tokens: r.tokens,
                mode: r.mode,
                overlap: share(r.measured_ms, r.predicted_host_ms, r.predicted_gpu_ms),
            },
        );
    }
    out.into_values().collect()
}

impl Fit {
    /// This fit with `points` of its execution added to its overlap curves (the calibrated
    /// counts' shares kept).
    pub fn with_overlap(&self, points: &[OverlapPoint]) -> Fit {
        let curve = |c: &Curve, mode: StepMode| {
            let mut p: Vec<(u64, f64)> = self
                .calibrated_at
                .iter()
                .map(|&t| (t, c.raw_at(t as f64)))
                .collect();
            p.extend(
                points
                    .iter()
                    .filter(|q| q.execution == self.execution && q.mode == mode)
                    .filter(|q| !self.calibrated_at.contains(&q.tokens))
                    .map(|q| (q.tokens, q.overlap)),
            );
            Curve::new(p)
        };
        Fit {
            overlap: curve(&self.overlap, StepMode::Bf16),
            overlap_fp8: curve(&self.overlap_fp8, StepMode::Fp8),
            ..self.clone()
        }
    }
}

/// The fits with `points` added ([`Fit::with_overlap`]).
pub fn refit(fits: &BTreeMap<Execution, Fit>, points: &[OverlapPoint]) -> BTreeMap<Execution, Fit> {
    fits.iter()
        .map(|(&e, f)| (e, f.with_overlap(points)))
        .collect()
}

/// Sets each held-out row's `refit_error`: its error under `fits` refit with `points` but its
/// own count's.
pub fn left_out(fits: &BTreeMap<Execution, Fit>, points: &[OverlapPoint], rows: &mut [CheckRow]) {
    let counts: BTreeSet<(Execution, u64)> = rows
        .iter()
        .filter(|r| !r.calibrated)
        .map(|r| (r.execution, r.tokens))
        .collect();
    for (e, t) in counts {
        let Some(fit) = fits.get(&e) else { continue };
        let others: Vec<OverlapPoint> = points
            .iter()
            .filter(|p| (p.execution, p.tokens) != (e, t))
            .cloned()
            .collect();
        let without = fit.with_overlap(&others);
        for r in rows
            .iter_mut()
            .filter(|r| (r.execution, r.tokens) == (e, t) && !r.calibrated)
        {
            let groups: BTreeSet<&str> = r.fp8_groups.iter().map(String::as_str).collect();
            let p = without.predict(&groups, t as f64).wall;
            r.refit_error = Some((p - r.measured_ms) / r.measured_ms);
        }
    }
}
