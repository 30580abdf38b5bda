//! The step model's calibration and its prediction for one execution (see the module docs of
//! [`super`] for the formula).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use fp8_policy::Execution;
use fp8_report::step_inputs::{StepInputs, StepMode, StepTimes};

use super::curve::{Curve, Poly, half_band, median};
use crate::error::MergeError;

/// One group's measured curves.
#[derive(Debug, Clone, PartialEq)]
pub struct GroupCurves {
    /// Modules of the group in one step.
    pub instances: f64,
    /// Whether a graphed step captures it (then its host time is not the step's).
    pub graphed: bool,
    /// GPU ms per module, BF16.
    pub gpu_bf16: Curve,
    /// GPU ms per module, FP8 (`None`: TE cannot run it in FP8).
    pub gpu_fp8: Option<Curve>,
    /// Host ms per module, BF16 (the median over counts: the host's work does not grow with rows).
    pub host_bf16: f64,
    /// Host ms per module, FP8.
    pub host_fp8: Option<f64>,
    /// Half the p10-p90 band of the per-round FP8 - BF16 GPU difference, per module.
    pub gpu_noise: Curve,
    /// The same for host time.
    pub host_noise: f64,
}

/// A plan's predicted step: host, GPU and wall ms.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Prediction {
    /// Host ms per step.
    pub host: f64,
    /// GPU ms per step.
    pub gpu: f64,
    /// Wall ms per step: `max(host, gpu) + overlap * min(host, gpu)`.
    pub wall: f64,
    /// The share `k` of the smaller time the larger does not hide.
    pub overlap: f64,
}

impl Prediction {
    /// What one more ms of host time and of GPU time adds to the wall: the larger side in
    /// full, the smaller by the overlap share. `(host, gpu)`.
    pub fn sensitivity(&self) -> (f64, f64) {
        if self.host >= self.gpu {
            (1.0, self.overlap)
        } else {
            (self.overlap, 1.0)
        }
    }
}

/// The calibrated model of one layout's step in one execution.
#[derive(Debug, Clone, PartialEq)]
pub struct Fit {
    /// The execution.
    pub execution: Execution,
    /// The all-BF16 step's host ms (`H_bf16`).
    pub host_bf16: f64,
    /// Host ms any FP8 plan adds beyond its (scaled) modules' (`Z_host`).
    pub host_region: f64,
    /// The share of the modules' host differences the whole step shows (`s_host`): all-FP8's
    /// host difference over their sum, within 0..=1.
    pub host_scale: f64,
    /// The same for GPU time against tokens (`s_gpu(t)`), within 0..=2, linear between
    /// calibrated counts.
    pub gpu_scale: Curve,
    /// GPU ms of the all-BF16 step beyond its modules', against tokens (`R(t)`).
    pub gpu_rest: Poly,
    /// GPU ms any FP8 plan adds beyond its (scaled) modules', against tokens (`Z_gpu(t)`).
    pub gpu_region: Poly,
    /// The share of the smaller of host and GPU time that does not overlap the larger, of the
    /// all-BF16 step (`k_bf16(t)`, linear between calibrated counts).
    pub overlap: Curve,
    /// The same of the all-FP8 step (`k_fp8(t)`); a plan's share lies between, by its part of
    /// all-FP8's module differences.
    pub overlap_fp8: Curve,
    /// The counts the real steps calibrated at.
    pub calibrated_at: Vec<u64>,
    /// Each group's curves.
    pub groups: BTreeMap<String, GroupCurves>,
}

/// The medians of a whole-step row.
#[derive(Debug, Clone, Copy)]
pub(crate) struct StepMedians {
    pub wall: f64,
    pub host: f64,
    pub gpu: f64,
}

pub(crate) fn medians(s: &StepTimes) -> Option<StepMedians> {
    Some(StepMedians {
        wall: median(&s.wall_ms),
        host: s.host_ms?,
        gpu: s.gpu_ms?,
    })
}

/// The whole steps of `execution` in `mode` that calibrate it, by count. A graphed step whose
/// GPU time is its wall time (the worker's stand-in where the profiler traced none of the graph's
/// kernels: at a host-bound count that reads the host's time as the GPU's) takes the eager step's
/// GPU time at the same count and mode where that was measured: the same kernels, launched one
/// by one (docs/RESULTS.md, "The step model", has what it changed on the H200).
fn calibration_rows(
    inputs: &StepInputs,
    execution: Execution,
    mode: StepMode,
) -> BTreeMap<u64, StepMedians> {
    let of = |execution: Execution| -> BTreeMap<u64, StepMedians> {
        inputs
            .step_times
            .iter()
            .filter(|s| s.execution == execution && s.mode == mode)
            .filter_map(|s| Some((s.tokens, medians(s)?)))
            .collect()
    };
    let mut rows = of(execution);
    if execution == Execution::Graphed {
        let eager = of(Execution::Eager);
        for (t, m) in &mut rows {
            if let Some(e) = eager.get(t).filter(|_| m.gpu >= WALL_AS_GPU * m.wall) {
                m.gpu = e.gpu;
            }
        }
    }
    rows
}

