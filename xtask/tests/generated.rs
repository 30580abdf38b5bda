//! Generated files are checked in; these fail when they are stale. Update with
//! `FP8_UPDATE_POLICIES=1 cargo test -p xtask --test generated` (or `cargo xtask gen-policy
//! --check` / `cargo xtask results` with the same variable).

use xtask::{UPDATE_ENV, check_policies, check_results, root};

fn update() -> bool {
    std::env::var_os(UPDATE_ENV).is_some_and(|v| v == "1")
}

#[test]
fn policies_are_up_to_date_with_the_committed_reports() {
    let stale = check_policies(&root(), update()).unwrap_or_else(|e| panic!("{e}"));
    assert!(
        stale.is_empty(),
        "policies/ is stale ({UPDATE_ENV}=1 cargo xtask gen-policy --check):\n{}",
        stale.join("\n")
    );
}

#[test]
fn results_are_up_to_date_with_the_committed_reports() {
    let stale = check_results(&root(), update()).unwrap_or_else(|e| panic!("{e}"));
    assert!(
        !stale,
        "docs/RESULTS.md is stale: run `cargo xtask results`"
    );
}

#[test]
fn results_hold_the_current_results_only() {
    // The current results with their commands; their history is in git.
    let text = std::fs::read_to_string(root().join("docs/RESULTS.md")).unwrap_or_default();
    let n = text.lines().count();
    assert!(
        (1..=600).contains(&n),
        "docs/RESULTS.md is {n} lines (at most 600): keep the current results, leave history to git"
    );
}

#[test]
fn every_recipes_default_serves_both_executions() {
    // Blockwise, tensorwise and delayed: min_tokens for eager trainers from an eager objective,
    // min_tokens_graphed from GPU time, both named in provenance.
    for f in [
        "policies/qwen2_5_72b.json",
        "policies/tensorwise/qwen2_5_72b.json",
        "policies/delayed/deepseek_v3.json",
    ] {
        let text = std::fs::read_to_string(root().join(f)).unwrap_or_else(|e| panic!("{f}: {e}"));
        let v: serde_json::Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}"));
        // A step model's file: each execution's thresholds from its own whole steps.
        if v["provenance"]["step"]["model"].is_array() {
            let timing = &v["provenance"]["timing"];
            assert!(
                ["step-model-eager", "step-model-graphed"]
                    .iter()
                    .all(|m| timing.as_array().is_some_and(|a| a.iter().any(|t| t == m))),
                "{f}: {timing}"
            );
            continue;
        }
        // Else every key's eager threshold from an eager objective (never GPU time alone), and
        // GPU time among the graphed ones' sources.
        let t = &v["provenance"]["sources"];
        let keys = t.as_array().map_or(&[][..], |a| a.as_slice());
        let eager_objective = |k: &serde_json::Value| {
            ["step", "eager_step", "host_profile"].contains(&k["eager"].as_str().unwrap_or(""))
        };
        assert!(
            !keys.is_empty()
                && keys.iter().all(eager_objective)
                && keys.iter().any(|k| k["graphed"] == "gpu_time"),
            "{f}: {t}"
        );
    }
}
