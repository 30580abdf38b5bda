//! `{{step_model: POLICY...}}`: the step model's error against its own check, one row per layout
//! of each policy file the step model made (`provenance.step.model`): the held-out steps'
//! |predicted / measured - 1|, the same step timed twice (the floor under that error), and the
//! checked plans slower than BF16 beyond their band, behind all-FP8, and not the policy's plan.

use std::fmt::Write as _;

use serde_json::Value;

/// How a layout's step-model measurements end (`<model>_tp<T>_ep<E>_etp<T>_inputs_step.json`).
pub(super) const INPUTS: &str = "_inputs_step.json";

/// The policy today's tool makes of one layout's committed measurements (`file`, relative to
/// `root`) and the checks beside it (`_check_step.json`, `_recheck_step.json`), as
/// `fp8sel merge-policy --step-model FILE --step-check ...` writes it: the table then says what
/// the tool as it stands predicts, not what it predicted when the row ran.
pub(super) fn refit(root: &std::path::Path, file: &str) -> Result<Value, String> {
    let base = file.trim_end_matches(INPUTS);
    let checks: Vec<std::path::PathBuf> = ["_check_step.json", "_recheck_step.json"]
        .iter()
        .map(|end| std::path::PathBuf::from(format!("{base}{end}")))
        .filter(|p| root.join(p).is_file())
        .collect();
    let layouts =
        fp8_pipeline::step::saved::layout_models(&[file.into()], &checks, Some(root), &[])
            .map_err(|e| format!("{file}: {e}"))?;
    let policy = fp8_pipeline::step::saved::saved_policy(&layouts, &[])
        .map_err(|e| format!("{file}: {e}"))?;
    serde_json::from_str(&policy.to_json()).map_err(|e| format!("{file}: {e}"))
}

/// One row per layout; a file without the step model's provenance is an error (the placeholder
/// names a file that is not the step model's).
pub(super) fn step_model(docs: &[(String, Value)]) -> Result<String, String> {
    let mut s = String::from(
        "| model | layout | held-out steps | median \\|error\\| | within 3% | within 3% or its band | worst | same step twice: median (max) | plans slower than BF16 | plans behind all-FP8 | plans not the policy's |\n|---|---|---:|---:|---:|---:|---:|---|---:|---:|---:|\n",
    );
    for (file, v) in docs {
        let layouts = v["provenance"]["step"]["model"].as_array().ok_or_else(|| {
            format!("{file}: no provenance.step.model (not made by the step model)")
        })?;
        let model = v["provenance"]["models"][0].as_str().unwrap_or("?");
        // A VLM's vision encoder is its own row beside its language model's.
        let name = match v["provenance"]["component"].as_str() {
            Some("vit") => format!("{model} (vision encoder)"),
            _ => model.to_owned(),
        };
        let name = name.as_str();
        for lm in layouts {
            let _ = writeln!(s, "{}", row(name, lm).map_err(|e| format!("{file}: {e}"))?);
        }
    }
    Ok(s)
}

