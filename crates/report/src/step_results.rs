//! The step benchmark's results (`python -m adaptive_fp8.bench.step_bench --json`, the TE blocks
//! or upstream `GPTModel`): per execution and count, every mode's interleaved rounds against
//! all-BF16, the oracle's trials, and the row's verdict as the benchmark measured it. Typed,
//! versioned, read with unknown fields refused, so no reader re-derives what a row says.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use fp8_policy::{Execution, RuleKey};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::read::{ReportError, ReportErrorKind};
use crate::step_inputs::{ExecutionSchema, KeySchema, Settled, check_settled};

/// The document's `format`.
pub const STEP_RESULTS_FORMAT: &str = "adaptive-fp8-step-results";
/// The version this crate reads.
pub const STEP_RESULTS_VERSION: u32 = 1;
/// Largest document read (a sweep is tens of KiB).
pub const MAX_STEP_RESULTS_BYTES: u64 = 16 * 1024 * 1024;

/// Which step ran.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum StepTrainer {
    /// The toolkit's TE blocks: every mode built from its FP8 groups alone, one program.
    Te,
    /// Upstream megatron-core `GPTModel`: each mode its own model; `fp8` is Megatron's global FP8.
    Megatron,
}

/// One run of the step benchmark.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StepResults {
    /// [`STEP_RESULTS_FORMAT`].
    pub format: String,
    /// [`STEP_RESULTS_VERSION`].
    pub version: u32,
    /// The model config as given.
    pub model: String,
    /// The model's name (the engine's); empty where the run did not record it.
    #[serde(default)]
    pub model_name: String,
    /// `llm` or `vit`.
    pub component: String,
    /// The step that ran.
    pub trainer: StepTrainer,
    /// The TE recipe class with its options (or Megatron's recipe name).
    pub recipe: String,
    /// Megatron's recipe name (`blockwise`, `tensorwise`, `delayed`), where recorded.
    #[serde(default)]
    pub fp8_recipe: Option<String>,
    /// The GPU.
    pub device: String,
    /// Transformer Engine's version.
    pub te_version: String,
    /// megatron-core's version (the Megatron judge).
    #[serde(default)]
    pub megatron_core_version: Option<String>,
    /// Tensor-parallel size.
    pub tp: u32,
    /// Expert-parallel size, where given.
    #[serde(default)]
    pub ep: Option<u32>,
    /// Expert tensor-parallel size, where given.
    #[serde(default)]
    pub etp: Option<u32>,
    /// Whether the step ran over a real TP group (communication in the times).
    #[serde(default)]
    pub tp_comm: bool,
    /// Layers per step.
    pub layers: u32,
    /// Each layer's type (`dense`, `moe`; the TE blocks).
    #[serde(default)]
    pub layer_types: Vec<String>,
    /// Back-to-back steps per timed round.
    pub steps: u32,
    /// Micro-batches per step.
    #[serde(default = "one")]
    pub grad_accum: u32,
    /// Interleaved rounds.
    pub repeats: u32,
    /// Whether Python's garbage collector was kept off while steps were timed (Megatron-LM's
    /// `--manual-gc`); false in runs that predate the field.
    #[serde(default)]
    pub manual_gc: bool,
    /// The bound on settling before the first timed rounds, seconds (`--settle`; 0: off); absent
    /// in runs that predate it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub settle_s: Option<f64>,
    /// What settling took; absent where it did not run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub settled: Option<Settled>,
    /// The oracle search (`greedy`, `none`), where recorded.
    #[serde(default)]
    pub oracle: Option<String>,
    /// Paired timings per oracle trial.
    #[serde(default)]
    pub oracle_repeats: Option<u32>,
    /// The executions asked for, comma-separated.
    pub execution: String,
    /// Whether the FP8 modes ran with FP8 weights (Megatron's `--fp8-param-gather`).
    #[serde(default)]
    pub fp8_param: Option<bool>,
    /// `PYTORCH_CUDA_ALLOC_CONF` as the run had it.
    #[serde(default)]
    pub cuda_alloc_conf: Option<String>,
    /// `CUDA_DEVICE_MAX_CONNECTIONS` as the run had it.
    #[serde(default)]
    pub cuda_device_max_connections: Option<String>,
    /// Each group the step builds and the policy key it is looked up with.
    #[serde(default)]
    pub group_keys: BTreeMap<String, GroupKeyEntry>,
    /// Where the rows were copied from (the repository path of the results file whose rows these
    /// are, its groups' keys added from the engine's plan), where so.
    #[serde(default)]
    pub copied_from: Option<String>,
    /// The Megatron judge's check of every policy build against the plan.
    #[serde(default)]
    pub precision_checks: Vec<PrecisionCheck>,
    /// What the benchmark noted.
    #[serde(default)]
    pub notes: Vec<String>,
    /// False while the benchmark runs (a stopped run keeps what it finished).
    #[serde(default = "yes")]
    pub complete: bool,
    /// One row per count and execution.
    pub results: Vec<StepRow>,
}

