//! Where a policy came from: the `provenance` object `fp8sel merge-policy` writes beside `rules`.
//!
//! The seed's loader reads only `rules`, so provenance never changes a decision there. Here it
//! tells an estimate from a measurement and a measured BF16 answer from a gap in the sweep.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::rule_key::{RuleKey, keys_any_form};

/// How a policy was made. Fields are in the order they are written (sorted), so output stays
/// byte-deterministic.
///
/// ```
/// use fp8_policy::{DenseKind, Policy, Provenance, RuleKey};
///
/// let mut p = Policy::new(1.0)?;
/// let mut prov = Provenance::default();
/// prov.estimated = true;
/// prov.measured_bf16_keys.push(RuleKey::Dense { kind: DenseKind::Row, ub_name: "fc2".into(), tp: 8 });
/// p.set_provenance(prov);
/// assert!(p.estimated());
/// let again = Policy::from_json_str(&p.to_json(), "again.json")?;
/// assert_eq!(again.provenance().map(|p| p.measured_bf16_keys.len()), Some(1));
/// # Ok::<(), fp8_policy::PolicyError>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Provenance {
    /// `llm` or `vit`.
    #[serde(default)]
    pub component: String,
    /// Devices the reports were measured on.
    #[serde(default)]
    pub device: Vec<String>,
    /// True when the policy comes from cost-model estimates, not measurements.
    #[serde(default)]
    pub estimated: bool,
    /// What the eager thresholds (`min_tokens`) were made from, when the tool that wrote the
    /// policy said ([`Provenance::eager_from_gpu_time`] reads older files too).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eager_source: Option<ThresholdSource>,
    /// Host floors applied for an eager trainer, when any.
    #[serde(default)]
    pub host_floor_ms: Option<HostFloor>,
    /// The host profile applied for an eager trainer (`probe_host`'s file, device, TE version),
    /// when one was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_profile: Option<String>,
    /// Noise margin added to the threshold.
    #[serde(default)]
    pub margin: Option<f64>,
    /// The numerics bound the merge applied, and every key it kept BF16 whatever its speedup.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub numerics: Option<NumericsBoundApplied>,
    /// Keys that were measured and never won FP8: a measured BF16 answer, not a gap.
    #[serde(default, deserialize_with = "keys_any_form")]
    pub measured_bf16_keys: Vec<RuleKey>,
    /// Model names of the reports.
    #[serde(default)]
    pub models: Vec<String>,
    /// FP8 recipes of the reports.
    #[serde(default)]
    pub recipe: Vec<String>,
    /// The report files merged.
    #[serde(default)]
    pub reports: Vec<String>,
    /// Each measured key's per-rank GEMM shapes (`in_features`, `out_features`): a model with
    /// other shapes on a key is another model, whatever its name. Empty where the tool that
    /// wrote the policy did not record them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shapes: Vec<KeyShapes>,
    /// Keys shared by several modules: how each was decided and what each module would have
    /// got on its own.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shared_keys: Vec<SharedKeyVerdict>,
    /// The thresholding rule, in words.
    #[serde(default)]
    pub rule: String,
    /// Threshold used.
    #[serde(default)]
    pub speedup_threshold: Option<f64>,
    /// The training steps the thresholds came from, when a policy was made from the step
    /// (`fp8sel merge-policy --step`): per execution the step's layers, micro-batches, recipe,
    /// TE and Megatron versions, and each key's oracle verdict per swept count.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<serde_json::Value>,
    /// Where each key's thresholds came from, execution by execution, in a policy folded from
    /// several sources (`fp8_merge::fold`): one entry per key with a rule or a measured BF16
    /// answer. Empty in a policy of one source (then `eager_source` says it).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sources: Vec<KeySources>,
    /// How the merged reports were timed, i.e. which backend made the policy: `gpu` (fp8sel's
    /// cuBLASLt backend, kernel time), `te-eager` (the Transformer Engine backend: eager step
    /// time, with GPU time alongside), `reference-eager` (the reference tool), `model` (the
    /// cost model). Empty in policies written before this field existed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub timing: Vec<String>,
    /// The tool and version that wrote the policy.
    #[serde(default)]
    pub tool: String,
    /// The trainer the thresholds are for: `graphed` (GPU time) or `eager` (the eager step, host
    /// included); absent when the reports' own times were used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trainer: Option<String>,
    /// The TP sizes whose rules were measured with TP communication in the times (a real TP
    /// group with sequence parallelism, `adaptive_fp8.bench.te_tp`); the other sizes' rules come from
    /// one rank's GEMMs alone. Empty when no such report was merged.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tp_comm: Vec<u32>,
    /// Fields written by other tools, kept on a round trip.
    #[serde(flatten)]
    other: BTreeMap<String, serde_json::Value>,
}

