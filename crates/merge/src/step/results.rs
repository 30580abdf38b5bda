//! The step benchmark's results (`python -m adaptive_fp8.bench.step_bench --json`, read by
//! `fp8_report::step_results`): each row's verdict as the benchmark measured it, per execution
//! and count, and the counts it could not time.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use fp8_policy::{Execution, RuleKey};
use fp8_report::step_results::{StepResults, StepTrainer, parse_step_results};
use serde::Serialize;

use crate::error::MergeError;

/// The verdict at one swept count: the groups the step measured fastest FP8.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepCount {
    /// The swept count: the dense token count of one micro-batch (`seq x mbs`).
    pub tokens: u64,
    /// Groups FP8 at this count.
    pub fp8_groups: BTreeSet<String>,
    /// `bf16`, `fp8` or `policy:<file>` where that mode, not the oracle, is the verdict: the
    /// row's rounds measured it faster than the oracle beyond the noise.
    pub overruled_by: Option<String>,
}

/// A module group of the step and the policy key it is looked up with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepGroup {
    /// The step benchmark's group name (`qkv`, `experts.fc1`, `shared.fc2`, ...).
    pub group: String,
    /// The key.
    pub key: RuleKey,
    /// What the key's tokens are per swept token: `moe_router_topk` for experts, else 1.
    pub scale: u64,
}

/// Largest step-results file read (a sweep's JSON is tens of KiB).
pub const MAX_STEP_BYTES: u64 = fp8_report::step_results::MAX_STEP_RESULTS_BYTES;

/// The layers a step built: their kinds where the benchmark lists them (the TE blocks), else
/// their count (the Megatron judge builds `layers` of the config's own kind).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum StepLayers {
    /// `dense`, `moe`, per layer.
    Kinds(Vec<String>),
    /// How many.
    Count(u32),
}

/// What a step was: two runs with the same setup timed the same step, so their counts are one
/// sweep (a sweep, its refinements, a count timed alone).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StepSetup {
    /// The TE blocks or Megatron's `GPTModel`.
    pub trainer: StepTrainer,
    /// The layers.
    pub layers: StepLayers,
    /// Micro-batches per step.
    pub grad_accum: u32,
    /// The TE recipe with its options.
    pub recipe: String,
    /// Transformer Engine's version.
    pub te_version: String,
    /// megatron-core's version (the Megatron judge).
    pub megatron_core_version: Option<String>,
    /// Tensor-parallel size.
    pub tp: u32,
    /// Over a real TP group (communication in the times).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub tp_comm: bool,
}

/// One execution's sweep from a step benchmark's results file.
#[derive(Debug, Clone, PartialEq)]
pub struct StepRun {
    /// The results file.
    pub file: PathBuf,
    /// Its execution.
    pub execution: Execution,
    /// The verdict per swept count.
    pub counts: Vec<StepCount>,
    /// The groups and their keys.
    pub groups: Vec<StepGroup>,
    /// The model's name.
    pub model: String,
    /// The component (`llm` or `vit`).
    pub component: String,
    /// The device.
    pub device: String,
    /// Megatron's recipe name.
    pub recipe: String,
    /// What the step was.
    pub setup: StepSetup,
    /// False for a run its time limit cut short (its finished counts still count).
    pub complete: bool,
    /// Where its rows were copied from, where so.
    pub copied_from: Option<String>,
}

impl StepRun {
    /// The run for provenance: the setup, the file and how the run ended.
    pub fn info(&self) -> serde_json::Value {
        let mut v = serde_json::to_value(&self.setup).unwrap_or_default();
        if let Some(m) = v.as_object_mut() {
            m.insert("file".into(), self.file.display().to_string().into());
            m.insert("complete".into(), self.complete.into());
            if let Some(c) = &self.copied_from {
                m.insert("copied_from".into(), c.clone().into());
            }
        }
        v
    }
}

fn format_err(file: &Path, message: impl Into<String>) -> MergeError {
    MergeError::Format {
        file: file.to_path_buf(),
        message: message.into(),
    }
}

/// The typed document, its reader's errors as the merge's (they name the file).
fn typed(text: &str, file: &Path) -> Result<StepResults, MergeError> {
    parse_step_results(text, file).map_err(MergeError::Report)
}

/// One policy mode of a judged row (`hook:<file>` and `native:<file>` in the Megatron judge,
/// `policy:<file>` in the TE blocks): its FP8 groups and its ratio to all-BF16 paired by round.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct JudgedPolicy {
    /// Eager or graphed.
    pub execution: Execution,
    /// The count.
    pub tokens: u64,
    /// The mode's name.
    pub mode: String,
    /// Its FP8 groups.
    pub fp8_groups: BTreeSet<String>,
    /// Its ratio to all-BF16: median, p10, p90.
    pub vs_bf16: (f64, f64, f64),
}

