//! `min_tokens_graphed`: a rule's threshold for CUDA-graphed steps beside the eager `min_tokens`.
//! It round-trips, is validated like `min_tokens`, changes only graphed decisions, and stays
//! readable by the seed's loader (which reads `min_tokens` and the key only).

#![allow(clippy::unwrap_used)]

use std::process::Command;

use fp8_policy::{DenseKind, Execution, GroupedKind, Lookup, Policy, Reason};

const BOTH: &str = r#"{"version": 1, "speedup_threshold": 1.0, "rules": {
    "row": {"fc2": [{"tp": 2, "min_tokens": 8192, "min_tokens_graphed": 1024, "measured_speedup": 1.1}],
            "proj": [{"tp": 2, "min_tokens": 4096}]},
    "column_grouped": [{"etp": 1, "num_gemms": 8, "min_tokens": 65536, "min_tokens_graphed": 16384}]}}"#;

fn fc2() -> Lookup<'static> {
    Lookup::Dense {
        kind: DenseKind::Row,
        ub_name: Some("fc2"),
        tp: 2,
    }
}

#[test]
fn graphed_steps_use_their_own_threshold_eager_ones_min_tokens() {
    let p = Policy::from_json_str(BOTH, "both.json").unwrap();
    assert!(!p.decide_in(fc2(), 4096, Execution::Eager).use_fp8);
    assert!(!p.decide(fc2(), 4096).use_fp8, "decide is eager");
    let g = p.decide_in(fc2(), 4096, Execution::Graphed);
    assert!(g.use_fp8);
    assert_eq!(
        g.reason.to_string(),
        "tokens 4096 >= min_tokens_graphed 1024, measured speedup 1.1 at min_tokens 8192"
    );
    assert!(matches!(
        p.decide_in(fc2(), 512, Execution::Graphed).reason,
        Reason::BelowThreshold {
            execution: Execution::Graphed,
            ..
        }
    ));
    // A rule without it: min_tokens in both executions.
    let proj = Lookup::Dense {
        kind: DenseKind::Row,
        ub_name: Some("proj"),
        tp: 2,
    };
    for e in [Execution::Eager, Execution::Graphed] {
        assert!(!p.decide_in(proj, 4095, e).use_fp8);
        let d = p.decide_in(proj, 4096, e);
        assert!(d.use_fp8 && d.reason.to_string().contains("min_tokens 4096"));
    }
    let experts = Lookup::Grouped {
        kind: GroupedKind::ColumnGrouped,
        etp: 1,
        num_gemms: 8,
    };
    assert!(p.decide_in(experts, 32768, Execution::Graphed).use_fp8);
    assert!(!p.decide_in(experts, 32768, Execution::Eager).use_fp8);
}

#[test]
fn the_field_round_trips_and_is_validated() {
    let p = Policy::from_json_str(BOTH, "both.json").unwrap();
    let text = p.to_json();
    assert!(text.contains("\"min_tokens_graphed\": 1024"), "{text}");
    assert_eq!(Policy::from_json_str(&text, "again.json").unwrap(), p);
    // Absent, nothing is written.
    let plain = Policy::from_json_str(
        r#"{"version": 1, "speedup_threshold": 1.0, "rules": {"row": {"fc2": [{"tp": 1, "min_tokens": 8}]}}}"#,
        "p.json",
    )
    .unwrap();
    assert!(!plain.to_json().contains("min_tokens_graphed"));
    for bad in ["-1", "1.5", "\"64\""] {
        let j = BOTH.replace(
            "\"min_tokens_graphed\": 1024",
            &format!("\"min_tokens_graphed\": {bad}"),
        );
        let e = Policy::from_json_str(&j, "bad.json")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("rules.row.fc2[0].min_tokens_graphed"),
            "{bad}: {e}"
        );
    }
}

#[test]
fn the_seed_loader_still_reads_a_policy_with_both_thresholds() {
    let Some(py) = ["python3", "python"].into_iter().find(|p| {
        Command::new(p)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
    }) else {
        println!("skipped: no python3 on PATH (python compatibility not checked)");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("both.json");
    let p = Policy::from_json_str(BOTH, "both.json").unwrap();
    p.write(&f).unwrap();
    let loader = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../fixtures/compat/seed_loader.py"
    );
    let out = Command::new(py)
        .arg(loader)
        .args(["check", f.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("ok {}", p.rule_count())
    );
}