/// The numerics bound of a merge (`--numerics FILE --max-quant-error E`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NumericsBoundApplied {
    /// The numerics report.
    pub report: String,
    /// The largest relative RMS quantization error a module may have and run FP8.
    pub max_quant_error: f64,
    /// Keys kept BF16 by the bound.
    pub overruled: Vec<NumericsOverrule>,
}

/// A key the numerics bound kept BF16.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NumericsOverrule {
    /// The key.
    pub key: RuleKey,
    /// The module whose error was over the bound.
    pub module: String,
    /// Its worst operand (`input`, `weight`, `grad_output`).
    pub operand: String,
    /// That operand's relative RMS quantize-dequantize error.
    pub error: f64,
    /// The `min_tokens` speed alone would have given.
    pub min_tokens: u64,
}

/// What a threshold was made from: a policy's eager ones (`eager_source`), or one key's in one
/// execution (`sources`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ThresholdSource {
    /// Eager step times measured module by module in the trainer (Transformer Engine's, or the
    /// reference tool's synced iterations): host time included.
    EagerStep,
    /// GPU times, each raised to a host profile of the machine (`host_profile` names it).
    HostProfile,
    /// The training step's per-group verdicts.
    Step,
    /// GPU time alone: right for CUDA-graphed steps, too early for eager ones, where the host's
    /// extra launches and casts of FP8 can make a module slower than BF16.
    GpuTime,
}

impl ThresholdSource {
    /// The name written in the file.
    pub const fn name(self) -> &'static str {
        match self {
            ThresholdSource::EagerStep => "eager_step",
            ThresholdSource::HostProfile => "host_profile",
            ThresholdSource::Step => "step",
            ThresholdSource::GpuTime => "gpu_time",
        }
    }
}

/// The earlier name of [`ThresholdSource`], when it named the eager thresholds' source only.
#[deprecated(note = "renamed ThresholdSource")]
pub type EagerSource = ThresholdSource;

/// Where one key's two thresholds came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeySources {
    /// The key.
    pub key: RuleKey,
    /// The source of `min_tokens`; absent where no source measured the key for an eager step
    /// (BF16 there for want of a measurement) or the source did not record what it was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eager: Option<ThresholdSource>,
    /// The same for `min_tokens_graphed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub graphed: Option<ThresholdSource>,
}

/// The per-rank GEMM shapes one key was measured at.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyShapes {
    /// The key.
    pub key: RuleKey,
    /// Each distinct shape, sorted.
    pub shapes: Vec<GemmShape>,
}

/// One per-rank GEMM shape: what a module of the key multiplies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct GemmShape {
    /// Input features of the rank's GEMM (K).
    pub in_features: u64,
    /// Output features of the rank's GEMM (N).
    pub out_features: u64,
}

impl std::fmt::Display for GemmShape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}x{}", self.in_features, self.out_features)
    }
}

