//! The step model's measurements (`python -m adaptive_fp8.bench.step_inputs`): per module group
//! and count, host and GPU time in BF16 and FP8; per execution and count, whole steps (wall,
//! host and GPU time) of all-BF16, all-FP8 and checked plans. Typed, versioned, and read with
//! unknown fields refused, so a writer that drifts from this type fails loudly.

use std::collections::BTreeSet;
use std::path::Path;

use fp8_policy::{Execution, RuleKey};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::read::{ReportError, ReportErrorKind};

/// The document's `format`.
pub const STEP_INPUTS_FORMAT: &str = "adaptive-fp8-step-inputs";
/// The version this crate reads and writes.
pub const STEP_INPUTS_VERSION: u32 = 1;
/// Largest document read (a five-count sweep is tens of KiB).
pub const MAX_STEP_INPUTS_BYTES: u64 = 16 * 1024 * 1024;

/// One run of the worker: a layout's measurements or its check.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StepInputs {
    /// [`STEP_INPUTS_FORMAT`].
    pub format: String,
    /// [`STEP_INPUTS_VERSION`].
    pub version: u32,
    /// The model config as given.
    pub model: String,
    /// The model's name (the engine's).
    pub model_name: String,
    /// Whose layers the steps built: `llm`, or `vit` (a VLM's vision encoder).
    pub component: String,
    /// The TE recipe class with its options.
    pub recipe: String,
    /// Megatron's recipe name.
    pub fp8_recipe: String,
    /// The FP8 format, Megatron's name (`e4m3`, `hybrid`); absent in documents that predate
    /// the field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fp8_format: Option<String>,
    /// Delayed scaling's amax history length; absent for the other recipes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub amax_history_len: Option<u32>,
    /// Delayed scaling's amax compute algorithm (`max`, `most_recent`); absent for the others.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub amax_compute_algo: Option<String>,
    /// Whether the FP8 groups held FP8 weights (Megatron's `--fp8-param-gather`), updated by
    /// TE's `FusedAdam`; false: BF16 weights each FP8 module quantizes in its forward, as
    /// Megatron trains by default and as a policy's FP8 groups run in the BF16 launch region.
    /// Absent in documents that predate the field, whose FP8 groups held FP8 weights.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fp8_param: Option<bool>,
    /// The GPU.
    pub device: String,
    /// The host's CPU and its logical CPU count (`AMD EPYC 9654 96-Core Processor, 192 CPUs`):
    /// eager thresholds of host-bound layouts move with it. Absent in documents that predate
    /// the field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// Transformer Engine's version.
    pub te_version: String,
    /// Tensor-parallel size.
    pub tp: u32,
    /// Expert-parallel size, where given.
    pub ep: Option<u32>,
    /// Expert tensor-parallel size, where given.
    pub etp: Option<u32>,
    /// Layers per step.
    pub layers: u32,
    /// Each layer's type (`dense`, `moe`).
    pub layer_types: Vec<String>,
    /// Micro-batches per step.
    pub grad_accum: u32,
    /// Back-to-back steps per timed round (the most: a row may say fewer).
    pub steps: u32,
    /// Interleaved rounds: of each module row; of a whole-step row at least this many, more
    /// (up to [`MAX_ROUNDS_FACTOR`] times) where its steps are short.
    pub rounds: u32,
    /// Whether Python's garbage collector was kept off while steps were timed (Megatron-LM's
    /// `--manual-gc`); false in runs that predate the field.
    #[serde(default)]
    pub manual_gc: bool,
    /// The bound on settling before the first timed whole steps, seconds (`--settle`; 0: off);
    /// absent in documents of workers that did not settle.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub settle_s: Option<f64>,
    /// What settling took; absent where it did not run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub settled: Option<Settled>,
    /// The step's module groups.
    pub groups: Vec<GroupInfo>,
    /// Each group alone, per count.
    pub modules: Vec<ModuleTimes>,
    /// Whole steps.
    pub step_times: Vec<StepTimes>,
    /// Counts that failed.
    pub failed: Vec<FailedStep>,
    /// What the worker noted.
    pub notes: Vec<String>,
    /// False while the worker runs (a stopped run keeps what it finished).
    pub complete: bool,
}

