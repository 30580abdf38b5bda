//! `{{step_model: POLICY...}}`: the step model's error against its own check, one row per layout
//! of each policy file the step model made (`provenance.step.model`): the held-out steps'
//! |predicted / measured - 1|, the same step timed twice (the floor under that error), and the
//! checked plans slower than BF16 beyond their band, behind all-FP8, and not the policy's plan.

use std::fmt::Write as _;

use serde_json::Value;

/// How a layout's step-model measurements end (`<model>_tp<T>_ep<E>_etp<T>_inputs_step.json`).
pub(super) const INPUTS: &str = "_inputs_step.json";

/// The policy today's tool makes of one layout's committed measurements (`file`, relative to
/// `root`) and the check rounds beside it (`_check_step.json`, `_recheck_step.json`, ...), as
/// `fp8sel merge-policy --step-model FILE --step-check ...` writes it: the table then says what
/// the tool as it stands predicts, not what it predicted when the row ran.
pub(super) fn refit(root: &std::path::Path, file: &str) -> Result<Value, String> {
    let base = file.trim_end_matches(INPUTS);
    let checks = fp8_report::step_inputs::check_rounds_beside(root, base);
    let layouts =
        fp8_pipeline::step::saved::layout_models(&[file.into()], &checks, Some(root), &[])
            .map_err(|e| format!("{file}: {e}"))?;
    let policy = fp8_pipeline::step::saved::saved_policy(&layouts, &[])
        .map_err(|e| format!("{file}: {e}"))?;
    serde_json::from_str(&policy.to_json()).map_err(|e| format!("{file}: {e}"))
}

/// The table's head, one column per measure.
const HEADER: &str = "| model | layout | run | held-out steps | median \\|error\\| | within 3% | within 3% or its band | refit, count left out: within 3% | worst | vs BF16: median \\|error\\| | vs BF16 within 3% | same step twice: median (max) | plans slower than BF16 | plans behind all-FP8 | plans not the policy's |\n|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|\n";

/// One row per layout, then the totals over them; a file without the step model's provenance
/// is an error (the placeholder names a file that is not the step model's).
pub(super) fn step_model(docs: &[(String, Value)]) -> Result<String, String> {
    let mut s = String::from(HEADER);
    let mut all = Totals::default();
    let mut by_bound: Vec<Vec<(f64, f64)>> = vec![Vec::new(); BOUNDS.len()];
    for (file, v) in docs {
        let (name, layouts) = named_layouts(file, v)?;
        let (name, run) = (name.as_str(), run(file));
        for lm in layouts {
            let (line, t) = row(name, &run, lm).map_err(|e| format!("{file}: {e}"))?;
            let _ = writeln!(s, "{line}");
            all.add(&t);
            for r in held_out(lm) {
                let (host, gpu) = (
                    r["predicted_host_ms"].as_f64(),
                    r["predicted_gpu_ms"].as_f64(),
                );
                let (Some(host), Some(gpu), Some(e)) = (host, gpu, r["error"].as_f64()) else {
                    continue;
                };
                let noise = r["noise"].as_f64().unwrap_or(0.0);
                let i = BOUNDS
                    .iter()
                    .rposition(|(lo, _)| gpu >= lo * host)
                    .unwrap_or(0);
                by_bound[i].push((e, noise));
            }
        }
    }
    let _ = writeln!(s, "{}", all.line());
    let _ = writeln!(s, "\n{}", bound_table(&by_bound));
    Ok(s)
}

/// A policy's model as the table names it and its layouts' step-model provenance; a file
/// without it is an error (the placeholder names a file that is not the step model's).
fn named_layouts<'a>(file: &str, v: &'a Value) -> Result<(String, &'a Vec<Value>), String> {
    let layouts = v["provenance"]["step"]["model"]
        .as_array()
        .ok_or_else(|| format!("{file}: no provenance.step.model (not made by the step model)"))?;
    let model = v["provenance"]["models"][0].as_str().unwrap_or("?");
    // A VLM's vision encoder is its own row beside its language model's.
    let name = match v["provenance"]["component"].as_str() {
        Some("vit") => format!("{model} (vision encoder)"),
        _ => model.to_owned(),
    };
    Ok((name, layouts))
}

