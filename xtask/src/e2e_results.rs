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

/// One plot per execution: each mode's speedup over BF16 (BF16 / mode, so above 1 is faster)
/// against tokens, with the p10-p90 band of the paired rounds; a mode's points come from the first
/// run of the scenario that has them.
fn plots(root: &Path, sc: &Scenario) -> Result<Vec<(String, String)>, String> {
    let mut by_exec: BTreeMap<String, BTreeMap<String, Line>> = BTreeMap::new();
    for rel in sc.files.iter().map(String::as_str) {
        let v = read_run(root, rel)?;
        for row in &v.results {
            let exec = row.execution.as_deref().unwrap_or("eager").to_owned();
            let tokens = row.tokens();
            for (name, m) in &row.modes {
                if name == "bf16" {
                    continue;
                }
                let label = if name.starts_with("policy:") {
                    policy_label(name, rel).to_owned()
                } else {
                    format!("all-{}", name.to_uppercase()).replace("all-ORACLE", "oracle")
                };
                let line = by_exec
                    .entry(exec.clone())
                    .or_default()
                    .entry(label.clone())
                    .or_insert(Line {
                        label,
                        points: Vec::new(),
                        band: Vec::new(),
                        min_tokens: None,
                    });
                if line.points.iter().any(|p| p.0 == tokens) {
                    continue;
                }
                let med = m.median();
                if !med.is_finite() || med <= 0.0 {
                    continue;
                }
                line.points.push((tokens, 1.0 / med));
                let (lo, hi) = m.band();
                if lo.is_finite() && hi.is_finite() && lo > 0.0 {
                    line.band.push((tokens, 1.0 / hi, 1.0 / lo));
                }
            }
        }
    }
    let mut out = Vec::new();
    for (exec, lines) in by_exec {
        let lines = sorted_lines(lines.into_values());
        let title = format!("{}, {exec}", sc.what.split(" (").next().unwrap_or(&sc.what));
        let chart = Chart {
            x_desc: "tokens per sequence (log scale)",
            y_desc: "step speedup over all-BF16 (BF16 ms / mode ms)",
            threshold_label: "all-BF16 =",
            rules: false,
        };
        out.push((exec, chart_svg(&title, 1.0, &lines, &chart)?));
    }
    Ok(out)
}

/// Lines in token order; a band that misses some point is dropped (the chart draws none rather
/// than a wrong one).
fn sorted_lines(lines: impl Iterator<Item = Line>) -> Vec<Line> {
    let mut lines: Vec<Line> = lines.collect();
    for l in &mut lines {
        l.points.sort_by_key(|p| p.0);
        l.band.sort_by_key(|b| b.0);
        if l.band.len() != l.points.len() {
            l.band.clear();
        }
    }
    lines
}

/// Gradient accumulation: the optimizer (which re-quantizes FP8 parameters) once per 8
/// micro-batches instead of once per micro-batch.
fn render_accum(
    root: &Path,
    parts: &Parts,
    cases: &[GradAccum],
    s: &mut String,
) -> Result<(), String> {
    s.push_str(parts.get("accum")?);
    for case in cases {
        for rel in case.files.iter().map(String::as_str) {
            let v = read_run(root, rel)?;
            let ga = v.grad_accum.unwrap_or(1);
            for row in &v.results {
                let pol = row
                    .modes
                    .iter()
                    .find(|(n, _)| {
                        let l = policy_label(n, rel);
                        n.starts_with("policy:")
                            && (l == "cuBLASLt, GPU time" || l == "cost model, GPU time")
                    })
                    .map_or("-".to_owned(), |(_, m)| format!("{:.3}", m.median()));
                let tokens = row.tokens();
                if !(1024..=4096).contains(&tokens) {
                    continue;
                }
                let _ = writeln!(
                    s,
                    "| {} | {ga} | {} | {tokens} | {:.3} | {pol} |",
                    case.model,
                    row.execution.as_deref().unwrap_or("?"),
                    row.mode("fp8").median()
                );
            }
        }
    }
    Ok(())
}

