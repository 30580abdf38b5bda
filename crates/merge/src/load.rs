//! Reading reports: ours, or the reference tool's list of results, into uniform samples.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use fp8_policy::ModuleKind;
use serde_json::Value;

use crate::error::MergeError;
use crate::report::{REPORT_FORMAT, REPORT_VERSION, Report, Stat, Status};

/// Largest report we read (a full sweep is a few MiB).
const MAX_REPORT_BYTES: u64 = 512 * 1024 * 1024;

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
    /// Model name.
    pub model: String,
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
    pub absent: Vec<String>,
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

/// Reads a report file of either format.
pub fn load(path: &Path, pad: u64) -> Result<Loaded, MergeError> {
    let io = |source| MergeError::Io {
        file: path.into(),
        source,
    };
    let meta = std::fs::metadata(path).map_err(io)?;
    if meta.len() > MAX_REPORT_BYTES {
        return Err(MergeError::Format {
            file: path.into(),
            message: format!("{} bytes is larger than any report", meta.len()),
        });
    }
    let text = std::fs::read_to_string(path).map_err(io)?;
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
    match &v {
        Value::Object(m) if m.get("format").and_then(Value::as_str) == Some(REPORT_FORMAT) => {
            let version = m.get("report_version").and_then(Value::as_u64);
            if version != Some(u64::from(REPORT_VERSION)) {
                return Err(fmt(format!(
                    "unsupported report_version {:?}; this fp8sel reads {REPORT_VERSION}",
                    version
                )));
            }
            let r: Report = serde_json::from_value(v)
                .map_err(|e| fmt(format!("malformed fp8sel report: {e}")))?;
            ours(r, path)
        }
        Value::Array(items) => crate::reference::parse(items, path, pad),
        Value::Object(_) => Err(fmt(
            "a JSON object without \"format\": \"fp8sel-report\"".into()
        )),
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
    for (name, v) in [("median", s.median), ("p10", s.p10), ("p90", s.p90)] {
        if !(v.is_finite() && v > 0.0) {
            return Err(MergeError::Point {
                file: file.into(),
                index,
                what: what.to_owned(),
                problem: format!(
                    "{which} {name} time is {v}, not a positive number of milliseconds"
                ),
            });
        }
    }
    Ok(())
}

fn ours(r: Report, path: &Path) -> Result<Loaded, MergeError> {
    let origin = Origin {
        device: r.provenance.device.name.clone(),
        recipe: r.provenance.recipe.clone(),
        estimated: r.estimated,
        model: r.provenance.model.clone(),
    };
    let mut samples = Vec::new();
    let mut not_ok = Vec::new();
    let mut has_bf16 = false;
    let mut has_fp8 = false;
    for (i, p) in r.points.iter().enumerate() {
        let what = format!("{} {} tokens {}", p.component, p.module, p.tokens);
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
        let (Some(b), Some(f)) = (p.bf16, p.fp8) else {
            continue;
        };
        check_stat(&b.total_ms, path, i, &what, "bf16")?;
        check_stat(&f.total_ms, path, i, &what, "fp8")?;
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
    let shard = r.provenance.extra.get("shard").map(|v| {
        let present: std::collections::BTreeSet<String> = r
            .points
            .iter()
            .map(|p| {
                // Must match `fp8_bench::shard::point_id`.
                format!(
                    "{}/{}/{}/{}/{}x{}x{}",
                    p.component,
                    p.module,
                    p.split_mode.clone().unwrap_or_default(),
                    p.tokens,
                    p.in_features,
                    p.out_features,
                    p.num_gemms
                )
            })
            .collect();
        let ids: Vec<String> = v["point_ids"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|x| x.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default();
        ShardInfo {
            rank: v["rank"].as_u64().unwrap_or(0) as usize,
            world: v["world_size"].as_u64().unwrap_or(1) as usize,
            digest: v["sweep_digest"].as_str().unwrap_or_default().to_owned(),
            absent: ids.into_iter().filter(|id| !present.contains(id)).collect(),
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