/// `{{step_model_by_model: FILE...}}`: as `step_model`, one row per model and run, its layouts'
/// steps together (the layout column lists them), then the totals: the compact form for runs of
/// many layouts (another recipe's shipped reports).
pub(super) fn by_model(docs: &[(String, Value)]) -> Result<String, String> {
    let mut groups: Vec<((String, String), Vec<String>, Value)> = Vec::new();
    for (file, v) in docs {
        let (name, layouts) = named_layouts(file, v)?;
        let key = (name, run(file));
        let at = match groups.iter().position(|g| g.0 == key) {
            Some(i) => i,
            None => {
                let empty = serde_json::json!({"check": [], "repeats": [], "not_the_policy": []});
                groups.push((key, Vec::new(), empty));
                groups.len() - 1
            }
        };
        for lm in layouts {
            let g = &mut groups[at];
            g.1.push(layout_of(lm));
            for k in ["check", "repeats", "not_the_policy"] {
                let more = lm[k].as_array().cloned().unwrap_or_default();
                if let Some(a) = g.2[k].as_array_mut() {
                    a.extend(more);
                }
            }
        }
    }
    let mut s = String::from(HEADER);
    let mut all = Totals::default();
    for ((model, run), layouts, lm) in &groups {
        let (line, t) = row_as(model, &layouts.join(", "), layouts.len(), run, lm)?;
        let _ = writeln!(s, "{line}");
        all.add(&t);
    }
    let _ = writeln!(s, "{}", all.line());
    Ok(s)
}

/// The bins of a held-out step by the model's GPU time over its host time: from each lower
/// edge, named.
const BOUNDS: [(f64, &str); 4] = [
    (0.0, "under 1 (host-bound)"),
    (1.0, "1 to 1.5"),
    (1.5, "1.5 to 2.5"),
    (2.5, "2.5 and over (GPU-bound)"),
];

pub(super) fn held_out(lm: &Value) -> impl Iterator<Item = &Value> {
    lm["check"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|r| r["calibrated"] == false)
}

/// Where the model misses: the held-out steps of every layout above by how GPU-bound the model
/// predicts them, each bin's signed median error (the model's bias there) beside its spread.
fn bound_table(bins: &[Vec<(f64, f64)>]) -> String {
    let mut s = String::from(
        "| predicted GPU / host time | held-out steps | median error | median \\|error\\| | within 3% | within 3% or its band | median band | a median of 7 such rounds known to |\n|---|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for ((_, name), rows) in BOUNDS.iter().zip(bins) {
        let n = rows.len();
        let mut signed: Vec<f64> = rows.iter().map(|r| r.0).collect();
        let mut abs: Vec<f64> = rows.iter().map(|r| r.0.abs()).collect();
        let within = abs.iter().filter(|e| **e <= 0.03).count();
        let banded = rows
            .iter()
            .filter(|(e, b)| e.abs() <= 0.03_f64.max(*b))
            .count();
        let pct = |v: Option<f64>, sign: bool| match v {
            Some(x) if sign => format!("{:+.1}%", 100.0 * x),
            Some(x) => format!("{:.1}%", 100.0 * x),
            None => "-".to_owned(),
        };
        let mut bands: Vec<f64> = rows.iter().map(|r| r.1).collect();
        let band = median(&mut bands);
        let _ = writeln!(
            s,
            "| {name} | {n} | {} | {} | {within} of {n} | {banded} of {n} | {} | {} |",
            pct(median(&mut signed), true),
            pct(median(&mut abs), false),
            pct(band, false),
            pct(band.map(median_known_to), false)
        );
    }
    s
}

/// How closely the median of 7 rounds knows a step whose rounds spread by `band` (half their
/// p10-p90 over the median): its standard error, 1.2533 sigma / sqrt(7) for normal rounds, sigma
/// = band / 1.2816.
fn median_known_to(band: f64) -> f64 {
    1.2533 * band / 1.2816 / 7f64.sqrt()
}

/// What the totals row sums: per layout, whether its medians are within 3%, and the counts.
#[derive(Default)]
struct Totals {
    layouts: usize,
    median_within: usize,
    held: usize,
    within: usize,
    banded: usize,
    ratio_median_within: usize,
    ratios: usize,
    ratio_within: usize,
    refit_within: usize,
}

impl Totals {
    fn add(&mut self, t: &Totals) {
        self.layouts += t.layouts;
        self.median_within += t.median_within;
        self.held += t.held;
        self.within += t.within;
        self.banded += t.banded;
        self.refit_within += t.refit_within;
        self.ratio_median_within += t.ratio_median_within;
        self.ratios += t.ratios;
        self.ratio_within += t.ratio_within;
    }

