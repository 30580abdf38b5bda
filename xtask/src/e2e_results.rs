//! The end-to-end section of docs/RESULTS.md: real TE training steps on the H200
//! (`python -m adaptive_fp8.bench.step_bench`, run by `scripts/device/trainer_loop.sh`), adaptive
//! policies against all-BF16, all-FP8 and the per-module oracle, per scenario of the seed's
//! section 4, eager and CUDA-graphed; how far the cuBLASLt backend's decisions match TE's; what
//! real TP communication changes. Everything is read from the step
//! benchmark's JSON under `docs/device-logs/trainer_loop/`; nothing here is typed in.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use fp8_report::step_results::{StepResults, StepRow};
use serde_json::Value;

use crate::build::Files;
use crate::plot::{Chart, Line, chart_svg};

mod sections;
use sections::{render_combine, render_tp};

/// The logs' folder.
pub const LOGS: &str = "docs/device-logs/trainer_loop";

/// What the section reads, listed beside the logs in `SCENARIOS_FILE` (paths relative to
/// [`LOGS`] unless they say otherwise).
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Sections {
    /// The scenarios the earlier sections tabled: their runs are what
    /// `scripts/upkeep/standing.py` reads against today's policies (checked to exist by a test).
    #[cfg_attr(not(test), allow(dead_code))]
    scenarios: Vec<Scenario>,
    /// The host-and-GPU combination table: per model, its reports (from the repository's root)
    /// and its eager step runs.
    combine: Vec<Combine>,
    /// `te_tp`'s results over a real TP 2 group.
    tp_comm: String,
}

/// One scenario: its name, what ran, and the step benchmark outputs.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)] // read by scripts/upkeep/standing.py; the test checks its files exist
struct Scenario {
    name: String,
    what: String,
    files: Vec<String>,
    /// The step's arguments its files do not record (older step benchmarks wrote no `ep`):
    /// read by the standing tool, which times today's groups at the layout that ran.
    #[serde(default)]
    #[allow(dead_code)]
    step_args: serde_json::Map<String, serde_json::Value>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Combine {
    model: String,
    cublaslt: String,
    te: String,
    steps: Vec<String>,
}

/// A mode's median ms per step in a row (NaN where the row lacks the mode).
fn ms(row: &StepRow, mode: &str) -> f64 {
    row.modes.get(mode).map_or(f64::NAN, |m| m.ms_median)
}

/// The section's inputs and prose files.
const SCENARIOS_FILE: &str = "docs/device-logs/trainer_loop/scenarios.json";
/// The section's opening.
const INTRO: &str = "docs/results/e2e/intro.md";
/// The prose between the tables, in named blocks.
const PARTS: &str = "docs/results/e2e/parts.md";

/// The named blocks of [`PARTS`]: each `<!-- name -->` line opens one, which runs to the next.
struct Parts(BTreeMap<String, String>);

impl Parts {
    fn parse(text: &str) -> Parts {
        let mut blocks = BTreeMap::new();
        let mut current: Option<String> = None;
        for line in text.split_inclusive('\n') {
            let name = line
                .trim_end()
                .strip_prefix("<!-- ")
                .and_then(|l| l.strip_suffix(" -->"))
                .filter(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_lowercase() || c == '-'));
            match (name, &current) {
                (Some(n), _) => {
                    blocks.insert(n.to_owned(), String::new());
                    current = Some(n.to_owned());
                }
                (None, Some(c)) => blocks.get_mut(c).expect("opened").push_str(line),
                (None, None) => {}
            }
        }
        Parts(blocks)
    }

    fn get(&self, name: &str) -> Result<&str, String> {
        self.0
            .get(name)
            .map(String::as_str)
            .ok_or_else(|| format!("{PARTS}: no block <!-- {name} -->"))
    }
}

fn sections(root: &Path) -> Result<Sections, String> {
    let text = std::fs::read_to_string(root.join(SCENARIOS_FILE))
        .map_err(|e| format!("{SCENARIOS_FILE}: {e}"))?;
    serde_json::from_str(&text).map_err(|e| format!("{SCENARIOS_FILE}: {e}"))
}

fn prose(root: &Path, rel: &str) -> Result<String, String> {
    std::fs::read_to_string(root.join(rel)).map_err(|e| format!("{rel}: {e}"))
}

/// A step run under [`LOGS`], through the step results' one typed reader.
fn read_run(root: &Path, rel: &str) -> Result<StepResults, String> {
    fp8_report::step_results::read_step_results(&root.join(LOGS).join(rel))
        .map_err(|e| e.to_string())
}

/// Any other JSON under [`LOGS`].
fn read(root: &Path, rel: &str) -> Result<Value, String> {
    let p = root.join(LOGS).join(rel);
    let t = std::fs::read_to_string(&p).map_err(|e| format!("{}: {e}", p.display()))?;
    serde_json::from_str(&t).map_err(|e| format!("{}: {e}", p.display()))
}

fn f(v: &Value, k: &str) -> f64 {
    v[k].as_f64().unwrap_or(f64::NAN)
}

/// Where the section's plots go.
pub const PLOT_DIR: &str = "docs/plots/e2e";

/// Renders the section and its plot (paths relative to [`PLOT_DIR`]): how host and GPU time
/// combine, and TP 2 over a real TP group against one rank alone.
pub fn render(root: &Path) -> Result<(String, Files), String> {
    let mut s = String::new();
    let mut files = Files::new();
    s.push_str(&prose(root, INTRO)?);
    s.push('\n');
    let sec = sections(root)?;
    let parts = Parts::parse(&prose(root, PARTS)?);
    render_combine(root, &parts, &sec.combine, &mut s)?;
    render_tp(root, &parts, &sec.tp_comm, &mut s, &mut files)?;
    Ok((s, files))
}

#[cfg(test)]
mod tests;
