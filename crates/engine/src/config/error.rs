//! Config errors: the file, the field, and what to do.

use std::path::PathBuf;

/// Why a model config could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The file could not be read: missing, not a regular file (a FIFO, a device), too large,
    /// or not UTF-8.
    #[error(transparent)]
    File(#[from] fp8_io::Error),
    /// Not valid YAML/JSON.
    #[error("{file}: not valid {format}: {message}")]
    Syntax {
        /// The file.
        file: PathBuf,
        /// `YAML` or `JSON`.
        format: &'static str,
        /// The parser's message.
        message: String,
    },
    /// A field is missing, has the wrong type, or an unsupported value.
    #[error("{file}: field `{field}`: {problem}; fix: {fix}")]
    Field {
        /// The file.
        file: PathBuf,
        /// Dotted path of the field.
        field: String,
        /// What is wrong.
        problem: String,
        /// What to do.
        fix: String,
    },
}

impl ConfigError {
    /// A [`ConfigError::Field`] of `file`.
    pub(crate) fn field(
        file: &std::path::Path,
        field: &str,
        problem: impl Into<String>,
        fix: impl Into<String>,
    ) -> ConfigError {
        ConfigError::Field {
            file: file.into(),
            field: field.into(),
            problem: problem.into(),
            fix: fix.into(),
        }
    }
}