/// Every policy mode of every timed row of a step benchmark's results (`--policy`, any oracle).
pub fn judged_policies(text: &str, file: &Path) -> Result<Vec<JudgedPolicy>, MergeError> {
    let doc = typed(text, file)?;
    let mut out = Vec::new();
    for row in doc.results.iter().filter(|r| r.error.is_none()) {
        for (name, m) in &row.modes {
            if ["hook:", "native:", "policy:"]
                .iter()
                .any(|p| name.starts_with(p))
            {
                out.push(JudgedPolicy {
                    execution: row.execution,
                    tokens: row.tokens,
                    mode: name.clone(),
                    fp8_groups: m.fp8_groups.iter().cloned().collect(),
                    vs_bf16: (m.vs_bf16_median, m.vs_bf16_p10, m.vs_bf16_p90),
                });
            }
        }
    }
    Ok(out)
}

/// Reads `python -m adaptive_fp8.bench.step_bench --json` results (the caller reads the file, bounded
/// by [`MAX_STEP_BYTES`]): one [`StepRun`] per execution swept. Every timed row must carry its
/// verdict (the oracle ran: `--oracle greedy`, the default) and the file its `group_keys`.
pub fn parse_results(text: &str, file: &Path) -> Result<Vec<StepRun>, MergeError> {
    let doc = typed(text, file)?;
    if doc.group_keys.is_empty() {
        return Err(format_err(
            file,
            "group_keys: empty; fix: re-run `python -m adaptive_fp8.bench.step_bench --json`",
        ));
    }
    // A group the step never ran has no verdict (the dense fc1 of a step of MoE layers only):
    // reading the oracle's silence as BF16 would turn its key BF16 for good.
    let built = doc.built_groups();
    let groups: Vec<StepGroup> = doc
        .group_keys
        .iter()
        .filter(|(g, _)| built.is_empty() || built.contains(g.as_str()))
        .map(|(g, k)| StepGroup {
            group: g.clone(),
            key: k.key.clone(),
            scale: k.scale.unwrap_or(1),
        })
        .collect();
    let mut by_exec: std::collections::BTreeMap<Execution, Vec<StepCount>> = Default::default();
    for (i, row) in doc.results.iter().enumerate() {
        if row.error.is_some() {
            continue;
        }
        let v = row.verdict.as_ref().ok_or_else(|| {
            format_err(file, format!("results[{i}] (tokens {}, {}): no verdict (no oracle); fix: run the step benchmark with --oracle greedy", row.tokens, row.execution))
        })?;
        by_exec.entry(row.execution).or_default().push(StepCount {
            tokens: row.tokens,
            fp8_groups: v.fp8_groups.clone(),
            overruled_by: Some(v.by.clone()).filter(|b| b != "oracle"),
        });
    }
    if by_exec.is_empty() {
        return Err(MergeError::Empty {
            file: file.to_path_buf(),
            problem: "no token count with a verdict; fix: re-run the step benchmark".into(),
        });
    }
    let setup = StepSetup {
        trainer: doc.trainer,
        layers: if doc.layer_types.is_empty() {
            StepLayers::Count(doc.layers)
        } else {
            StepLayers::Kinds(doc.layer_types.clone())
        },
        grad_accum: doc.grad_accum,
        recipe: doc.recipe.clone(),
        te_version: doc.te_version.clone(),
        megatron_core_version: doc.megatron_core_version.clone(),
        tp: doc.tp,
        tp_comm: doc.tp_comm,
    };
    Ok(by_exec
        .into_iter()
        .map(|(execution, counts)| StepRun {
            file: file.to_path_buf(),
            execution,
            counts,
            groups: groups.clone(),
            model: doc.model_name.clone(),
            component: doc.component.clone(),
            device: doc.device.clone(),
            recipe: doc
                .fp8_recipe
                .clone()
                .unwrap_or_else(|| "blockwise".to_owned()),
            setup: setup.clone(),
            complete: doc.complete,
            copied_from: doc.copied_from.clone(),
        })
        .collect())
}

/// A count the step benchmark could not time: a results row with an `error` (no verdict).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FailedCount {
    /// Its execution.
    pub execution: Execution,
    /// The count.
    pub tokens: u64,
    /// The worker's message (`Kind: text`, as Python names the exception).
    pub error: String,
}

impl FailedCount {
    /// Whether the GPU ran out of memory there. In one process the Megatron judge's graphed
    /// counts leave memory behind (measured on the H200: Qwen2.5-72B graphed 4096 after 2048):
    /// a count that ran out after others may finish alone in a fresh process.
    pub fn out_of_memory(&self) -> bool {
        self.error.starts_with("OutOfMemoryError") || self.error.contains("out of memory")
    }
}

/// The counts of `python -m adaptive_fp8.bench.step_bench --json` results that failed, in file
/// order ([`parse_results`] skips them).
pub fn failed_counts(text: &str, file: &Path) -> Result<Vec<FailedCount>, MergeError> {
    Ok(typed(text, file)?
        .results
        .into_iter()
        .filter_map(|r| {
            Some(FailedCount {
                execution: r.execution,
                tokens: r.tokens,
                error: r.error?,
            })
        })
        .collect())
}
