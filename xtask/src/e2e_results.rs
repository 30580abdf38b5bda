//! The end-to-end section of docs/RESULTS.md: real TE training steps on the H200
//! (`python -m adaptive_fp8.bench.step_bench`, run by `scripts/device/trainer_loop.sh`), adaptive
//! policies against all-BF16, all-FP8 and the per-module oracle, per scenario of the seed's
//! section 4, eager and CUDA-graphed; how far the cuBLASLt backend's decisions match TE's; what
//! gradient accumulation and real TP communication change. Everything is read from the step
//! benchmark's JSON under `docs/device-logs/trainer_loop/`; nothing here is typed in.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::build::Files;
use crate::plot::{Chart, Line, chart_svg};

mod sections;
use sections::{plots, render_accum, render_combine, render_tp};

/// The logs' folder.
pub const LOGS: &str = "docs/device-logs/trainer_loop";

/// What the section reads, listed beside the logs in `SCENARIOS_FILE` (paths relative to
/// [`LOGS`] unless they say otherwise).
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Sections {
    /// The scenarios, in the section's order.
    scenarios: Vec<Scenario>,
    /// The gradient-accumulation table: per model, its step runs with 1 and 8 micro-batches.
    grad_accum: Vec<GradAccum>,
    /// The host-and-GPU combination table: per model, its reports (from the repository's root)
    /// and its eager step runs.
    combine: Vec<Combine>,
    /// `te_tp`'s results over a real TP 2 group.
    tp_comm: String,
}

/// One scenario: its name, what ran, and the step benchmark outputs.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
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
struct GradAccum {
    model: String,
    files: Vec<String>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Combine {
    model: String,
    cublaslt: String,
    te: String,
    steps: Vec<String>,
}

/// One step benchmark output (`step_bench --json`), as this section reads it.
#[derive(serde::Deserialize, Default)]
struct StepRun {
    /// False for a run its time limit cut short.
    #[serde(default = "yes")]
    complete: bool,
    #[serde(default)]
    grad_accum: Option<u64>,
    #[serde(default)]
    layers: Option<f64>,
    #[serde(default)]
    results: Vec<StepRow>,
}

fn yes() -> bool {
    true
}

/// One token count and execution.
#[derive(serde::Deserialize, Default)]
struct StepRow {
    #[serde(default)]
    execution: Option<String>,
    #[serde(default)]
    tokens: Option<u64>,
    #[serde(default)]
    error: Option<String>,
    #[serde(default)]
    modes: BTreeMap<String, ModeRow>,
}

/// One mode's figures; a missing one reads as NaN.
#[derive(serde::Deserialize, Default)]
struct ModeRow {
    #[serde(default)]
    fp8_groups: Vec<String>,
    #[serde(default)]
    ms_median: Option<f64>,
    #[serde(default)]
    vs_bf16_median: Option<f64>,
    #[serde(default)]
    vs_bf16_p10: Option<f64>,
    #[serde(default)]
    vs_bf16_p90: Option<f64>,
    #[serde(default)]
    verdict_vs_bf16: Option<String>,
    #[serde(default)]
    vs_best_of_bf16_fp8: Option<f64>,
}

/// A mode a row does not have.
static NO_MODE: ModeRow = ModeRow {
    fp8_groups: Vec::new(),
    ms_median: None,
    vs_bf16_median: None,
    vs_bf16_p10: None,
    vs_bf16_p90: None,
    verdict_vs_bf16: None,
    vs_best_of_bf16_fp8: None,
};

impl StepRow {
    fn tokens(&self) -> u64 {
        self.tokens.unwrap_or(0)
    }

    fn mode(&self, name: &str) -> &ModeRow {
        self.modes.get(name).unwrap_or(&NO_MODE)
    }
}

impl ModeRow {
    fn median(&self) -> f64 {
        self.vs_bf16_median.unwrap_or(f64::NAN)
    }

    fn best(&self) -> f64 {
        self.vs_best_of_bf16_fp8.unwrap_or(f64::NAN)
    }

    fn band(&self) -> (f64, f64) {
        (
            self.vs_bf16_p10.unwrap_or(f64::NAN),
            self.vs_bf16_p90.unwrap_or(f64::NAN),
        )
    }

