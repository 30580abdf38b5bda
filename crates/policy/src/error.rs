//! Typed errors. Every message names the file, the JSON path and the fix.

use std::path::PathBuf;

/// Largest policy file we read. Real policies are a few kilobytes; anything this large is not a
/// policy, and reading it whole would only waste memory.
pub const MAX_POLICY_BYTES: u64 = 64 * 1024 * 1024;

/// Why a policy could not be loaded, validated, built or written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PolicyError {
    /// The file could not be read or written: missing, not a regular file (a FIFO, a device),
    /// larger than [`MAX_POLICY_BYTES`], not UTF-8, or an output that would replace an input.
    #[error(transparent)]
    File(#[from] fp8_io::Error),
    /// The file is empty (or only whitespace).
    #[error("{file}: file is empty; fix: regenerate it with `fp8sel merge-policy`")]
    Empty {
        /// The file concerned.
        file: PathBuf,
    },
    /// The file is not valid JSON.
    #[error(
        "{file}: not valid JSON at line {line}, column {column}: {message}; \
         fix: repair the syntax or regenerate it with `fp8sel merge-policy`"
    )]
    NotJson {
        /// The file concerned.
        file: PathBuf,
        /// 1-based line of the syntax error.
        line: usize,
        /// 1-based column of the syntax error.
        column: usize,
        /// The parser's message.
        message: String,
    },
    /// The JSON is well formed but breaks the schema.
    #[error("{file}: {path}: {problem}; fix: {}", problem.fix())]
    Invalid {
        /// The file concerned (`<memory>` for in-memory input).
        file: PathBuf,
        /// JSON path of the offending value, for example `rules.row.fc2[1].tp`.
        path: String,
        /// What is wrong.
        problem: Problem,
    },
}

/// What is wrong with a value in a policy document.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum Problem {
    /// A required key is absent.
    #[error("missing required key `{0}`")]
    MissingKey(&'static str),
    /// A value has the wrong JSON type.
    #[error("expected {expected}, found {found}")]
    WrongType {
        /// What the schema wants.
        expected: &'static str,
        /// What the file has.
        found: String,
    },
    /// `version` is not one this library reads.
    #[error("unsupported policy version {0}; this library reads version 1")]
    UnsupportedVersion(String),
    /// A count is negative or fractional.
    #[error("expected a non-negative integer, found {0}")]
    NotACount(String),
    /// `tp`, `etp` or `num_gemms` is zero.
    #[error("must be at least 1, found 0")]
    Zero,
    /// A count does not fit the integer type.
    #[error("value {0} is out of range")]
    OutOfRange(String),
    /// A speedup or threshold is NaN, infinite, zero or negative.
    #[error("expected a finite number above 0, found {0}")]
    BadRatio(String),
    /// A key under `rules` names no module kind.
    #[error(
        "unknown module kind `{0}`; expected one of layernorm_column, column, row, duplicated, \
         column_grouped, row_grouped"
    )]
    UnknownKind(String),
    /// A dense kind is a flat list: the pre-`ub_name` format.
    #[error("dense kind `{0}` is a flat list, which is the older policy format")]
    FlatDenseList(String),
    /// A grouped kind is not a flat list.
    #[error("grouped kind `{0}` must be a flat list of rules")]
    GroupedNotList(String),
    /// Two rules share one lookup key.
    #[error("duplicate rule for {key}, first defined at {first}")]
    Duplicate {
        /// The lookup key both rules have.
        key: String,
        /// Path of the first rule with that key.
        first: String,
    },
    /// A JSON object holds the same key twice (JSON parsers keep the last one silently).
    #[error("`{parent}` holds the key `{key}` twice: its keys #{first} and #{second}")]
    DuplicateKey {
        /// The key.
        key: String,
        /// JSON path of the object.
        parent: String,
        /// Position of the first occurrence among the object's keys (1-based).
        first: usize,
        /// Position of the second.
        second: usize,
    },
    /// A rule carries a key the schema does not know.
    #[error("unknown key `{0}` in a rule")]
    UnknownRuleKey(String),
    /// An empty `ub_name`.
    #[error("empty ub_name")]
    EmptyUbName,
    /// A `recipes` plan that breaks its schema (docs/POLICY.md, "Per-module recipes").
    #[error("{0}")]
    RecipePlan(String),
}

impl Problem {
    /// The one-line fix shown to the user.
    pub fn fix(&self) -> &'static str {
        match self {
            Problem::MissingKey(_) => {
                "add the key, or regenerate the policy with `fp8sel merge-policy`"
            }
            Problem::WrongType { .. } => {
                "write the value with the type the schema gives (docs/POLICY.md)"
            }
            Problem::UnsupportedVersion(_) => {
                "set \"version\": 1, or regenerate the policy with this version of fp8sel"
            }
            Problem::NotACount(_) | Problem::OutOfRange(_) => "write a whole, non-negative number",
            Problem::Zero => "parallel sizes and num_gemms start at 1",
            Problem::BadRatio(_) => "write a positive, finite ratio such as 1.0",
            Problem::UnknownKind(_) => {
                "rename the key to one of the six module kinds, or remove it"
            }
            Problem::FlatDenseList(_) => {
                "re-run `fp8sel merge-policy` on the benchmark reports to get the nested {ub_name: [rules]} format"
            }
            Problem::GroupedNotList(_) => {
                "write the grouped kind as a list of {etp, num_gemms, min_tokens, measured_speedup}"
            }
            Problem::Duplicate { .. } => {
                "keep one rule per key (the reference loader silently used the last one)"
            }
            Problem::DuplicateKey { .. } => {
                "merge the two entries into one (a JSON reader would silently keep only the last)"
            }
            Problem::UnknownRuleKey(_) => {
                "remove the key or fix its spelling (tp, etp, num_gemms, min_tokens, measured_speedup)"
            }
            Problem::EmptyUbName => {
                "use the module's TE tp-comm buffer name (qkv, proj, fc1, fc2, ...)"
            }
            Problem::RecipePlan(_) => {
                "write `recipes` as {base, max_quant_error, keys: [{key, eager, graphed}]} with steps [{from, recipe}] in rising `from` (docs/POLICY.md, \"Per-module recipes\"), or regenerate it with `fp8sel gen-policy --recipes`"
            }
        }
    }
}