fn one() -> u32 {
    1
}

fn yes() -> bool {
    true
}

/// A group's policy key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GroupKeyEntry {
    /// The key.
    #[schemars(with = "KeySchema")]
    pub key: RuleKey,
    /// The key's tokens per step token (`moe_router_topk` for routed experts), 1 where absent.
    #[serde(default)]
    pub scale: Option<u64>,
}

/// One policy build checked against `fp8sel explain`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PrecisionCheck {
    /// The count.
    pub tokens: u64,
    /// Its execution, where recorded.
    #[serde(default)]
    #[schemars(with = "Option<ExecutionSchema>")]
    pub execution: Option<Execution>,
    /// The mode.
    pub mode: String,
    /// The launch region (`bf16`, `fp8`).
    pub region: String,
    /// TE modules the model built.
    pub te_modules: u64,
    /// Of them, FP8.
    pub fp8_modules: u64,
    /// Modules whose precision differs from the plan, in words.
    pub mismatches: Vec<String>,
    /// The FP8 modules by the TE recipe each ran (its `fp8_meta["recipe"]` class, e.g.
    /// `Float8CurrentScaling`); absent in checks made before the judge read recipes back.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub recipes: BTreeMap<String, u64>,
    /// Whether one more step quantized each FP8 module's weight again; absent in checks made
    /// before the judge looked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fp8_weights: Option<Fp8WeightsCheck>,
}

/// The judge's look for stale FP8 weights: each FP8 module's cached FP8 weight before and after
/// one more step whose optimizer moved its weights (a CUDA graph captured with a cached weight
/// and nothing to refresh it replays the capture's).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Fp8WeightsCheck {
    /// FP8 modules with a cached FP8 weight.
    #[serde(default)]
    pub cached: u64,
    /// FP8 modules without one (they quantize their weight every forward).
    #[serde(default)]
    pub uncached: u64,
    /// Cached modules whose weights moved while their cached FP8 weight did not.
    #[serde(default)]
    pub stale: Vec<String>,
    /// Modules whose weights the step did not move.
    #[serde(default)]
    pub unmoved: Vec<String>,
    /// Why the look could not be made, where it could not (then the counts are empty).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_checked: Option<String>,
}

/// One count and execution.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StepRow {
    /// The dense token count of one micro-batch (`seq x mbs`).
    pub tokens: u64,
    /// Eager or graphed.
    #[schemars(with = "ExecutionSchema")]
    pub execution: Execution,
    /// Each mode's figures (`bf16`, `fp8`, `oracle`, `policy:<file>`, `hook:<file>`,
    /// `native:<file>`); empty where the row failed.
    #[serde(default)]
    pub modes: BTreeMap<String, ModeResult>,
    /// The oracle's trials, in order.
    #[serde(default)]
    pub oracle_trials: Vec<OracleTrial>,
    /// Why the count could not be timed (`Kind: text`), where it could not.
    #[serde(default)]
    pub error: Option<String>,
    /// The row's verdict, where it has one: the FP8 groups the step measured fastest.
    #[serde(default)]
    pub verdict: Option<Verdict>,
}

/// A row's verdict: the FP8 groups of the oracle, or of the mode its interleaved rounds measured
/// faster beyond the noise.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Verdict {
    /// The groups FP8.
    pub fp8_groups: BTreeSet<String>,
    /// The mode they are of: `oracle`, or the mode that overruled it (`bf16`, `fp8`,
    /// `policy:<file>`).
    pub by: String,
}

/// One mode's interleaved rounds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ModeResult {
    /// The groups the mode ran FP8.
    pub fp8_groups: Vec<String>,
    /// ms per step: median, p10, p90 of the rounds.
    pub ms_median: f64,
    /// See `ms_median`.
    pub ms_p10: f64,
    /// See `ms_median`.
    pub ms_p90: f64,
    /// Against all-BF16, paired by round: median, p10, p90.
    pub vs_bf16_median: f64,
    /// See `vs_bf16_median`.
    pub vs_bf16_p10: f64,
    /// See `vs_bf16_median`.
    pub vs_bf16_p90: f64,
    /// `faster`, `slower`, `tie` (by the band), `-` for BF16 itself.
    pub verdict_vs_bf16: String,
    /// The median over the better of all-BF16's and all-FP8's medians (unpaired).
    pub vs_best_of_bf16_fp8: f64,
    /// The fastest reference (`bf16`, `fp8`, `oracle`) the next three are paired against.
    #[serde(default)]
    pub vs_min_of: Option<String>,
    /// Against that reference, paired by round.
    #[serde(default)]
    pub vs_min_median: Option<f64>,
    /// See `vs_min_median`.
    #[serde(default)]
    pub vs_min_p10: Option<f64>,
    /// See `vs_min_median`.
    #[serde(default)]
    pub vs_min_p90: Option<f64>,
}

