//! `fp8sel gen-policy --backend step` end to end with the stand-in worker: the refit, where the
//! check's all-BF16 and all-FP8 steps join the overlap share and the choice is made again.

#![allow(clippy::unwrap_used)]

mod common;

use common::err;

/// An eager step-model run with the stand-in's `env`, which must succeed: its folder and its
/// stderr.
fn eager_ok(env: &[(&str, &str)]) -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let args = ["--backend", "step", "--tp", "1", "--execution", "eager"];
    let o = common::gen_with_stand_ins(dir.path(), &args, env);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    (dir, err(&o))
}

#[test]
fn the_checks_steps_refit_the_overlap_and_a_plan_they_move_is_timed_again() {
    // Every checked step hides only half of its smaller time: the calibrated counts (timed with
    // the inputs) did not show it.
    let (dir, e) = eager_ok(&[("FAKE_STEP_UNHIDDEN", "0.5")]);
    assert!(
        e.contains("refit the model's overlap share and moved the policy's plan at "),
        "{e}"
    );
    let p: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join("llama3_2_1b.json")).unwrap(),
    )
    .unwrap();
    let m = &p["provenance"]["step"]["model"][0];
    let refit = m["refit"].as_array().unwrap();
    assert!(!refit.is_empty(), "{m}");
    assert!(
        refit.iter().all(|r| r["overlap"].as_f64().unwrap() > 0.4),
        "{m}"
    );
    // The moved plans were timed: a checked plan that is not the policy's is one a lift moved
    // (the check's own move, as before the refit).
    let lifted: Vec<&serde_json::Value> = m["lifted"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| &l["tokens"])
        .collect();
    for n in m["not_the_policy"].as_array().unwrap() {
        assert!(lifted.contains(&&n["tokens"]), "{n}: {e}");
    }
    // Each held-out row has its error with its own count left out.
    let held: Vec<&serde_json::Value> = m["check"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["calibrated"] == false)
        .collect();
    assert!(
        !held.is_empty() && held.iter().all(|r| r["refit_error"].is_f64()),
        "{m}"
    );
    let md = std::fs::read_to_string(dir.path().join("llama3_2_1b.md")).unwrap();
    assert!(
        md.contains("joined the overlap share's calibration"),
        "{md}"
    );
}
