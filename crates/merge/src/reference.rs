//! The reference tool's report: a JSON list of results, one per (case, precision, token count).
//!
//! Results are paired as the reference pairs them: by case, i.e. `case_name` plus `model_name`
//! (which carries the sweep's seq x mbs, `qwen_s4096_b2`). One sweep holds several cases with the
//! same token count (8192 = 8192x1 = 4096x2 = 2048x4), so pairing by token count alone loses
//! results. Within a case, FP8 token counts are padded (to 16, and per expert split for grouped
//! GEMMs), so they do not equal the BF16 counts; the reference paired by equality there too and
//! never emitted a MoE rule. We pair each FP8 result with the largest BF16 count of the same case
//! that is not above it, provided the gap is at most what padding can add (`num_gemms x pad`), and
//! key the pair by the BF16 (logical) count. Reports without cases pair the same way per module.
//! Everything left unpaired is reported.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use fp8_policy::ModuleKind;
use serde_json::Value;

use crate::error::MergeError;
use crate::sample::{GroupKey, Loaded, Origin, ParKey, Sample, check_stat};
use fp8_report::Stat;

struct Row {
    index: usize,
    curve: String,
    /// `case_name` and `model_name`: what the reference pairs by.
    case: (String, String),
    key: GroupKey,
    fp8: bool,
    tokens: u64,
    total_ms: f64,
    num_gemms: u32,
}

fn field<'a>(o: &'a serde_json::Map<String, Value>, k: &str) -> Option<&'a Value> {
    o.get(k).filter(|v| !v.is_null())
}

/// The model without the sweep's `_s<seq>_b<mbs>` suffix: `qwen2_5_72b_s4096_b2` -> `qwen2_5_72b`.
pub(crate) fn base_model(name: &str) -> &str {
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if let Some((head, mbs)) = name.rsplit_once("_b")
        && digits(mbs)
        && let Some((base, seq)) = head.rsplit_once("_s")
        && digits(seq)
    {
        return base;
    }
    name
}

fn component_of(model: &str, case: &str) -> &'static str {
    let t = format!("{model} {case}").to_ascii_lowercase();
    if ["vit", "visual", "vision", "image_encoder"]
        .iter()
        .any(|w| t.contains(w))
    {
        "vit"
    } else {
        "llm"
    }
}

pub(crate) fn parse(items: &[Value], path: &Path, pad: u64) -> Result<Loaded, MergeError> {
    if items.is_empty() {
        return Err(MergeError::Empty {
            file: path.into(),
            problem: "the report has no results".into(),
        });
    }
    let mut models: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let rows = items
        .iter()
        .enumerate()
        .map(|(index, item)| read_row(index, item, path, &mut models))
        .collect::<Result<Vec<_>, _>>()?;
    let (samples, unpaired) = pair(&rows, path, pad)?;
    if samples.is_empty() {
        return Err(no_pairs(&rows, unpaired.len(), path));
    }
    Ok(Loaded {
        file: path.into(),
        origin: Origin {
            device: String::new(),
            recipe: String::new(),
            estimated: false,
            model: models
                .values()
                .flatten()
                .cloned()
                .collect::<BTreeSet<_>>()
                .into_iter()
                .collect::<Vec<_>>()
                .join("+"),
            models,
            recompute: None,
            tp_comm: None,
            tps: BTreeSet::new(),
            timing: "reference-eager".to_owned(),
        },
        samples,
        unpaired,
        not_ok: Vec::new(),
        shard: None,
    })
}

