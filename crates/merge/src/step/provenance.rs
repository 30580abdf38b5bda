//! The step's record in a policy's provenance (`provenance.step`, written by
//! [`super::step_policy`] and `model::model_policy`), read back typed: one reader, so no caller
//! decides from untyped JSON or from prose.

use std::collections::BTreeMap;

use fp8_policy::{Execution, Policy, RuleKey};
use serde::Deserialize;

/// `provenance.step`: the oracle's runs and each key's verdicts, or the step model's layouts.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct StepRecord {
    /// The step oracle's runs, one per results file and execution.
    #[serde(default)]
    pub runs: Vec<RunRecord>,
    /// Each key's verdicts per execution, by the key's display form.
    #[serde(default)]
    pub verdicts: BTreeMap<String, KeyRecord>,
    /// The step model's layouts.
    #[serde(default)]
    pub model: Vec<LayoutRecord>,
}

/// One run of the step oracle.
#[derive(Debug, Clone, Deserialize)]
pub struct RunRecord {
    /// Its execution.
    pub execution: Execution,
    /// The counts it timed.
    pub counts: Vec<u64>,
    /// The step it was (its tensor-parallel size among the rest).
    pub info: RunInfo,
}

/// What a run recorded of its step (the fields a reader decides from).
#[derive(Debug, Clone, Deserialize)]
pub struct RunInfo {
    /// Its tensor-parallel size.
    pub tp: u32,
}

/// One key's verdicts in each execution the step swept.
#[derive(Debug, Clone, Deserialize)]
pub struct KeyRecord {
    /// `(count, FP8?)` per count the eager sweep timed.
    pub eager: Option<Vec<(u64, bool)>>,
    /// Per count of the graphed sweep.
    pub graphed: Option<Vec<(u64, bool)>>,
    /// The smallest count swept, in the key's own tokens, per execution.
    pub swept_from: PerExecution,
    /// The largest count swept, in the key's own tokens, per execution.
    pub swept_to: PerExecution,
}

/// A count per execution, where that execution was swept.
#[derive(Debug, Clone, Copy, Deserialize)]
pub struct PerExecution {
    /// Eager.
    pub eager: Option<u64>,
    /// Graphed.
    pub graphed: Option<u64>,
}

impl PerExecution {
    fn get(&self, e: Execution) -> Option<u64> {
        match e {
            Execution::Eager => self.eager,
            Execution::Graphed => self.graphed,
        }
    }
}

/// One layout of the step model.
#[derive(Debug, Clone, Deserialize)]
pub struct LayoutRecord {
    /// Its tensor-parallel size.
    pub tp: u32,
    /// The counts its module groups were measured at.
    pub swept: Vec<u64>,
    /// The executions it modelled, with their thresholds.
    pub thresholds: BTreeMap<Execution, serde_json::Value>,
}

impl StepRecord {
    /// The record of `policy`, where it has one; an error where it has one that does not read.
    pub fn of(policy: &Policy) -> Option<Result<StepRecord, String>> {
        let v = policy.provenance()?.step.as_ref()?;
        Some(serde_path_to_error::deserialize(v.clone()).map_err(|e| {
            let at = e.path().to_string();
            let at = if at == "." {
                String::new()
            } else {
                format!(".{at}")
            };
            format!(
                "provenance.step{at}: {} (not a record fp8sel wrote)",
                e.inner()
            )
        }))
    }

    /// The counts the step timed at tensor-parallel size `tp` in `execution` (the oracle's runs
    /// and the step model's layouts), ascending.
    pub fn counts_at(&self, tp: u32, execution: Execution) -> Vec<u64> {
        let mut out: Vec<u64> = self
            .runs
            .iter()
            .filter(|r| r.execution == execution && r.info.tp == tp)
            .flat_map(|r| r.counts.iter().copied())
            .chain(
                self.model
                    .iter()
                    .filter(|l| l.tp == tp && l.thresholds.contains_key(&execution))
                    .flat_map(|l| l.swept.iter().copied()),
            )
            .collect();
        out.sort_unstable();
        out.dedup();
        out
    }

    /// The counts the oracle swept for `key` in `execution`, in the key's own tokens: `None`
    /// where it did not sweep that execution.
    pub fn swept(&self, key: &RuleKey, execution: Execution) -> Option<(u64, u64)> {
        let k = self.verdicts.get(&key.to_string())?;
        let timed = match execution {
            Execution::Eager => k.eager.as_ref(),
            Execution::Graphed => k.graphed.as_ref(),
        };
        timed?;
        Some((k.swept_from.get(execution)?, k.swept_to.get(execution)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(step: serde_json::Value) -> Policy {
        let text = serde_json::json!({"version": 1, "speedup_threshold": 1.0, "rules": {},
            "provenance": {"step": step}})
        .to_string();
        Policy::from_json_str(&text, "p.json").unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn the_record_reads_the_oracles_runs_and_the_models_layouts() {
        let p = policy(serde_json::json!({
            "runs": [{"execution": "eager", "counts": [1024, 2048], "info": {"tp": 1, "trainer": "te"}, "overruled": {}},
                     {"execution": "graphed", "counts": [4096], "info": {"tp": 2}}],
            "verdicts": {"(kind=row, ub_name=fc2, tp=1)": {"eager": [[1024, false], [2048, true]], "graphed": null,
                "groups": ["fc2"], "swept_from": {"eager": 1024, "graphed": null}, "swept_to": {"eager": 2048, "graphed": null}}},
            "model": [{"tp": 8, "swept": [1024, 16384], "thresholds": {"graphed": []}, "fits": {}}]}));
        let r = StepRecord::of(&p)
            .unwrap_or_else(|| panic!("a record"))
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(r.counts_at(1, Execution::Eager), [1024, 2048]);
        assert_eq!(r.counts_at(2, Execution::Graphed), [4096]);
        assert_eq!(r.counts_at(8, Execution::Graphed), [1024, 16384]);
        assert!(
            r.counts_at(8, Execution::Eager).is_empty(),
            "the model did not model eager"
        );
        let fc2 = RuleKey::Dense {
            kind: fp8_policy::DenseKind::Row,
            ub_name: "fc2".into(),
            tp: 1,
        };
        assert_eq!(r.swept(&fc2, Execution::Eager), Some((1024, 2048)));
        assert_eq!(r.swept(&fc2, Execution::Graphed), None);
        // A record that does not read is an error, never an empty record.
        let bad = policy(
            serde_json::json!({"runs": [{"execution": "fast", "counts": [], "info": {"tp": 1}}]}),
        );
        let e = StepRecord::of(&bad)
            .and_then(Result::err)
            .unwrap_or_default();
        assert!(
            e.starts_with("provenance.step.runs[0].execution: "),
            "the error names the field: {e}"
        );
        let none = policy(serde_json::Value::Null);
        assert!(StepRecord::of(&none).is_none_or(|r| r.is_err()));
    }
}
