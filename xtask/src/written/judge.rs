//! `{{judge: FILE...}}`: the step benchmark's results (`fp8_report::step_results`, the one
//! reader), the policy mode of each row against BF16, all-FP8 and the oracle.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use fp8_report::step_results::{ModeResult, StepResults, StepRow, StepTrainer};

/// One row per model, execution and count. A failed row that a later file ran again (the same
/// model, layout, execution and count) is replaced in place by that run, marked "(re-run)".
pub(super) fn judge(docs: &[(String, StepResults)]) -> String {
    let mut rows: Vec<JudgeRow> = Vec::new();
    for (_, v) in docs {
        let label = judge_label(v);
        for r in &v.results {
            let key = (label.clone(), r.execution.name().to_owned(), r.tokens);
            let failed_before = rows.iter().position(|row| row.failed && row.key == key);
            if let Some(e) = &r.error {
                if failed_before.is_none() {
                    let line = format!(
                        "| {label} | {} | {} | - | error: {} | - | - | - | - |",
                        key.1,
                        r.tokens,
                        error_head(e)
                    );
                    rows.push(JudgeRow {
                        key,
                        line,
                        failed: true,
                    });
                }
                continue;
            }
            let rerun = failed_before.map_or("", |_| " (re-run)");
            let Some(line) = judge_line(&label, v.trainer, r, rerun) else {
                continue;
            };
            let row = JudgeRow {
                key,
                line,
                failed: false,
            };
            match failed_before {
                Some(i) => rows[i] = row,
                None => rows.push(row),
            }
        }
    }
    let mut s = String::from(
        "| model | execution | tokens | FP8 groups | / BF16 (p10-p90) | verdict | all-FP8 / BF16 | oracle / BF16 | / min |\n|---|---|---:|---:|---|---|---:|---:|---:|\n",
    );
    for row in rows {
        s.push_str(&row.line);
        s.push('\n');
    }
    s
}

struct JudgeRow {
    key: (String, String, u64),
    line: String,
    failed: bool,
}

pub(super) fn judge_label(v: &StepResults) -> String {
    let p = Path::new(&v.model);
    let stem = p
        .file_stem()
        .map(|x| x.to_string_lossy().into_owned())
        .unwrap_or_default();
    // A held-out model is a folder with a config.json: the folder names it.
    let name = if stem == "config" {
        p.parent()
            .and_then(Path::file_name)
            .map(|x| x.to_string_lossy().into_owned())
            .unwrap_or(stem)
    } else {
        stem
    };
    let ep =
        v.ep.filter(|e| *e > 1)
            .map(|e| format!(" EP {e}"))
            .unwrap_or_default();
    // Blockwise is the default recipe; any other one is named, or its rows read as blockwise.
    let recipe = v
        .fp8_recipe
        .as_deref()
        .filter(|r| *r != "blockwise")
        .map(|r| format!(", {r}"))
        .unwrap_or_default();
    format!("{name}, TP {}{ep}, {} layer(s){recipe}", v.tp, v.layers)
}

/// The policy mode's line of a row that ran; `None` where the row has no policy mode.
fn judge_line(label: &str, trainer: StepTrainer, r: &StepRow, rerun: &str) -> Option<String> {
    let (_, m) = r
        .modes
        .iter()
        .find(|(k, _)| k.starts_with("hook:") || k.starts_with("policy:"))?;
    let via = match trainer {
        StepTrainer::Megatron => " (Megatron, hook)",
        StepTrainer::Te => " (TE blocks)",
    };
    let oracle = r
        .modes
        .get("oracle")
        .map_or_else(|| "-".to_owned(), |o| format!("{:.3}", o.vs_bf16_median));
    let fp8 = r.modes.get("fp8").map_or(f64::NAN, |f| f.vs_bf16_median);
    Some(format!(
        "| {label} | {}{via} | {}{rerun} | {} | {:.3} ({:.3}-{:.3}) | {} | {fp8:.3} | {oracle} | {} |",
        r.execution,
        r.tokens,
        m.fp8_groups.len(),
        m.vs_bf16_median,
        m.vs_bf16_p10,
        m.vs_bf16_p90,
        m.verdict_vs_bf16,
        vs_min(&r.modes, m),
    ))
}

