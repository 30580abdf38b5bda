//! Reading and checking our report format.

use std::fmt;
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::report::{REPORT_FORMAT, REPORT_VERSION, Report, Stat, Status, Timing};

/// Largest report we read: a full sweep is a few MiB; this leaves room for 50x that.
pub const MAX_REPORT_BYTES: u64 = 64 * 1024 * 1024;

/// What is wrong with a report.
#[derive(Debug)]
#[non_exhaustive]
pub enum ReportErrorKind {
    /// The file could not be read (or is not a regular file, or too large).
    Io(fp8_io::Error),
    /// Not JSON.
    NotJson(String),
    /// JSON, but not our report (or a version we do not read).
    Format(String),
    /// A document of another of our formats (the step model's inputs, the step benchmark's
    /// results) that breaks its rules: the message names the field and the fix.
    Document(String),
    /// One point breaks the format's rules.
    Point {
        /// Index of the point in `points`.
        index: usize,
        /// The point in words.
        what: String,
        /// What is wrong.
        problem: String,
    },
}

/// A report that could not be read. The message names the file, the point and the fix.
#[derive(Debug)]
pub struct ReportError {
    file: PathBuf,
    kind: ReportErrorKind,
}

impl ReportError {
    pub(crate) fn new(file: &Path, kind: ReportErrorKind) -> Self {
        ReportError {
            file: file.to_path_buf(),
            kind,
        }
    }

    /// The report file.
    pub fn file(&self) -> &Path {
        &self.file
    }

    /// What is wrong.
    pub fn kind(&self) -> &ReportErrorKind {
        &self.kind
    }

    /// True unless the system failed (a permission or disk error): the input was bad.
    pub fn is_user_input(&self) -> bool {
        match &self.kind {
            ReportErrorKind::Io(e) => e.is_user_input(),
            _ => true,
        }
    }
}

impl fmt::Display for ReportError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let file = self.file.display();
        match &self.kind {
            ReportErrorKind::Io(e) => write!(f, "{e}"),
            ReportErrorKind::NotJson(m) => write!(
                f,
                "{file}: not valid JSON: {m}; fix: pass a report written by `fp8sel bench`"
            ),
            ReportErrorKind::Format(m) => write!(
                f,
                "{file}: {m}; fix: pass a report written by `fp8sel bench` (format \"{REPORT_FORMAT}\") \
                 or by the reference tool (a JSON list of results)"
            ),
            ReportErrorKind::Document(m) => write!(f, "{file}: {m}"),
            ReportErrorKind::Point {
                index,
                what,
                problem,
            } => write!(
                f,
                "{file}: points[{index}] ({what}): {problem}; fix: re-run the benchmark for this point \
                 (fp8sel bench --resume re-measures what is missing)"
            ),
        }
    }
}

impl std::error::Error for ReportError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match &self.kind {
            ReportErrorKind::Io(e) => Some(e),
            _ => None,
        }
    }
}

/// Reads the text of a report file, bounded by [`MAX_REPORT_BYTES`]; FIFOs and devices are
/// refused at once.
pub fn read_text(path: &Path) -> Result<String, ReportError> {
    fp8_io::read_to_string_limited(path, MAX_REPORT_BYTES)
        .map_err(|e| ReportError::new(path, ReportErrorKind::Io(e)))
}

/// Reads and checks a report file.
pub fn read(path: &Path) -> Result<Report, ReportError> {
    parse(&read_text(path)?, path)
}

/// Parses and checks report text; `path` names it in errors.
pub fn parse(text: &str, path: &Path) -> Result<Report, ReportError> {
    let v: Value = serde_json::from_str(text)
        .map_err(|e| ReportError::new(path, ReportErrorKind::NotJson(e.to_string())))?;
    from_value(v, path)
}

/// True when a JSON value claims to be our report (its `format` field), whatever its version.
pub fn is_ours(v: &Value) -> bool {
    v.get("format").and_then(Value::as_str) == Some(REPORT_FORMAT)
}

/// Checks the format and version of a parsed JSON value, then every point.
pub fn from_value(v: Value, path: &Path) -> Result<Report, ReportError> {
    let format = |m: String| ReportError::new(path, ReportErrorKind::Format(m));
    if !v.is_object() {
        return Err(format("not a JSON object".into()));
    }
    if !is_ours(&v) {
        return Err(format(format!(
            "a JSON object without \"format\": \"{REPORT_FORMAT}\""
        )));
    }
    let version = v.get("report_version").and_then(Value::as_u64);
    if version != Some(u64::from(REPORT_VERSION)) {
        return Err(format(format!(
            "unsupported report_version {}; this fp8sel reads {REPORT_VERSION}",
            version.map_or_else(|| "(missing)".to_owned(), |v| v.to_string())
        )));
    }
    let r: Report =
        from_value_at(v).map_err(|e| format(format!("malformed fp8sel report: {e}")))?;
    r.check(path)?;
    Ok(r)
}

