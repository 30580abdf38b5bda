//! The convergence check's report (format `adaptive-fp8-convergence`, version 1): what `python -m
//! adaptive_fp8.bench.convergence` writes after training the same model from the same weights on
//! the same data in BF16, all-FP8 and under a policy (megatron-core's `GPTModel`): each run's loss
//! and gradient-norm curves, held-out evaluations, its count of non-finite steps, and the summary
//! that judges the policy's gap to BF16 against all-FP8's. Typed, unknown fields refused; a loss
//! that was not finite is `null` (JSON has no NaN).

use std::collections::BTreeMap;
use std::path::Path;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::read::{ReportError, ReportErrorKind};

/// The format name.
pub const CONVERGENCE_FORMAT: &str = "adaptive-fp8-convergence";
/// The only version read.
pub const CONVERGENCE_VERSION: u32 = 1;
/// Largest report read (300 steps of four runs is about 60 KB).
pub const MAX_CONVERGENCE_BYTES: u64 = 64 * 1024 * 1024;

/// One convergence check.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Convergence {
    /// [`CONVERGENCE_FORMAT`].
    pub format: String,
    /// [`CONVERGENCE_VERSION`].
    pub version: u32,
    /// The model's name.
    pub model: String,
    /// The trainer's FP8 recipe (Megatron's `--fp8-recipe`).
    pub recipe: String,
    /// The policy of the `adaptive` run, if there was one.
    pub policy: Option<String>,
    /// What the run changed or could not do, in words.
    pub notes: Vec<String>,
    /// The module groups the policy ran FP8 (as TE reported them in the step).
    pub plan_fp8: Vec<String>,
    /// Every module group of the model.
    pub groups: Vec<String>,
    /// The synthetic corpus's entropy floor (the best loss any model can reach).
    pub corpus_floor: Option<f64>,
    /// The training settings.
    pub settings: ConvergenceSettings,
    /// The GPU.
    pub device: String,
    /// Transformer Engine's version.
    pub te_version: String,
    /// megatron-core's version.
    pub megatron_core_version: String,
    /// Each mode's run: `bf16`, `bf16-repeat`, `fp8`, `adaptive`.
    pub runs: BTreeMap<String, ConvergenceRun>,
    /// The gaps and the verdict.
    pub summary: ConvergenceSummary,
}

/// How the runs trained.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ConvergenceSettings {
    /// Transformer layers.
    pub layers: u32,
    /// Tokens per sequence.
    pub seq_length: u64,
    /// Sequences per step.
    pub micro_batch_size: u64,
    /// Optimizer steps.
    pub steps: u32,
    /// Learning-rate warm-up steps.
    pub warmup_steps: u32,
    /// Peak learning rate.
    pub lr: f64,
    /// The seed of weights and data.
    pub seed: u64,
    /// The corpus's vocabulary.
    pub vocab: u64,
    /// Expert parallelism emulated on one GPU (one EP rank's experts), if any.
    pub ep: Option<u32>,
    /// Held-out batches per evaluation.
    pub eval_batches: u32,
    /// Deterministic kernels (Megatron's `--deterministic-mode`).
    #[serde(default)]
    pub deterministic: bool,
}

/// One mode's run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ConvergenceRun {
    /// The training loss of each step (`null` where it was not finite).
    pub losses: Vec<Option<f64>>,
    /// The gradient norm of each step (`null` where it was not finite).
    pub grad_norms: Vec<Option<f64>>,
    /// `(step, held-out loss)` at each evaluation.
    pub evals: Vec<(u32, Option<f64>)>,
    /// The last held-out loss.
    pub final_eval: Option<f64>,
    /// Steps whose loss or gradient norm was not finite.
    pub nonfinite_steps: u32,
    /// The module groups that ran FP8 (TE's `module.fp8` in the first step).
    pub fp8_groups: Vec<String>,
    /// The TE recipe class each FP8 group ran (TE's `fp8_meta["recipe"]`); absent in reports
    /// before it was read back.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub recipes: BTreeMap<String, Vec<String>>,
}

/// The gaps to BF16 and the verdict.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ConvergenceSummary {
    /// Each mode's last held-out loss.
    pub final_eval: BTreeMap<String, Option<f64>>,
    /// Each mode's last held-out loss minus BF16's.
    pub gap_to_bf16: BTreeMap<String, Option<f64>>,
    /// The standard error of BF16's loss over its last tenth of steps.
    pub bf16_tail_noise: Option<f64>,
    /// What two runs of one program differ by: the larger of the BF16 repeat's gap and the tail
    /// noise (absent in reports before it was kept).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub band: Option<f64>,
    /// Each mode's non-finite steps, where any.
    pub nonfinite: BTreeMap<String, u32>,
    /// `pass` or `fail` (with an `adaptive` and an `fp8` run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verdict: Option<String>,
    /// The verdict in words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verdict_text: Option<String>,
    /// Where the plan is all BF16 or all FP8 (the adaptive run repeats another).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan_note: Option<String>,
}

impl Convergence {
    /// The policy's gap to BF16, all-FP8's and the BF16 repeat's, where run and finite.
    pub fn gap(&self, mode: &str) -> Option<f64> {
        self.summary.gap_to_bf16.get(mode).copied().flatten()
    }

    /// Non-finite steps over every run.
    pub fn nonfinite_steps(&self) -> u32 {
        self.runs.values().map(|r| r.nonfinite_steps).sum()
    }
}

/// The JSON Schema of [`Convergence`] (generated from the type; `docs/schemas/` holds it, a test
/// keeps it current, and the Python writer's tests read it).
pub fn convergence_schema() -> String {
    crate::read::schema_of::<Convergence>()
}

/// Reads and checks a report.
pub fn read_convergence(path: &Path) -> Result<Convergence, ReportError> {
    let text = crate::read::read_bounded(path, MAX_CONVERGENCE_BYTES)?;
    parse_convergence(&text, path)
}

/// Parses and checks a report: its format and version, every field typed (unknown ones
/// refused), a `bf16` run, and counts that agree.
pub fn parse_convergence(text: &str, path: &Path) -> Result<Convergence, ReportError> {
    let doc: Convergence = crate::read::typed_document(
        text,
        path,
        (CONVERGENCE_FORMAT, CONVERGENCE_VERSION),
        "python -m adaptive_fp8.bench.convergence",
        "run the convergence check again with the installed adaptive_fp8",
    )?;
    check(&doc).map_err(|m| ReportError::new(path, ReportErrorKind::Document(m)))?;
    Ok(doc)
}

fn check(doc: &Convergence) -> Result<(), String> {
    if !doc.runs.contains_key("bf16") {
        return Err("runs: no `bf16` run, which every gap is to; fix: run the check with its default --modes".into());
    }
    for (mode, r) in &doc.runs {
        let bad = r
            .losses
            .iter()
            .zip(&r.grad_norms)
            .filter(|(l, g)| l.is_none_or(|x| !x.is_finite()) || g.is_none_or(|x| !x.is_finite()))
            .count();
        if r.losses.len() != r.grad_norms.len() || bad as u64 != u64::from(r.nonfinite_steps) {
            return Err(format!(
                "runs.{mode}: {} losses, {} gradient norms and {} non-finite steps do not agree",
                r.losses.len(),
                r.grad_norms.len(),
                r.nonfinite_steps
            ));
        }
    }
    if doc.settings.layers == 0
        || doc.settings.seq_length == 0
        || doc.settings.micro_batch_size == 0
    {
        return Err("settings: layers, seq_length and micro_batch_size start at 1".into());
    }
    Ok(())
}
