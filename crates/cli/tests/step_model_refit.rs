//! `fp8sel gen-policy --backend step` end to end with the stand-in worker: the re-timing, where a
//! count the step disagrees at is timed again, and the refit, where the check's all-BF16 and
//! all-FP8 steps join the overlap share and the choice is made again.

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

/// The policy gen-policy wrote to `dir`.
fn policy(dir: &std::path::Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(dir.join("llama3_2_1b.json")).unwrap()).unwrap()
}

/// The layout's step report of `run` (`inputs`, `check`, `recheck`, `recheck2`, ...) gen-policy wrote
/// under `dir`.
fn step_report(dir: &std::path::Path, run: &str) -> serde_json::Value {
    let f = dir.join(format!("reports/llama3_2_1b_tp1_ep1_etp1_{run}_step.json"));
    serde_json::from_str(&std::fs::read_to_string(f).unwrap()).unwrap()
}

/// The layout's step-model record in the policy gen-policy wrote to `dir`.
fn layout(dir: &std::path::Path) -> serde_json::Value {
    policy(dir)["provenance"]["step"]["model"][0].clone()
}

/// Every checked plan that is not the policy's lies at or above a count a lift moved crossings
/// down to (the check's own move, which nothing times again): the plans the refit moved were
/// timed.
fn only_lifts_left(m: &serde_json::Value, e: &str) {
    let lifted: Vec<u64> = m["lifted"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["tokens"].as_u64().unwrap())
        .collect();
    for n in m["not_the_policy"].as_array().unwrap() {
        let t = n["tokens"].as_u64().unwrap();
        assert!(lifted.iter().any(|&l| l <= t), "{n}: {e}");
    }
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
    let m = &layout(dir.path());
    let refit = m["refit"].as_array().unwrap();
    assert!(!refit.is_empty(), "{m}");
    assert!(
        refit.iter().all(|r| r["overlap"].as_f64().unwrap() > 0.4),
        "{m}"
    );
    only_lifts_left(m, &e);
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

#[test]
fn a_plan_the_re_timing_measured_faster_than_bf16_is_not_moved_back_and_the_rounds_end() {
    // The first check's steps between calibrated counts hide half their smaller time, the
    // re-timed ones all of it: the re-timing's refit would move the plan back, but the re-timing
    // measured that plan faster than BF16 beyond the noise, so it holds (`check::hold`; before
    // holds a second round timed the plan the refit moved to) and the rounds end.
    let (dir, e) = eager_ok(&[
        ("FAKE_STEP_UNHIDDEN", "0.5"),
        ("FAKE_STEP_UNHIDDEN_GROWTH", "-0.5"),
    ]);
    assert!(e.contains("timing the new plans"), "{e}");
    assert!(!e.contains("(round 2 of 3)"), "{e}");
    // One re-timing round, its own document, each count once.
    assert!(
        !dir.path()
            .join("reports/llama3_2_1b_tp1_ep1_etp1_recheck2_step.json")
            .exists()
    );
    let recheck = step_report(dir.path(), "recheck");
    let mut seen = std::collections::BTreeSet::new();
    for r in recheck["step_times"].as_array().unwrap() {
        let key = (r["tokens"].as_u64(), r["mode"].to_string());
        assert!(seen.insert(key), "a count's rows twice: {recheck}");
    }
    // The plan the rounds settled on is the policy's.
    only_lifts_left(&layout(dir.path()), &e);
}

#[test]
fn a_count_the_step_disagrees_at_is_timed_again_and_the_later_steps_decide() {
    // The first check that times 8192 (swept, not calibrated) runs every mode there 30% slower
    // (a cold start); timed again, the steps are the made-up rules' own.
    let (base_dir, base) = eager_ok(&[]);
    assert!(!base.contains("disagree beyond 3%"), "{base}");
    let (dir, e) = eager_ok(&[("FAKE_STEP_CHECK_COLD", "8192")]);
    assert!(
        e.contains("disagree beyond 3% and the noise at 1 count(s) (eager 8192; the model's plan measured slower than BF16 at 0); timing them again"),
        "{e}"
    );
    let retimed = |d: &std::path::Path| -> std::collections::BTreeSet<u64> {
        let f = d.join("reports/llama3_2_1b_tp1_ep1_etp1_recheck_step.json");
        let Ok(text) = std::fs::read_to_string(f) else {
            return Default::default();
        };
        let doc: serde_json::Value = serde_json::from_str(&text).unwrap();
        doc["step_times"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["tokens"].as_u64().unwrap())
            .collect()
    };
    // What the plain run timed again (plans behind all-FP8), and 8192.
    let mut expect = retimed(base_dir.path());
    assert!(!expect.contains(&8192), "{expect:?}");
    expect.insert(8192);
    assert_eq!(retimed(dir.path()), expect);
    // The re-timed steps replace the cold ones: the same rows, rules and no disagreement as
    // the run that never ran cold.
    let (p, q) = (policy(dir.path()), policy(base_dir.path()));
    let m = |p: &serde_json::Value, f: &str| p["provenance"]["step"]["model"][0][f].clone();
    // (in another order: a count timed again comes after the check's)
    let rows = |p: &serde_json::Value| -> Vec<String> {
        let mut v: Vec<String> = m(p, "check")
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r.to_string())
            .collect();
        v.sort();
        v
    };
    assert_eq!(rows(&p), rows(&q));
    assert_eq!(m(&p, "disagreements"), m(&q, "disagreements"));
    assert_eq!(p["rules"], q["rules"]);
    assert!(!m(&p, "disagreements").to_string().contains("8192"), "{p}");
}

