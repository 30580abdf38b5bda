//! The step model's worker kept up for a layout (`step_inputs --serve`): its measurements, then
//! each check asked on its stdin, in one process, so TE's import and the CUDA start (about 12 s
//! on the H200) are paid once per layout, not once per phase. Bounded by the run's clock as a
//! one-shot worker is.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::time::{Duration, Instant};

use super::worker::{Clock, POLL, WorkerEnd, remove_old, stop};

/// What the worker prints on stdout once a document is written.
const DONE: &str = "step_inputs: done ";

/// How long a worker whose input has ended gets to exit before it is killed.
const EXIT_GRACE: Duration = Duration::from_secs(30);

/// A running `step_inputs --serve`.
pub(super) struct Served {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    shown: String,
    /// Stopped at the time limit or failed: nothing more can be asked.
    gone: bool,
}

impl Served {
    /// Starts `python args... --serve` and waits for its first document, `json`.
    pub(super) fn start(
        python: &str,
        args: &[String],
        clock: &Clock,
        json: &Path,
    ) -> Result<(Self, WorkerEnd), String> {
        remove_old(json)?;
        let shown = format!("{python} {} --serve", args.join(" "));
        let mut child = Command::new(python)
            .args(args)
            .arg("--serve")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot start `{shown}`: {e}; fix: pass --python with an interpreter that has torch, transformer_engine and adaptive_fp8"))?;
        let stdin = child.stdin.take();
        let out = child.stdout.take().expect("stdout is piped");
        let (tx, lines) = channel();
        // The worker's stdout: its `done` lines to us, anything else on to stderr.
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                if line.starts_with(DONE) {
                    if tx.send(line).is_err() {
                        break;
                    }
                } else {
                    eprintln!("{line}");
                }
            }
        });
        let mut s = Self {
            child,
            stdin,
            lines,
            shown,
            gone: false,
        };
        let end = s.wait(clock, json)?;
        Ok((s, end))
    }

    /// Asks for the check of `plans`, written to `json`, and waits for it. `Stopped` at the
    /// clock's limit (the file then holds the counts it finished) or when the worker is gone.
    pub(super) fn check(
        &mut self,
        plans: &Path,
        json: &Path,
        clock: &Clock,
    ) -> Result<WorkerEnd, String> {
        if self.gone {
            return Ok(WorkerEnd::Stopped);
        }
        remove_old(json)?;
        let line = serde_json::json!({
            "check": plans.display().to_string(),
            "json": json.display().to_string(),
        });
        let sent = self
            .stdin
            .as_mut()
            .map(|w| writeln!(w, "{line}").and_then(|()| w.flush()));
        if !matches!(sent, Some(Ok(()))) {
            self.gone = true;
            return Err(self.failure());
        }
        self.wait(clock, json)
    }

    /// Ends the worker: its input closed, it exits; killed after [`EXIT_GRACE`].
    pub(super) fn end(mut self) {
        self.stdin = None;
        if self.gone {
            return;
        }
        let until = Instant::now() + EXIT_GRACE;
        while Instant::now() < until {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(POLL);
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Waits for the `done` line of `json`, the worker's exit, or the clock's limit.
    fn wait(&mut self, clock: &Clock, json: &Path) -> Result<WorkerEnd, String> {
        let want = format!("{DONE}{}", json.display());
        loop {
            match self.lines.recv_timeout(POLL) {
                Ok(line) if line == want => return Ok(WorkerEnd::Finished),
                Ok(line) => {
                    self.gone = true;
                    stop(&mut self.child);
                    return Err(format!(
                        "the step worker announced `{line}` where `{want}` was due: `{}`",
                        self.shown
                    ));
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => {
                    self.gone = true;
                    return Err(self.failure());
                }
            }
            if clock.out() {
                self.gone = true;
                stop(&mut self.child);
                return Ok(WorkerEnd::Stopped);
            }
        }
    }

    /// The error of a worker that ended while a document was due.
    fn failure(&mut self) -> String {
        let status = match self.child.wait() {
            Ok(s) => s.to_string(),
            Err(e) => format!("its status unknown: {e}"),
        };
        format!(
            "the step worker ended before its document was written ({status}): `{}`; its \
             messages are above (where it could not import adaptive_fp8, torch or \
             transformer_engine, fix: `pip install .` into an interpreter where torch and \
             transformer_engine import, given as --python; or per-module timing, --backend cuda)",
            self.shown
        )
    }
}

/// A layout's worker: served from its inputs on, or (a resumed layout, whose inputs an earlier
/// run measured) started by its first check.
pub(super) enum Worker {
    /// Running.
    Up(Served),
    /// Not started: the interpreter and the inputs' arguments without `--json`.
    Later(String, Vec<String>),
}

impl Worker {
    /// [`Served::check`]; a worker not started yet starts with this check as its first document.
    pub(super) fn check(
        &mut self,
        plans: &Path,
        json: &Path,
        clock: &Clock,
    ) -> Result<WorkerEnd, String> {
        match self {
            Worker::Up(s) => s.check(plans, json, clock),
            Worker::Later(python, args) => {
                let mut a = args.clone();
                a.extend([
                    "--check".to_owned(),
                    plans.display().to_string(),
                    "--json".to_owned(),
                    json.display().to_string(),
                ]);
                let (s, end) = Served::start(python, &a, clock, json)?;
                *self = Worker::Up(s);
                Ok(end)
            }
        }
    }

    /// [`Served::end`], where it started.
    pub(super) fn end(self) {
        if let Worker::Up(s) = self {
            s.end();
        }
    }
}

impl Drop for Served {
    /// A worker left behind by an error path is not left running.
    fn drop(&mut self) {
        if !self.gone && matches!(self.child.try_wait(), Ok(None)) {
            self.stdin = None;
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

#[cfg(test)]
mod tests {
    //! A stand-in worker in a few lines of Python (`python3 -c`): the protocol, its failures,
    //! and the clock.
    use super::*;

    /// Announces its `--json` (the last argument before `--serve`), then each asked one.
    const ECHO: &str = "import sys, json\nj = sys.argv[-2]\nwhile True:\n    open(j, 'w').write('{}')\n    print('step_inputs: done ' + j, flush=True)\n    line = sys.stdin.readline()\n    if not line.strip(): break\n    j = json.loads(line)['json']\n";

    fn args(code: &str, json: &Path) -> Vec<String> {
        vec!["-c".into(), code.into(), json.display().to_string()]
    }

    #[test]
    fn a_served_worker_runs_each_check_in_one_process_and_ends_with_its_input() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a.json"), dir.path().join("b.json"));
        let clock = Clock::start(None);
        let (mut w, end) = Served::start("python3", &args(ECHO, &a), &clock, &a).unwrap();
        assert_eq!(end, WorkerEnd::Finished);
        assert!(a.exists());
        let end = w.check(&dir.path().join("plans.json"), &b, &clock).unwrap();
        assert_eq!(end, WorkerEnd::Finished);
        assert!(b.exists());
        let t = Instant::now();
        w.end();
        assert!(
            t.elapsed() < EXIT_GRACE,
            "it exited at the end of its input"
        );
    }

    #[test]
    fn a_worker_started_later_runs_its_first_check_as_its_first_document() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a.json"), dir.path().join("b.json"));
        let clock = Clock::start(None);
        // ECHO writes the argument before `--serve`: here the check's `--json`.
        let mut w = Worker::Later("python3".into(), vec!["-c".into(), ECHO.into()]);
        let plans = dir.path().join("plans.json");
        assert_eq!(w.check(&plans, &a, &clock).unwrap(), WorkerEnd::Finished);
        assert!(a.exists() && matches!(w, Worker::Up(_)));
        assert_eq!(w.check(&plans, &b, &clock).unwrap(), WorkerEnd::Finished);
        assert!(b.exists());
        w.end();
    }

    #[test]
    fn a_worker_that_dies_before_its_document_is_an_error_naming_its_status() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a.json");
        let code = "import sys; sys.exit(3)";
        let e = Served::start("python3", &args(code, &a), &Clock::start(None), &a)
            .err()
            .unwrap();
        assert!(
            e.contains("ended before its document") && e.contains('3'),
            "{e}"
        );
        // The auto backend finds TE without importing it: a worker that cannot import it is
        // told what to do.
        let code = "import transformer_engine_that_does_not_import";
        let e = Served::start("python3", &args(code, &a), &Clock::start(None), &a)
            .err()
            .unwrap();
        assert!(e.contains("fix:") && e.contains("--backend cuda"), "{e}");
    }

    #[test]
    fn a_worker_that_announces_another_file_is_stopped_with_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a.json");
        let code =
            "import time; print('step_inputs: done /elsewhere.json', flush=True); time.sleep(60)";
        let t = Instant::now();
        let e = Served::start("python3", &args(code, &a), &Clock::start(None), &a)
            .err()
            .unwrap();
        assert!(
            e.contains("/elsewhere.json") && e.contains("was due"),
            "{e}"
        );
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "stopped, not waited for"
        );
    }

    #[test]
    fn at_the_time_limit_the_worker_is_stopped_and_later_checks_are_not_asked() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a.json");
        let code = "import time; time.sleep(60)";
        let clock = Clock::start(Some(Duration::from_millis(300)));
        let t = Instant::now();
        let (mut w, end) = Served::start("python3", &args(code, &a), &clock, &a).unwrap();
        assert_eq!(end, WorkerEnd::Stopped);
        assert!(t.elapsed() < Duration::from_secs(30));
        let end = w.check(&dir.path().join("p.json"), &a, &clock).unwrap();
        assert_eq!(end, WorkerEnd::Stopped);
        w.end();
    }
}