    fn line(&self) -> String {
        let Totals {
            layouts: l,
            held: n,
            ratios: r,
            ..
        } = *self;
        format!(
            "| **all** | {l} layouts | | {n} | within 3% in {} of {l} | {} of {n} | {} of {n} | {} of {n} | | within 3% in {} of {l} | {} of {r} | | | | |",
            self.median_within,
            self.within,
            self.banded,
            self.refit_within,
            self.ratio_median_within,
            self.ratio_within
        )
    }
}

/// The model's error on what the choice reads, a plan's step against all-BF16's at its count:
/// `|predicted ratio / measured ratio - 1|`, the prediction's ratio of its two predicted steps,
/// the step's the paired median by round (`vs_bf16`). One per held-out all-FP8 row and per
/// held-out plan row that is neither all-BF16 nor all-FP8 (those are the same steps again).
fn ratio_errors(check: &[Value]) -> Vec<f64> {
    let held = |r: &&Value| r["calibrated"] == false;
    let at = |r: &Value, mode: &str| {
        check.iter().find(|b| {
            b["mode"] == mode && b["execution"] == r["execution"] && b["tokens"] == r["tokens"]
        })
    };
    check
        .iter()
        .filter(held)
        .filter(|r| match r["mode"].as_str() {
            Some("fp8") => true,
            Some("plan") => {
                let groups = &r["fp8_groups"];
                groups.as_array().is_some_and(|g| !g.is_empty())
                    && at(r, "fp8").is_none_or(|f| f["fp8_groups"] != *groups)
            }
            _ => false,
        })
        .filter_map(|r| {
            let base = at(r, "bf16")?;
            let predicted = r["predicted_ms"].as_f64()? / base["predicted_ms"].as_f64()?;
            let measured = r["vs_bf16"][0].as_f64()?;
            (measured > 0.0).then(|| (predicted / measured - 1.0).abs())
        })
        .collect()
}

/// Which run a file is of: its folder under `docs/device-logs/step_model/` (the reports/step/
/// or reports/ inside it left out), or `shipped` for the shipped measurements.
/// The run a file is of: "shipped" for the shipped files' reports (`reports/h200/step_model/`),
/// "shipped, <recipe>" for another recipe's (`reports/h200/<recipe>/step_model/`), else its
/// folder under `docs/device-logs/step_model/`.
fn run(file: &str) -> String {
    if let Some(rest) = file.strip_prefix("reports/h200/") {
        return match rest.split_once('/') {
            Some((recipe, tail)) if tail.starts_with("step_model/") => format!("shipped, {recipe}"),
            _ => "shipped".to_owned(),
        };
    }
    let dir = std::path::Path::new(file)
        .parent()
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_default();
    let dir = dir.trim_end_matches("/step").trim_end_matches("/reports");
    dir.trim_start_matches("docs/device-logs/step_model/")
        .to_owned()
}

/// A layout's name: `TP t[ EP e]`.
fn layout_of(lm: &Value) -> String {
    let u = |k: &str| lm[k].as_u64().unwrap_or(1);
    let mut layout = format!("TP {}", u("tp"));
    if u("ep") > 1 {
        let _ = write!(layout, " EP {}", u("ep"));
    }
    layout
}

fn row(name: &str, run: &str, lm: &Value) -> Result<(String, Totals), String> {
    row_as(name, &layout_of(lm), 1, run, lm)
}

