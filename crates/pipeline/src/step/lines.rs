//! The step model tuner's lines to the user: its notes, its progress and its one-line summary
//! of a layout (what `model` prints; the numbers are `fp8_merge::model`'s).

use fp8_merge::model::LayoutModel;
use fp8_report::step_inputs::StepInputs;

/// Where a worker's run stopped settling at its bound with its steps still getting faster (its
/// document's typed `settled`), the note that says its first counts may read slow.
pub(super) fn unsettled(at: &str, run: &str, doc: &StepInputs) -> Option<String> {
    let s = doc.settled.as_ref().filter(|s| !s.flat)?;
    Some(format!(
        "{at}: the {run}'s steps still got faster after {:.1} s of settling before {} ({:.3} -> {:.3} ms a round): its first counts may read slow; where a step there disagrees with the model, the check's re-timing decides (docs/POLICY.md)",
        s.seconds, s.at, s.first_ms, s.last_ms
    ))
}

/// Why a layout whose whole steps all failed has no rules, and the fix: out of memory at every
/// count is a layout too large for this GPU at the measured layers.
pub(super) fn no_whole_step(at: &str, inputs: &StepInputs) -> String {
    let oom = |e: &str| e.starts_with("OutOfMemoryError") || e.contains("out of memory");
    let fix = if !inputs.failed.is_empty() && inputs.failed.iter().all(|f| oom(&f.error)) {
        format!(
            "its {} layer(s) do not fit this GPU at any count; fix: a layout of more ranks (a \
             larger TP or EP: one rank's share is what is timed), one layer, or fewer tokens",
            inputs.layers
        )
    } else {
        "fix: see the worker's messages above".to_owned()
    };
    format!(
        "{at}: not modelled, so no rules for this layout: no whole step ran at any count ({} \
         failed); {fix}",
        inputs.failed.len()
    )
}

/// One line on the model's error where the check held out the count.
pub(super) fn summary(at: &str, lm: &LayoutModel) -> String {
    let held = lm.held_out_errors();
    if held.is_empty() {
        return format!("{at}: modelled; no count held out of the calibration was checked");
    }
    let worst = held.iter().copied().fold(0.0, f64::max);
    let mut line = format!(
        "{at}: modelled; at {} held-out step(s) the model was within {:.1}% of the step (worst; median {:.1}%)",
        held.len(),
        100.0 * worst,
        100.0 * fp8_merge::model::curve::median(&held)
    );
    if let Some((med, most)) = lm.repeatability() {
        line.push_str(&format!(
            "; the same step timed twice differed by {:.1}% (median), up to {:.1}%",
            100.0 * med,
            100.0 * most
        ));
    }
    line
}

/// How far apart (relative) the same step may read in the inputs and again in the check before
/// the run is called unsteady: the model's own tolerance is 3%, and a quiet H200 repeats within
/// 2% (docs/RESULTS.md, "Eager thresholds follow the host").
pub(super) const UNSTEADY: f64 = 0.05;

/// Where the same step timed twice differed by more than [`UNSTEADY`], the note that the step's
/// time moved during the run, so thresholds near a crossing may not repeat.
pub(super) fn unsteady(at: &str, lm: &LayoutModel) -> Option<String> {
    let (_, most) = lm.repeatability()?;
    (most > UNSTEADY).then(|| {
        format!(
            "{at}: the same step timed twice differed by up to {:.1}% (over {:.0}%): its time moved between the inputs and the check, so thresholds near a crossing, eager ones of host-bound layouts most, may not repeat; where the machine was busy (another job, its clocks), make the policy again on an idle machine and compare the two (fp8sel diff)",
            100.0 * most,
            100.0 * UNSTEADY
        )
    })
}

/// The check's progress line: how many plans, how many of them the inputs timed, and whether the
/// smallest calibrated count is timed again.
pub(super) fn checking(at: &str, plans: usize, to_time: usize, anchor: bool) -> String {
    let again = if anchor {
        "; the smallest calibrated count timed again, to measure how far the step moved since"
    } else {
        ""
    };
    format!(
        "{at}: checking the model's plans in whole steps at {plans} count(s) ({} of them timed \
         with the inputs: a calibrated count's all-BF16 or all-FP8 plan{again})",
        plans - to_time
    )
}
