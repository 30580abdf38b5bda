//! The step model's pictures: per layout and execution, the whole step's speedup over all-BF16
//! against the token count, measured (with the rounds' p10-p90 band) and predicted, for all-FP8
//! and for the policy's plan. Where the plan's line sits at or above both all-FP8's and 1.0,
//! the policy keeps its promise at that count.
//!
//! Not here: the per-module speedup plots of the folded policies (`crate::build`).

use std::collections::BTreeMap;
use std::path::PathBuf;

use fp8_merge::model::{CheckRow, LayoutModel};
use fp8_policy::Execution;
use fp8_report::step_inputs::StepMode;

use crate::build::Files;
use crate::plot::{Chart, Line, chart_svg};

const AXES: Chart<'static> = Chart {
    x_desc: "tokens per step (log scale)",
    y_desc: "all-BF16 step / step (speedup of the whole step)",
    threshold_label: "all-BF16 (1.0)",
    rules: false,
};

/// `plots/<model>/step-tp<T>[-ep<E>]-<execution>.svg` of each layout and checked execution (a
/// VLM's vision encoder: `vit-step-...`).
pub fn step_plots(model: &str, layouts: &[LayoutModel]) -> Result<Files, String> {
    let mut out = Files::new();
    for lm in layouts {
        let (tp, ep) = (lm.inputs.tp, lm.inputs.ep.unwrap_or(1));
        let (layout, words) = if ep > 1 {
            (format!("tp{tp}-ep{ep}"), format!("TP {tp} EP {ep}"))
        } else {
            (format!("tp{tp}"), format!("TP {tp}"))
        };
        let (prefix, whose) = if lm.inputs.component == "vit" {
            ("vit-", "'s vision encoder")
        } else {
            ("", "")
        };
        for ex in [Execution::Eager, Execution::Graphed] {
            let rows: Vec<&CheckRow> = lm.check.iter().filter(|r| r.execution == ex).collect();
            let lines = lines(&rows);
            if lines.iter().all(|l| l.points.is_empty()) {
                continue;
            }
            let title = format!(
                "{model}{whose} {words}, {}: the step model against the step",
                ex.name()
            );
            let svg = chart_svg(&title, 1.0, &lines, &AXES)?;
            let name = format!("plots/{model}/{prefix}step-{layout}-{}.svg", ex.name());
            out.insert(PathBuf::from(name), svg.into_bytes());
        }
    }
    Ok(out)
}

/// Measured and predicted speedup lines of all-FP8 and the plan.
fn lines(rows: &[&CheckRow]) -> Vec<Line> {
    let bf16: BTreeMap<u64, f64> = rows
        .iter()
        .filter(|r| r.mode == StepMode::Bf16)
        .map(|r| (r.tokens, r.predicted_ms))
        .collect();
    let mut out = Vec::new();
    for (mode, name) in [(StepMode::Fp8, "all-FP8"), (StepMode::Plan, "the policy")] {
        let of: Vec<&&CheckRow> = rows.iter().filter(|r| r.mode == mode).collect();
        let measured = of.iter().map(|r| (r.tokens, 1.0 / r.vs_bf16.0)).collect();
        let band = of
            .iter()
            .map(|r| (r.tokens, 1.0 / r.vs_bf16.2, 1.0 / r.vs_bf16.1))
            .collect();
        let predicted = of
            .iter()
            .filter_map(|r| bf16.get(&r.tokens).map(|b| (r.tokens, b / r.predicted_ms)))
            .collect();
        out.push(line(format!("{name}, measured (p10-p90)"), measured, band));
        out.push(line(format!("{name}, the model"), predicted, Vec::new()));
    }
    out
}

fn line(label: String, mut points: Vec<(u64, f64)>, mut band: Vec<(u64, f64, f64)>) -> Line {
    points.sort_by_key(|p| p.0);
    band.sort_by_key(|b| b.0);
    Line {
        label,
        points,
        band,
        min_tokens: None,
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    #[test]
    fn each_checked_layout_and_execution_has_its_picture_of_measured_and_modelled_steps() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let dir = Path::new("reports/h200/step_model");
        let inputs = [dir.join("llama3_2_1b_tp1_ep1_etp1_inputs_step.json")];
        let checks = [dir.join("llama3_2_1b_tp1_ep1_etp1_check_step.json")];
        let layouts =
            crate::step::saved::layout_models(&inputs, &checks, Some(&root), &[]).unwrap();
        let models: Vec<LayoutModel> = layouts.into_iter().map(|l| l.1).collect();
        let plots = step_plots("llama3_2_1b", &models).unwrap();
        let names: Vec<String> = plots.keys().map(|p| p.display().to_string()).collect();
        assert_eq!(
            names,
            [
                "plots/llama3_2_1b/step-tp1-eager.svg",
                "plots/llama3_2_1b/step-tp1-graphed.svg"
            ]
        );
        for svg in plots.values().map(|b| String::from_utf8_lossy(b)) {
            for label in [
                "all-FP8, measured (p10-p90)",
                "the policy, the model",
                "all-BF16 (1.0)",
                "TP 1",
            ] {
                assert!(svg.contains(label), "{label}");
            }
        }
        // A point per checked count: the eager plan's measured line is the check's plan rows.
        let eager = models[0]
            .check
            .iter()
            .filter(|r| r.execution == Execution::Eager)
            .collect::<Vec<_>>();
        let l = lines(&eager);
        let plan_rows = eager.iter().filter(|r| r.mode == StepMode::Plan).count();
        assert!(plan_rows > 3 && l[2].points.len() == plan_rows && l[2].band.len() == plan_rows);
        assert!(l[2].band.iter().all(|b| b.1 <= b.2));
        // Nothing checked, no picture.
        let mut bare = models[0].clone();
        bare.check.clear();
        assert!(step_plots("m", &[bare]).unwrap().is_empty());
    }
}
