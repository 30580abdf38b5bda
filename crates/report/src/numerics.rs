//! The numerics report (format `fp8sel-numerics`, version 1): what `python -m
//! adaptive_fp8.bench.numerics` writes from real training steps, per TE module and per GEMM operand
//! (`input`, `weight`, `grad_output`): the relative RMS error of the FP8 round trip against the
//! BF16 tensor, and the shares of elements that underflow to zero and that saturate. The parser
//! is the only reader; the bound a merge applies with it is `fp8_merge::numerics`'.
//!
//! ```json
//! {"format": "fp8sel-numerics", "version": 1, "model": "llama3_2_1b", "recipe": "blockwise",
//!  "modules": [{"component": "llm", "name": "decoder.layers.mlp.linear_fc2",
//!               "key": {"kind": "row", "ub_name": "fc2", "tp": 1},
//!               "operands": {"input": {"rel_rms": 0.031, "underflow": 0.0, "saturated": 0.0}}}]}
//! ```

use std::path::{Path, PathBuf};

use fp8_policy::RuleKey;
use serde_json::Value;

use crate::read::{ReportError, ReportErrorKind};

/// The format name in a numerics report.
pub const NUMERICS_FORMAT: &str = "fp8sel-numerics";
/// The only version read.
pub const NUMERICS_VERSION: u64 = 1;
/// Largest numerics report read.
pub const MAX_NUMERICS_BYTES: u64 = 16 * 1024 * 1024;

/// One operand's error statistics.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct OperandError {
    /// Relative RMS error of the FP8 round trip.
    pub rel_rms: f64,
    /// Share of non-zero elements that became zero.
    pub underflow: f64,
    /// Share of elements at the format's largest magnitude.
    pub saturated: f64,
}

/// One module's errors.
#[derive(Debug, Clone, PartialEq)]
pub struct ModuleNumerics {
    /// `llm` or `vit`.
    pub component: String,
    /// The module group (`decoder.layers.mlp.linear_fc2`).
    pub name: String,
    /// Its policy key.
    pub key: RuleKey,
    /// `(operand, error)` in the report's order.
    pub operands: Vec<(String, OperandError)>,
}

impl ModuleNumerics {
    /// The operand with the largest relative RMS error.
    pub fn worst(&self) -> Option<(&str, f64)> {
        self.operands
            .iter()
            .map(|(n, e)| (n.as_str(), e.rel_rms))
            .max_by(|a, b| a.1.total_cmp(&b.1))
    }
}

/// A parsed numerics report.
#[derive(Debug, Clone, PartialEq)]
pub struct NumericsReport {
    /// The file.
    pub file: PathBuf,
    /// The recipe the errors were measured with (the report's `recipe`), where it says.
    pub recipe: Option<fp8_policy::Recipe>,
    /// The modules.
    pub modules: Vec<ModuleNumerics>,
}

fn bad(file: &Path, field: &str, problem: impl Into<String>) -> ReportError {
    ReportError::new(
        file,
        ReportErrorKind::Document(format!("field `{field}`: {}", problem.into())),
    )
}

fn share(v: &Value, file: &Path, field: &str) -> Result<f64, ReportError> {
    match v.as_f64() {
        Some(x) if (0.0..=1.0).contains(&x) => Ok(x),
        _ => Err(bad(
            file,
            field,
            format!("{v} is not a share between 0 and 1"),
        )),
    }
}

/// Parses a numerics report (the caller reads the file, bounded by [`MAX_NUMERICS_BYTES`]).
pub fn parse_numerics(text: &str, file: &Path) -> Result<NumericsReport, ReportError> {
    let v: Value = serde_json::from_str(text)
        .map_err(|e| bad(file, "(top level)", format!("not JSON ({e})")))?;
    if v.get("format").and_then(Value::as_str) != Some(NUMERICS_FORMAT) {
        return Err(bad(
            file,
            "format",
            format!(
                "not \"{NUMERICS_FORMAT}\"; fix: pass the report `python -m adaptive_fp8.bench.numerics` wrote"
            ),
        ));
    }
    if v.get("version").and_then(Value::as_u64) != Some(NUMERICS_VERSION) {
        return Err(bad(
            file,
            "version",
            format!("only version {NUMERICS_VERSION} is read; fix: re-run the numerics probe"),
        ));
    }
    let list = v
        .get("modules")
        .and_then(Value::as_array)
        .ok_or_else(|| bad(file, "modules", "missing or not a list"))?;
    let mut modules = Vec::with_capacity(list.len());
    for (i, m) in list.iter().enumerate() {
        let at = |f: &str| format!("modules[{i}].{f}");
        let text = |f: &str| {
            m.get(f)
                .and_then(Value::as_str)
                .map(str::to_owned)
                .ok_or_else(|| bad(file, &at(f), "missing or not a string"))
        };
        let key: RuleKey = serde_json::from_value(m.get("key").cloned().unwrap_or(Value::Null))
            .map_err(|e| bad(file, &at("key"), e.to_string()))?;
        let ops = m
            .get("operands")
            .and_then(Value::as_object)
            .filter(|o| !o.is_empty())
            .ok_or_else(|| bad(file, &at("operands"), "missing or empty"))?;
        let mut operands = Vec::with_capacity(ops.len());
        for (name, o) in ops {
            let f = |k: &str| format!("modules[{i}].operands.{name}.{k}");
            let rel_rms = match o.get("rel_rms").and_then(Value::as_f64) {
                Some(x) if x.is_finite() && x >= 0.0 => x,
                _ => return Err(bad(file, &f("rel_rms"), "missing, negative or not finite")),
            };
            let zero = Value::from(0.0);
            operands.push((
                name.clone(),
                OperandError {
                    rel_rms,
                    underflow: share(o.get("underflow").unwrap_or(&zero), file, &f("underflow"))?,
                    saturated: share(o.get("saturated").unwrap_or(&zero), file, &f("saturated"))?,
                },
            ));
        }
        modules.push(ModuleNumerics {
            component: text("component")?,
            name: text("name")?,
            key,
            operands,
        });
    }
    let recipe = match v.get("recipe") {
        None | Some(Value::Null) => None,
        Some(r) => Some(r.as_str().and_then(|s| s.parse().ok()).ok_or_else(|| {
            bad(
                file,
                "recipe",
                format!("{r} is not a recipe name (blockwise, tensorwise, delayed, mxfp8, nvfp4)"),
            )
        })?),
    };
    Ok(NumericsReport {
        file: file.to_path_buf(),
        recipe,
        modules,
    })
}
