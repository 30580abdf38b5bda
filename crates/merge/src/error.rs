//! Merge errors: each names the report file and, where it applies, the point.

use std::path::PathBuf;

/// Why reports could not be merged.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MergeError {
    /// The report could not be read, or breaks our format's rules.
    #[error(transparent)]
    Report(#[from] fp8_report::ReportError),
    /// A policy could not be built, or a policy given to fold carries a record that does not
    /// read.
    #[error(transparent)]
    Policy(#[from] fp8_policy::PolicyError),
    /// A policy's provenance record (`provenance.step`) does not read.
    #[error(
        "{0}; fix: make the policy again with `fp8sel merge-policy --step` or `gen-policy --backend step`"
    )]
    Record(String),
    /// Not JSON, or neither our format nor the reference tool's.
    #[error(
        "{file}: {message}; fix: pass a report written by `fp8sel bench` (format \"fp8sel-report\") or by the reference tool (a JSON list of results)"
    )]
    Format {
        /// The report.
        file: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// A point is unusable.
    #[error("{file}: point {index} ({what}): {problem}; fix: re-run the benchmark for this point")]
    Point {
        /// The report.
        file: PathBuf,
        /// Index of the point in the report.
        index: usize,
        /// The point, in words.
        what: String,
        /// What is wrong.
        problem: String,
    },
    /// The report has nothing to merge.
    #[error("{file}: {problem}")]
    Empty {
        /// The report.
        file: PathBuf,
        /// What is missing.
        problem: String,
    },
    /// Reports from different devices or recipes.
    #[error(
        "reports disagree on {what}: {a} ({file_a}) vs {b} ({file_b}); fix: {}",
        mixed_fix(.what)
    )]
    Mixed {
        /// `model`, `device`, `recipe`, or `estimated`.
        what: &'static str,
        /// First value.
        a: String,
        /// Its file.
        file_a: PathBuf,
        /// Conflicting value.
        b: String,
        /// Its file.
        file_b: PathBuf,
    },
    /// A sharded sweep is incomplete.
    #[error(
        "{0}; fix: pass every rank's report, or re-run the missing ranks (fp8sel bench --resume measures only what is missing)"
    )]
    Shards(String),
    /// Invalid options.
    #[error("{0}")]
    Options(String),
    /// A merge setting that cannot make a policy, in the library's words (a front end names
    /// its own flag for `setting`).
    #[error("{setting}: {problem}")]
    Setting {
        /// Which setting.
        setting: Setting,
        /// What is wrong, and the fix.
        problem: String,
    },
}

/// A merge setting, as [`MergeError::Setting`] names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Setting {
    /// `MergeOptions::threshold`.
    SpeedupThreshold,
    /// `MergeOptions::margin`.
    Margin,
    /// `MergeOptions::host_floor_ms` against `host_profile`.
    HostFloors,
    /// `MergeOptions::host_profile`.
    HostProfile,
    /// `MergeOptions::trainer`.
    Trainer,
}

impl std::fmt::Display for Setting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Setting::SpeedupThreshold => "speedup threshold",
            Setting::Margin => "margin",
            Setting::HostFloors => "host floors",
            Setting::HostProfile => "host profile",
            Setting::Trainer => "trainer",
        })
    }
}

/// The fix for reports that disagree on `what`.
fn mixed_fix(what: &str) -> &'static str {
    match what {
        "TP communication" => {
            "give one report per TP size (the te_tp one has the communication in its times; drop the other), or pass --allow-mixed"
        }
        _ => "merge reports of one model, device and recipe, or pass --allow-mixed",
    }
}