/// Untimed rounds of the built steps before a run's first timed ones, until they stopped getting
/// faster (`adaptive_fp8.bench.settle`): a step-inputs document's, a judge's results'.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Settled {
    /// The count it ran before, `<execution> at <tokens>`.
    pub at: String,
    /// Untimed rounds.
    pub rounds: u32,
    /// Their steps' time, seconds.
    pub seconds: f64,
    /// The first round's ms per step, summed over the steps.
    pub first_ms: f64,
    /// The last round's.
    pub last_ms: f64,
    /// Whether it stopped because the rounds were flat (else at the bound).
    pub flat: bool,
}

/// A module group of the step.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GroupInfo {
    /// `qkv`, `proj`, `fc1`, `experts.fc1`, ...
    pub group: String,
    /// The policy key it is looked up with.
    #[schemars(with = "KeySchema")]
    pub key: RuleKey,
    /// The key's tokens per step token (`moe_router_topk` for routed experts, else 1).
    pub scale: u64,
    /// Modules of the group in one step.
    pub instances: u32,
    /// The rank's GEMM input features (K).
    pub in_features: u64,
    /// The rank's GEMM output features (N).
    pub out_features: u64,
    /// Whether a graphed step captures it (attention and dense MLP blocks).
    pub graphed: bool,
    /// Whether TE can run it in FP8.
    pub fp8_capable: bool,
}

/// Host and GPU ms per step of one module, one value per round.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Rounds {
    /// Host ms per round.
    pub host_ms: Vec<f64>,
    /// GPU ms per round.
    pub gpu_ms: Vec<f64>,
}

/// One group alone at one count.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ModuleTimes {
    /// The step's token count.
    pub tokens: u64,
    /// The group.
    pub group: String,
    /// In BF16.
    pub bf16: Rounds,
    /// In FP8 (`None` where TE cannot run it in FP8).
    pub fp8: Option<Rounds>,
}

/// What a whole-step row timed.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum StepMode {
    /// Every group BF16.
    Bf16,
    /// Every FP8-capable group FP8.
    Fp8,
    /// The groups of a plan.
    Plan,
}

/// Whole steps of one mode at one count and execution.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StepTimes {
    /// Eager or graphed.
    #[schemars(with = "ExecutionSchema")]
    pub execution: Execution,
    /// The step's token count.
    pub tokens: u64,
    /// What ran.
    pub mode: StepMode,
    /// The groups FP8.
    pub fp8_groups: BTreeSet<String>,
    /// Wall ms per step (back-to-back steps), per round.
    pub wall_ms: Vec<f64>,
    /// Back-to-back steps per round of this row, at most the document's `steps` (a long step's
    /// rounds have fewer, so they last about as long as a short step's); absent: `steps`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steps: Option<u32>,
    /// Host ms per step: the median wall time of the same mode at a count so small that the host
    /// bounds the step (`None` in a check, which needs the wall time only).
    pub host_ms: Option<f64>,
    /// GPU ms per step: the union of the step's kernels' times under the profiler (`None` in a
    /// check).
    pub gpu_ms: Option<f64>,
}

/// A count the worker could not time.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FailedStep {
    /// Eager or graphed.
    #[schemars(with = "ExecutionSchema")]
    pub execution: Execution,
    /// The count.
    pub tokens: u64,
    /// Why.
    pub error: String,
}

/// A rule key as the policy file writes it (`fp8_policy::RuleKey`'s JSON).
#[derive(JsonSchema)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
pub(crate) struct KeySchema {
    /// The module kind (`layernorm_column`, `row`, `column_grouped`, ...).
    kind: String,
    /// Dense keys: the module's `ub_name`.
    ub_name: Option<String>,
    /// Dense keys: the TP size.
    tp: Option<u32>,
    /// Grouped keys: the expert TP size.
    etp: Option<u32>,
    /// Grouped keys: the rank's local experts.
    num_gemms: Option<u32>,
}

