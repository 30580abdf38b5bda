//! Reading reports: ours, or the reference tool's list of results, into uniform samples.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use fp8_policy::ModuleKind;
use fp8_report::{PointId, Report, Stat, Status};
use serde_json::Value;

use crate::error::MergeError;

/// The parallel part of a rule key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ParKey {
    /// Dense kinds: tensor-parallel size.
    Tp(u32),
    /// Grouped kinds: (etp, num_gemms).
    Grouped(u32, u32),
}

/// A rule key with its component: what one policy rule is for.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct GroupKey {
    /// `llm` or `vit`: never pooled.
    pub component: String,
    /// Module kind.
    pub kind: ModuleKind,
    /// TE buffer name (dense kinds; `None` for grouped kinds).
    pub ub_name: Option<String>,
    /// Parallel key.
    pub par: ParKey,
}

/// One BF16/FP8 pair at one logical token count.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// The rule it informs.
    pub key: GroupKey,
    /// The curve inside the key: module name and expert split. Modules sharing a key (a dense
    /// fc2 and a shared-expert fc2 at the same TP) are separate curves, and a rule must hold for
    /// all of them.
    pub curve: String,
    /// Logical token count.
    pub tokens: u64,
    /// BF16 step time.
    pub bf16: Stat,
    /// FP8 step time.
    pub fp8: Stat,
    /// Kernel launches per step (BF16, FP8), when known.
    pub launches: Option<(u32, u32)>,
    /// True when the stats have a real spread (p10/p90 measured).
    pub has_spread: bool,
    /// GPU busy time (BF16, FP8) beside eager `bf16`/`fp8` times, when the report has both
    /// (the TE backend).
    pub gpu: Option<(Stat, Stat)>,
    /// Instances of the module per rank (the report's `instances`), when known.
    pub instances: Option<u64>,
}

/// What a report says about where it came from.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Origin {
    /// Device name.
    pub device: String,
    /// Recipe.
    pub recipe: String,
    /// Cost-model estimate.
    pub estimated: bool,
    /// Model name (several joined by `+`).
    pub model: String,
    /// The models per component (`llm`, `vit`); a component with two is a mixed report.
    pub models: BTreeMap<String, BTreeSet<String>>,
    /// Whether the forward was recomputed in the backward; `None` when the report does not say
    /// (the reference tool's list format).
    pub recompute: Option<bool>,
    /// Whether TP communication was in the times (`adaptive_fp8.te_tp`); `None` when the report
    /// does not say (the reference tool's list format).
    pub tp_comm: Option<bool>,
    /// The TP sizes above 1 of its points (only those differ with and without communication).
    pub tps: BTreeSet<u32>,
    /// What `total_ms` is: `gpu` (GPU time: the cuda backend), `model` (estimated GPU time),
    /// `te-eager` (an eager step, host included; GPU time beside it), `reference-eager` (the
    /// reference tool's synchronized eager iterations).
    pub timing: String,
}

/// A partial report of a sharded sweep (one rank of a torchrun/Slurm launch).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardInfo {
    /// This report's rank.
    pub rank: usize,
    /// Number of ranks.
    pub world: usize,
    /// Identifies the sweep the shards belong to.
    pub digest: String,
    /// Points the rank was assigned that its report does not contain.
    pub absent: Vec<PointId>,
}

/// A loaded report.
#[derive(Debug, Clone)]
pub struct Loaded {
    /// The file.
    pub file: PathBuf,
    /// Provenance.
    pub origin: Origin,
    /// Usable samples.
    pub samples: Vec<Sample>,
    /// Points that could not be paired (reference format), in words.
    pub unpaired: Vec<String>,
    /// Points skipped or failed in the sweep, in words.
    pub not_ok: Vec<String>,
    /// Set when the report is one shard of a sharded sweep.
    pub shard: Option<ShardInfo>,
}

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

pub(crate) fn check_stat(
    s: &Stat,
    file: &Path,
    index: usize,
    what: &str,
    which: &str,
) -> Result<(), MergeError> {
    fp8_report::check_stat(s, which).map_err(|problem| MergeError::Point {
        file: file.into(),
        index,
        what: what.to_owned(),
        problem,
    })
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

/// Groups samples by key, sorted, for the merge.
pub fn by_key(samples: &[Sample]) -> BTreeMap<GroupKey, Vec<&Sample>> {
    let mut m: BTreeMap<GroupKey, Vec<&Sample>> = BTreeMap::new();
    for s in samples {
        m.entry(s.key.clone()).or_default().push(s);
    }
    m
}