/// An error's kind and first sentences, at most 100 characters: the table names the failure,
/// the JSON beside it keeps the whole message.
pub(super) fn error_head(e: &str) -> String {
    let two = e.match_indices(". ").nth(1).map_or(e, |(i, _)| &e[..=i]);
    if two.chars().count() <= 100 {
        return two.to_owned();
    }
    let cut: String = two.chars().take(99).collect();
    format!("{cut}…")
}

/// The policy mode over the fastest of BF16, all-FP8 and (where the row searched one) the
/// oracle: the issue's `/min`. Paired by round with its p10-p90 band where the judge wrote it
/// (`vs_min_*`); from older results the unpaired ratio of medians, and without an oracle the
/// row's own `vs_best_of_bf16_fp8`.
fn vs_min(modes: &BTreeMap<String, ModeResult>, policy: &ModeResult) -> String {
    if let (Some(m), Some(lo), Some(hi)) =
        (policy.vs_min_median, policy.vs_min_p10, policy.vs_min_p90)
    {
        return format!("{m:.3} ({lo:.3}-{hi:.3})");
    }
    let Some(oracle) = modes.get("oracle") else {
        return format!("{:.3}", policy.vs_best_of_bf16_fp8);
    };
    let ms = |name: &str| modes.get(name).map_or(f64::INFINITY, |m| m.ms_median);
    let best = ms("bf16").min(ms("fp8")).min(oracle.ms_median);
    format!("{:.3}", policy.ms_median / best)
}

/// `{{modes: FILE...}}`: one row per policy of every row that ran, for runs that judge several
/// policies side by side: its FP8 groups, its step against BF16 through the hook (or the TE
/// blocks' `policy:`) and through the native config, with the verdict, and the hook's step
/// against the fastest of BF16 and all-FP8 (the trainer's recipe).
pub(super) fn modes(docs: &[(String, StepResults)]) -> String {
    let mut s = String::from(
        "| model | execution | tokens | policy | FP8 groups | hook / BF16 (p10-p90) | native / BF16 (p10-p90) | all-FP8 / BF16 | hook / min |\n|---|---|---:|---|---|---|---|---:|---:|\n",
    );
    let cell = |m: Option<&ModeResult>| {
        m.map_or_else(
            || "-".to_owned(),
            |m| {
                format!(
                    "{:.3} ({:.3}-{:.3}) {}",
                    m.vs_bf16_median, m.vs_bf16_p10, m.vs_bf16_p90, m.verdict_vs_bf16
                )
            },
        )
    };
    for (_, v) in docs {
        let label = judge_label(v);
        for r in v.results.iter().filter(|r| r.error.is_none()) {
            let fp8 = r.modes.get("fp8").map_or(f64::NAN, |f| f.vs_bf16_median);
            // Each policy's modes by integration: hook (or policy), native.
            let mut by: BTreeMap<&str, [Option<&ModeResult>; 2]> = BTreeMap::new();
            for (name, m) in &r.modes {
                let (slot, file) = match name.split_once(':') {
                    Some(("hook" | "policy", f)) => (0, f),
                    Some(("native", f)) => (1, f),
                    _ => continue,
                };
                by.entry(file).or_default()[slot] = Some(m);
            }
            for (file, [hook, native]) in by {
                let Some(first) = hook.or(native) else {
                    continue;
                };
                let groups = if first.fp8_groups.is_empty() {
                    "-".to_owned()
                } else {
                    first.fp8_groups.join(",")
                };
                let _ = writeln!(
                    s,
                    "| {label} | {} | {} | {file} | {groups} | {} | {} | {fp8:.3} | {} |",
                    r.execution,
                    r.tokens,
                    cell(hook),
                    cell(native),
                    vs_min(&r.modes, first),
                );
            }
        }
    }
    s
}

#[cfg(test)]
mod tests;