/// The ways to combine per-module host and GPU time compared with the measured eager steps.
const RULES: [(&str, &str); 5] = [
    ("A", "GPU time only (cuBLASLt)"),
    ("B", "per module max(GPU, host) (the host profile)"),
    ("C", "TE eager step per module"),
    ("D", "per layer max(sum GPU, sum host)"),
    ("E", "per module GPU + host"),
];

/// Per (module, tokens): the report's measured points.
type Points = BTreeMap<(String, u64), fp8_report::Point>;

fn points_by(root: &Path, rel: &str) -> Result<Points, String> {
    let report = fp8_report::read(&root.join(rel)).map_err(|e| e.to_string())?;
    Ok(report
        .points
        .into_iter()
        .filter(|p| p.status == fp8_report::Status::Ok)
        .map(|p| ((p.ub_name.clone().unwrap_or_default(), p.tokens), p))
        .collect())
}

/// Predicts all-FP8 / BF16 of each measured eager step from per-module figures under each rule:
/// the step's time outside the four modules (attention core, norms, optimizer) is what the
/// measured BF16 step leaves after the rule's BF16 module times, and is kept for FP8.
fn render_combine(
    root: &Path,
    parts: &Parts,
    cases: &[Combine],
    s: &mut String,
) -> Result<(), String> {
    let host_text =
        std::fs::read_to_string(root.join(crate::H200_HOST_PROFILE)).map_err(|e| e.to_string())?;
    let host = fp8_merge::host::HostProfile::parse(&host_text, crate::H200_HOST_PROFILE)
        .map_err(|e| e.to_string())?;
    s.push_str(parts.get("combine")?);
    for (k, what) in RULES {
        let _ = writeln!(s, "- {k}: {what}");
    }
    let _ = writeln!(
        s,
        "\n| model | tokens | measured | A | B | C | D | E |\n|---|---|---|---|---|---|---|---|"
    );
    let mut err: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
    let mut sign: BTreeMap<&str, u32> = BTreeMap::new();
    let mut rows = 0u32;
    for case in cases {
        let (c, t) = (points_by(root, &case.cublaslt)?, points_by(root, &case.te)?);
        let mut seen = std::collections::BTreeSet::new();
        for rel in case.steps.iter().map(String::as_str) {
            let v = read_run(root, rel)?;
            let layers = v.layers.unwrap_or(1.0);
            for row in &v.results {
                let tokens = row.tokens();
                if row.execution.as_deref() != Some("eager") || !seen.insert(tokens) {
                    continue;
                }
                let (b, f8) = (row.mode("bf16").ms(), row.mode("fp8").ms());
                let measured = f8 / b;
                let mut cells = Vec::new();
                for (k, _) in RULES {
                    let predict = |prec| predicted_layer(k, prec, tokens, &c, &t, &host);
                    let (Some(lb), Some(lf)) = (predict("bf16"), predict("fp8")) else {
                        cells.push("-".to_owned());
                        continue;
                    };
                    let pred = (b - layers * lb + layers * lf) / b;
                    err.entry(k).or_default().push((pred - measured).abs());
                    if (pred < 1.0) == (measured < 1.0) {
                        *sign.entry(k).or_default() += 1;
                    }
                    cells.push(format!("{pred:.3}"));
                }
                rows += 1;
                let _ = writeln!(
                    s,
                    "| {} | {tokens} | {measured:.3} | {} |",
                    case.model,
                    cells.join(" | ")
                );
            }
        }
    }
    write_rule_errors(s, &err, &sign, rows);
    Ok(())
}