/// One row of `layouts` layouts' steps (`lm`: their checks, repeats and plans not the policy's
/// together), named `layout`.
fn row_as(
    name: &str,
    layout: &str,
    layouts: usize,
    run: &str,
    lm: &Value,
) -> Result<(String, Totals), String> {
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
    // The model refit with the check's other counts' all-BF16 and all-FP8 steps
    // (fp8_merge::model::refit), this count's left out.
    let refit_within = check
        .iter()
        .filter(|r| r["calibrated"] == false)
        .filter(|r| r["refit_error"].as_f64().is_some_and(|e| e.abs() <= 0.03))
        .count();
    let mut ratios = ratio_errors(check);
    let ratio_within = ratios.iter().filter(|e| **e <= 0.03).count();
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
    let (n, r, p) = (held.len(), ratios.len(), plans.len());
    let (med, ratio_med) = (median(&mut held), median(&mut ratios));
    let totals = Totals {
        layouts,
        median_within: usize::from(med.is_some_and(|m| m <= 0.03)),
        held: n,
        within,
        banded,
        ratio_median_within: usize::from(ratio_med.is_some_and(|m| m <= 0.03)),
        ratios: r,
        ratio_within,
        refit_within,
    };
    let line = format!(
        "| {name} | {layout} | {run} | {n} | {} | {within} of {n} | {banded} of {n} | {refit_within} of {n} | {} | {} | {ratio_within} of {r} | {} ({}) | {slower} of {p} | {behind} of {p} | {other} of {p} |",
        pct(med),
        pct(held.last().copied()),
        pct(ratio_med),
        pct(median(&mut twice)),
        pct(twice.last().copied()),
    );
    Ok((line, totals))
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
        let check = |cal: bool, mode: &str, err: f64, vs: [f64; 3], g: &[&str]| json!({"calibrated": cal, "mode": mode, "error": err, "vs_bf16": vs, "execution": "eager", "tokens": if cal { 1024 } else { 4096 }, "fp8_groups": g, "predicted_ms": 1.0, "measured_ms": 1.0, "noise": if mode == "fp8" { 0.12 } else { 0.0 }, "disagrees": false, "refit_error": if mode == "fp8" { json!(0.02) } else { json!(null) }});
        let lm = json!({"tp": 8, "ep": 64, "check": [
            check(true, "bf16", 0.5, [1.0, 1.0, 1.0], &[]), check(false, "bf16", -0.02, [1.0, 1.0, 1.0], &[]),
            check(false, "fp8", 0.10, [0.9, 0.88, 0.92], &["a", "b"]), check(false, "plan", 0.01, [1.05, 1.02, 1.1], &["a"])],
            "repeats": [{"change": -0.04}, {"change": 0.01}], "not_the_policy": [{"execution": "eager", "tokens": 4096}]});
        let doc = json!({"provenance": {"models": ["m"], "step": {"model": [lm]}}});
        let f = "docs/device-logs/step_model/cost/anchor/reports/step/p.json";
        let t = step_model(&[(f.into(), doc)]).unwrap();
        // The calibrated row is not held out; the median of 2%, 10%, 1% is 2%; the 10% is inside
        // its step's 12% band. Against BF16 the model predicts 1.0 for both all-FP8 (measured
        // 0.9: 11.1%) and the plan (1.05: 4.8%), median 7.9%. One plan of one slower than BF16
        // beyond its band (p10 above 1), and behind all-FP8 at its count. Refit, the all-FP8 row
        // left out is within 3% (the others record no refit error).
        assert!(
            t.contains(
                "| m | TP 8 EP 64 | cost/anchor | 3 | 2.0% | 2 of 3 | 3 of 3 | 1 of 3 | 10.0% | 7.9% | 0 of 2 | 2.5% (4.0%) | 1 of 1 | 1 of 1 | 1 of 1 |"
            ),
            "{t}"
        );
        assert!(
            t.contains("| **all** | 1 layouts | | 3 | within 3% in 1 of 1 | 2 of 3 | 3 of 3 | 1 of 3 | | within 3% in 0 of 1 | 0 of 2 |"),
            "{t}"
        );
        // No row records the predicted host and GPU time here: every bin is empty.
        assert!(
            t.contains("| under 1 (host-bound) | 0 | - | - | 0 of 0 | 0 of 0 |"),
            "{t}"
        );
        // A VLM's vision encoder: its own row, named so.
        let vit =
            json!({"provenance": {"models": ["m"], "component": "vit", "step": {"model": [lm]}}});
        let t = step_model(&[("reports/h200/step_model/v.json".into(), vit)]).unwrap();
        assert!(
            t.contains("| m (vision encoder) | TP 8 EP 64 | shipped | 3 |"),
            "{t}"
        );
        // Another recipe's shipped reports say which.
        let t = step_model(&[(
            "reports/h200/tensorwise/step_model/m.json".into(),
            json!({"provenance": {"models": ["m"], "step": {"model": [lm]}}}),
        )])
        .unwrap();
        assert!(
            t.contains("| m | TP 8 EP 64 | shipped, tensorwise | 3 |"),
            "{t}"
        );
        let e = step_model(&[("f.json".into(), json!({"provenance": {}}))]).unwrap_err();
        assert!(
            e.contains("f.json") && e.contains("provenance.step.model"),
            "{e}"
        );
    }

    #[test]
    fn by_model_puts_a_runs_layouts_of_one_model_in_one_row() {
        let r = |err: f64| json!({"calibrated": false, "mode": "bf16", "error": err, "vs_bf16": [1.0, 1.0, 1.0], "execution": "eager", "tokens": 4096, "fp8_groups": [], "predicted_ms": 1.0, "measured_ms": 1.0, "noise": 0.0, "disagrees": false});
        let doc = |tp: u64, err: f64| json!({"provenance": {"models": ["m"], "step": {"model": [{"tp": tp, "check": [r(err)], "repeats": [{"change": 0.01 * tp as f64}]}]}}});
        let dir = "reports/h200/tensorwise/step_model";
        let docs = [
            (format!("{dir}/m_tp1_inputs_step.json"), doc(1, 0.01)),
            (format!("{dir}/m_tp2_inputs_step.json"), doc(2, 0.05)),
            (
                "reports/h200/step_model/m_tp1_inputs_step.json".to_owned(),
                doc(1, 0.02),
            ),
        ];
        let t = by_model(&docs).unwrap();
        // The recipe's two layouts together: two held-out steps (1% and 5%), median 3.0%;
        // the blockwise run its own row.
        assert!(
            t.contains(
                "| m | TP 1, TP 2 | shipped, tensorwise | 2 | 3.0% | 1 of 2 | 1 of 2 | 0 of 2 | 5.0% |"
            ),
            "{t}"
        );
        assert!(t.contains("| m | TP 1 | shipped | 1 | 2.0% |"), "{t}");
        assert!(t.contains("| **all** | 3 layouts | | 3 |"), "{t}");
    }

    #[test]
    fn the_ratio_to_bf16_skips_calibrated_rows_and_plans_that_are_all_bf16_or_all_fp8() {
        let r = |cal: bool, mode: &str, pred: f64, vs: f64, g: &[&str]| json!({"calibrated": cal, "mode": mode, "execution": "graphed", "tokens": if cal { 1024 } else { 2048 }, "fp8_groups": g, "predicted_ms": pred, "vs_bf16": [vs, vs, vs]});
        let check = [
            r(true, "bf16", 10.0, 1.0, &[]),
            r(true, "fp8", 5.0, 0.9, &["a", "b"]),
            r(false, "bf16", 10.0, 1.0, &[]),
            r(false, "fp8", 9.0, 0.91, &["a", "b"]),
            r(false, "plan", 9.0, 0.5, &["a", "b"]),
            r(false, "plan", 10.0, 0.5, &[]),
        ];
        let e = ratio_errors(&check);
        // Only the held-out all-FP8 row: 0.9 predicted against 0.91 measured.
        assert_eq!(e.len(), 1, "{e:?}");
        assert!((e[0] - (0.9_f64 / 0.91 - 1.0).abs()).abs() < 1e-12, "{e:?}");
    }

    #[test]
    fn held_out_steps_are_binned_by_the_predicted_gpu_over_host_time() {
        let r = |cal: bool, host: f64, gpu: f64, err: f64, noise: f64| json!({"calibrated": cal, "mode": "bf16", "execution": "eager", "tokens": 2048, "fp8_groups": [], "predicted_ms": 1.0, "predicted_host_ms": host, "predicted_gpu_ms": gpu, "measured_ms": 1.0, "error": err, "noise": noise, "vs_bf16": [1.0, 1.0, 1.0], "disagrees": false});
        let lm = json!({"tp": 1, "check": [
            r(false, 10.0, 5.0, -0.10, 0.12), r(false, 10.0, 9.9, -0.02, 0.0), r(true, 10.0, 5.0, 0.5, 0.0),
            r(false, 10.0, 10.0, 0.05, 0.0), r(false, 10.0, 30.0, 0.01, 0.0)]});
        let doc = json!({"provenance": {"models": ["m"], "step": {"model": [lm]}}});
        let t = step_model(&[("p.json".into(), doc)]).unwrap();
        // Host-bound: -10% (inside its 12% band) and -2%; the calibrated row left out. GPU equal
        // to host is the next bin; three times the host the last.
        for want in [
            // Its bands 12% and 0: a median band of 6%, which 7 rounds know the median to
            // 1.2533 x 6% / 1.2816 / sqrt(7) = 2.2%.
            "| under 1 (host-bound) | 2 | -6.0% | 6.0% | 1 of 2 | 2 of 2 | 6.0% | 2.2% |",
            "| 1 to 1.5 | 1 | +5.0% | 5.0% | 0 of 1 | 0 of 1 |",
            "| 1.5 to 2.5 | 0 | - | - | 0 of 0 | 0 of 0 | - | - |",
            "| 2.5 and over (GPU-bound) | 1 | +1.0% | 1.0% | 1 of 1 | 1 of 1 |",
        ] {
            assert!(t.contains(want), "{want}\n{t}");
        }
    }
}