/// One trial of the oracle's search.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct OracleTrial {
    /// `up`, `down` or `final`.
    #[serde(default)]
    pub search: Option<String>,
    /// The group (or unit) tried.
    pub group: String,
    /// The step with it against without: median, p10, p90.
    pub ratio_median: f64,
    /// See `ratio_median`.
    pub ratio_p10: f64,
    /// See `ratio_median`.
    pub ratio_p90: f64,
    /// Whether the search kept the switch.
    pub kept: bool,
    /// Paired timings it took.
    #[serde(default)]
    pub pairs: Option<u32>,
}

/// The JSON Schema of [`StepResults`] (generated from the type; `docs/schemas/` holds it, a test
/// keeps it current, and the Python writer's tests read it).
pub fn step_results_schema() -> String {
    crate::read::schema_of::<StepResults>()
}

/// Reads and checks a document.
pub fn read_step_results(path: &Path) -> Result<StepResults, ReportError> {
    let text = crate::read::read_bounded(path, MAX_STEP_RESULTS_BYTES)?;
    parse_step_results(&text, path)
}

/// Parses and checks a document: its format and version, every field typed (unknown ones
/// refused), counts and sizes positive, figures finite, and every verdict's groups ones the row
/// timed.
pub fn parse_step_results(text: &str, path: &Path) -> Result<StepResults, ReportError> {
    let doc: StepResults = crate::read::typed_document(
        text,
        path,
        (STEP_RESULTS_FORMAT, STEP_RESULTS_VERSION),
        "python -m adaptive_fp8.bench.step_bench --json",
        "run the step benchmark again with the installed adaptive_fp8",
    )?;
    check(&doc).map_err(|m| ReportError::new(path, ReportErrorKind::Document(m)))?;
    Ok(doc)
}

fn check(doc: &StepResults) -> Result<(), String> {
    if doc.tp == 0 || doc.layers == 0 || doc.steps == 0 || doc.repeats == 0 {
        return Err("tp, layers, steps and repeats must be positive".into());
    }
    check_settled(doc.settle_s, doc.settled.as_ref())?;
    for (g, k) in &doc.group_keys {
        if k.scale == Some(0) {
            return Err(format!("group_keys.{g}.scale: must be at least 1"));
        }
    }
    for (i, r) in doc.results.iter().enumerate() {
        let at = format!("results[{i}] ({} at {})", r.execution, r.tokens);
        if r.tokens == 0 {
            return Err(format!("results[{i}].tokens: must be a positive count"));
        }
        for (name, m) in &r.modes {
            let figures = [
                m.ms_median,
                m.ms_p10,
                m.ms_p90,
                m.vs_bf16_median,
                m.vs_bf16_p10,
                m.vs_bf16_p90,
                m.vs_best_of_bf16_fp8,
            ];
            let optional = [m.vs_min_median, m.vs_min_p10, m.vs_min_p90];
            if figures
                .iter()
                .chain(optional.iter().flatten())
                .any(|x| !x.is_finite() || *x <= 0.0)
            {
                return Err(format!(
                    "{at}.modes.{name}: a time or ratio is not finite and positive"
                ));
            }
        }
        if let Some(v) = &r.verdict {
            // The groups a verdict may name: in the TE blocks those the row's all-FP8 mode ran
            // (one program, every capable group); in the Megatron judge (whose `fp8` is
            // Megatron's global FP8) the step's groups.
            let fp8 = r.modes.get("fp8").map(|m| &m.fp8_groups);
            let known = |g: &String| match (doc.trainer, fp8) {
                (StepTrainer::Te, Some(all)) => all.contains(g),
                _ => doc.group_keys.is_empty() || doc.group_keys.contains_key(g),
            };
            if let Some(g) = v.fp8_groups.iter().find(|g| !known(g)) {
                return Err(format!("{at}.verdict: {g} is not a group the step ran"));
            }
        }
    }
    Ok(())
}

impl StepResults {
    /// The document as JSON (pretty, a trailing newline).
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("step results serialize") + "\n"
    }

    /// The groups the step built: every group of its all-FP8 rows (`group_keys` lists every
    /// group of the model's plan, also those of a layer type the step did not build).
    pub fn built_groups(&self) -> BTreeSet<&str> {
        self.results
            .iter()
            .filter_map(|r| r.modes.get("fp8"))
            .flat_map(|m| m.fp8_groups.iter().map(String::as_str))
            .collect()
    }
}