/// A graphed step's GPU time at least this share of its wall time is taken for the worker's
/// stand-in (its wall time itself); in a step truly that GPU-bound the eager step's kernels take
/// the same time.
const WALL_AS_GPU: f64 = 0.999;

/// Each group's curves from the module rows.
pub fn group_curves(inputs: &StepInputs) -> BTreeMap<String, GroupCurves> {
    inputs
        .groups
        .iter()
        .filter_map(|g| {
            let rows: Vec<_> = inputs
                .modules
                .iter()
                .filter(|m| m.group == g.group)
                .collect();
            if rows.is_empty() {
                return None;
            }
            let gpu_bf16 = Curve::new(
                rows.iter()
                    .map(|m| (m.tokens, median(&m.bf16.gpu_ms)))
                    .collect(),
            );
            let fp8_rows: Vec<_> = rows
                .iter()
                .filter_map(|m| Some((m, m.fp8.as_ref()?)))
                .collect();
            let capable = g.fp8_capable && fp8_rows.len() == rows.len();
            let host = |v: Vec<f64>| median(&v);
            Some((
                g.group.clone(),
                GroupCurves {
                    instances: f64::from(g.instances),
                    graphed: g.graphed,
                    gpu_bf16,
                    gpu_fp8: capable.then(|| {
                        Curve::new(
                            fp8_rows
                                .iter()
                                .map(|(m, f)| (m.tokens, median(&f.gpu_ms)))
                                .collect(),
                        )
                    }),
                    host_bf16: host(rows.iter().map(|m| median(&m.bf16.host_ms)).collect()),
                    host_fp8: capable
                        .then(|| host(fp8_rows.iter().map(|(_, f)| median(&f.host_ms)).collect())),
                    gpu_noise: Curve::new(
                        fp8_rows
                            .iter()
                            .map(|(m, f)| (m.tokens, half_band(&f.gpu_ms, &m.bf16.gpu_ms)))
                            .collect(),
                    ),
                    host_noise: host(
                        fp8_rows
                            .iter()
                            .map(|(m, f)| half_band(&f.host_ms, &m.bf16.host_ms))
                            .collect(),
                    ),
                },
            ))
        })
        .collect()
}

impl GroupCurves {
    /// Whether FP8 can run it.
    pub fn capable(&self) -> bool {
        self.gpu_fp8.is_some()
    }

    /// GPU ms of all its modules in one step.
    pub fn gpu(&self, fp8: bool, t: f64) -> f64 {
        let c = if fp8 {
            self.gpu_fp8.as_ref().unwrap_or(&self.gpu_bf16)
        } else {
            &self.gpu_bf16
        };
        self.instances * c.at(t)
    }

    /// Host ms FP8 adds to one step over BF16 (0 where a graphed step captures it).
    pub fn host_delta(&self, execution: Execution) -> f64 {
        if execution == Execution::Graphed && self.graphed {
            return 0.0;
        }
        self.instances * (self.host_fp8.unwrap_or(self.host_bf16) - self.host_bf16)
    }

    /// GPU ms FP8 adds to one step over BF16 (negative where FP8 saves).
    pub fn gpu_delta(&self, t: f64) -> f64 {
        self.gpu(true, t) - self.gpu(false, t)
    }

    /// The noise of the group's FP8 - BF16 difference in one step's wall time: its host and
    /// GPU noise, each weighted by what that side adds to the wall (`Prediction::sensitivity`:
    /// host noise is hidden in a GPU-bound step but for the overlap share, and the reverse).
    pub fn noise(&self, execution: Execution, t: f64, (w_host, w_gpu): (f64, f64)) -> f64 {
        let host = if execution == Execution::Graphed && self.graphed {
            0.0
        } else {
            self.host_noise
        };
        self.instances * (w_gpu * self.gpu_noise.spread_at(t) + w_host * host)
    }
}

/// The share of a step's smaller time that did not overlap its larger: `(wall - max) / min`.
pub(super) fn share(wall: f64, host: f64, gpu: f64) -> f64 {
    let (hi, lo) = (host.max(gpu), host.min(gpu));
    if lo > 0.0 {
        ((wall - hi) / lo).clamp(0.0, 1.0)
    } else {
        0.0
    }
}

/// How much of the modules' summed difference `modules` the whole step's difference `step`
/// shows: their ratio within `0..=max` where both have one sign, else 1 (the modules as
/// measured; the rest is the region term).
fn scale(step: f64, modules: f64, max: f64) -> f64 {
    if modules.abs() < 1e-9 || step * modules < 0.0 {
        return 1.0;
    }
    (step / modules).clamp(0.0, max)
}

