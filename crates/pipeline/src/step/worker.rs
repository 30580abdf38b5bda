//! The step worker as a process: started, bounded by the run's time limit (stopped at it), and
//! its results file read back.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The run's time limit, if any.
pub(crate) struct Clock(Option<Instant>);

impl Clock {
    pub(crate) fn start(limit: Option<Duration>) -> Self {
        Self(limit.map(|d| Instant::now() + d))
    }

    pub(super) fn out(&self) -> bool {
        self.0.is_some_and(|d| Instant::now() >= d)
    }
}

/// A worker's results: the verdicts it timed and the counts it could not (a file of failed
/// counts only is no verdict, not an error).
pub(super) fn read_timed(
    json: &Path,
) -> Result<
    (
        Vec<fp8_merge::step::StepRun>,
        Vec<fp8_merge::step::FailedCount>,
    ),
    String,
> {
    let text = fp8_io::read_to_string_limited(json, fp8_merge::step::MAX_STEP_BYTES)
        .map_err(|e| e.to_string())?;
    let failed = fp8_merge::step::failed_counts(&text, json).map_err(|e| e.to_string())?;
    match fp8_merge::step::parse_results(&text, json) {
        Ok(runs) => Ok((runs, failed)),
        Err(fp8_merge::MergeError::Empty { .. }) if !failed.is_empty() => Ok((Vec::new(), failed)),
        Err(e) => Err(e.to_string()),
    }
}

/// An error message's first sentence (at most 160 characters): the note names the failure, the
/// worker's results file keeps the whole message.
pub(super) fn first_sentence(e: &str) -> String {
    let one = e.find(". ").map_or(e, |i| &e[..=i]);
    if one.chars().count() <= 160 {
        return one.to_owned();
    }
    let cut: String = one.chars().take(159).collect();
    format!("{cut}…")
}

/// How long a stopped worker gets to end its own processes (torchrun's agent stops its ranks
/// on SIGTERM) before it is killed.
const GRACE: Duration = Duration::from_secs(20);

/// Stops a worker at the time limit: SIGTERM (a plain interpreter ends at once: Python keeps the
/// default action; torchrun's launcher ends its ranks first), then SIGKILL after [`GRACE`].
pub(super) fn stop(child: &mut std::process::Child) {
    #[cfg(unix)]
    if let Ok(pid) = libc::pid_t::try_from(child.id()) {
        // SAFETY: kill(2) on our own child's pid, which `child` has not yet reaped, so the pid
        // names no other process.
        unsafe {
            libc::kill(pid, libc::SIGTERM);
        }
        let end = Instant::now() + GRACE;
        while Instant::now() < end {
            if matches!(child.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(POLL);
        }
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// Runs `python args...` within the clock's limit, its stdout dropped (and its stderr too when
/// `silent`): `Ok(true)` when it exited 0, `Ok(false)` when it failed or was stopped at the
/// limit, `Err` when it could not start.
pub(crate) fn run_quiet(
    python: &str,
    args: &[String],
    clock: &Clock,
    silent: bool,
) -> Result<bool, String> {
    let mut cmd = Command::new(python);
    cmd.args(args).stdout(Stdio::null()).stdin(Stdio::null());
    if silent {
        cmd.stderr(Stdio::null());
    }
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("cannot start `{python}`: {e}"))?;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Ok(status.success()),
            Ok(None) => {}
            Err(e) => return Err(format!("waiting for `{python}`: {e}")),
        }
        if clock.out() {
            stop(&mut child);
            return Ok(false);
        }
        std::thread::sleep(POLL);
    }
}

/// How a worker run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum WorkerEnd {
    Finished,
    /// Stopped at the time limit: its results file holds the counts it finished, if any.
    Stopped,
}

/// How often a bounded worker is looked at.
pub(super) const POLL: Duration = Duration::from_millis(100);

/// Runs `python args...`, writing `json`; the worker's progress goes to stderr, its tables are
/// not needed (the results are in the JSON it writes). An earlier run's `json` is removed
/// first, so a worker stopped before its first count leaves none to be taken for its own. At
/// the clock's limit the worker is stopped ([`stop`]): it saves each finished count as it ends
/// (by rename, never half a file), so its file is then what it finished.
pub(super) fn run_worker(
    python: &str,
    args: &[String],
    clock: &Clock,
    json: &Path,
) -> Result<WorkerEnd, String> {
    let shown = format!("{python} {}", args.join(" "));
    remove_old(json)?;
    let mut child = Command::new(python)
        .args(args)
        .stdout(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot start `{shown}`: {e}; fix: pass --python with an interpreter that has torch, transformer_engine and adaptive_fp8"))?;
    let status = loop {
        let waited = match clock.0 {
            None => child.wait().map(Some),
            Some(_) => child.try_wait(),
        }
        .map_err(|e| format!("waiting for `{shown}`: {e}"))?;
        if let Some(status) = waited {
            break status;
        }
        if clock.out() {
            stop(&mut child);
            return Ok(WorkerEnd::Stopped);
        }
        std::thread::sleep(POLL);
    };
    if status.success() {
        Ok(WorkerEnd::Finished)
    } else {
        Err(format!(
            "the step worker failed ({status}): `{shown}`; its messages are above"
        ))
    }
}

/// Removes an earlier run's `json`, so a worker stopped before its first count leaves none to
/// be taken for its own.
pub(super) fn remove_old(json: &Path) -> Result<(), String> {
    match std::fs::remove_file(json) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(format!("{}: cannot replace it: {e}", json.display())),
    }
}
