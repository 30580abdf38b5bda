//! How a job reports what it does: the `Progress` a caller passes (a line per layout, a bar
//! over the points, notes), one that shows nothing, and the terminal one both `fp8sel
//! gen-policy` and `cargo xtask gen-policy` use. The pipeline prints through these only.

use fp8_bench::driver;
use fp8_bench::sweep::BenchPoint;
use fp8_engine::Parallel;
use fp8_report::Point;

/// Progress of a whole job: a line per layout, then its points (through the driver).
pub trait Progress: driver::Progress {
    /// A layout starts: `measure` points to measure, `reuse` copied from an earlier layout's
    /// measurement of the same per-rank shape.
    fn layout(&self, _model: &str, _parallel: Parallel, _measure: usize, _reuse: usize) {}
}

/// Progress that shows nothing.
pub struct Silent;

impl driver::Progress for Silent {}
impl Progress for Silent {}

/// The terminal progress both `fp8sel gen-policy` and `cargo xtask gen-policy` show: a line per
/// layout (what is measured, what is reused) and a bar over its points, on stderr.
pub struct TermProgress {
    bar: indicatif::ProgressBar,
    quiet: bool,
}

impl TermProgress {
    /// Progress on stderr; `quiet` shows nothing.
    pub fn new(quiet: bool) -> Self {
        let bar = if quiet {
            indicatif::ProgressBar::hidden()
        } else {
            indicatif::ProgressBar::new(0)
        };
        bar.set_style(
            indicatif::ProgressStyle::with_template("{prefix} [{bar:30}] {pos}/{len} {msg}")
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
                .progress_chars("=> "),
        );
        TermProgress { bar, quiet }
    }

    /// Says something right away (the first line a user sees).
    pub fn say(&self, message: &str) {
        if !self.quiet {
            self.bar.suspend(|| eprintln!("{message}"));
        }
    }

    /// Removes the bar.
    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }
}

impl driver::Progress for TermProgress {
    fn start(&self, todo: usize) {
        self.bar.set_position(0);
        self.bar.set_length(todo as u64);
    }
    fn point(&self, p: &BenchPoint, _: &Point) {
        self.bar
            .set_message(p.spec.name.rsplit('.').next().unwrap_or("").to_owned());
        self.bar.inc(1);
    }
    fn note(&self, message: &str) {
        self.say(message);
    }
}

impl Progress for TermProgress {
    fn layout(&self, model: &str, parallel: Parallel, measure: usize, reuse: usize) {
        self.bar.set_prefix(format!("{model} {parallel}"));
        self.say(&format!(
            "{model} {parallel}: {measure} point(s) to measure, {reuse} reused from an earlier layout"
        ));
    }
}
