//! The step model's summary for people: `<model>.md` beside the policy, with each key's
//! thresholds, the model against the check, and what the check changed.

use std::fmt::Write;

use fp8_policy::{Execution, threshold_words};

use super::LayoutModel;

/// The markdown summary of the layouts' models (the policy's thresholds are per layout, in the
/// key's own tokens).
pub fn summary_markdown(model: &str, layouts: &[LayoutModel]) -> String {
    let mut s = format!(
        "# {model}: the step model's policy\n\nMade by `fp8sel gen-policy --backend step` (docs/POLICY.md, \"From a model of the training step\"). \
         Thresholds in the key's own tokens (routed tokens for experts); \"never\" keeps a key BF16.\n"
    );
    for l in layouts {
        let i = &l.inputs;
        let _ = write!(
            s,
            "\n## TP {} EP {} ETP {} ({} layers: {}; {} with {} on {}{}, TE {})\n\n| key | groups | eager | graphed |\n|---|---|---:|---:|\n",
            i.tp,
            i.ep.unwrap_or(1),
            i.etp.unwrap_or(i.tp),
            i.layers,
            i.layer_types.join(", "),
            i.fp8_recipe,
            i.weights_words(),
            i.device,
            i.host
                .as_ref()
                .map_or(String::new(), |h| format!(" (host: {h})")),
            i.te_version
        );
        for (k, u) in l.units.iter().enumerate() {
            let at = |e: Execution| {
                l.thresholds.get(&e).map_or("-".to_owned(), |ts| {
                    threshold_words(
                        ts[k]
                            .from
                            .map_or(fp8_policy::NEVER, |f| f.saturating_mul(u.scale)),
                    )
                })
            };
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} |",
                u.key,
                u.groups.join(", "),
                at(Execution::Eager),
                at(Execution::Graphed)
            );
        }
        let _ = write!(
            s,
            "\nThe model against whole steps (error = predicted / measured - 1; `cal`: a count the model was calibrated at):\n\n\
             | execution | tokens | mode | FP8 groups | predicted ms | measured ms | error | refit, count left out | / BF16 p50 (p10-p90) |\n|---|---:|---|---|---:|---:|---:|---:|---|\n"
        );
        let mut rows: Vec<&super::CheckRow> = l.check.iter().collect();
        rows.sort_by_key(|r| (r.execution, r.tokens, r.mode as u8));
        for r in rows {
            let mode = match r.mode {
                fp8_report::step_inputs::StepMode::Bf16 => "all-BF16",
                fp8_report::step_inputs::StepMode::Fp8 => "all-FP8",
                fp8_report::step_inputs::StepMode::Plan => "plan",
            };
            let groups: Vec<&str> = r.fp8_groups.iter().map(String::as_str).collect();
            let _ = writeln!(
                s,
                "| {} | {}{} | {mode} | {} | {:.3} | {:.3} | {:+.1}% | {} | {:.3} ({:.3}-{:.3}) |",
                r.execution,
                r.tokens,
                if r.calibrated { " cal" } else { "" },
                if groups.is_empty() {
                    "-".to_owned()
                } else {
                    groups.join(", ")
                },
                r.predicted_ms,
                r.measured_ms,
                100.0 * r.error,
                r.refit_error
                    .map_or("-".to_owned(), |e| format!("{:+.1}%", 100.0 * e)),
                r.vs_bf16.0,
                r.vs_bf16.1,
                r.vs_bf16.2
            );
        }
        let off = l.check.iter().filter(|r| r.disagrees).count();
        let _ = writeln!(
            s,
            "\n{off} of {} checked step(s) off the model by more than 3% and their noise.",
            l.check.len()
        );
        refit_line(&mut s, l);
        if let Some((med, worst)) = l.repeatability() {
            let _ = writeln!(
                s,
                "The same step timed twice (all-BF16 or all-FP8 in the inputs, again in the check, {} step(s)): median {:.1}%, up to {:.1}% apart, a floor under the model's error.",
                l.repeats.len(),
                100.0 * med,
                100.0 * worst
            );
        }
        moves(&mut s, l);
        let other: Vec<String> = l
            .not_the_policy()
            .iter()
            .map(|r| format!("{} {}", r.execution, r.tokens))
            .collect();
        if !other.is_empty() {
            let _ = writeln!(
                s,
                "- {} checked plan(s) are not this policy's plan at their count ({}): a check of an earlier choice, or a count the check moved; the policy there is not yet timed in the step.",
                other.len(),
                other.join(", ")
            );
        }
    }
    s
}

/// What the check's steps did to the model: how many counts refit the overlap share, and the
/// held-out steps within 3% before and after (each count left out).
fn refit_line(s: &mut String, l: &LayoutModel) {
    if l.refit.is_empty() {
        return;
    }
    let counts: std::collections::BTreeSet<_> =
        l.refit.iter().map(|p| (p.execution, p.tokens)).collect();
    let held: Vec<&super::CheckRow> = l.check.iter().filter(|r| !r.calibrated).collect();
    let within = |e: f64| e.abs() <= super::check::TOLERANCE;
    let before = held.iter().filter(|r| within(r.error)).count();
    let after = held
        .iter()
        .filter(|r| r.refit_error.is_some_and(within))
        .count();
    let _ = writeln!(
        s,
        "The check's all-BF16 and all-FP8 steps at {} count(s) joined the overlap share's calibration and the choice was made again (the thresholds above): each count left out, the refit model is within 3% at {after} of {} held-out step(s), the first model at {before}.",
        counts.len(),
        held.len()
    );
}

/// The thresholds the check moved, one line each: guarded, lifted and held.
fn moves(s: &mut String, l: &LayoutModel) {
    for (e, t) in &l.guarded {
        let _ = writeln!(
            s,
            "- {e} at {t}: a plan measured slower than BF16; its keys are FP8 only above {t}."
        );
    }
    for (e, t, g) in &l.lifted {
        let _ = writeln!(
            s,
            "- {e} at {t}: the plan measured behind all-FP8 (more than 1%, the bands apart); {} (BF16 in it, FP8 further up by the model) FP8 from {t}.",
            g.join(", ")
        );
    }
    for (e, t, g) in &l.held {
        let _ = writeln!(
            s,
            "- {e} at {t}: a plan measured faster than BF16 beyond the noise, which the refit had moved; {} FP8 from {t} again.",
            g.join(", ")
        );
    }
}