impl Fit {
    /// Calibrates `execution` from the document's whole steps in all-BF16 and all-FP8 (`file`
    /// names it in errors).
    pub fn calibrate(
        inputs: &StepInputs,
        execution: Execution,
        file: &Path,
    ) -> Result<Fit, MergeError> {
        let groups = group_curves(inputs);
        let (bf16, fp8) = (
            calibration_rows(inputs, execution, StepMode::Bf16),
            calibration_rows(inputs, execution, StepMode::Fp8),
        );
        let at: Vec<u64> = bf16
            .keys()
            .filter(|t| fp8.contains_key(t))
            .copied()
            .collect();
        if at.is_empty() {
            return Err(MergeError::Empty {
                file: file.to_path_buf(),
                problem: format!(
                    "no {execution} step was timed in both all-BF16 and all-FP8, so the step model has nothing to calibrate {execution} with; fix: measure with --execution {execution} (the worker's failed counts say why one is missing)"
                ),
            });
        }
        let module_gpu = |fp8: bool, t: u64| -> f64 {
            groups
                .values()
                .map(|g| g.gpu(fp8 && g.capable(), t as f64))
                .sum()
        };
        let host_delta: f64 = groups
            .values()
            .filter(|g| g.capable())
            .map(|g| g.host_delta(execution))
            .sum();
        // A step is never faster than its host's work: the small step's wall time bounds the
        // host from above, and so does every calibrated step's.
        let bound = |rows: &BTreeMap<u64, StepMedians>| {
            rows.values()
                .map(|m| m.wall.min(m.host))
                .fold(f64::INFINITY, f64::min)
        };
        let (host_b, host_f) = (bound(&bf16), bound(&fp8));
        let host_scale = scale(host_f - host_b, host_delta, 1.0);
        let mut rest = Vec::new();
        let mut region = Vec::new();
        let mut gpu_scale = Vec::new();
        let mut overlap = Vec::new();
        let mut overlap_fp8 = Vec::new();
        for &t in &at {
            let (b, f) = (bf16[&t], fp8[&t]);
            let delta = module_gpu(true, t) - module_gpu(false, t);
            let s = scale(f.gpu - b.gpu, delta, 2.0);
            rest.push((t, b.gpu - module_gpu(false, t)));
            region.push((t, f.gpu - b.gpu - s * delta));
            gpu_scale.push((t, s));
            overlap.push((t, share(b.wall, host_b, b.gpu)));
            overlap_fp8.push((t, share(f.wall, host_f, f.gpu)));
        }
        Ok(Fit {
            execution,
            host_bf16: host_b,
            host_region: host_f - host_b - host_scale * host_delta,
            host_scale,
            gpu_scale: Curve::new(gpu_scale),
            gpu_rest: Poly::fit(&rest, 2),
            gpu_region: Poly::fit(&region, 1),
            overlap: Curve::new(overlap),
            overlap_fp8: Curve::new(overlap_fp8),
            calibrated_at: at,
            groups,
        })
    }

    /// The predicted step of the plan whose FP8 groups are `fp8`, at `t` tokens.
    pub fn predict(&self, fp8: &BTreeSet<&str>, t: f64) -> Prediction {
        let on = |n: &str, g: &GroupCurves| g.capable() && fp8.contains(n);
        let any = self.groups.iter().any(|(n, g)| on(n, g));
        let region = if any { 1.0 } else { 0.0 };
        let fp8_groups = || self.groups.iter().filter(|(n, g)| on(n, g)).map(|(_, g)| g);
        let gpu = self.groups.values().map(|g| g.gpu(false, t)).sum::<f64>()
            + self.gpu_scale.raw_at(t) * fp8_groups().map(|g| g.gpu_delta(t)).sum::<f64>()
            + self.gpu_rest.at(t)
            + region * self.gpu_region.at(t);
        let host = self.host_bf16
            + self.host_scale
                * fp8_groups()
                    .map(|g| g.host_delta(self.execution))
                    .sum::<f64>()
            + region * self.host_region;
        let (host, gpu) = (host.max(0.0), gpu.max(0.0));
        let weight = |on: &dyn Fn(&str, &GroupCurves) -> bool| -> f64 {
            self.groups
                .iter()
                .filter(|(n, g)| g.capable() && on(n, g))
                .map(|(_, g)| g.gpu_delta(t).abs() + g.host_delta(self.execution).abs())
                .sum()
        };
        let total = weight(&|_, _| true);
        let part = if total > 0.0 {
            weight(&|n, g| on(n, g)) / total
        } else {
            0.0
        };
        let (kb, kf) = (self.overlap.raw_at(t), self.overlap_fp8.raw_at(t));
        let k = (kb + part * (kf - kb)).clamp(0.0, 1.0);
        Prediction {
            host,
            gpu,
            wall: host.max(gpu) + k * host.min(gpu),
            overlap: k,
        }
    }

    /// The groups FP8 can run.
    pub fn capable(&self) -> BTreeSet<&str> {
        self.groups
            .iter()
            .filter(|(_, g)| g.capable())
            .map(|(n, _)| n.as_str())
            .collect()
    }
}
