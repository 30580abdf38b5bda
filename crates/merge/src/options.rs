//! What a merge is asked to do: the threshold and margin, the trainer (eager or graphed) and its
//! host model, how keys shared by several modules are decided, the numerics bound; and the
//! report samples each trainer's thresholds are made from.

use crate::error::{MergeError, Setting};
use crate::sample::{Loaded, Sample};
use fp8_policy::Execution;

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
    pub trainer: Option<Execution>,
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

/// The samples of a report for a trainer: GPU time for a graphed trainer, the eager step for an
/// eager one. An eager trainer can also take GPU times with a host profile: the profile's
/// `max(gpu, host)` is then its model of the eager step. A report without the figure the trainer
/// needs is refused, naming the fix.
pub(crate) fn for_trainer(
    l: &Loaded,
    trainer: Execution,
    host_modelled: bool,
) -> Result<Vec<Sample>, MergeError> {
    let eager_report = matches!(l.origin.timing.as_str(), "te-eager" | "reference-eager");
    l.samples
        .iter()
        .map(|s| match (trainer, eager_report, s.gpu) {
            (Execution::Eager, true, _) | (Execution::Graphed, false, _) => Ok(s.clone()),
            (Execution::Eager, false, _) if host_modelled => Ok(s.clone()),
            (Execution::Graphed, true, Some((bf16, fp8))) => Ok(Sample {
                bf16,
                fp8,
                ..s.clone()
            }),
            (Execution::Graphed, true, None) => Err(MergeError::Setting {
                setting: Setting::Trainer,
                problem: format!(
                    "{}: graphed needs GPU times, and this report has only eager times ({}); \
                     fix: measure with the TE backend (both figures) or the cuBLASLt backend \
                     (GPU time)",
                    l.file.display(),
                    l.origin.timing
                ),
            }),
            (Execution::Eager, false, _) => Err(MergeError::Setting {
                setting: Setting::Trainer,
                problem: format!(
                    "{}: eager needs eager step times (host included), and this report has GPU \
                     times only ({}); fix: measure with the TE backend, or model the host with a \
                     host profile (python -m adaptive_fp8.bench.probe_host)",
                    l.file.display(),
                    l.origin.timing
                ),
            }),
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

impl MergeOptions {
    /// Refuses settings that cannot make a policy, before any report is read.
    pub(crate) fn check(&self) -> Result<(), MergeError> {
        let bad = |setting, problem: String| Err(MergeError::Setting { setting, problem });
        if !(self.threshold.is_finite() && self.threshold > 0.0) {
            return bad(
                Setting::SpeedupThreshold,
                format!("{} must be a positive number", self.threshold),
            );
        }
        if !(self.margin.is_finite() && self.margin >= 0.0) {
            return bad(
                Setting::Margin,
                format!("{} must be a non-negative number", self.margin),
            );
        }
        if self.host_profile.is_some() && self.host_floor_ms.is_some() {
            return bad(
                Setting::HostFloors,
                "host floors and a host profile both set floors; give one (the profile is per \
                 kind, precision and expert)"
                    .into(),
            );
        }
        if self.host_profile.is_some() && self.trainer == Some(Execution::Graphed) {
            return bad(
                Setting::HostProfile,
                "it models an eager trainer's host, and a graphed trainer has none to model".into(),
            );
        }
        Ok(())
    }
}