    fn ms(&self) -> f64 {
        self.ms_median.unwrap_or(f64::NAN)
    }

    fn verdict(&self) -> &str {
        self.verdict_vs_bf16.as_deref().unwrap_or("?")
    }
}

/// The section's inputs and prose files.
const SCENARIOS_FILE: &str = "docs/device-logs/trainer_loop/scenarios.json";
/// The section's prose: its opening, and the reading of the misses that closes it.
const INTRO: &str = "docs/results/e2e/intro.md";
const MISSES: &str = "docs/results/e2e/misses.md";
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

/// A run that hit its time limit before writing JSON keeps its per-token summary lines
/// (`  tokens N eager: bf16 1.000, fp8 1.275, policy:x.json 1.000, oracle 1.000`): medians only.
fn from_log(text: &str) -> StepRun {
    let mut results = Vec::new();
    for line in text.lines() {
        let Some(rest) = line.trim().strip_prefix("tokens ") else {
            continue;
        };
        let Some((head, tail)) = rest.split_once(": ") else {
            continue;
        };
        let Some((tokens, exec)) = head.split_once(' ') else {
            continue;
        };
        if !tail.starts_with("bf16 ") {
            continue;
        }
        let mut modes = BTreeMap::new();
        for part in tail.split(", ") {
            if let Some((name, v)) = part.rsplit_once(' ')
                && let Ok(x) = v.parse::<f64>()
            {
                let m = ModeRow {
                    vs_bf16_median: Some(x),
                    verdict_vs_bf16: Some("median only".to_owned()),
                    ..ModeRow::default()
                };
                modes.insert(name.to_owned(), m);
            }
        }
        let fp8 = modes
            .get("fp8")
            .and_then(|m| m.vs_bf16_median)
            .unwrap_or(1.0);
        for m in modes.values_mut() {
            m.vs_best_of_bf16_fp8 = Some(m.median() / fp8.min(1.0));
        }
        results.push(StepRow {
            tokens: Some(tokens.parse::<u64>().unwrap_or(0)),
            execution: Some(exec.to_owned()),
            error: None,
            modes,
        });
    }
    StepRun {
        complete: true,
        grad_accum: None,
        layers: None,
        results,
    }
}

/// Which backend and objective made a policy, from its file name in the logs (`policy:<name>`,
/// or `policy:<folder>/<name>` where two policies share a name: `eager/` and `te/` are the
/// shipped folders).
fn policy_label(mode: &str, file: &str) -> &'static str {
    let name = mode.trim_start_matches("policy:");
    let new_model = file.contains("qwen3_30b_a3b") || file.contains("mixtral");
    if name.ends_with("_tp2_comm.json") {
        TP_COMM_LABEL
    } else if name.ends_with("_te_eager.json") || name.starts_with("te/") {
        "TE, eager"
    } else if name.ends_with("_te_graphed.json") {
        "TE, GPU time"
    } else if name.ends_with("_host.json") || name.starts_with("eager/") {
        "cuBLASLt + host profile (eager)"
    } else if new_model {
        "cost model, GPU time"
    } else {
        "cuBLASLt, GPU time"
    }
}

/// A TE eager policy whose TP 2 rules were measured over a real TP group (`te_tp`).
const TP_COMM_LABEL: &str = "TE, eager, TP communication";

/// The policy an objective's user would pick: eager -> TE eager, else cuBLASLt + host profile;
/// graphed -> cuBLASLt (or the cost model for a model not measured).
fn is_objective_policy(label: &str, execution: &str) -> bool {
    match execution {
        "eager" => {
            label == "TE, eager"
                || label == TP_COMM_LABEL
                || label == "cuBLASLt + host profile (eager)"
        }
        _ => {
            label == "cuBLASLt, GPU time"
                || label == "cost model, GPU time"
                || label == "TE, GPU time"
        }
    }
}

