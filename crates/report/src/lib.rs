//! `fp8-report` owns the benchmark report format: the one file `fp8-bench` writes and
//! `fp8-merge` reads. Producer and consumer share these types, so neither copies the other's
//! conventions.
//!
//! - [`Report`], [`Point`], [`Provenance`] (with typed [`Shard`] data) and [`Stat`];
//! - [`PointId`]: the one identity of a point, used by the sweep, shards, `--resume` and the
//!   merge's coverage check;
//! - [`step_inputs`]: the step model's measurements (module groups alone, whole steps), typed;
//! - [`step_results`]: the step benchmark's results (every mode's rounds, each row's verdict),
//!   typed;
//! - [`numerics`]: the numerics probe's report (each module's FP8 round-trip error per operand);
//! - [`convergence`]: the convergence check's report (loss curves of BF16, all-FP8 and a policy);
//! - [`read`] / [`parse`] (bounded, checked: positive ordered timings, sizes of at least 1) and
//!   [`write`] (atomic).
//!
//! It measures nothing and merges nothing. The reference tool's list-of-results format is read by
//! `fp8-merge`, which pairs its results; this crate knows only ours.

pub mod convergence;
pub mod numerics;
mod point_id;
mod read;
mod report;
pub mod step_inputs;
pub mod step_results;

pub use point_id::{BadPointId, PointId, sweep_digest};
pub use read::{
    MAX_REPORT_BYTES, ReportError, ReportErrorKind, check_stat, from_value, is_ours, parse, read,
    read_text,
};
pub use report::{
    DeviceInfo, ParallelInfo, Point, Provenance, REPORT_FORMAT, REPORT_VERSION, Report, Shard,
    Stat, Status, Timing,
};

use std::path::Path;

/// Writes a report atomically, creating its directory.
pub fn write(report: &Report, path: &Path) -> Result<(), fp8_io::Error> {
    fp8_io::create_parent_dir(path)?;
    fp8_io::write_atomic(path, report.to_json().as_bytes())
}

/// True when a JSON text is one of the step model's or the step benchmark's documents
/// ([`crate::step_inputs`], [`crate::step_results`]): they share a folder with reports (`gen-policy
/// --out DIR` writes both under `DIR/reports/`) and have their own readers.
pub fn is_step_document(text: &str) -> bool {
    use step_inputs::{STEP_INPUTS_FORMAT, STEP_PLANS_FORMAT};
    use step_results::STEP_RESULTS_FORMAT;
    serde_json::from_str::<serde_json::Value>(text).is_ok_and(|v| {
        v.get("format")
            .and_then(serde_json::Value::as_str)
            .is_some_and(|f| {
                [STEP_INPUTS_FORMAT, STEP_PLANS_FORMAT, STEP_RESULTS_FORMAT].contains(&f)
            })
    })
}
