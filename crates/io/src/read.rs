//! Bounded reads of regular files.

use std::fs::{File, OpenOptions};
use std::io::Read;
use std::path::Path;

use crate::error::{Error, ErrorKind};

/// Reads a whole regular file of at most `limit` bytes.
///
/// The file is opened without blocking (so a FIFO with no writer cannot hang us) and refused
/// unless it is a regular file; the limit holds while reading, so a file that grows, or lies
/// about its size, costs at most `limit + 1` bytes of memory.
pub fn read_limited(path: &Path, limit: u64) -> Result<Vec<u8>, Error> {
    let file = open_regular(path)?;
    let size = file
        .metadata()
        .map_err(|e| Error::os(path, "stat", e))?
        .len();
    if size > limit {
        return Err(Error::new(path, ErrorKind::TooLarge { limit }));
    }
    let mut bytes = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
    file.take(limit.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|e| Error::os(path, "read", e))?;
    if bytes.len() as u64 > limit {
        return Err(Error::new(path, ErrorKind::TooLarge { limit }));
    }
    Ok(bytes)
}

/// [`read_limited`], as UTF-8 text.
pub fn read_to_string_limited(path: &Path, limit: u64) -> Result<String, Error> {
    let bytes = read_limited(path, limit)?;
    String::from_utf8(bytes).map_err(|e| {
        Error::new(
            path,
            ErrorKind::NotUtf8 {
                offset: e.utf8_error().valid_up_to(),
            },
        )
    })
}

fn open_regular(path: &Path) -> Result<File, Error> {
    // Refuse by the path's type first: opening a FIFO for reading blocks until a writer comes.
    let meta = std::fs::metadata(path).map_err(|e| Error::os(path, "open", e))?;
    if !meta.is_file() {
        return Err(Error::not_regular(path, &meta));
    }
    let mut opts = OpenOptions::new();
    opts.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        // The path could be swapped for a FIFO between the check and the open.
        opts.custom_flags(libc::O_NONBLOCK);
    }
    let file = opts.open(path).map_err(|e| Error::os(path, "open", e))?;
    let meta = file.metadata().map_err(|e| Error::os(path, "stat", e))?;
    if !meta.is_file() {
        return Err(Error::not_regular(path, &meta));
    }
    Ok(file)
}
