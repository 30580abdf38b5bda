//! The end-to-end section's parts: the host-and-GPU combination and the TP group (split from `e2e_results` by concern).

use super::*;

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
pub(super) fn render_combine(
    root: &Path,
    parts: &Parts,
    cases: &[Combine],
    s: &mut String,
) -> Result<(), String> {
    let host_text =
        std::fs::read_to_string(root.join(crate::H200_HOST_PROFILE)).map_err(|e| e.to_string())?;
    let host = fp8_merge::host::HostProfile::parse(&host_text, crate::H200_HOST_PROFILE)
        .map_err(|e| e.to_string())?;
    // The rules are named in the error table below the predictions.
    s.push_str(parts.get("combine")?);
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
            let layers = f64::from(v.layers);
            for row in &v.results {
                let tokens = row.tokens;
                if row.execution != fp8_policy::Execution::Eager || !seen.insert(tokens) {
                    continue;
                }
                let (b, f8) = (ms(row, "bf16"), ms(row, "fp8"));
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
pub(super) fn render_tp(
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
        trainer: Some(fp8_policy::Execution::Eager),
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
