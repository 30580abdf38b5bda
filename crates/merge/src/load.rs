//! Reading reports: ours, or the reference tool's list of results, into uniform samples.

use std::collections::BTreeSet;
use std::path::Path;

use fp8_report::{PointId, Report, Status};
use serde_json::Value;

use crate::error::MergeError;
use crate::sample::{GroupKey, Loaded, Origin, ParKey, Sample, ShardInfo};

/// Reads a report file of either format. Only regular files are read, never more than
/// [`fp8_report::MAX_REPORT_BYTES`].
pub fn load(path: &Path, pad: u64) -> Result<Loaded, MergeError> {
    let text = fp8_report::read_text(path)?;
    parse(&text, path, pad)
}

/// Parses report text of either format.
pub fn parse(text: &str, path: &Path, pad: u64) -> Result<Loaded, MergeError> {
    let fmt = |message: String| MergeError::Format {
        file: path.into(),
        message,
    };
    if text.trim().is_empty() {
        return Err(MergeError::Empty {
            file: path.into(),
            problem: "the report is empty".into(),
        });
    }
    let v: Value = serde_json::from_str(text).map_err(|e| fmt(format!("not valid JSON: {e}")))?;
    match v {
        Value::Array(items) => crate::reference::parse(&items, path, pad),
        Value::Object(_) => ours(fp8_report::from_value(v, path)?, path),
        _ => Err(fmt("neither a report object nor a list of results".into())),
    }
}

fn ours(r: Report, path: &Path) -> Result<Loaded, MergeError> {
    let origin = Origin {
        device: r.provenance.device.name.clone(),
        recipe: r.provenance.recipe.clone(),
        estimated: r.estimated,
        model: r.provenance.model.clone(),
        recompute: Some(r.provenance.recompute),
        tp_comm: Some(r.provenance.tp_comm),
        tps: r.points.iter().map(|p| p.tp).filter(|&t| t > 1).collect(),
        timing: r.provenance.timing.clone(),
        models: r
            .points
            .iter()
            .map(|p| {
                (
                    p.component.clone(),
                    BTreeSet::from([r.provenance.model.clone()]),
                )
            })
            .collect(),
    };
    let mut samples = Vec::new();
    let mut not_ok = Vec::new();
    let mut has_bf16 = false;
    let mut has_fp8 = false;
    for p in &r.points {
        let what = p.describe();
        has_bf16 |= p.bf16.is_some();
        has_fp8 |= p.fp8.is_some();
        if p.status != Status::Ok {
            not_ok.push(
                format!(
                    "{what}: {:?} {}",
                    p.status,
                    p.reason.clone().unwrap_or_default()
                )
                .to_lowercase(),
            );
            continue;
        }
        // `fp8_report` checked the timings; a point with one precision is from a one-precision
        // report, refused below.
        let (Some(b), Some(f)) = (p.bf16, p.fp8) else {
            continue;
        };
        let par = if p.module_kind.is_grouped() {
            ParKey::Grouped(p.etp, p.num_gemms)
        } else {
            ParKey::Tp(p.tp)
        };
        let curve = match &p.split_mode {
            Some(s) => format!("{} [{s}]", p.module),
            None => p.module.clone(),
        };
        samples.push(Sample {
            key: GroupKey {
                component: p.component.clone(),
                kind: p.module_kind,
                ub_name: if p.module_kind.is_grouped() {
                    None
                } else {
                    p.ub_name.clone()
                },
                par,
            },
            curve,
            tokens: p.tokens,
            bf16: b.total_ms,
            fp8: f.total_ms,
            launches: Some((b.launches, f.launches)),
            has_spread: !r.estimated,
            gpu: b.gpu_total_ms.zip(f.gpu_total_ms),
            instances: p.instances,
            shape: Some(fp8_policy::GemmShape {
                in_features: p.in_features,
                out_features: p.out_features,
            }),
        });
    }
    if r.points.is_empty() {
        return Err(MergeError::Empty {
            file: path.into(),
            problem: "the report has no points".into(),
        });
    }
    // A report whose every point was skipped (a rank whose device failed) has neither; its
    // points come back as warnings. Only one precision measured is a mistake.
    if has_fp8 != has_bf16 {
        let only = if has_bf16 { "BF16" } else { "FP8" };
        return Err(MergeError::Empty {
            file: path.into(),
            problem: format!(
                "the report has only {only} timings; fix: benchmark with --precisions bf16,fp8"
            ),
        });
    }
    let shard = r.provenance.shard.as_ref().map(|sh| {
        let present: std::collections::BTreeSet<PointId> =
            r.points.iter().map(fp8_report::Point::id).collect();
        ShardInfo {
            rank: sh.rank,
            world: sh.world_size,
            digest: sh.sweep_digest.clone(),
            absent: sh
                .point_ids
                .iter()
                .filter(|id| !present.contains(*id))
                .cloned()
                .collect(),
        }
    });
    Ok(Loaded {
        file: path.into(),
        origin,
        samples,
        unpaired: Vec::new(),
        not_ok,
        shard,
    })
}
