//! What `fp8sel bench` shows while and after it measures: the progress bar and notes, the
//! end-of-sweep table or JSON, and the report written atomically.

use std::path::Path;

use fp8_bench::driver;
use fp8_bench::sweep::BenchPoint;
use fp8_report::{Point, Report, Status};
use indicatif::{ProgressBar, ProgressStyle};

use crate::error::{CliError, CliResult};

/// The progress bar and notes (both hidden with --quiet).
pub struct Bar(pub ProgressBar, bool);

impl Bar {
    /// A printer; `quiet` keeps it to errors and the summary.
    pub fn new(quiet: bool) -> Self {
        let bar = if quiet {
            ProgressBar::hidden()
        } else {
            ProgressBar::new(0)
        };
        bar.set_style(
            ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {pos}/{len} {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> "),
        );
        Bar(bar, quiet)
    }
}

impl driver::Progress for Bar {
    fn start(&self, todo: usize) {
        self.0.set_length(todo as u64);
    }
    fn point(&self, p: &BenchPoint, r: &Point) {
        let sp = r.speedup.map_or_else(
            || format!("{:?}", r.status).to_lowercase(),
            |s| format!("{s:.3}x"),
        );
        self.0.set_message(format!(
            "{} @ {} tokens: {sp}",
            p.spec.name.rsplit('.').next().unwrap_or(""),
            p.tokens
        ));
        self.0.inc(1);
    }
    fn note(&self, message: &str) {
        if !self.1 {
            self.0.suspend(|| eprintln!("{message}"));
        }
    }
}

/// Writes a report atomically.
pub fn write_report(report: &Report, path: &std::path::Path) -> CliResult {
    fp8_report::write(report, path).map_err(CliError::from)
}

/// Prints the sweep as one JSON object.
pub fn print_json(report: &Report, path: &Path) {
    let (ok, failed, skipped) = report.status_counts();
    let points: Vec<serde_json::Value> = report
        .points
        .iter()
        .map(|p| {
            serde_json::json!({
                "id": p.id(), "module": p.module, "split": p.split_mode, "tokens": p.tokens,
                "tp": p.tp, "etp": p.etp, "num_gemms": p.num_gemms,
                "bf16_ms": p.bf16.map(|t| t.total_ms.median), "fp8_ms": p.fp8.map(|t| t.total_ms.median),
                "speedup": p.speedup, "status": p.status, "reason": p.reason,
            })
        })
        .collect();
    let out = serde_json::json!({
        "report": path, "device": report.provenance.device.name, "estimated": report.estimated,
        "ok": ok, "failed": failed, "skipped": skipped, "points": points,
    });
    println!("{out:#}");
}

/// Prints the end-of-sweep table and the summary line; with `quiet`, the summary line only.
pub fn print_summary(report: &Report, quiet: bool) {
    let (ok, failed, skipped) = report.status_counts();
    let estimate = if report.estimated {
        " (ESTIMATES from the cost model, not measurements)"
    } else {
        ""
    };
    let line = format!(
        "{ok} ok, {failed} failed, {skipped} skipped; device {}{estimate}",
        report.provenance.device.name
    );
    if quiet {
        println!("{line}");
        return;
    }
    println!(
        "{:<48} {:>8} {:>8} {:>10} {:>10} {:>8}  status",
        "module", "gemms", "tokens", "bf16 ms", "fp8 ms", "speedup"
    );
    for p in &report.points {
        let name = format!(
            "{}{}",
            p.module
                .trim_start_matches("decoder.layers.")
                .trim_start_matches("image_encoder.layers."),
            p.split_mode
                .as_deref()
                .map(|s| format!(" [{s}]"))
                .unwrap_or_default()
        );
        let f = |t: Option<fp8_report::Timing>| {
            t.map_or_else(|| "-".to_owned(), |t| format!("{:.3}", t.total_ms.median))
        };
        let status = match p.status {
            Status::Ok => "ok".to_owned(),
            _ => format!("{:?}: {}", p.status, p.reason.clone().unwrap_or_default()).to_lowercase(),
        };
        println!(
            "{:<48} {:>8} {:>8} {:>10} {:>10} {:>8}  {}",
            name,
            p.num_gemms,
            p.tokens,
            f(p.bf16),
            f(p.fp8),
            p.speedup
                .map_or_else(|| "-".to_owned(), |s| format!("{s:.3}")),
            status
        );
    }
    println!("{line}");
}