/// A step run under [`LOGS`]: its JSON, or what a log cut short kept.
fn read_run(root: &Path, rel: &str) -> Result<StepRun, String> {
    let p = root.join(LOGS).join(rel);
    let t = std::fs::read_to_string(&p).map_err(|e| format!("{}: {e}", p.display()))?;
    if rel.ends_with(".log") {
        return Ok(from_log(&t));
    }
    serde_json::from_str(&t).map_err(|e| format!("{}: {e}", p.display()))
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

/// Tallies of the targets, per objective policy.
#[derive(Default)]
struct Tally {
    rows: u32,
    not_slower: u32,
    within_2pct: u32,
    misses: Vec<String>,
}

/// Where the section's plots go.
pub const PLOT_DIR: &str = "docs/plots/e2e";

/// Renders the section and its plots (paths relative to [`PLOT_DIR`]): per scenario and
/// execution, each mode's step speedup over all-BF16 against tokens.
pub fn render(root: &Path) -> Result<(String, Files), String> {
    let mut s = String::new();
    let mut files = Files::new();
    s.push_str(&prose(root, INTRO)?);
    s.push('\n');
    let mut tallies: Tallies = Default::default();
    let mut agree: Vec<(String, u32, u32, u32, u32)> = Vec::new();
    let sec = sections(root)?;
    let parts = Parts::parse(&prose(root, PARTS)?);
    for (i, sc) in sec.scenarios.iter().enumerate() {
        let _ = writeln!(s, "### {}: {}\n", sc.name, sc.what);
        for (exec, svg) in plots(root, sc)? {
            let name = format!("{:02}_{exec}.svg", i + 1);
            let _ = writeln!(
                s,
                "![{}, {exec}: step speedup over BF16 per mode](plots/e2e/{name})\n",
                sc.what
            );
            files.insert(PathBuf::from(name), svg.into_bytes());
        }
        let (same_g, tot_g, same_e, tot_e) = scenario_table(root, sc, &mut s, &mut tallies)?;
        s.push('\n');
        if tot_g + tot_e > 0 {
            agree.push((sc.what.clone(), same_g, tot_g, same_e, tot_e));
        }
    }
    write_tallies(&mut s, &parts, &tallies, &agree)?;
    render_accum(root, &parts, &sec.grad_accum, &mut s)?;
    render_combine(root, &parts, &sec.combine, &mut s)?;
    render_tp(root, &parts, &sec.tp_comm, &mut s, &mut files)?;
    s.push('\n');
    s.push_str(&prose(root, MISSES)?);
    Ok((s, files))
}

/// Per (execution, policy label): the rows judged against that objective's targets.
type Tallies = std::collections::BTreeMap<(String, String), Tally>;

/// One scenario's table: a row per run, execution and token count; returns the decision
/// agreement with TE (same and total groups, against TE's GPU time and TE's eager policy).
fn scenario_table(
    root: &Path,
    sc: &Scenario,
    s: &mut String,
    tallies: &mut Tallies,
) -> Result<(u32, u32, u32, u32), String> {
    let _ = writeln!(
        s,
        "| run | execution | tokens | BF16 ms | all-FP8 / BF16 | oracle / BF16 | policy: / BF16 (band) verdict, / best |\n|---|---|---|---|---|---|---|"
    );
    let (mut same_g, mut tot_g, mut same_e, mut tot_e) = (0, 0, 0, 0);
    for rel in sc.files.iter().map(String::as_str) {
        let v = read_run(root, rel)?;
        let mut run = rel.split('/').next().unwrap_or(rel).to_owned();
        if !v.complete {
            // A run cut by its time limit: only the cases it finished.
            run.push_str(" (partial)");
        }
        for row in &v.results {
            let exec = row.execution.as_deref().unwrap_or("eager");
            let tokens = row.tokens();
            if let Some(e) = &row.error {
                let _ = writeln!(s, "| {run} | {exec} | {tokens} | error: {e} | | | |");
                continue;
            }
            let (bf, fp) = (row.mode("bf16"), row.mode("fp8"));
            let oracle = row
                .modes
                .get("oracle")
                .map_or("-".to_owned(), |o| format!("{:.3}", o.median()));
            let (cells, cub, te) = policy_cells(&row.modes, rel, sc, exec, tokens, tallies);
            // Decision agreement, once per token count (eager rows; both executions share
            // the same policies).
            if exec == "eager"
                && let Some(c) = &cub
            {
                let all = &fp.fp8_groups;
                for (label, t) in &te {
                    let same = all
                        .iter()
                        .filter(|g| c.contains(g) == t.contains(g))
                        .count() as u32;
                    let n = all.len() as u32;
                    if label == "TE, GPU time" {
                        same_g += same;
                        tot_g += n;
                    } else {
                        same_e += same;
                        tot_e += n;
                    }
                }
            }
            let ms = bf.ms();
            let ms = if ms.is_nan() {
                "- (log)".to_owned()
            } else {
                format!("{ms:.2}")
            };
            let _ = writeln!(
                s,
                "| {run} | {exec} | {tokens} | {ms} | {:.3} ({}) | {oracle} | {} |",
                fp.median(),
                fp.verdict(),
                cells.join("<br>")
            );
        }
    }
    Ok((same_g, tot_g, same_e, tot_e))
}

/// The FP8 groups of each TE policy mode of a row, by label.
type TeGroups = Vec<(String, Vec<String>)>;

/// Each policy mode's cell of a row; the tallies of the objective policies are counted here.
/// Also returns the cuBLASLt (or cost-model) policy's FP8 groups and the TE policies'.
fn policy_cells(
    modes: &BTreeMap<String, ModeRow>,
    rel: &str,
    sc: &Scenario,
    exec: &str,
    tokens: u64,
    tallies: &mut Tallies,
) -> (Vec<String>, Option<Vec<String>>, TeGroups) {
    let mut cells = Vec::new();
    let mut cub: Option<Vec<String>> = None;
    let mut te: TeGroups = Vec::new();
    for (name, m) in modes {
        if !name.starts_with("policy:") {
            continue;
        }
        let label = policy_label(name, rel);
        let (ratio, best, verdict) = (m.median(), m.best(), m.verdict());
        let (lo, hi) = m.band();
        cells.push(if lo.is_nan() {
            format!("{label}: {ratio:.3} ({verdict}), {best:.3}")
        } else {
            format!("{label}: {ratio:.3} ({lo:.3}-{hi:.3}) {verdict}, {best:.3}")
        });
        if label.starts_with("cuBLASLt, ") || label.starts_with("cost model") {
            cub = Some(m.fp8_groups.clone());
        }
        if label == "TE, eager" || label == "TE, GPU time" {
            te.push((label.to_owned(), m.fp8_groups.clone()));
        }
        if is_objective_policy(label, exec) {
            let t = tallies
                .entry((exec.to_owned(), label.to_owned()))
                .or_default();
            t.rows += 1;
            if verdict != "slower" {
                t.not_slower += 1;
            }
            if best <= 1.02 {
                t.within_2pct += 1;
            }
            if verdict == "slower" || best > 1.02 {
                t.misses.push(format!(
                    "{} ({}) {exec} {tokens}: {ratio:.3} of BF16 ({verdict}), {best:.3} of best; FP8 groups: {}",
                    sc.what.split(',').next().unwrap_or(""),
                    sc.name,
                    m.fp8_groups.join(",")
                ));
            }
        }
    }
    (cells, cub, te)
}

/// The targets per objective, their misses, and the cuBLASLt-vs-TE decision agreement.
fn write_tallies(
    s: &mut String,
    parts: &Parts,
    tallies: &Tallies,
    agree: &[(String, u32, u32, u32, u32)],
) -> Result<(), String> {
    s.push_str(parts.get("targets")?);
    for ((exec, label), t) in tallies {
        let _ = writeln!(
            s,
            "| {exec} | {label} | {} | {} | {} |",
            t.rows, t.not_slower, t.within_2pct
        );
    }
    s.push_str(parts.get("misses-intro")?);
    for ((exec, label), t) in tallies {
        for m in &t.misses {
            let _ = writeln!(s, "- {exec}, {label}: {m}");
        }
    }
    s.push_str(parts.get("agreement")?);
    let pct = |a: u32, b: u32| {
        if b == 0 {
            "-".to_owned()
        } else {
            format!("{a}/{b} ({:.0}%)", 100.0 * f64::from(a) / f64::from(b))
        }
    };
    for (what, sg, tg, se, te) in agree {
        let _ = writeln!(s, "| {what} | {} | {} |", pct(*sg, *tg), pct(*se, *te));
    }
    Ok(())
}

#[cfg(test)]
mod tests;