#[test]
fn a_run_whose_steps_were_still_getting_faster_after_settling_is_said() {
    // Every stand-in document records settling; flat ones say nothing.
    let (dir, base) = eager_ok(&[]);
    assert!(!base.contains("still got faster"), "{base}");
    let inputs = step_report(dir.path(), "inputs");
    assert_eq!(inputs["settled"]["flat"], true, "{inputs}");
    for run in ["inputs", "check"] {
        let (_dir, e) = eager_ok(&[("FAKE_STEP_UNSETTLED", run)]);
        let want = format!(
            "llama3_2_1b tp1 ep1 etp1 cp1: the {run}'s steps still got faster after 12.1 s of settling before eager at 1024 (30.000 -> 24.000 ms a round): its first counts may read slow"
        );
        assert!(e.contains(&want), "{run}: {e}");
        assert_eq!(e.matches("still got faster").count(), 1, "{e}");
    }
}

#[test]
fn each_re_timing_round_is_its_own_document_and_a_later_round_keeps_an_earlier_ones_steps() {
    // Noisy plan steps (bands of +-40%: no plan wins or loses beyond the noise, so nothing is
    // held or guarded) and a share that moves each time a count is timed again: the refit moves
    // 5248's plan twice, so a second round times it again.
    let (dir, e) = eager_ok(&[
        ("FAKE_STEP_UNHIDDEN", "0.5"),
        ("FAKE_STEP_UNHIDDEN_GROWTH", "-0.5"),
        ("FAKE_STEP_PLAN_NOISE", "0.2"),
    ]);
    assert!(e.contains("(round 2 of 3)"), "{e}");
    let plans_at = |run: &str, t: u64| -> Vec<String> {
        let doc = step_report(dir.path(), run);
        let mut seen = std::collections::BTreeSet::new();
        let rows = doc["step_times"].as_array().unwrap();
        for r in rows {
            let key = (
                r["tokens"].as_u64(),
                r["mode"].to_string(),
                r["fp8_groups"].to_string(),
            );
            assert!(seen.insert(key), "{run}: a row twice: {doc}");
        }
        rows.iter()
            .filter(|r| r["mode"] == "plan" && r["tokens"].as_u64() == Some(t))
            .map(|r| r["fp8_groups"].to_string())
            .collect()
    };
    // Both rounds timed 5248, each with its own all-BF16 and plan rows, in its own document:
    // the second round's plan did not replace the first's evidence.
    let (first, second) = (plans_at("recheck", 5248), plans_at("recheck2", 5248));
    assert_eq!((first.len(), second.len()), (1, 1), "{first:?} {second:?}");
    assert_ne!(first, second);
    // The saved rounds, read in order, remake the policy gen-policy wrote.
    let f = |run: &str| {
        dir.path()
            .join(format!("reports/llama3_2_1b_tp1_ep1_etp1_{run}_step.json"))
    };
    assert!(!f("recheck3").exists());
    let out = dir.path().join("again.json");
    let m = std::process::Command::new(env!("CARGO_BIN_EXE_fp8sel"))
        .args(["merge-policy", "--step-model"])
        .arg(f("inputs"))
        .arg("--step-check")
        .args([f("check"), f("recheck"), f("recheck2")])
        .arg("--output")
        .arg(&out)
        .output()
        .unwrap();
    assert_eq!(m.status.code(), Some(0), "{}", err(&m));
    let again: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    assert_eq!(again["rules"], policy(dir.path())["rules"]);
}

#[test]
fn an_unsteady_machine_is_said_to_make_thresholds_that_may_not_repeat() {
    // The check's steps 8% slower than the same steps in the inputs (the machine's speed moved
    // during the run): the policy is still written, with a note on stderr that names the spread
    // and the fix.
    let dir = tempfile::tempdir().unwrap();
    let args = [
        "--backend",
        "step",
        "--tp",
        "1",
        "--tokens",
        "512,1024,2048,4096,16384",
    ];
    let args = [&args[..], &["--check-anchor"]].concat();
    let o = common::gen_with_stand_ins(dir.path(), &args, &[("FAKE_STEP_CHECK_DRIFT", "1.08")]);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    let e = err(&o);
    let note = common::line_of(&e, |l| l.contains("may not repeat"));
    assert!(note.starts_with("note: llama3_2_1b tp1"), "{note}");
    assert!(note.contains("differed by up to 8.0% (over 5%)"), "{note}");
    assert!(
        note.contains("make the policy again on an idle machine"),
        "{note}"
    );
    assert!(!String::from_utf8_lossy(&o.stdout).contains("may not repeat"));
    assert!(!policy(dir.path())["rules"].as_object().unwrap().is_empty());
}

#[test]
fn the_policy_and_its_summary_name_the_host_its_steps_ran_on() {
    // Eager thresholds of host-bound layouts move with the host: the worker's `host` reaches the
    // policy's provenance and the summary's layout heading.
    let (dir, _) = eager_ok(&[]);
    assert_eq!(layout(dir.path())["host"], "Stand-in CPU, 16 CPUs");
    let md = std::fs::read_to_string(dir.path().join("llama3_2_1b.md")).unwrap();
    assert!(md.contains("(host: Stand-in CPU, 16 CPUs), TE"), "{md}");
}
