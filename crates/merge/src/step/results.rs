//! The step benchmark's results file (`python -m adaptive_fp8.bench.step_bench --json`): the
//! oracle's verdicts per execution and count, and the counts it could not time.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use fp8_policy::{Execution, RuleKey};
use serde_json::{Value, json};

use crate::error::MergeError;

/// The oracle's verdict at one swept count: the groups it kept FP8.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepCount {
    /// The swept count: the dense token count of one micro-batch (`seq x mbs`).
    pub tokens: u64,
    /// Groups FP8 at this count: the oracle's, or the reference's that overruled it.
    pub fp8_groups: BTreeSet<String>,
    /// `bf16`, `fp8` or `policy:<file>` where that mode, not the oracle, is the verdict: the
    /// row's rounds measured it faster than the oracle beyond the noise.
    pub overruled_by: Option<String>,
}

/// A module group of the step and the policy key it is looked up with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupKey {
    /// The step benchmark's group name (`qkv`, `experts.fc1`, `shared.fc2`, ...).
    pub group: String,
    /// The key.
    pub key: RuleKey,
    /// What the key's tokens are per swept token: `moe_router_topk` for experts, else 1.
    pub scale: u64,
}

/// Largest step-results file read (a sweep's JSON is tens of KiB).
pub const MAX_STEP_BYTES: u64 = 16 * 1024 * 1024;

/// One execution's sweep from a step benchmark's results file.
#[derive(Debug, Clone, PartialEq)]
pub struct StepRun {
    /// The results file.
    pub file: PathBuf,
    /// Its execution.
    pub execution: Execution,
    /// The oracle's verdict per swept count.
    pub counts: Vec<StepCount>,
    /// The groups and their keys.
    pub groups: Vec<GroupKey>,
    /// The model's name.
    pub model: String,
    /// The component (`llm` or `vit`).
    pub component: String,
    /// The device.
    pub device: String,
    /// Megatron's recipe name.
    pub recipe: String,
    /// What the step was, for provenance: layers, micro-batches, versions, trainer.
    pub info: Value,
}

/// The `results` rows, numbered (none where the file has no list).
fn result_rows(v: &Value) -> impl Iterator<Item = (usize, &Value)> {
    v.get("results")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
}

/// A results row's execution (eager where the row does not say: older results).
fn row_execution(row: &Value, i: usize, file: &Path) -> Result<Execution, MergeError> {
    row.get("execution")
        .and_then(Value::as_str)
        .unwrap_or("eager")
        .parse()
        .map_err(|e: String| format_err(file, format!("results[{i}].execution: {e}")))
}

fn format_err(file: &Path, message: impl Into<String>) -> MergeError {
    MergeError::Format {
        file: file.to_path_buf(),
        message: message.into(),
    }
}

/// A row's verdict and the reference that gave it where not the oracle: the FP8 groups of its
/// oracle, unless the row's own interleaved rounds put all-BF16 or all-FP8 ahead of the oracle
/// beyond the noise (the oracle's `vs_min_of` names that reference and its whole p10-p90 band
/// against it is above 1): then that reference's groups.
/// The search decides each trial on a few early-stopped pairs and keeps the fewer-FP8 side of a
/// tie, so it can settle short of all-FP8 where the rounds, more of them and interleaved, measure
/// all-FP8 faster (measured on the H200 in a retune; git history of docs/RESULTS.md). Only where the step builds every mode
/// from its groups alone (`same_program`: the TE blocks); in the Megatron judge `fp8` is
/// Megatron's own global FP8, another program than the oracle's per-module one with every
/// group FP8. `None` where the row has no oracle.
fn row_verdict(row: &Value, same_program: bool) -> Option<(&Vec<Value>, Option<&str>)> {
    let oracle = row.pointer("/modes/oracle")?;
    let searched = oracle.get("fp8_groups").and_then(Value::as_array)?;
    let beaten_by = oracle
        .get("vs_min_of")
        .and_then(Value::as_str)
        .filter(|r| same_program && matches!(*r, "bf16" | "fp8"))
        .filter(|_| {
            oracle
                .get("vs_min_p10")
                .and_then(Value::as_f64)
                .is_some_and(|p10| p10 > 1.0)
        });
    let by_reference = beaten_by.and_then(|r| {
        let groups = row.pointer(&format!("/modes/{r}/fp8_groups"))?;
        Some((groups.as_array()?, Some(r)))
    });
    let by_policy = same_program.then(|| policy_ahead(row)).flatten();
    Some(by_policy.or(by_reference).unwrap_or((searched, None)))
}