impl Provenance {
    /// True when the eager thresholds are GPU time alone: `eager_source` says so, or, in a file
    /// written before that field, the policy is a graphed one, or one of GPU (or cost-model)
    /// times with no host profile, host floor or eager source beside them.
    pub fn eager_from_gpu_time(&self) -> bool {
        if let Some(s) = self.eager_source {
            return s == ThresholdSource::GpuTime;
        }
        if self.trainer.as_deref() == Some("graphed") {
            return true;
        }
        self.trainer.is_none()
            && self.sources.is_empty()
            && self.host_profile.is_none()
            && self.host_floor_ms.is_none()
            && !self.timing.is_empty()
            && self.timing.iter().all(|t| t == "gpu" || t == "model")
    }

    /// The shapes `key` was measured at, when the policy recorded them.
    pub fn shapes_of(&self, key: &RuleKey) -> Option<&[GemmShape]> {
        self.shapes
            .iter()
            .find(|k| &k.key == key)
            .map(|k| k.shapes.as_slice())
    }

    /// The numerics overrule of `key`, when the bound kept it BF16.
    pub fn numerics_overrule(&self, key: &RuleKey) -> Option<&NumericsOverrule> {
        self.numerics
            .as_ref()?
            .overruled
            .iter()
            .find(|o| &o.key == key)
    }
}

/// How a rule key shared by several modules was decided.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SharedKeyVerdict {
    /// The key.
    pub key: RuleKey,
    /// `step` (the instance-weighted sum of the modules' times) or `all-win` (every module on
    /// its own).
    pub rule: String,
    /// The key's `min_tokens` (`None`: BF16).
    pub min_tokens: Option<u64>,
    /// Each module on the key.
    pub modules: Vec<ModuleVerdict>,
}

/// One module of a shared key.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModuleVerdict {
    /// The module (`decoder.layers.mlp.linear_fc2`).
    pub module: String,
    /// Instances per rank, when the reports said.
    pub instances: Option<u64>,
    /// The `min_tokens` it would get on its own (`None`: BF16).
    pub min_tokens: Option<u64>,
}

/// Per-module host floors (ms) for an eager trainer.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct HostFloor {
    /// BF16 floor.
    pub bf16: f64,
    /// FP8 floor.
    pub fp8: f64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kind::{DenseKind, GroupedKind};

    #[test]
    fn old_display_strings_still_read() {
        let p: Provenance = serde_json::from_str(
            r#"{"measured_bf16_keys": ["(kind=layernorm_column, ub_name=qkv, tp=8)",
                "(kind=row_grouped, etp=1, num_gemms=32)", {"kind": "row", "ub_name": "fc2", "tp": 2}]}"#,
        )
        .expect("reads");
        assert_eq!(
            p.measured_bf16_keys,
            vec![
                RuleKey::Dense {
                    kind: DenseKind::LayernormColumn,
                    ub_name: "qkv".into(),
                    tp: 8
                },
                RuleKey::Grouped {
                    kind: GroupedKind::RowGrouped,
                    etp: 1,
                    num_gemms: 32
                },
                RuleKey::Dense {
                    kind: DenseKind::Row,
                    ub_name: "fc2".into(),
                    tp: 2
                },
            ]
        );
        for bad in [
            r#"{"measured_bf16_keys": ["(kind=row, tp=8)"]}"#,
            r#"{"measured_bf16_keys": [{"kind": "row", "ub_name": "fc2", "tp": 0}]}"#,
            r#"{"measured_bf16_keys": [{"kind": "row_grouped", "etp": 1}]}"#,
        ] {
            assert!(serde_json::from_str::<Provenance>(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn unknown_fields_survive() {
        let text = r#"{"estimated":true,"zz_from_another_tool":[1,2]}"#;
        let p: Provenance = serde_json::from_str(text).expect("reads");
        assert!(p.estimated);
        let back = serde_json::to_value(&p).expect("writes");
        assert_eq!(back["zz_from_another_tool"], serde_json::json!([1, 2]));
    }
}
