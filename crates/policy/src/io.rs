//! Loading from and writing to disk.

use std::fs;
use std::io::{Read, Write};
use std::path::Path;

use crate::error::{MAX_POLICY_BYTES, PolicyError};
use crate::parse::parse_str;
use crate::policy::Policy;

impl Policy {
    /// Loads and validates a policy file.
    ///
    /// Errors name the file and the JSON path of the problem. Files over 64 MiB are refused
    /// before they are read.
    pub fn load(path: impl AsRef<Path>) -> Result<Policy, PolicyError> {
        let path = path.as_ref();
        let io = |action, source| PolicyError::Io {
            file: path.into(),
            action,
            source,
        };
        let file = fs::File::open(path).map_err(|e| io("open", e))?;
        let size = file.metadata().map_err(|e| io("stat", e))?.len();
        if size > MAX_POLICY_BYTES {
            return Err(PolicyError::TooLarge {
                file: path.into(),
                size,
            });
        }
        let mut bytes = Vec::with_capacity(size as usize);
        // `take` guards against a file that grows between the stat and the read.
        file.take(MAX_POLICY_BYTES + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| io("read", e))?;
        if bytes.len() as u64 > MAX_POLICY_BYTES {
            return Err(PolicyError::TooLarge {
                file: path.into(),
                size: bytes.len() as u64,
            });
        }
        let text = String::from_utf8(bytes).map_err(|e| PolicyError::NotJson {
            file: path.into(),
            line: 1,
            column: 1,
            message: format!("not UTF-8 text (byte {})", e.utf8_error().valid_up_to()),
        })?;
        parse_str(&text, path)
    }

    /// Parses and validates a policy from JSON text. `origin` names the source in errors.
    pub fn from_json_str(text: &str, origin: impl AsRef<Path>) -> Result<Policy, PolicyError> {
        if text.len() as u64 > MAX_POLICY_BYTES {
            return Err(PolicyError::TooLarge {
                file: origin.as_ref().into(),
                size: text.len() as u64,
            });
        }
        parse_str(text, origin.as_ref())
    }

    /// Writes the policy atomically: a temp file in the same directory, fsync, rename, then an
    /// fsync of the directory. On any failure the previous file is left untouched and no temp
    /// file remains.
    pub fn write(&self, path: impl AsRef<Path>) -> Result<(), PolicyError> {
        write_atomic(path.as_ref(), self.to_json().as_bytes())
    }
}

/// Writes `bytes` to `path` atomically (temp file, fsync, rename, directory fsync).
///
/// Exposed because the other tools of the workspace write reports and summaries the same way.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), PolicyError> {
    let io = |action, source| PolicyError::Io {
        file: path.into(),
        action,
        source,
    };
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let mut tmp = tempfile::Builder::new()
        .prefix(".fp8-tmp-")
        .tempfile_in(dir)
        .map_err(|e| io("create temp file", e))?;
    tmp.write_all(bytes).map_err(|e| io("write", e))?;
    tmp.as_file().sync_all().map_err(|e| io("fsync", e))?;
    // Keep the permissions a normal `File::create` would give, not the temp file's 0600.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = fs::metadata(path)
            .map(|m| m.permissions().mode())
            .unwrap_or(0o644);
        let _ = tmp
            .as_file()
            .set_permissions(fs::Permissions::from_mode(mode));
    }
    tmp.persist(path).map_err(|e| io("rename", e.error))?;
    if let Ok(d) = fs::File::open(dir) {
        // Best effort: some filesystems refuse fsync on directories.
        let _ = d.sync_all();
    }
    Ok(())
}