/// The header field that lets rows without an oracle be read, and its one value: each row's
/// fastest mode is its verdict.
pub(super) const VERDICT_WITHOUT_ORACLE: &str = "verdict_without_oracle";
/// See [`VERDICT_WITHOUT_ORACLE`].
const FASTEST_MODE: &str = "fastest_mode";

/// The verdict of a TE-block row that ran no oracle: of the modes its interleaved rounds timed
/// (BF16, all-FP8, the policies of its day, each built from its groups alone), the fastest by the
/// median among those faster than BF16 beyond the noise (the whole p10-p90 band against BF16
/// below 1), else BF16. A search over fewer candidates than the oracle's: it can miss a subset
/// that pays, never pick one the rounds did not measure ahead of BF16. `None` without a BF16 mode.
fn fastest_mode(row: &Value) -> Option<(&Vec<Value>, Option<&str>)> {
    match fastest_ahead(row, "vs_bf16", |name| name != "oracle") {
        Some((groups, name)) => Some((groups, Some(name))),
        None => Some((
            row.pointer("/modes/bf16/fp8_groups")?.as_array()?,
            Some("bf16"),
        )),
    }
}

/// The policy mode a row's rounds measured faster than the fastest of BF16, all-FP8 and the
/// oracle beyond the noise (its whole p10-p90 band against that one below 1), the fastest such
/// where several ran: a program the same rounds timed ahead of every reference is the count's
/// verdict (the greedy search, on fewer pairs, can settle on a slower subset).
fn policy_ahead(row: &Value) -> Option<(&Vec<Value>, Option<&str>)> {
    let (groups, name) = fastest_ahead(row, "vs_min", |name| name.starts_with("policy:"))?;
    Some((groups, Some(name)))
}

/// Of a row's modes that `eligible` names, those whose whole p10-p90 band of `{ratio}_p90`
/// against the ratio's reference is below 1, the one with the lowest `{ratio}_median`: its FP8
/// groups and its name.
fn fastest_ahead<'a>(
    row: &'a Value,
    ratio: &str,
    eligible: impl Fn(&str) -> bool,
) -> Option<(&'a Vec<Value>, &'a str)> {
    let num = |m: &Value, k: &str| m.get(format!("{ratio}_{k}")).and_then(Value::as_f64);
    row.get("modes")?
        .as_object()?
        .iter()
        .filter(|(name, m)| eligible(name) && num(m, "p90").is_some_and(|p90| p90 < 1.0))
        .filter_map(|(name, m)| {
            Some((
                num(m, "median")?,
                m.get("fp8_groups")?.as_array()?,
                name.as_str(),
            ))
        })
        .min_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, groups, name)| (groups, name))
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
    let v: Value =
        serde_json::from_str(text).map_err(|e| format_err(file, format!("not JSON ({e})")))?;
    let mut out = Vec::new();
    for (i, row) in result_rows(&v) {
        if row.get("error").is_some() {
            continue;
        }
        let execution = row_execution(row, i, file)?;
        let Some(tokens) = row.get("tokens").and_then(Value::as_u64) else {
            return Err(format_err(file, format!("results[{i}].tokens: missing")));
        };
        let Some(modes) = row.get("modes").and_then(Value::as_object) else {
            continue;
        };
        for (name, m) in modes {
            if !["hook:", "native:", "policy:"]
                .iter()
                .any(|p| name.starts_with(p))
            {
                continue;
            }
            let num = |k: &str| m.get(k).and_then(Value::as_f64);
            let (Some(p50), Some(p10), Some(p90)) = (
                num("vs_bf16_median"),
                num("vs_bf16_p10"),
                num("vs_bf16_p90"),
            ) else {
                return Err(format_err(
                    file,
                    format!("results[{i}].modes.{name}: no vs_bf16 median, p10 and p90"),
                ));
            };
            let fp8_groups = m
                .get("fp8_groups")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect();
            out.push(JudgedPolicy {
                execution,
                tokens,
                mode: name.clone(),
                fp8_groups,
                vs_bf16: (p50, p10, p90),
            });
        }
    }
    Ok(out)
}

