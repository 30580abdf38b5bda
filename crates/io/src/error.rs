//! The one error type: the file, what went wrong, and the fix.

use std::fmt;
use std::path::{Path, PathBuf};

/// What went wrong with a file.
#[derive(Debug)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The path is a FIFO, a device, a socket or a directory.
    NotRegular {
        /// What it is instead, in words (`a FIFO`, `a character device`, ...).
        what: &'static str,
    },
    /// The file holds more than the limit allows.
    TooLarge {
        /// The limit in bytes.
        limit: u64,
    },
    /// The bytes are not UTF-8 text.
    NotUtf8 {
        /// Offset of the first bad byte.
        offset: usize,
    },
    /// An output would replace one of the command's inputs.
    SameAsInput {
        /// The input it would destroy.
        input: PathBuf,
    },
    /// An output is a symlink whose target does not exist.
    DanglingSymlink,
    /// The operating system refused.
    Os {
        /// What was being done (`open`, `read`, `rename`, ...).
        action: &'static str,
        /// The OS error.
        source: std::io::Error,
    },
}

/// A file could not be read or written safely. The message names the file and the fix.
#[derive(Debug)]
pub struct Error {
    file: PathBuf,
    kind: ErrorKind,
}

impl Error {
    pub(crate) fn new(file: &Path, kind: ErrorKind) -> Self {
        Error {
            file: file.to_path_buf(),
            kind,
        }
    }

    /// `file` is not a regular file: it is `meta`'s type.
    pub(crate) fn not_regular(file: &Path, meta: &std::fs::Metadata) -> Self {
        Error::new(
            file,
            ErrorKind::NotRegular {
                what: describe(meta.file_type()),
            },
        )
    }

    pub(crate) fn os(file: &Path, action: &'static str, source: std::io::Error) -> Self {
        Error::new(file, ErrorKind::Os { action, source })
    }

    /// The file concerned.
    pub fn file(&self) -> &Path {
        &self.file
    }

    /// What went wrong.
    pub fn kind(&self) -> &ErrorKind {
        &self.kind
    }

    /// True for problems with what the user pointed at (a missing or unreadable input, the wrong
    /// kind of file, too large, an output that is an input), false for failures while writing
    /// (a full disk, a read-only directory).
    pub fn is_user_input(&self) -> bool {
        match &self.kind {
            ErrorKind::Os { action, .. } => matches!(*action, "open" | "read"),
            _ => true,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let file = self.file.display();
        match &self.kind {
            ErrorKind::NotRegular { what } => write!(
                f,
                "{file}: is {what}, not a regular file; fix: point at a file on disk"
            ),
            ErrorKind::TooLarge { limit } => write!(
                f,
                "{file}: larger than the {} MiB this tool reads; fix: point at the right file",
                limit / (1024 * 1024)
            ),
            ErrorKind::NotUtf8 { offset } => write!(
                f,
                "{file}: not UTF-8 text (bad byte at offset {offset}); fix: point at a text file"
            ),
            ErrorKind::SameAsInput { input } => write!(
                f,
                "{file}: this output is the same file as the input {}; writing it would destroy \
                 the input; fix: choose another output path",
                input.display()
            ),
            ErrorKind::DanglingSymlink => write!(
                f,
                "{file}: is a symlink to a file that does not exist; fix: remove the link or \
                 create its target"
            ),
            ErrorKind::Os { action, source } => write!(f, "{file}: {action} failed: {source}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match &self.kind {
            ErrorKind::Os { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// The file type in words, for refusals.
fn describe(ft: std::fs::FileType) -> &'static str {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if ft.is_fifo() {
            return "a FIFO (named pipe)";
        }
        if ft.is_char_device() {
            return "a character device";
        }
        if ft.is_block_device() {
            return "a block device";
        }
        if ft.is_socket() {
            return "a socket";
        }
    }
    if ft.is_dir() {
        "a directory"
    } else if ft.is_symlink() {
        "a symlink"
    } else {
        "not a regular file"
    }
}
