//! The hand-written sections of docs/RESULTS.md (`docs/results/*.md`, in name order): their prose
//! is Markdown, and every measured number in them comes from a table rendered here from the
//! device logs a placeholder line names, so no measured number is typed by hand:
//!
//! - `{{probe: FILE...}}`: numerics reports (`fp8sel-numerics`), the worst operand per module;
//! - `{{convergence: FILE...}}`: the convergence check's reports (`fp8_report::convergence`),
//!   final losses and gaps;
//! - `{{judge: FILE...}}`: step-benchmark JSON, the policy mode of each row against BF16;
//! - `{{modes: FILE...}}`: the same, one row per policy mode (several policies judged together);
//! - `{{standing: FILE}}`: the end-to-end runs read against today's policies ([`crate::standing`]);
//! - `{{causes: FILE}}`: the standing misses' causes, one bullet each;
//! - `{{step_model: FILE...}}`: the step model's error against its check, per layout: of a policy
//!   it made, or of a layout's committed `*_inputs_step.json`, fitted afresh by today's tool
//!   with the checks beside it;
//! - `{{step_model_by_model: FILE...}}`: the same, one row per model and run (its layouts
//!   together), for runs of many layouts;
//! - `{{step_model_order: FILE...}}`: the same layouts' held-out steps by where their check
//!   timed their count ([`check_order`]);
//! - `{{table: FILE...}}`: the Markdown table lines of files a device script wrote (its own
//!   output, committed beside its inputs), verbatim.
//!
//! Paths are relative to the repository.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde_json::Value;

mod check_order;
mod judge;
mod step_model;

/// The folder of the written sections.
pub const WRITTEN_RESULTS: &str = "docs/results";

/// Every written section, placeholders replaced, each after a blank line.
pub fn render(root: &Path) -> Result<String, String> {
    let dir = root.join(WRITTEN_RESULTS);
    let mut names: Vec<PathBuf> = match std::fs::read_dir(&dir) {
        Ok(rd) => rd
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "md"))
            .collect(),
        Err(_) => return Ok(String::new()),
    };
    names.sort();
    let mut out = String::new();
    for p in names {
        let text = std::fs::read_to_string(&p).map_err(|e| format!("{}: {e}", p.display()))?;
        out.push('\n');
        for line in text.trim_end().lines() {
            match placeholder(line) {
                Some((kind, files)) => out.push_str(
                    &table(root, kind, &files).map_err(|e| format!("{}: {e}", p.display()))?,
                ),
                None => {
                    out.push_str(line);
                    out.push('\n');
                }
            }
        }
    }
    Ok(out)
}

/// `{{kind: a b c}}` as `(kind, [a, b, c])`.
fn placeholder(line: &str) -> Option<(&str, Vec<&str>)> {
    let inner = line.trim().strip_prefix("{{")?.strip_suffix("}}")?;
    let (kind, files) = inner.split_once(':')?;
    Some((kind.trim(), files.split_whitespace().collect()))
}

fn table(root: &Path, kind: &str, files: &[&str]) -> Result<String, String> {
    if kind == "convergence" {
        // The convergence check's reports, through their one typed reader.
        let typed = files
            .iter()
            .map(|f| {
                let doc = fp8_report::convergence::read_convergence(&root.join(f))
                    .map_err(|e| e.to_string())?;
                Ok(((*f).to_owned(), doc))
            })
            .collect::<Result<Vec<_>, String>>()?;
        return Ok(convergence(&typed));
    }
    if kind == "table" {
        return files.iter().map(|f| markdown_table(root, f)).collect();
    }
    if kind == "judge" || kind == "modes" {
        // The step benchmark's results, through their one typed reader.
        let typed = files
            .iter()
            .map(|f| {
                let doc = fp8_report::step_results::read_step_results(&root.join(f))
                    .map_err(|e| e.to_string())?;
                Ok(((*f).to_owned(), doc))
            })
            .collect::<Result<Vec<_>, String>>()?;
        return Ok(if kind == "judge" {
            judge::judge(&typed)
        } else {
            judge::modes(&typed)
        });
    }
    let docs: Vec<(String, Value)> = files
        .iter()
        .map(|f| {
            if kind.starts_with("step_model") && f.ends_with(step_model::INPUTS) {
                return Ok(((*f).to_owned(), step_model::refit(root, f)?));
            }
            let text = std::fs::read_to_string(root.join(f)).map_err(|e| format!("{f}: {e}"))?;
            let v: Value = serde_json::from_str(&text).map_err(|e| format!("{f}: {e}"))?;
            Ok(((*f).to_owned(), v))
        })
        .collect::<Result<_, String>>()?;
    match kind {
        "probe" => Ok(probe(&docs)),
        "standing" => Ok(docs
            .iter()
            .map(|(_, v)| crate::standing::table(v))
            .collect()),
        "causes" => Ok(docs.iter().map(|(_, v)| causes(v)).collect()),
        "step_model" => step_model::step_model(&docs),
        "step_model_by_model" => step_model::by_model(&docs),
        "step_model_order" => check_order::by_order(root, &docs),
        other => Err(format!(
            "unknown placeholder `{other}` (probe, convergence, judge, modes, standing, causes, step_model, step_model_by_model, step_model_order, table)"
        )),
    }
}