/// The groups the step built, where its rows say: every group of the all-FP8 reference (`fp8`).
/// `group_keys` lists every group of the model's plan, also those of a layer type the step did
/// not build (the dense fc1 of a step of MoE layers only): a group the step never ran has no
/// verdict, and reading the oracle's silence as BF16 would turn its key BF16 for good.
fn built_groups(v: &Value) -> BTreeSet<String> {
    result_rows(v)
        .filter_map(|(_, row)| row.pointer("/modes/fp8/fp8_groups")?.as_array())
        .flatten()
        .filter_map(Value::as_str)
        .map(str::to_owned)
        .collect()
}

/// Reads `python -m adaptive_fp8.bench.step_bench --json` results (the caller reads the file, bounded
/// by [`MAX_STEP_BYTES`]): one [`StepRun`] per execution swept. The oracle must have run
/// (`--oracle greedy`, the default) and the file must carry `group_keys` (step benchmarks from
/// this version on).
pub fn parse_results(text: &str, file: &Path) -> Result<Vec<StepRun>, MergeError> {
    let v: Value =
        serde_json::from_str(text).map_err(|e| format_err(file, format!("not JSON ({e})")))?;
    let keys = v.get("group_keys").and_then(Value::as_object).filter(|m| !m.is_empty()).ok_or_else(|| {
        format_err(file, "no `group_keys`: not step benchmark results, or written before they carried each group's policy key; re-run `python -m adaptive_fp8.bench.step_bench --json`")
    })?;
    let mut groups = Vec::new();
    for (g, k) in keys {
        let key: RuleKey = serde_json::from_value(k.get("key").cloned().unwrap_or(Value::Null))
            .map_err(|e| format_err(file, format!("group_keys.{g}.key: {e}")))?;
        let scale = k
            .get("scale")
            .and_then(Value::as_u64)
            .filter(|s| *s >= 1)
            .unwrap_or(1);
        groups.push(GroupKey {
            group: g.clone(),
            key,
            scale,
        });
    }
    let built = built_groups(&v);
    if !built.is_empty() {
        groups.retain(|g| built.contains(&g.group));
    }
    let text_of = |k: &str| {
        v.get(k)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    let te_blocks = v.get("trainer").and_then(Value::as_str).unwrap_or("te") == "te";
    // An older TE-block run without the oracle, marked so when its keys were backfilled: each
    // row's fastest mode is its verdict (below).
    let fastest_fallback =
        te_blocks && v.get(VERDICT_WITHOUT_ORACLE).and_then(Value::as_str) == Some(FASTEST_MODE);
    let mut by_exec: BTreeMap<Execution, Vec<StepCount>> = BTreeMap::new();
    for (i, row) in result_rows(&v) {
        if row.get("error").is_some() {
            continue;
        }
        let execution = row_execution(row, i, file)?;
        let tokens = row
            .get("tokens")
            .and_then(Value::as_u64)
            .filter(|t| *t > 0)
            .ok_or_else(|| {
                format_err(
                    file,
                    format!("results[{i}].tokens: missing or not a positive count"),
                )
            })?;
        let (verdict, overruled_by) = row_verdict(row, te_blocks)
            .or_else(|| fastest_fallback.then(|| fastest_mode(row)).flatten())
            .ok_or_else(|| {
                format_err(file, format!("results[{i}] (tokens {tokens}, {execution}): no oracle; fix: run the step benchmark with --oracle greedy"))
            })?;
        by_exec.entry(execution).or_default().push(StepCount {
            tokens,
            fp8_groups: verdict
                .iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect(),
            overruled_by: overruled_by.map(str::to_owned),
        });
    }
    if by_exec.is_empty() {
        return Err(MergeError::Empty {
            file: file.to_path_buf(),
            problem: "no token count with an oracle result; fix: re-run the step benchmark".into(),
        });
    }
    let mut info = json!({
        "file": file.display().to_string(), "trainer": v.get("trainer").cloned().unwrap_or(json!("te")),
        // The layer kinds where the worker lists them (the TE blocks), else their count (the
        // Megatron judge builds `layers` of the config's own kind).
        "layers": v.get("layer_types").filter(|t| t.as_array().is_some_and(|a| !a.is_empty()))
            .or_else(|| v.get("layers")).cloned().unwrap_or(Value::Null),
        "grad_accum": v.get("grad_accum").cloned().unwrap_or(json!(1)),
        "recipe": v.get("recipe").cloned().unwrap_or(Value::Null),
        "te_version": v.get("te_version").cloned().unwrap_or(Value::Null),
        "megatron_core_version": v.get("megatron_core_version").cloned().unwrap_or(Value::Null),
        "tp": v.get("tp").cloned().unwrap_or(Value::Null), "complete": v.get("complete").cloned().unwrap_or(json!(true)),
    });
    // A step over a real TP group (`--tp-comm`: the communication in the times), and keys added
    // to an older file from the plan: said where so, absent otherwise.
    for k in ["tp_comm", "backfilled_from", VERDICT_WITHOUT_ORACLE] {
        if let Some(x) = v.get(k).filter(|x| !x.is_null() && **x != json!(false)) {
            info[k] = x.clone();
        }
    }
    Ok(by_exec
        .into_iter()
        .map(|(execution, counts)| StepRun {
            file: file.to_path_buf(),
            execution,
            counts,
            groups: groups.clone(),
            model: text_of("model_name"),
            component: v
                .get("component")
                .and_then(Value::as_str)
                .unwrap_or("llm")
                .to_owned(),
            device: text_of("device"),
            recipe: v
                .get("fp8_recipe")
                .and_then(Value::as_str)
                .unwrap_or("blockwise")
                .to_owned(),
            info: info.clone(),
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
    /// counts leave memory behind (measured on the H200: Qwen2.5-72B graphed 4096 after 2048): a count that ran out
    /// after others may finish alone in a fresh process.
    pub fn out_of_memory(&self) -> bool {
        self.error.starts_with("OutOfMemoryError") || self.error.contains("out of memory")
    }
}

/// The counts of `python -m adaptive_fp8.bench.step_bench --json` results that failed, in file
/// order ([`parse_results`] skips them).
pub fn failed_counts(text: &str, file: &Path) -> Result<Vec<FailedCount>, MergeError> {
    let v: Value =
        serde_json::from_str(text).map_err(|e| format_err(file, format!("not JSON ({e})")))?;
    let mut out = Vec::new();
    for (i, row) in result_rows(&v) {
        let Some(error) = row.get("error") else {
            continue;
        };
        let execution = row_execution(row, i, file)?;
        let tokens = row.get("tokens").and_then(Value::as_u64).ok_or_else(|| {
            format_err(file, format!("results[{i}].tokens: missing or not a count"))
        })?;
        out.push(FailedCount {
            execution,
            tokens,
            error: error
                .as_str()
                .map_or_else(|| error.to_string(), str::to_owned),
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn verdict_of(oracle: &str) -> (Vec<String>, Option<String>) {
        verdict_in("te", oracle)
    }

    fn verdict_in(trainer: &str, oracle: &str) -> (Vec<String>, Option<String>) {
        let text = format!(
            r#"{{"trainer": "{trainer}", "group_keys": {{"fc1": {{"key": {{"kind": "layernorm_column", "tp": 1, "ub_name": "fc1"}}}}}}, "results": [{{"tokens": 3072, "modes": {{
                "bf16": {{"fp8_groups": []}}, "fp8": {{"fp8_groups": ["fc1", "fc2", "qkv"]}},
                "oracle": {oracle}}}}}]}}"#
        );
        let runs = parse_results(&text, Path::new("s.json")).unwrap_or_else(|e| panic!("{e}"));
        let c = &runs[0].counts[0];
        (
            c.fp8_groups.iter().cloned().collect(),
            c.overruled_by.clone(),
        )
    }

    #[test]
    fn a_reference_faster_than_the_oracle_beyond_the_noise_is_the_verdict() {
        let beaten = r#"{"fp8_groups": ["fc1"], "vs_min_of": "fp8", "vs_min_p10": 1.011, "vs_min_p90": 1.031}"#;
        let fp8 = Some("fp8".to_owned());
        assert_eq!(
            verdict_of(beaten),
            (vec!["fc1".into(), "fc2".into(), "qkv".into()], fp8)
        );
        let by_bf16 = r#"{"fp8_groups": ["fc1"], "vs_min_of": "bf16", "vs_min_p10": 1.02}"#;
        assert_eq!(verdict_of(by_bf16), (vec![], Some("bf16".to_owned())));
        // Within the noise (the band reaches 1), or the oracle itself the fastest: the search's.
        let tie = r#"{"fp8_groups": ["fc1"], "vs_min_of": "fp8", "vs_min_p10": 0.992, "vs_min_p90": 1.045}"#;
        assert_eq!(verdict_of(tie), (vec!["fc1".into()], None));
        let fastest = r#"{"fp8_groups": ["fc1"], "vs_min_of": "oracle", "vs_min_p10": 1.0}"#;
        assert_eq!(verdict_of(fastest), (vec!["fc1".into()], None));
        // In the Megatron judge `fp8` is Megatron's global FP8: not the oracle's program.
        assert_eq!(verdict_in("megatron", beaten), (vec!["fc1".into()], None));
        // A policy the rounds measured ahead of every reference beyond the noise is the verdict.
        let text = r#"{"group_keys": {"fc1": {"key": {"kind": "layernorm_column", "tp": 1, "ub_name": "fc1"}}}, "results": [{"tokens": 2048, "modes": {
            "bf16": {"fp8_groups": []}, "fp8": {"fp8_groups": ["fc1", "qkv"]},
            "policy:a.json": {"fp8_groups": ["qkv"], "vs_min_median": 0.974, "vs_min_p90": 0.997},
            "policy:b.json": {"fp8_groups": ["fc1"], "vs_min_median": 0.990, "vs_min_p90": 1.004},
            "oracle": {"fp8_groups": ["fc1"], "vs_min_of": "oracle", "vs_min_p10": 1.0}}}]}"#;
        let c = &parse_results(text, Path::new("p.json")).unwrap_or_else(|e| panic!("{e}"))[0]
            .counts[0];
        assert_eq!(c.fp8_groups, ["qkv".to_owned()].into());
        assert_eq!(c.overruled_by.as_deref(), Some("policy:a.json"));
        let older = r#"{"fp8_groups": ["fc1"]}"#;
        // Rows without an oracle: refused, unless the header marks the run for its fastest mode.
        let no_oracle = |mark: &str| {
            format!(
                r#"{{{mark}"group_keys": {{"fc1": {{"key": {{"kind": "layernorm_column", "tp": 2, "ub_name": "fc1"}}}}}}, "results": [
                {{"tokens": 1024, "modes": {{"bf16": {{"fp8_groups": []}},
                    "fp8": {{"fp8_groups": ["fc1", "qkv"], "vs_bf16_median": 1.087, "vs_bf16_p90": 1.09}}}}}},
                {{"tokens": 2048, "modes": {{"bf16": {{"fp8_groups": []}},
                    "fp8": {{"fp8_groups": ["fc1", "qkv"], "vs_bf16_median": 0.948, "vs_bf16_p90": 0.957}},
                    "policy:a.json": {{"fp8_groups": ["fc1"], "vs_bf16_median": 0.940, "vs_bf16_p90": 0.956}},
                    "policy:b.json": {{"fp8_groups": ["qkv"], "vs_bf16_median": 0.930, "vs_bf16_p90": 1.002}}}}}}]}}"#
            )
        };
        let err = parse_results(&no_oracle(""), Path::new("g.json"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("g.json") && err.contains("no oracle"), "{err}");
        let marked = no_oracle(r#""verdict_without_oracle": "fastest_mode", "#);
        let run = &parse_results(&marked, Path::new("g.json")).unwrap_or_else(|e| panic!("{e}"))[0];
        let read: Vec<_> = run
            .counts
            .iter()
            .map(|c| (c.fp8_groups.clone(), c.overruled_by.clone()))
            .collect();
        // 1024: nothing ahead of BF16; 2048: the fastest of those ahead beyond the noise (b's
        // median is lower, its band reaches 1).
        assert_eq!(
            read,
            [
                (BTreeSet::new(), Some("bf16".into())),
                (["fc1".to_owned()].into(), Some("policy:a.json".into()))
            ]
        );
        assert_eq!(run.info[VERDICT_WITHOUT_ORACLE], FASTEST_MODE);
        // The Megatron judge's modes are other programs: no fallback there.
        let megatron = marked.replacen('{', r#"{"trainer": "megatron", "#, 1);
        assert!(parse_results(&megatron, Path::new("g.json")).is_err());
        assert_eq!(
            verdict_of(older),
            (vec!["fc1".into()], None),
            "rows without the band keep the oracle's verdict"
        );
    }

    #[test]
    fn a_group_the_step_did_not_build_is_not_measured() {
        let text = r#"{"group_keys": {
                "fc1": {"key": {"kind": "layernorm_column", "tp": 8, "ub_name": "fc1"}},
                "experts.fc1": {"key": {"kind": "column_grouped", "etp": 1, "num_gemms": 4}, "scale": 8}},
            "results": [{"tokens": 2048, "modes": {"bf16": {"fp8_groups": []},
                "fp8": {"fp8_groups": ["experts.fc1"]}, "oracle": {"fp8_groups": []}}}]}"#;
        let runs = parse_results(text, Path::new("s.json")).unwrap_or_else(|e| panic!("{e}"));
        let groups: Vec<&str> = runs[0].groups.iter().map(|g| g.group.as_str()).collect();
        assert_eq!(groups, ["experts.fc1"], "fc1 was not in the step's layers");
        assert!(
            runs[0].info.get("tp_comm").is_none(),
            "said only where true"
        );
        let comm = text.replacen('{', r#"{"tp_comm": true, "#, 1);
        let runs = parse_results(&comm, Path::new("s.json")).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(runs[0].info["tp_comm"], json!(true));
    }

    #[test]
    fn failed_counts_are_listed_and_out_of_memory_is_told_apart() {
        let text = r#"{"results": [
            {"tokens": 2048, "execution": "graphed", "modes": {"oracle": {"fp8_groups": []}}},
            {"tokens": 4096, "execution": "graphed", "error": "OutOfMemoryError: CUDA out of memory. Tried"},
            {"tokens": 8192, "error": "RuntimeError: capture failed"}]}"#;
        let f = failed_counts(text, Path::new("s.json")).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            f.iter()
                .map(|c| (c.execution, c.tokens, c.out_of_memory()))
                .collect::<Vec<_>>(),
            [
                (Execution::Graphed, 4096, true),
                (Execution::Eager, 8192, false)
            ]
        );
        let bad = failed_counts(r#"{"results": [{"error": "x"}]}"#, Path::new("s.json"));
        assert!(
            bad.is_err_and(|e| e.to_string().contains("results[0].tokens")),
            "a failed row without its count is refused"
        );
    }
}