/// `eager` or `graphed` (`fp8_policy::Execution`).
#[derive(JsonSchema)]
#[serde(rename_all = "lowercase")]
#[allow(dead_code)]
pub(crate) enum ExecutionSchema {
    /// Kernels launched one by one.
    Eager,
    /// CUDA graphs.
    Graphed,
}

/// The JSON Schema of [`StepInputs`] (generated from the type; `docs/schemas/` holds it, a test
/// keeps it current, and the Python writer's tests read it).
pub fn step_inputs_schema() -> String {
    crate::read::schema_of::<StepInputs>()
}

/// The JSON Schema of [`StepPlans`].
pub fn step_plans_schema() -> String {
    crate::read::schema_of::<StepPlans>()
}

/// Reads and checks a document.
pub fn read_step_inputs(path: &Path) -> Result<StepInputs, ReportError> {
    let text = crate::read::read_bounded(path, MAX_STEP_INPUTS_BYTES)?;
    parse_step_inputs(&text, path)
}

/// A layout's check as files: round 0 is `<layout>_check_step.json`, round 1 (the first
/// re-timing) `<layout>_recheck_step.json`, round N from 2 `<layout>_recheck<N>_step.json`. Each
/// round is its own document (its all-BF16, all-FP8 and plans timed in the same rounds), so a
/// later round never replaces what an earlier one measured; readers take them in round order.
pub fn check_round_word(round: usize) -> String {
    match round {
        0 => "check".to_owned(),
        1 => "recheck".to_owned(),
        n => format!("recheck{n}"),
    }
}

/// The round a file's word names ([`check_round_word`]'s inverse; `None` for any other word,
/// `recheck1` and `recheck02` included).
pub fn check_round(word: &str) -> Option<usize> {
    match word {
        "check" => Some(0),
        "recheck" => Some(1),
        w => {
            let n = w.strip_prefix("recheck")?;
            let round: usize = n.parse().ok()?;
            (round >= 2 && n == round.to_string()).then_some(round)
        }
    }
}

/// Most check rounds a reader looks for beside a layout (a bound, not a limit the tool reaches).
pub const MAX_CHECK_ROUNDS: usize = 64;

/// The check rounds of the layout `base` (`<base>_check_step.json`, ...) present under `root`, in
/// round order, up to the first one missing.
pub fn check_rounds_beside(root: &Path, base: &str) -> Vec<std::path::PathBuf> {
    (0..MAX_CHECK_ROUNDS)
        .map(|r| std::path::PathBuf::from(format!("{base}_{}_step.json", check_round_word(r))))
        .take_while(|p| root.join(p).is_file())
        .collect()
}

/// A whole-step row has at most this many times `rounds` rounds: the worker times a count of
/// short steps in more rounds (`adaptive_fp8.bench.step_inputs.count_rounds`).
pub const MAX_ROUNDS_FACTOR: usize = 3;

/// Parses and checks a document: its format and version, every field typed (unknown ones
/// refused), timings finite and positive (host time may be zero), each module's round list as
/// long as `rounds` and each whole step's from `rounds` to [`MAX_ROUNDS_FACTOR`] times that, and
/// every group a row names one of `groups`.
pub fn parse_step_inputs(text: &str, path: &Path) -> Result<StepInputs, ReportError> {
    let doc: StepInputs = crate::read::typed_document(
        text,
        path,
        (STEP_INPUTS_FORMAT, STEP_INPUTS_VERSION),
        "python -m adaptive_fp8.bench.step_inputs",
        "measure again with the installed adaptive_fp8",
    )?;
    check(&doc).map_err(|m| ReportError::new(path, ReportErrorKind::Document(m)))?;
    Ok(doc)
}

fn check(doc: &StepInputs) -> Result<(), String> {
    check_header(doc)?;
    let groups: BTreeSet<&str> = doc.groups.iter().map(|g| g.group.as_str()).collect();
    let capable: BTreeSet<&str> = doc
        .groups
        .iter()
        .filter(|g| g.fp8_capable)
        .map(|g| g.group.as_str())
        .collect();
    check_modules(doc, &groups, &capable)?;
    check_steps(doc, &groups, &capable)
}