/// One layer's module time under a combination rule (`RULES`), from the cuBLASLt points `c`,
/// the TE points `t` and the host profile; `None` where a figure is missing.
fn predicted_layer(
    rule: &str,
    prec: &str,
    tokens: u64,
    c: &Points,
    t: &Points,
    host: &fp8_merge::host::HostProfile,
) -> Option<f64> {
    let get = |m: &Points, g: &str| -> Option<(f64, f64)> {
        let p = m.get(&(g.to_owned(), tokens))?;
        let (hb, hf) = host.floors(p.module_kind, 1)?;
        let (timing, h) = if prec == "bf16" {
            (p.bf16.as_ref(), hb)
        } else {
            (p.fp8.as_ref(), hf)
        };
        Some((timing?.total_ms.median, h))
    };
    let (mut gpu, mut hst, mut tot) = (0.0, 0.0, 0.0);
    for g in ["qkv", "proj", "fc1", "fc2"] {
        let (gt, h) = get(c, g)?;
        gpu += gt;
        hst += h;
        tot += match rule {
            "A" => gt,
            "B" => gt.max(h),
            "C" => get(t, g)?.0,
            _ => gt + h,
        };
    }
    Some(if rule == "D" { gpu.max(hst) } else { tot })
}

/// Each rule's prediction error over the measured steps, and how often it got FP8's side of 1.
fn write_rule_errors(
    s: &mut String,
    err: &BTreeMap<&str, Vec<f64>>,
    sign: &BTreeMap<&str, u32>,
    rows: u32,
) {
    let _ = writeln!(
        s,
        "\n| rule | mean abs error | largest | FP8 faster or not, as measured |\n|---|---|---|---|"
    );
    for (k, what) in RULES {
        let e = err.get(k).cloned().unwrap_or_default();
        if e.is_empty() {
            continue;
        }
        let mean = e.iter().sum::<f64>() / e.len() as f64;
        let max = e.iter().copied().fold(0.0, f64::max);
        let _ = writeln!(
            s,
            "| {k}: {what} | {mean:.3} | {max:.3} | {}/{rows} |",
            sign.get(k).copied().unwrap_or(0)
        );
    }
}

/// TP 2 with real communication against the one-GPU per-rank mode.
fn render_tp(
    root: &Path,
    parts: &Parts,
    rel: &str,
    s: &mut String,
    files: &mut Files,
) -> Result<(), String> {
    let v = read(root, rel)?;
    s.push_str(&parts.get("tp")?.replace("{iters}", &v["iters"].to_string()));
    let results = v["results"].as_array().cloned().unwrap_or_default();
    for c in v["crossovers"].as_array().into_iter().flatten() {
        let g = c["group"].as_str().unwrap_or("?");
        let at = results
            .iter()
            .filter(|r| r["group"] == g && r["status"] == "ok")
            .max_by_key(|r| r["tokens"].as_u64().unwrap_or(0))
            .map_or("-".to_owned(), |r| {
                format!(
                    "{:.2} / {:.2}",
                    f(&r["tp"], "speedup"),
                    f(&r["local"], "speedup")
                )
            });
        let show = |x: &Value| x.as_u64().map_or("never".to_owned(), |t| t.to_string());
        let _ = writeln!(
            s,
            "| {g} | {} | {} | {at} |",
            show(&c["crossover_tp"]),
            show(&c["crossover_local"])
        );
    }
    let name = "tp2_comm.svg";
    files.insert(PathBuf::from(name), tp_plot(&results)?.into_bytes());
    let _ = writeln!(
        s,
        "\n![FP8 speedup per module against tokens, TP 2 with communication and one rank alone](plots/e2e/{name})"
    );
    render_tp_policies(root, parts, s)
}