/// One result of the list, its model noted under its component.
fn read_row(
    index: usize,
    item: &Value,
    path: &Path,
    models: &mut BTreeMap<String, BTreeSet<String>>,
) -> Result<Row, MergeError> {
    let bad = |problem: String| MergeError::Point {
        file: path.into(),
        index,
        what: "reference result".into(),
        problem,
    };
    let o = item
        .as_object()
        .ok_or_else(|| bad("not an object".into()))?;
    let s = |k: &str| field(o, k).and_then(Value::as_str).map(str::to_owned);
    let n = |k: &str| field(o, k).and_then(Value::as_u64);
    let kind: ModuleKind = s("module_kind")
        .ok_or_else(|| bad("missing module_kind".into()))?
        .parse()
        .map_err(|e| bad(format!("{e}")))?;
    let precision = s("precision").ok_or_else(|| bad("missing precision".into()))?;
    let fp8 = match precision.as_str() {
        "fp8" => true,
        "bf16" => false,
        other => return Err(bad(format!("unknown precision `{other}`"))),
    };
    let tokens = n("num_tokens").ok_or_else(|| bad("missing or non-integer num_tokens".into()))?;
    let total_ms = field(o, "total_ms")
        .and_then(Value::as_f64)
        .ok_or_else(|| bad("missing total_ms".into()))?;
    let model_name = s("model_name").unwrap_or_default();
    let case = s("case_name").unwrap_or_default();
    let component = component_of(&model_name, &case);
    if !model_name.is_empty() {
        models
            .entry(component.to_owned())
            .or_default()
            .insert(base_model(&model_name).to_owned());
    }
    let tp = n("tp_size").unwrap_or(1) as u32;
    let etp = n("etp_size").unwrap_or(1) as u32;
    let num_gemms = n("num_gemms").unwrap_or(1) as u32;
    let par = if kind.is_grouped() {
        ParKey::Grouped(etp, num_gemms)
    } else {
        ParKey::Tp(tp)
    };
    let curve = s("module_name")
        .filter(|m| !m.is_empty())
        .unwrap_or_else(|| case.clone());
    Ok(Row {
        index,
        case: (case, model_name),
        curve,
        key: GroupKey {
            component: component.to_owned(),
            kind,
            ub_name: if kind.is_grouped() {
                None
            } else {
                s("ub_name")
            },
            par,
        },
        fp8,
        tokens,
        total_ms,
        num_gemms,
    })
}

/// BF16 and FP8 results paired as the reference pairs them: by key, curve and case, then each
/// FP8 result with the largest unused BF16 count at most `num_gemms x pad` below it.
fn pair(rows: &[Row], path: &Path, pad: u64) -> Result<(Vec<Sample>, Vec<String>), MergeError> {
    type Pairs<'a> = (Vec<&'a Row>, Vec<&'a Row>);
    type CaseKey = (GroupKey, String, (String, String));
    let mut by_case: BTreeMap<CaseKey, Pairs<'_>> = BTreeMap::new();
    for r in rows {
        let e = by_case
            .entry((r.key.clone(), r.curve.clone(), r.case.clone()))
            .or_default();
        if r.fp8 { e.1.push(r) } else { e.0.push(r) }
    }
    let mut samples = Vec::new();
    let mut unpaired = Vec::new();
    for ((key, curve, _case), (mut bf, fp)) in by_case {
        bf.sort_by_key(|r| r.tokens);
        let mut used = vec![false; bf.len()];
        for f in fp {
            let gap = u64::from(f.num_gemms.max(1)) * pad;
            let best = bf
                .iter()
                .enumerate()
                .rev()
                .find(|(_, b)| b.tokens <= f.tokens && f.tokens - b.tokens <= gap);
            match best {
                Some((i, b)) if !used[i] => {
                    used[i] = true;
                    let what = format!("{curve} tokens {}", b.tokens);
                    let (bs, fs) = (Stat::exact(b.total_ms), Stat::exact(f.total_ms));
                    check_stat(&bs, path, b.index, &what, "bf16")?;
                    check_stat(&fs, path, f.index, &what, "fp8")?;
                    samples.push(Sample {
                        key: key.clone(),
                        curve: curve.clone(),
                        tokens: b.tokens,
                        bf16: bs,
                        fp8: fs,
                        launches: None,
                        has_spread: false,
                        gpu: None,
                        instances: None,
                        shape: None,
                    });
                }
                _ => unpaired.push(format!(
                    "{curve}: fp8 at {} tokens (result {}) has no bf16 partner within {gap} tokens",
                    f.tokens, f.index
                )),
            }
        }
        for (i, b) in bf.iter().enumerate() {
            if !used[i] {
                unpaired.push(format!(
                    "{curve}: bf16 at {} tokens (result {}) has no fp8 partner",
                    b.tokens, b.index
                ));
            }
        }
    }
    Ok((samples, unpaired))
}

/// Why no pair formed: one precision only, or none within the padding.
fn no_pairs(rows: &[Row], unpaired: usize, path: &Path) -> MergeError {
    let has_fp8 = rows.iter().any(|r| r.fp8);
    let has_bf16 = rows.iter().any(|r| !r.fp8);
    let problem = if !has_fp8 || !has_bf16 {
        format!(
            "the report has only {} results; fix: benchmark both precisions",
            if has_bf16 { "bf16" } else { "fp8" }
        )
    } else {
        format!("no bf16/fp8 pair could be formed ({unpaired} unpaired results)")
    };
    MergeError::Empty {
        file: path.into(),
        problem,
    }
}