fn row(name: &str, lm: &Value) -> Result<String, String> {
    let u = |k: &str| lm[k].as_u64().unwrap_or(1);
    let mut layout = format!("TP {}", u("tp"));
    if u("ep") > 1 {
        let _ = write!(layout, " EP {}", u("ep"));
    }
    let check = lm["check"].as_array().map_or(&[][..], Vec::as_slice);
    let mut held: Vec<f64> = check
        .iter()
        .filter(|r| r["calibrated"] == false)
        .filter_map(|r| r["error"].as_f64().map(f64::abs))
        .collect();
    let within = held.iter().filter(|e| **e <= 0.03).count();
    // A step's own band (its measured p10-p90 half-width, `noise`) is what one timing can tell
    // apart: an error inside it is no error the measurement can show.
    let banded = check
        .iter()
        .filter(|r| r["calibrated"] == false)
        .filter(|r| {
            r["error"]
                .as_f64()
                .is_some_and(|e| e.abs() <= 0.03_f64.max(r["noise"].as_f64().unwrap_or(0.0)))
        })
        .count();
    let mut twice: Vec<f64> = lm["repeats"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| r["change"].as_f64().map(f64::abs))
        .collect();
    let plans: Vec<&Value> = check.iter().filter(|r| r["mode"] == "plan").collect();
    let slower = plans
        .iter()
        .filter(|r| r["vs_bf16"][1].as_f64().is_some_and(|p10| p10 > 1.0))
        .count();
    // The rows as gen-policy wrote them, read back typed: the one rule it notes them by.
    let typed: Vec<fp8_merge::model::CheckRow> = serde_json::from_value(lm["check"].clone())
        .map_err(|e| format!("provenance.step.model[].check: {e}"))?;
    let behind = fp8_merge::model::behind_fp8(&typed).len();
    let other = lm["not_the_policy"].as_array().map_or(0, Vec::len);
    let pct = |v: Option<f64>| v.map_or("-".to_owned(), |x| format!("{:.1}%", 100.0 * x));
    let n = held.len();
    Ok(format!(
        "| {name} | {layout} | {n} | {} | {within} of {n} | {banded} of {n} | {} | {} ({}) | {slower} of {} | {behind} of {} | {other} of {} |",
        pct(median(&mut held)),
        pct(held.last().copied()),
        pct(median(&mut twice)),
        pct(twice.last().copied()),
        plans.len(),
        plans.len(),
        plans.len()
    ))
}

/// The step model's own median (`fp8_merge::model::curve`), the slice left sorted so its last
/// is the largest; `None` when empty.
fn median(v: &mut [f64]) -> Option<f64> {
    v.sort_by(f64::total_cmp);
    (!v.is_empty()).then(|| fp8_merge::model::curve::median(v))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_layout_row_counts_held_out_errors_repeats_and_slow_plans() {
        let check = |cal: bool, mode: &str, err: f64, vs: [f64; 3], g: &[&str]| json!({"calibrated": cal, "mode": mode, "error": err, "vs_bf16": vs, "execution": "eager", "tokens": if cal { 1024 } else { 4096 }, "fp8_groups": g, "predicted_ms": 1.0, "measured_ms": 1.0, "noise": if mode == "fp8" { 0.12 } else { 0.0 }, "disagrees": false});
        let lm = json!({"tp": 8, "ep": 64, "check": [
            check(true, "bf16", 0.5, [1.0, 1.0, 1.0], &[]), check(false, "bf16", -0.02, [1.0, 1.0, 1.0], &[]),
            check(false, "fp8", 0.10, [0.9, 0.88, 0.92], &["a", "b"]), check(false, "plan", 0.01, [1.05, 1.02, 1.1], &["a"])],
            "repeats": [{"change": -0.04}, {"change": 0.01}], "not_the_policy": [{"execution": "eager", "tokens": 4096}]});
        let doc = json!({"provenance": {"models": ["m"], "step": {"model": [lm]}}});
        let t = step_model(&[("p.json".into(), doc)]).unwrap();
        // The calibrated row is not held out; the median of 2%, 10%, 1% is 2%; the 10% is inside
        // its step's 12% band; one plan of one slower than BF16 beyond its band (p10 above 1),
        // and behind all-FP8 at its count.
        assert!(
            t.contains(
                "| m | TP 8 EP 64 | 3 | 2.0% | 2 of 3 | 3 of 3 | 10.0% | 2.5% (4.0%) | 1 of 1 | 1 of 1 | 1 of 1 |"
            ),
            "{t}"
        );
        // A VLM's vision encoder: its own row, named so.
        let vit =
            json!({"provenance": {"models": ["m"], "component": "vit", "step": {"model": [lm]}}});
        let t = step_model(&[("v.json".into(), vit)]).unwrap();
        assert!(t.contains("| m (vision encoder) | TP 8 EP 64 | 3 |"), "{t}");
        let e = step_model(&[("f.json".into(), json!({"provenance": {}}))]).unwrap_err();
        assert!(
            e.contains("f.json") && e.contains("provenance.step.model"),
            "{e}"
        );
    }
}