/// Each module's FP8 speedup (BF16 / FP8, eager forward + backward) against tokens, over the TP
/// group and one rank alone, with the spread of the timings.
fn tp_plot(results: &[Value]) -> Result<String, String> {
    let mut lines: BTreeMap<(String, &str), Line> = BTreeMap::new();
    for r in results.iter().filter(|r| r["status"] == "ok") {
        let g = r["group"].as_str().unwrap_or("?");
        let tokens = r["tokens"].as_u64().unwrap_or(0);
        for (way, label) in [("tp", "TP group"), ("local", "one rank alone")] {
            let w = &r[way];
            let line = lines.entry((g.to_owned(), label)).or_insert_with(|| Line {
                label: format!("{g}, {label}"),
                points: Vec::new(),
                band: Vec::new(),
                min_tokens: None,
            });
            line.points.push((tokens, f(w, "speedup")));
            let t = |prec: &str, q: &str| w[prec]["total_ms"][q].as_f64().unwrap_or(f64::NAN);
            let (lo, hi) = (
                t("bf16", "p10") / t("fp8", "p90"),
                t("bf16", "p90") / t("fp8", "p10"),
            );
            if lo.is_finite() && hi.is_finite() {
                line.band.push((tokens, lo, hi));
            }
        }
    }
    let lines = sorted_lines(lines.into_values());
    let chart = Chart {
        x_desc: "tokens per sequence (log scale)",
        y_desc: "FP8 speedup (BF16 ms / FP8 ms), eager fwd + bwd",
        threshold_label: "BF16 =",
        rules: false,
    };
    chart_svg(
        "Qwen2.5-72B modules at TP 2: with communication vs one rank alone",
        1.0,
        &lines,
        &chart,
    )
}

