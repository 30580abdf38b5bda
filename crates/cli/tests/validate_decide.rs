//! End-to-end tests of `fp8sel validate` and `fp8sel decide`: output, exit codes, no panics.

#![allow(clippy::unwrap_used)]

use std::process::{Command, Output};

const SEED: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../fixtures/policies/seed_example.json"
);

fn fp8sel(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_fp8sel"))
        .args(args)
        .output()
        .unwrap()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn validate_ok() {
    let o = fp8sel(&["validate", SEED]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(stdout(&o), "ok: 6 rules\n");
}

#[test]
fn validate_invalid_exits_2_with_the_error_on_stderr() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.json");
    std::fs::write(&bad, r#"{"version": 1, "speedup_threshold": 1.0, "rules": {"row": [{"tp": 1, "min_tokens": 4}]}}"#).unwrap();
    let o = fp8sel(&["validate", bad.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stdout(&o).is_empty());
    let e = stderr(&o);
    assert!(
        e.contains("bad.json") && e.contains("rules.row") && e.contains("merge-policy"),
        "{e}"
    );
    let o = fp8sel(&["validate", "/no/such/file.json"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("/no/such/file.json"));
}

#[test]
fn decide_dense_boundary() {
    let base = [
        "decide",
        "--policy",
        SEED,
        "--te-class",
        "TERowParallelLinear",
        "--ub-name",
        "fc2",
        "--tp",
        "1",
    ];
    let o = fp8sel(
        &[
            &base[..],
            &["--seq-length", "4096", "--micro-batch-size", "2"],
        ]
        .concat(),
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = stdout(&o);
    let lines: Vec<_> = out.lines().collect();
    assert_eq!(lines[0], "fp8");
    assert!(lines[1].contains("8192 >= min_tokens 8192"), "{out}");
    let o = fp8sel(&[&base[..], &["--num-tokens", "8191"]].concat());
    assert_eq!(stdout(&o).lines().next(), Some("bf16"));
    // CP divides the derived count.
    let o = fp8sel(
        &[
            &base[..],
            &[
                "--seq-length",
                "8192",
                "--micro-batch-size",
                "2",
                "--cp",
                "4",
            ],
        ]
        .concat(),
    );
    assert_eq!(stdout(&o).lines().next(), Some("bf16"), "{}", stdout(&o));
}

#[test]
fn decide_json() {
    let o = fp8sel(&[
        "decide",
        "--policy",
        SEED,
        "--kind",
        "layernorm_column",
        "--ub-name",
        "fc1",
        "--tp",
        "1",
        "--num-tokens",
        "5000",
        "--json",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["use_fp8"], true);
    assert_eq!(v["module_kind"], "layernorm_column");
    assert_eq!(v["num_tokens"], 5000);
    assert_eq!(v["rule"]["min_tokens"], 4096);
    assert!(
        v["reason"]
            .as_str()
            .unwrap()
            .contains("5000 >= min_tokens 4096")
    );
    // No rule: rule is null.
    let o = fp8sel(&[
        "decide",
        "--policy",
        SEED,
        "--kind",
        "row",
        "--ub-name",
        "fc2",
        "--tp",
        "8",
        "--num-tokens",
        "99999",
        "--json",
    ]);
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["use_fp8"], false);
    assert!(v["rule"].is_null());
    assert!(v["reason"].as_str().unwrap().contains("tp=8"));
}

#[test]
fn decide_expert_promotes_and_scales_by_topk() {
    let o = fp8sel(&[
        "decide",
        "--policy",
        SEED,
        "--te-class",
        "TEColumnParallelLinear",
        "--ub-name",
        "fc1",
        "--expert",
        "--topk",
        "8",
        "--tp",
        "4",
        "--etp",
        "1",
        "--num-gemms",
        "64",
        "--num-tokens",
        "53",
        "--json",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["module_kind"], "column_grouped");
    assert_eq!(v["num_tokens"], 424);
    assert_eq!(v["use_fp8"], true);
    let o = fp8sel(&[
        "decide",
        "--policy",
        SEED,
        "--te-class",
        "TERowParallelLinear",
        "--expert",
        "--topk",
        "8",
        "--tp",
        "1",
        "--num-gemms",
        "64",
        "--num-tokens",
        "52",
    ]);
    let out = stdout(&o);
    assert!(out.starts_with("bf16\n"), "{out}");
    assert!(out.contains("416 < min_tokens 424"), "{out}");
    assert!(out.contains("promoted to row_grouped"), "{out}");
}

#[test]
fn expert_without_num_gemms_is_a_usage_error() {
    let o = fp8sel(&[
        "decide",
        "--policy",
        SEED,
        "--te-class",
        "TERowParallelLinear",
        "--expert",
        "--topk",
        "8",
        "--tp",
        "1",
        "--num-tokens",
        "100000",
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("--num-gemms"), "{}", stderr(&o));
    let o = fp8sel(&[
        "decide",
        "--policy",
        SEED,
        "--kind",
        "column_grouped",
        "--tp",
        "1",
        "--num-gemms",
        "64",
        "--num-tokens",
        "100000",
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("--topk"), "{}", stderr(&o));
}

#[test]
fn usage_errors_exit_2_and_never_panic() {
    let cases: &[&[&str]] = &[
        &["decide"],
        &["decide", "--policy", SEED, "--tp", "1", "--num-tokens", "1"],
        &[
            "decide",
            "--policy",
            SEED,
            "--kind",
            "nope",
            "--tp",
            "1",
            "--num-tokens",
            "1",
        ],
        &[
            "decide",
            "--policy",
            SEED,
            "--kind",
            "row",
            "--tp",
            "0",
            "--num-tokens",
            "1",
        ],
        &[
            "decide",
            "--policy",
            SEED,
            "--kind",
            "row",
            "--tp",
            "1",
            "--num-tokens",
            "-5",
        ],
        &[
            "decide",
            "--policy",
            SEED,
            "--te-class",
            "Weird",
            "--ub-name",
            "zzz",
            "--tp",
            "1",
            "--num-tokens",
            "1",
        ],
        &["validate"],
        &["nonsense"],
    ];
    for args in cases {
        let o = fp8sel(args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        assert!(!stderr(&o).contains("panicked"), "{args:?}");
    }
}

#[test]
fn unknown_class_uses_the_ub_name_fallback() {
    let o = fp8sel(&[
        "decide",
        "--policy",
        SEED,
        "--te-class",
        "MyLinear",
        "--ub-name",
        "fc2",
        "--tp",
        "1",
        "--num-tokens",
        "9000",
    ]);
    assert_eq!(o.status.code(), Some(0));
    assert!(stdout(&o).starts_with("fp8\n"));
}