/// The sizes, settling and groups: positive, finite, each group once.
fn check_header(doc: &StepInputs) -> Result<(), String> {
    if doc.rounds == 0 || doc.tp == 0 || doc.layers == 0 || doc.steps == 0 {
        return Err("rounds, tp, layers and steps must be positive".into());
    }
    check_settled(doc.settle_s, doc.settled.as_ref())?;
    let groups: BTreeSet<&str> = doc.groups.iter().map(|g| g.group.as_str()).collect();
    if groups.len() != doc.groups.len() {
        return Err("groups: a group is listed twice".into());
    }
    for (i, g) in doc.groups.iter().enumerate() {
        if g.scale == 0 || g.instances == 0 {
            return Err(format!(
                "groups[{i}] ({}): scale and instances must be positive",
                g.group
            ));
        }
    }
    Ok(())
}

/// `settle_s` a bound of 0 or more seconds; `settled` a positive count of rounds of finite times.
pub(crate) fn check_settled(
    settle_s: Option<f64>,
    settled: Option<&Settled>,
) -> Result<(), String> {
    if let Some(x) = settle_s.filter(|x| !x.is_finite() || *x < 0.0) {
        return Err(format!(
            "settle_s: {x} is not a bound in seconds (0 or more)"
        ));
    }
    if let Some(s) = settled {
        let times = [s.seconds, s.first_ms, s.last_ms];
        if s.rounds == 0 || times.iter().any(|x| !x.is_finite() || *x < 0.0) {
            return Err(format!(
                "settled ({}): rounds must be positive and its times finite and 0 or more",
                s.at
            ));
        }
    }
    Ok(())
}

/// A round list at `at`: `least` to `most` values (a module row has `rounds`; a whole-step row
/// up to [`MAX_ROUNDS_FACTOR`] times that), each finite and positive (0 too where `zero_ok`).
fn times(at: &str, v: &[f64], least: usize, most: usize, zero_ok: bool) -> Result<(), String> {
    if v.len() < least || v.len() > most {
        let expected = if most == least {
            format!("rounds = {least}")
        } else {
            format!("rounds = {least} to {most}")
        };
        return Err(format!("{at}: {} values, expected {expected}", v.len()));
    }
    match v
        .iter()
        .find(|x| !x.is_finite() || **x < 0.0 || (!zero_ok && **x == 0.0))
    {
        Some(x) => Err(format!("{at}: {x} is not a positive time in ms")),
        None => Ok(()),
    }
}

/// Each module row: a group of `groups` at a count once, FP8 rounds iff it is FP8-capable.
fn check_modules(
    doc: &StepInputs,
    groups: &BTreeSet<&str>,
    capable: &BTreeSet<&str>,
) -> Result<(), String> {
    let rounds = doc.rounds as usize;
    let mut seen = BTreeSet::new();
    for (i, m) in doc.modules.iter().enumerate() {
        let at = format!("modules[{i}] ({} at {})", m.group, m.tokens);
        if !groups.contains(m.group.as_str()) || m.tokens == 0 {
            return Err(format!("{at}: not a group of `groups`, or tokens 0"));
        }
        if !seen.insert((m.group.as_str(), m.tokens)) {
            return Err(format!("{at}: the group is timed twice at this count"));
        }
        if m.fp8.is_some() != capable.contains(m.group.as_str()) {
            return Err(format!(
                "{at}.fp8: FP8 rounds where `groups` says the group is not FP8-capable, or none where it is"
            ));
        }
        for (p, r) in [("bf16", Some(&m.bf16)), ("fp8", m.fp8.as_ref())] {
            if let Some(r) = r {
                times(
                    &format!("{at}.{p}.host_ms"),
                    &r.host_ms,
                    rounds,
                    rounds,
                    true,
                )?;
                times(
                    &format!("{at}.{p}.gpu_ms"),
                    &r.gpu_ms,
                    rounds,
                    rounds,
                    false,
                )?;
            }
        }
    }
    Ok(())
}