/// The TP 2 rules merged (eager objective) from one rank alone and from the TP group, and where
/// the step over the group judged them.
fn render_tp_policies(root: &Path, parts: &Parts, s: &mut String) -> Result<(), String> {
    s.push_str(parts.get("tp-policies")?);
    let opt = fp8_merge::MergeOptions {
        trainer: Some(fp8_merge::Trainer::Eager),
        ..fp8_merge::MergeOptions::default()
    };
    for (model, name) in [
        ("Qwen2.5-72B", "qwen2_5_72b"),
        ("Llama-3.2-1B", "llama3_2_1b"),
    ] {
        let rules = |file: &str| -> Result<Option<BTreeMap<String, Option<u64>>>, String> {
            let p = root.join("reports/h200/te").join(file);
            if !p.exists() {
                return Ok(None);
            }
            let l = fp8_merge::load(&p, 16).map_err(|e| e.to_string())?;
            let m = fp8_merge::merge(&[l], &opt).map_err(|e| e.to_string())?;
            Ok(Some(
                m.outcomes
                    .iter()
                    .filter(|o| o.key.par == fp8_merge::ParKey::Tp(2))
                    .map(|o| {
                        (
                            o.key.ub_name.clone().unwrap_or_default(),
                            o.rule.map(|r| r.0),
                        )
                    })
                    .collect(),
            ))
        };
        let alone = rules(&format!("te_{name}_tp2.json"))?;
        let Some(comm) = rules(&format!("te_{name}_tp2_comm.json"))? else {
            continue;
        };
        let show = |r: Option<u64>| r.map_or("BF16".to_owned(), |t| t.to_string());
        for (ub, c) in &comm {
            let a = alone.as_ref().map_or("not measured".to_owned(), |a| {
                a.get(ub).map_or("-".to_owned(), |r| show(*r))
            });
            let _ = writeln!(s, "| {model} | {ub} | {a} | {} |", show(*c));
        }
    }
    s.push_str(parts.get("tp-closing")?);
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::{
        LOGS, PARTS, Parts, TP_COMM_LABEL, from_log, is_objective_policy, policy_label, sections,
    };

    #[test]
    fn a_log_keeps_its_per_token_medians_and_best_of() {
        let v = from_log(
            "  tokens 1024 eager: oracle up qkv: 0.99 (not kept)\n  tokens 1024 eager: bf16 1.000, fp8 1.250, policy:a.json 1.100, oracle 1.000\n\
             junk\n  tokens 4096 graphed: bf16 1.000, fp8 0.800, policy:a.json 0.880, oracle 0.800\n",
        );
        let r = &v.results;
        assert_eq!(r.len(), 2);
        assert_eq!(r[0].tokens, Some(1024));
        assert_eq!(r[1].execution.as_deref(), Some("graphed"));
        let p = r[1].mode("policy:a.json");
        assert!((p.median() - 0.88).abs() < 1e-12);
        // best of BF16 and FP8 is FP8 (0.8): 0.88 / 0.8
        assert!((p.best() - 1.1).abs() < 1e-12);
        assert_eq!(r[0].mode("policy:a.json").verdict(), "median only");
        assert!(v.complete && r[0].mode("policy:a.json").band().0.is_nan());
    }

    #[test]
    fn prose_blocks_run_from_their_marker_to_the_next_as_written() {
        let p = Parts::parse(
            "<!-- a note, not a block -->\nignored\n<!-- one -->\n\n### A\ntext\n<!-- two -->\nlast",
        );
        assert_eq!(p.get("one").unwrap(), "\n### A\ntext\n");
        assert_eq!(p.get("two").unwrap(), "last");
        assert!(p.get("three").unwrap_err().contains("<!-- three -->"));
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let shipped = Parts::parse(&std::fs::read_to_string(root.join(PARTS)).unwrap());
        for name in [
            "targets",
            "misses-intro",
            "agreement",
            "accum",
            "combine",
            "tp",
            "tp-policies",
            "tp-closing",
        ] {
            assert!(!shipped.get(name).unwrap().trim().is_empty(), "{name}");
        }
    }

    #[test]
    fn the_sections_data_file_reads_and_names_existing_runs() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let sec = sections(&root).unwrap();
        assert!(sec.scenarios.len() >= 10 && !sec.grad_accum.is_empty() && !sec.combine.is_empty());
        for rel in sec.scenarios.iter().flat_map(|s| &s.files) {
            assert!(root.join(LOGS).join(rel).exists(), "{rel}");
        }
        for c in &sec.combine {
            assert!(
                root.join(&c.cublaslt).exists() && root.join(&c.te).exists(),
                "{}",
                c.model
            );
        }
    }

    #[test]
    fn policies_are_labelled_by_backend_and_objective() {
        assert_eq!(policy_label("policy:qwen_te_eager.json", "x"), "TE, eager");
        assert_eq!(
            policy_label("policy:qwen_te_graphed.json", "x"),
            "TE, GPU time"
        );
        assert_eq!(
            policy_label("policy:qwen2_5_72b_host.json", "x"),
            "cuBLASLt + host profile (eager)"
        );
        assert_eq!(
            policy_label("policy:mixtral_8x7b.json", "c/sb/mixtral.json"),
            "cost model, GPU time"
        );
        assert_eq!(
            policy_label("policy:qwen2_5_72b.json", "ab/sb/qwen72b_tp8.json"),
            "cuBLASLt, GPU time"
        );
        assert!(
            is_objective_policy("TE, eager", "eager")
                && !is_objective_policy("TE, eager", "graphed")
        );
        // Policies that share a file name are named with their folder by the step benchmark.
        let f = "g/sb/qwen72b_tp2_comm_b.json";
        assert_eq!(
            policy_label("policy:policies/qwen2_5_72b.json", f),
            "cuBLASLt, GPU time"
        );
        assert_eq!(
            policy_label("policy:eager/qwen2_5_72b.json", f),
            "cuBLASLt + host profile (eager)"
        );
        assert_eq!(policy_label("policy:te/qwen2_5_72b.json", f), "TE, eager");
        assert_eq!(
            policy_label("policy:qwen2_5_72b_tp2_comm.json", f),
            TP_COMM_LABEL
        );
        assert!(
            is_objective_policy(TP_COMM_LABEL, "eager")
                && !is_objective_policy(TP_COMM_LABEL, "graphed")
        );
    }
}
