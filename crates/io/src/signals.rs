//! Removing temp files when the process is interrupted.
//!
//! Temp files being written are registered here. A watcher thread (not a signal handler: it may
//! lock and allocate) removes them when SIGINT, SIGTERM or SIGHUP arrives, then lets the signal
//! end the process as it would have. The rename and the unregistering happen under the same lock,
//! so the watcher never removes a file that has already become the target.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, Once};

static PENDING: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());
static INSTALL: Once = Once::new();

fn pending() -> MutexGuard<'static, Vec<PathBuf>> {
    // A panic while holding the lock leaves a valid list; keep using it.
    PENDING.lock().unwrap_or_else(|e| e.into_inner())
}

/// Installs the watcher (once per process; later calls do nothing). Programs call it at start;
/// libraries never do. Without it, an interrupted write can leave a `.fp8-tmp-*` file, though
/// never a damaged target.
pub fn clean_up_on_signals() -> std::io::Result<()> {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    let mut result = Ok(());
    INSTALL.call_once(|| {
        let mut signals = match signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP]) {
            Ok(s) => s,
            Err(e) => {
                result = Err(e);
                return;
            }
        };
        let spawned = std::thread::Builder::new()
            .name("fp8-io-signals".into())
            .spawn(move || {
                if let Some(sig) = signals.forever().next() {
                    let list = pending();
                    for p in list.iter() {
                        let _ = std::fs::remove_file(p);
                    }
                    // Die of the signal, with the lock held so no rename can follow.
                    let _ = signal_hook::low_level::emulate_default_handler(sig);
                    std::process::exit(128 + sig);
                }
            });
        if let Err(e) = spawned {
            result = Err(e);
        }
    });
    result
}

/// A temp file on the pending list until it is persisted or dropped.
pub(crate) struct Registered {
    path: PathBuf,
}

impl Registered {
    pub(crate) fn new(path: &Path) -> Self {
        pending().push(path.to_path_buf());
        Registered {
            path: path.to_path_buf(),
        }
    }

    /// Renames the temp file over `target` and unregisters it, atomically with respect to the
    /// signal watcher.
    pub(crate) fn persist(
        self,
        tmp: tempfile::NamedTempFile,
        target: &Path,
    ) -> std::io::Result<()> {
        let mut list = pending();
        let r = tmp.persist(target).map(|_| ()).map_err(|e| e.error);
        list.retain(|p| p != &self.path);
        drop(list);
        r
    }
}

impl Drop for Registered {
    fn drop(&mut self) {
        pending().retain(|p| p != &self.path);
    }
}