impl Report {
    /// Checks what serde cannot: sizes of at least 1, timings that are positive and ordered
    /// (p10 <= median <= p90), and an `ok` point carrying every precision the report measured.
    pub fn check(&self, path: &Path) -> Result<(), ReportError> {
        let has = |f: fn(&crate::report::Point) -> bool| self.points.iter().any(f);
        let (bf16, fp8) = (has(|p| p.bf16.is_some()), has(|p| p.fp8.is_some()));
        for (index, p) in self.points.iter().enumerate() {
            let bad = |problem: String| {
                ReportError::new(
                    path,
                    ReportErrorKind::Point {
                        index,
                        what: p.describe(),
                        problem,
                    },
                )
            };
            for (name, v) in [("tp", p.tp), ("etp", p.etp), ("num_gemms", p.num_gemms)] {
                if v == 0 {
                    return Err(bad(format!("{name} is 0; parallel sizes start at 1")));
                }
            }
            if p.tokens == 0 {
                return Err(bad("tokens is 0".into()));
            }
            if p.instances == Some(0) {
                return Err(bad(
                    "instances is 0; a measured module exists at least once per rank (drop the field if unknown)".into(),
                ));
            }
            if p.status != Status::Ok {
                continue;
            }
            for (prec, wanted, t) in [("bf16", bf16, p.bf16), ("fp8", fp8, p.fp8)] {
                match t {
                    Some(t) => check_timing(&t, prec).map_err(&bad)?,
                    None if wanted => {
                        return Err(bad(format!(
                            "status ok but no {prec} timing, while other points have one"
                        )));
                    }
                    None => {}
                }
            }
        }
        Ok(())
    }
}

fn check_timing(t: &Timing, prec: &str) -> Result<(), String> {
    check_stat(&t.total_ms, &format!("{prec}.total_ms"))
}

/// A stat must be positive, finite and ordered: p10 <= median <= p90.
pub fn check_stat(s: &Stat, what: &str) -> Result<(), String> {
    for (name, v) in [("median", s.median), ("p10", s.p10), ("p90", s.p90)] {
        if !(v.is_finite() && v > 0.0) {
            return Err(format!(
                "{what}.{name} is {v}, not a positive number of milliseconds"
            ));
        }
    }
    if !(s.p10 <= s.median && s.median <= s.p90) {
        return Err(format!(
            "{what}: p10 {} <= median {} <= p90 {} does not hold",
            s.p10, s.median, s.p90
        ));
    }
    Ok(())
}

/// One of our typed documents (the step model's inputs, the step benchmark's results): its
/// `format` and `version` checked, then the whole document as `T` (unknown fields refused by
/// `T`). `writer` names the program that writes it, `again` the fix for another version.
pub(crate) fn typed_document<T: serde::de::DeserializeOwned>(
    text: &str,
    path: &Path,
    (format, version): (&str, u32),
    writer: &str,
    again: &str,
) -> Result<T, ReportError> {
    let err = |m: String| ReportError::new(path, ReportErrorKind::Document(m));
    let head: serde_json::Value =
        serde_json::from_str(text).map_err(|e| err(format!("not valid JSON: {e}")))?;
    if head.get("format").and_then(|v| v.as_str()) != Some(format) {
        return Err(err(format!(
            "format: expected \"{format}\" (a file {writer} wrote)"
        )));
    }
    if head.get("version").and_then(|v| v.as_u64()) != Some(u64::from(version)) {
        return Err(err(format!(
            "version: this fp8sel reads version {version}; fix: {again}"
        )));
    }
    from_value_at(head).map_err(err)
}

/// A JSON value as `T`, its error naming the field it failed at (`results[0].tokens: invalid
/// type: string "x", expected u64`; serde alone names no field for a wrong type or value).
pub(crate) fn from_value_at<T: serde::de::DeserializeOwned>(v: Value) -> Result<T, String> {
    serde_path_to_error::deserialize(v).map_err(|e| {
        let at = e.path().to_string();
        if at == "." {
            e.inner().to_string()
        } else {
            format!("{at}: {}", e.inner())
        }
    })
}

/// A document's text, bounded by `max` bytes, its read error a report error: what every typed
/// reader here reads before it parses.
pub(crate) fn read_bounded(path: &Path, max: u64) -> Result<String, ReportError> {
    fp8_io::read_to_string_limited(path, max)
        .map_err(|e| ReportError::new(path, ReportErrorKind::Io(e)))
}

/// The JSON Schema of a typed document, pretty, as `docs/schemas/` holds it.
pub(crate) fn schema_of<T: schemars::JsonSchema>() -> String {
    serde_json::to_string_pretty(&schemars::schema_for!(T)).expect("a schema serializes") + "\n"
}