/// Each whole-step row: a count of tokens, the groups its mode runs, each mode once a count.
fn check_steps(
    doc: &StepInputs,
    groups: &BTreeSet<&str>,
    capable: &BTreeSet<&str>,
) -> Result<(), String> {
    let rounds = doc.rounds as usize;
    let mut rows = BTreeSet::new();
    for (i, s) in doc.step_times.iter().enumerate() {
        let at = format!("step_times[{i}] ({} at {})", s.execution, s.tokens);
        if s.tokens == 0 {
            return Err(format!("{at}.tokens: a step of 0 tokens"));
        }
        if let Some(g) = s.fp8_groups.iter().find(|g| !groups.contains(g.as_str())) {
            return Err(format!(
                "{at}: fp8_groups names {g}, not a group of `groups`"
            ));
        }
        let all_fp8 = s
            .fp8_groups
            .iter()
            .map(String::as_str)
            .eq(capable.iter().copied());
        let fits = match s.mode {
            StepMode::Bf16 => s.fp8_groups.is_empty(),
            StepMode::Fp8 => all_fp8,
            StepMode::Plan => s.fp8_groups.iter().all(|g| capable.contains(g.as_str())),
        };
        if !fits {
            return Err(format!(
                "{at}.fp8_groups: not what its mode runs (bf16: none; fp8: every FP8-capable group of `groups`; plan: FP8-capable groups)"
            ));
        }
        if !rows.insert((s.execution, s.tokens, s.mode, &s.fp8_groups)) {
            return Err(format!("{at}: the same mode is timed twice at this count"));
        }
        let most = MAX_ROUNDS_FACTOR * rounds;
        times(&format!("{at}.wall_ms"), &s.wall_ms, rounds, most, false)?;
        if let Some(n) = s.steps.filter(|n| *n == 0 || *n > doc.steps) {
            return Err(format!(
                "{at}.steps: {n} is not between 1 and the document's steps ({})",
                doc.steps
            ));
        }
        for (f, v) in [("host_ms", s.host_ms), ("gpu_ms", s.gpu_ms)] {
            if let Some(x) = v.filter(|x| !x.is_finite() || *x <= 0.0) {
                return Err(format!("{at}.{f}: {x} is not a positive time in ms"));
            }
        }
    }
    Ok(())
}

impl StepInputs {
    /// Whether the FP8 groups held FP8 weights (`fp8_param`; a document without the field
    /// predates it, and its groups did).
    pub fn fp8_weights(&self) -> bool {
        self.fp8_param.unwrap_or(true)
    }

    /// How the FP8 groups held their weights, in words: "FP8 weights" or "BF16 weights".
    pub fn weights_words(&self) -> &'static str {
        if self.fp8_weights() {
            "FP8 weights"
        } else {
            "BF16 weights"
        }
    }

    /// The document as JSON (what the worker writes; for tests and stand-ins).
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("plain data serializes")
    }
}

/// The plans file's `format` (what fp8sel asks the worker's `--check` to time).
pub const STEP_PLANS_FORMAT: &str = "adaptive-fp8-step-plans";

/// The plans the check times.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StepPlans {
    /// [`STEP_PLANS_FORMAT`].
    pub format: String,
    /// Each plan.
    pub plans: Vec<PlannedStep>,
}

/// One plan to time at one count and execution.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PlannedStep {
    /// Eager or graphed.
    #[schemars(with = "ExecutionSchema")]
    pub execution: Execution,
    /// The count.
    pub tokens: u64,
    /// The groups FP8.
    pub fp8_groups: Vec<String>,
}

impl StepPlans {
    /// The plans, in the format.
    pub fn new(plans: Vec<PlannedStep>) -> StepPlans {
        StepPlans {
            format: STEP_PLANS_FORMAT.to_owned(),
            plans,
        }
    }

    /// As JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("plain data serializes") + "\n"
    }
}
