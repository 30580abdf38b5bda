//! Rendering a plan: the table `fp8sel explain` prints, and the JSON that `fp8sel explain --json`
//! and the Python package's `plan()` both return (one function, so they cannot differ).

use std::fmt::Write;

use serde_json::json;

use crate::plan::Plan;

/// The plan as JSON: `{"model": name, "modules": [...], "summary": {...}, "architecture": {role: ...},
/// "launch_region": "bf16"|"fp8"}` (the FP8 region to launch with: [`crate::native::Region`]), one object per module group with
/// its name, component, layers, TE class, kind, ub_name, per-rank shape, GEMM count, the tokens
/// compared, its GEMM rows, the answer, the reason and the policy key it looks up.
pub fn plan_json(p: &Plan) -> serde_json::Value {
    let modules: Vec<_> = p
        .modules
        .iter()
        .map(|m| {
            let s = &m.spec;
            json!({
                "name": s.name, "component": s.component, "layers": s.layers, "te_class": s.te_class,
                "module_kind": s.module_kind, "ub_name": s.ub_name, "in_features": s.in_features,
                "out_features": s.out_features, "num_gemms": s.num_gemms, "num_tokens": m.num_tokens,
                "gemm_rows": m.gemm_rows, "use_fp8": m.use_fp8, "estimated": m.estimated,
                "reason": m.reason, "key": s.lookup().key(), "recipe": m.recipe,
            })
        })
        .collect();
    json!({
        "model": p.model, "modules": modules, "summary": p.summary, "architecture": p.architectures,
        "launch_region": crate::native::Region::for_plan(p),
        "fp8_region_need": crate::native::Region::fp8_need(p),
        "native_bf16_because": crate::native::Region::native_bf16_because(p),
        "warnings": diagnostics(p),
    })
}

/// Renders the plan as an aligned table followed by the summary (results only: the
/// [`diagnostics`] go to stderr).
pub fn table(plan: &Plan) -> String {
    let header = [
        "module", "comp", "layers", "te_class", "kind", "ub_name", "in x out", "gemms", "tokens",
        "prec", "reason",
    ];
    let rows: Vec<[String; 11]> = plan
        .modules
        .iter()
        .map(|m| {
            let s = &m.spec;
            [
                s.name.clone(),
                s.component.to_string(),
                s.layers.to_string(),
                s.te_class.to_string(),
                s.module_kind.to_string(),
                s.ub_name.clone().unwrap_or_else(|| "-".into()),
                format!("{} x {}", s.in_features, s.out_features),
                s.num_gemms.to_string(),
                m.num_tokens.to_string(),
                match (&m.recipe, m.use_fp8) {
                    (Some(r), true)
                        if r.parse::<fp8_policy::Recipe>().is_ok_and(|x| x.is_fp4()) =>
                    {
                        format!("fp4 {r}")
                    }
                    (Some(r), true) => format!("fp8 {r}"),
                    (_, true) => "fp8".to_owned(),
                    (_, false) => "bf16".to_owned(),
                },
                m.reason.clone(),
            ]
        })
        .collect();
    let mut width = header.map(str::len);
    for r in &rows {
        for (w, cell) in width.iter_mut().zip(r) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let line = |out: &mut String, cells: &[&str]| {
        let mut l = String::new();
        for (i, c) in cells.iter().enumerate() {
            if i + 1 == cells.len() {
                l.push_str(c);
            } else {
                let _ = write!(l, "{c:<w$}  ", w = width[i]);
            }
        }
        out.push_str(l.trim_end());
        out.push('\n');
    };
    line(&mut out, &header);
    for r in &rows {
        let cells: Vec<&str> = r.iter().map(String::as_str).collect();
        line(&mut out, &cells);
    }
    let s = &plan.summary;
    let _ = writeln!(out);
    for (role, t) in &s.tokens {
        let _ = writeln!(out, "tokens ({role}): {t}");
    }
    let _ = writeln!(
        out,
        "fp8: {} of {} module instances, {:.1}% of GEMM FLOPs",
        s.fp8_modules,
        s.modules,
        100.0 * s.fp8_flop_share
    );
    for role in &s.components_without_policy {
        let _ = writeln!(out, "no policy for {role}: all of its modules run BF16");
    }
    if !s.missing_rules.is_empty() {
        let _ = writeln!(out, "missing rules (modules fell back to BF16):");
        for m in &s.missing_rules {
            let _ = writeln!(out, "  {} {}: {}", m.component, m.key, m.modules.join(", "));
        }
    }
    out
}

/// What the user must hear besides the results, one line each, for stderr (and the JSON's
/// `warnings`): `warning: ...`, `note: ...`, `default applied: ...`.
pub fn diagnostics(plan: &Plan) -> Vec<String> {
    let s = &plan.summary;
    let warnings = s.warnings.iter().map(|w| format!("warning: {w}"));
    let notes = s.notes.iter().map(|n| format!("note: {n}"));
    let defaults = s
        .defaults_applied
        .iter()
        .map(|d| format!("default applied: {d}"));
    warnings.chain(notes).chain(defaults).collect()
}
