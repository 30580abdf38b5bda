//! `fp8-io` is how every adaptive-FP8 tool touches files it did not make: policies, reports and
//! model configs come from users, and outputs land next to their inputs.
//!
//! - [`read_limited`] refuses anything that is not a regular file at once (a FIFO would block,
//!   `/dev/zero` never ends) and holds its size limit *while* reading, not only on the size the
//!   file reports.
//! - [`write_atomic`] writes a temp file beside the target, fsyncs it and renames it over the
//!   target, so a reader sees the old file or the new one, never half of one. It writes through a
//!   symlink to its target and refuses targets that are not regular files (a device node must
//!   stay a device node).
//! - [`refuse_same_file`] stops an output from replacing one of the command's own inputs.
//! - [`clean_up_on_signals`] removes temp files that are still being written when SIGINT,
//!   SIGTERM or SIGHUP arrives. SIGKILL cannot be caught: it can leave one `.fp8-tmp-*` file
//!   behind, but the target itself is never damaged.
//!
//! It does not parse anything and knows nothing of policies or reports.

mod error;
mod read;
mod signals;
mod write;

pub use error::{Error, ErrorKind};
pub use read::{read_limited, read_to_string_limited};
pub use signals::clean_up_on_signals;
pub use write::{TEMP_PREFIX, create_parent_dir, refuse_same_file, same_file, write_atomic};
