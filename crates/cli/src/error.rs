//! The CLI's error type and its exit codes: 2 for bad input or usage, 1 for everything else.

use std::fmt;

/// A failure to report on stderr, with the exit code it maps to.
#[derive(Debug)]
pub struct CliError {
    /// Process exit code.
    pub code: u8,
    /// The message, already naming the file/field and the fix.
    pub message: String,
}

impl CliError {
    /// Any other failure (I/O, device): exit 1.
    pub fn other(message: impl fmt::Display) -> Self {
        CliError {
            code: 1,
            message: message.to_string(),
        }
    }

    /// Invalid input or usage: exit 2.
    pub fn input(message: impl fmt::Display) -> Self {
        CliError {
            code: 2,
            message: message.to_string(),
        }
    }
}

impl From<fp8_policy::PolicyError> for CliError {
    /// Loading errors are the user's input (a missing or malformed policy): exit 2; a write that
    /// the system refused is exit 1.
    fn from(e: fp8_policy::PolicyError) -> Self {
        match e {
            fp8_policy::PolicyError::File(f) => f.into(),
            other => CliError::input(other),
        }
    }
}

/// Result alias for commands.
pub type CliResult<T = ()> = Result<T, CliError>;

impl From<fp8_io::Error> for CliError {
    /// A wrong kind of file or an output that is an input is the user's to fix (exit 2); a
    /// failing disk is not (exit 1).
    fn from(e: fp8_io::Error) -> Self {
        if e.is_user_input() {
            CliError::input(e)
        } else {
            CliError::other(e)
        }
    }
}
