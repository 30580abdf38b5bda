//! Atomic writes that never replace what they must not.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::error::{Error, ErrorKind};
use crate::signals;

/// Prefix of the temp files [`write_atomic`] creates next to its targets.
pub const TEMP_PREFIX: &str = ".fp8-tmp-";

/// Test hook: milliseconds to wait between writing the temp file and renaming it, so a test can
/// deliver a signal while a temp file exists. Unset in normal use.
const HOLD_ENV: &str = "FP8_IO_TEST_HOLD_BEFORE_RENAME_MS";

/// Writes `bytes` to `path` atomically: a temp file in the target's directory, fsync, rename,
/// then a best-effort fsync of the directory.
///
/// - A symlink is written through: its target gets the new content and the link stays a link.
///   A dangling link is refused.
/// - An existing target that is not a regular file (a device node, a FIFO, a directory) is
///   refused: a rename would replace it with a regular file.
/// - On any failure the target is untouched and the temp file is removed; with
///   [`clean_up_on_signals`](crate::clean_up_on_signals) installed, so it is on SIGINT/SIGTERM.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), Error> {
    let target = resolve_target(path)?;
    let dir = match target.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let mut tmp = tempfile::Builder::new()
        .prefix(TEMP_PREFIX)
        .tempfile_in(&dir)
        .map_err(|e| Error::os(path, "create a temp file beside", e))?;
    let guard = signals::Registered::new(tmp.path());
    tmp.write_all(bytes)
        .map_err(|e| Error::os(path, "write", e))?;
    tmp.as_file()
        .sync_all()
        .map_err(|e| Error::os(path, "fsync", e))?;
    // Keep the permissions the target had (or a normal file's), not the temp file's 0600.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = fs::metadata(&target)
            .map(|m| m.permissions().mode())
            .unwrap_or(0o644);
        // Best effort: the content matters more than the mode.
        let _ = tmp
            .as_file()
            .set_permissions(fs::Permissions::from_mode(mode));
    }
    if let Some(ms) = std::env::var(HOLD_ENV)
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
    {
        std::thread::sleep(std::time::Duration::from_millis(ms.min(60_000)));
    }
    guard
        .persist(tmp, &target)
        .map_err(|e| Error::os(path, "rename", e))?;
    if let Ok(d) = fs::File::open(&dir) {
        // Best effort: some filesystems refuse fsync on directories.
        let _ = d.sync_all();
    }
    Ok(())
}

/// The path to replace: `path` itself, or the file a symlink at `path` points to.
fn resolve_target(path: &Path) -> Result<PathBuf, Error> {
    let target = match fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_symlink() => {
            fs::canonicalize(path).map_err(|_| Error::new(path, ErrorKind::DanglingSymlink))?
        }
        Ok(_) => path.to_path_buf(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(path.to_path_buf()),
        Err(e) => return Err(Error::os(path, "stat", e)),
    };
    let meta = fs::metadata(&target).map_err(|e| Error::os(path, "stat", e))?;
    if !meta.is_file() {
        return Err(Error::not_regular(path, &meta));
    }
    Ok(target)
}

/// True when `a` and `b` name the same file: the same inode when both exist (through links and
/// different spellings), else the same normalized path.
pub fn same_file(a: &Path, b: &Path) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        if let (Ok(x), Ok(y)) = (fs::metadata(a), fs::metadata(b)) {
            return x.dev() == y.dev() && x.ino() == y.ino();
        }
    }
    normalized(a) == normalized(b)
}

/// An absolute path with the existing part canonicalized, for comparing paths to files that do
/// not exist yet.
fn normalized(p: &Path) -> PathBuf {
    if let Ok(c) = fs::canonicalize(p) {
        return c;
    }
    let name = p.file_name().map(PathBuf::from).unwrap_or_default();
    let parent = match p.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    fs::canonicalize(&parent)
        .unwrap_or_else(|_| std::path::absolute(&parent).unwrap_or(parent))
        .join(name)
}

/// Refuses an `output` that is one of `inputs` (or another output written earlier in the same
/// command): writing it would destroy that file.
pub fn refuse_same_file<'a>(
    output: &Path,
    inputs: impl IntoIterator<Item = &'a Path>,
) -> Result<(), Error> {
    for input in inputs {
        if same_file(output, input) {
            return Err(Error::new(
                output,
                ErrorKind::SameAsInput {
                    input: input.to_path_buf(),
                },
            ));
        }
    }
    Ok(())
}

/// Creates the directory an output goes into, when it does not exist yet.
pub fn create_parent_dir(path: &Path) -> Result<(), Error> {
    match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => {
            fs::create_dir_all(dir).map_err(|e| Error::os(dir, "create directory", e))
        }
        _ => Ok(()),
    }
}