/// A file's Markdown table lines (those starting with `|`), verbatim; a file without one is an
/// error (the placeholder names the wrong file).
fn markdown_table(root: &Path, file: &str) -> Result<String, String> {
    let text = std::fs::read_to_string(root.join(file)).map_err(|e| format!("{file}: {e}"))?;
    let rows: String = text
        .lines()
        .filter(|l| l.starts_with('|'))
        .map(|l| format!("{l}\n"))
        .collect();
    if rows.is_empty() {
        return Err(format!(
            "{file}: no Markdown table (no line starts with `|`); fix: name the file the script wrote its table to"
        ));
    }
    Ok(rows)
}

/// The standing misses' causes, one bullet each: what missed, then why.
fn causes(v: &Value) -> String {
    let mut s = String::new();
    for c in v["causes"].as_array().into_iter().flatten() {
        let _ = writeln!(
            s,
            "- **{}**: {}",
            c["what"].as_str().unwrap_or("?"),
            c["cause"].as_str().unwrap_or("?")
        );
    }
    s
}

fn num(v: &Value, k: &str) -> f64 {
    v.get(k).and_then(Value::as_f64).unwrap_or(f64::NAN)
}

/// A module group without its `decoder.layers.` prefix.
fn short(name: &str) -> &str {
    name.strip_prefix("decoder.layers.").unwrap_or(name)
}

fn probe(docs: &[(String, Value)]) -> String {
    let mut s = String::from(
        "| model | recipe | module | worst operand | rel. RMS | max underflow | max saturated |\n|---|---|---|---|---:|---:|---:|\n",
    );
    for (_, r) in docs {
        let ep = r["settings"]["ep"].as_u64().unwrap_or(1);
        let model = match ep {
            1 => r["model"].as_str().unwrap_or("?").to_owned(),
            e => format!("{}, EP {e}", r["model"].as_str().unwrap_or("?")),
        };
        for m in r["modules"].as_array().into_iter().flatten() {
            let ops = m["operands"].as_object().cloned().unwrap_or_default();
            let worst = ops
                .iter()
                .max_by(|a, b| num(a.1, "rel_rms").total_cmp(&num(b.1, "rel_rms")));
            let Some((op, w)) = worst else { continue };
            let max = |k: &str| ops.values().map(|o| num(o, k)).fold(0.0, f64::max);
            let _ = writeln!(
                s,
                "| {model} | {} | {} | {op} | {:.4} | {:.1e} | {:.1e} |",
                r["recipe"].as_str().unwrap_or("?"),
                short(m["name"].as_str().unwrap_or("?")),
                num(w, "rel_rms"),
                max("underflow"),
                max("saturated")
            );
        }
    }
    s
}

fn convergence(docs: &[(String, fp8_report::convergence::Convergence)]) -> String {
    let mut s = String::from(
        "| run | recipe | tokens/step | plan's FP8 groups | BF16 | all-FP8 gap | plan gap | BF16 repeat gap | NaN/Inf steps |\n|---|---|---:|---|---:|---:|---:|---:|---:|\n",
    );
    for (file, c) in docs {
        let run = Path::new(file)
            .parent()
            .and_then(|p| p.strip_prefix("docs/device-logs/").ok())
            .map_or_else(|| file.clone(), |p| p.display().to_string());
        let tokens = c.settings.seq_length * c.settings.micro_batch_size;
        let gap = |m: &str| c.gap(m).map_or("-".to_owned(), |g| format!("{g:+.4}"));
        let plan = if !c.runs.contains_key("adaptive") {
            "-".to_owned()
        } else if c.plan_fp8.is_empty() {
            "none (all BF16)".to_owned()
        } else {
            c.plan_fp8
                .iter()
                .map(|g| short(g))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let bf16 = c
            .summary
            .final_eval
            .get("bf16")
            .copied()
            .flatten()
            .unwrap_or(f64::NAN);
        let _ = writeln!(
            s,
            "| {run} ({}) | {} | {tokens} | {plan} | {bf16:.4} | {} | {} | {} | {} |",
            c.model,
            c.recipe,
            gap("fp8"),
            gap("adaptive"),
            gap("bf16-repeat"),
            c.nonfinite_steps(),
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_are_whole_lines() {
        assert_eq!(
            placeholder("{{probe: a.json b.json}}"),
            Some(("probe", vec!["a.json", "b.json"]))
        );
        assert_eq!(placeholder("text {{probe: a}}"), None);
        assert_eq!(short("decoder.layers.mlp.linear_fc1"), "mlp.linear_fc1");
    }

    #[test]
    fn a_table_placeholder_keeps_only_the_table_lines() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("t.md"),
            "wrote x\n| a | b |\n|---|---|\n| 1 | 2 |\ndone\n",
        )
        .unwrap();
        std::fs::write(dir.path().join("none.txt"), "no table here\n").unwrap();
        let t = table(dir.path(), "table", &["t.md"]).unwrap();
        assert_eq!(t, "| a | b |\n|---|---|\n| 1 | 2 |\n");
        let e = table(dir.path(), "table", &["none.txt"]).unwrap_err();
        assert!(e.contains("none.txt") && e.contains("fix:"), "{e}");
        assert!(table(dir.path(), "table", &["missing.md"]).is_err());
    }
}
