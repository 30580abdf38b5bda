//! `fp8sel bench --backend model` (the seed's environment variables included) and
//! `fp8sel merge-policy`, end to end on the CPU.

#![allow(clippy::unwrap_used)]

mod common;
use common::fp8sel_env as fp8sel;

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn seed_environment_variables_drive_the_bench() {
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("report_tp2.json");
    let policy = dir.path().join("policy_tp2.json");
    let o = fp8sel(
        &["bench", "--backend", "model", "--quiet"],
        &[
            (
                "TE_LAYER_PERF_OMNI_CONFIG_PATH",
                "fixtures/models/qwen2_5_72b.yaml",
            ),
            ("TE_LAYER_PERF_TP_SIZE", "2"),
            ("TE_LAYER_PERF_PRECISIONS", "bf16,fp8"),
            ("TE_LAYER_PERF_FP8_RECIPE", "blockwise"),
            ("TE_LAYER_PERF_WARMUP", "3"),
            ("TE_LAYER_PERF_ITERS", "4"),
            ("TE_LAYER_PERF_SHAPE_SWEEP", "1024x1,4096x2"),
            ("TE_LAYER_PERF_REPORT_PATH", report.to_str().unwrap()),
            ("TE_LAYER_PERF_FP8_POLICY_PATH", policy.to_str().unwrap()),
            ("TE_LAYER_PERF_SPEEDUP_THRESHOLD", "1.05"),
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    // --quiet: the summary line only, and it says these are estimates.
    assert!(text(&o.stdout).contains("ESTIMATES"), "{}", text(&o.stdout));
    assert_eq!(text(&o.stdout).lines().count(), 2, "{}", text(&o.stdout));
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    assert_eq!(r["estimated"], true);
    assert_eq!(r["provenance"]["parallel"]["tp"], 2);
    assert_eq!(r["provenance"]["warmup"], 3);
    assert_eq!(r["provenance"]["iters"], 4);
    assert_eq!(r["provenance"]["device"]["name"], "model:h200");
    let tokens: std::collections::BTreeSet<u64> = r["points"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["tokens"].as_u64().unwrap())
        .collect();
    assert_eq!(tokens.into_iter().collect::<Vec<_>>(), vec![1024, 8192]);
    let p: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&policy).unwrap()).unwrap();
    assert_eq!(p["speedup_threshold"], 1.05);
    assert_eq!(p["provenance"]["estimated"], true);
}

#[test]
fn bench_input_errors_exit_2() {
    let base = [
        "bench",
        "--backend",
        "model",
        "--model",
        "fixtures/models/qwen2_5_72b.yaml",
        "--report",
        "/tmp/x.json",
    ];
    for (extra, want) in [
        (&["--recipe", "fp4"][..], "alias current"),
        (
            &["--recipe", "blockwise", "--fp8-format", "hybrid"],
            "E4M3 only",
        ),
        (
            &["--recipe", "current", "--amax-history-len", "16"],
            "--recipe delayed",
        ),
        (&["--precisions", "fp16"], "fp16"),
        (&["--shape-sweep", "12xq"], "shape-sweep"),
        (&["--device-profile", "mi300"], "mi300"),
        (&["--modules", "nothing-matches"], "nothing to measure"),
    ] {
        let args = [&base[..], extra].concat();
        let o = fp8sel(&args, &[]);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", text(&o.stderr));
        assert!(
            text(&o.stderr).contains(want),
            "{args:?}: {}",
            text(&o.stderr)
        );
    }
    // Without a GPU, the CUDA backend is a clear input error, never a panic.
    let o = fp8sel(
        &[
            "bench",
            "--model",
            "fixtures/models/qwen2_5_72b.yaml",
            "--report",
            "/tmp/x.json",
        ],
        &[],
    );
    if o.status.code() == Some(2) {
        assert!(
            text(&o.stderr).contains("--backend model"),
            "{}",
            text(&o.stderr)
        );
    }
    assert!(!text(&o.stderr).contains("panicked"));
}

#[test]
fn merge_policy_end_to_end() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("q72.json");
    let o = fp8sel(
        &[
            "merge-policy",
            "--reports",
            "reports/h200/qwen2_5_72b_tp1.json",
            "reports/h200/qwen2_5_72b_tp8.json",
            "--output",
            out.to_str().unwrap(),
        ],
        &[],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let stdout = text(&o.stdout);
    assert!(
        stdout.contains("llm row/fc2 tp=1") && stdout.contains("min_tokens"),
        "{stdout}"
    );
    let v = fp8sel(&["validate", out.to_str().unwrap()], &[]);
    // As many rules as the written file holds (the count itself depends on the measurements).
    let rules = std::fs::read_to_string(&out)
        .unwrap()
        .matches("\"min_tokens\"")
        .count();
    assert!(rules > 0);
    assert_eq!(
        text(&v.stdout),
        format!("ok: {rules} rules; made for qwen2_5_72b\n")
    );
    // A VLM's reports need one policy per component.
    let vlm = [
        "reports/h200/qwen3_vl_llm_tp1_ep4.json",
        "reports/h200/qwen3_vl_vit_tp1.json",
    ];
    let o = fp8sel(
        &[
            &["merge-policy", "--reports"],
            &vlm[..],
            &["--output", out.to_str().unwrap()],
        ]
        .concat(),
        &[],
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(
        text(&o.stderr).contains("--component or --output-dir"),
        "{}",
        text(&o.stderr)
    );
    let o = fp8sel(
        &[
            &["merge-policy", "--reports"],
            &vlm[..],
            &[
                "--output-dir",
                dir.path().to_str().unwrap(),
                "--name",
                "vlm",
            ],
        ]
        .concat(),
        &[],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert!(dir.path().join("vlm.llm.json").exists() && dir.path().join("vlm.vit.json").exists());
    let o = fp8sel(
        &[
            &["merge-policy", "--reports"],
            &vlm[..],
            &["--component", "vit", "--output", out.to_str().unwrap()],
        ]
        .concat(),
        &[],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
}

#[test]
fn merge_policy_bad_input_exits_2_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.json");
    std::fs::write(&bad, "{\"hello\": 1}").unwrap();
    let out = dir.path().join("p.json");
    let o = fp8sel(
        &[
            "merge-policy",
            "--reports",
            bad.to_str().unwrap(),
            "--output",
            out.to_str().unwrap(),
        ],
        &[],
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o.stderr).contains("bad.json"), "{}", text(&o.stderr));
    assert!(!out.exists(), "no half-written policy on failure");
    // Mixed devices.
    let est = dir.path().join("est.json");
    let b = fp8sel(
        &[
            "bench",
            "--backend",
            "model",
            "--quiet",
            "--model",
            "fixtures/models/qwen2_5_72b.yaml",
            "--tp",
            "1",
            "--report",
            est.to_str().unwrap(),
        ],
        &[],
    );
    assert_eq!(b.status.code(), Some(0), "{}", text(&b.stderr));
    let o = fp8sel(
        &[
            "merge-policy",
            "--reports",
            "reports/h200/qwen2_5_72b_tp1.json",
            est.to_str().unwrap(),
            "--output",
            out.to_str().unwrap(),
        ],
        &[],
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(
        text(&o.stderr).contains("--allow-mixed"),
        "{}",
        text(&o.stderr)
    );
    let o = fp8sel(
        &[
            "merge-policy",
            "--reports",
            "reports/h200/qwen2_5_72b_tp1.json",
            "--host-floor-ms",
            "x",
            "--output",
            out.to_str().unwrap(),
        ],
        &[],
    );
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn bench_kernels_teaches_and_rejects_bad_flags() {
    let help = fp8sel(&["bench-kernels", "--help"], &[]);
    assert_eq!(help.status.code(), Some(0));
    let h = text(&help.stdout);
    assert!(
        h.contains("--search") && h.contains("exhaustive") && h.contains("heuristic"),
        "{h}"
    );
    let bad = fp8sel(&["bench-kernels", "--search", "random"], &[]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(
        text(&bad.stderr).contains("exhaustive"),
        "{}",
        text(&bad.stderr)
    );
    let shapes = fp8sel(&["bench-kernels", "--shapes", "4096x2048"], &[]);
    assert_eq!(shapes.status.code(), Some(2));
    assert!(
        text(&shapes.stderr).contains("MxKxN"),
        "{}",
        text(&shapes.stderr)
    );
}

/// A JSON file's value.
fn read(p: &std::path::Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

/// Every rule of a policy with a `ub_name` level: `kind/ub/tp` and its `min_tokens`.
fn rule_starts(v: &serde_json::Value) -> Vec<(String, u64)> {
    let mut out = vec![];
    for (kind, ubs) in v["rules"].as_object().unwrap() {
        if let Some(ubs) = ubs.as_object() {
            for (ub, rules) in ubs {
                for r in rules.as_array().unwrap() {
                    out.push((
                        format!("{kind}/{ub}/{}", r["tp"]),
                        r["min_tokens"].as_u64().unwrap(),
                    ));
                }
            }
        }
    }
    out
}

#[test]
fn merge_policy_applies_a_host_profile_and_refuses_a_bad_one() {
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("r.json");
    let o = fp8sel(
        &[
            "bench",
            "--backend",
            "model",
            "--quiet",
            "--model",
            "fixtures/models/llama3_2_1b.yaml",
            "--report",
            report.to_str().unwrap(),
        ],
        &[],
    );
    assert!(o.status.success(), "{}", text(&o.stderr));
    let merge = |extra: &[&str], out: &std::path::Path| {
        let mut a = vec![
            "merge-policy",
            "--reports",
            report.to_str().unwrap(),
            "--output",
            out.to_str().unwrap(),
        ];
        a.extend_from_slice(extra);
        fp8sel(&a, &[])
    };
    let (plain, host) = (dir.path().join("plain.json"), dir.path().join("host.json"));
    assert!(merge(&[], &plain).status.success());
    let o = merge(&["--host-profile", "fixtures/host/example.json"], &host);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let (p, h) = (read(&plain), read(&host));
    assert!(
        h["provenance"]["host_profile"]
            .as_str()
            .unwrap()
            .contains("example device")
    );
    // Host floors only ever delay FP8: every rule of the floored policy starts at or above the
    // plain one's (or is gone).
    let hs = rule_starts(&h);
    for (k, t) in rule_starts(&p) {
        if let Some((_, th)) = hs.iter().find(|(kk, _)| *kk == k) {
            assert!(*th >= t, "{k}: {th} < {t}");
        }
    }
    assert_ne!(
        hs,
        rule_starts(&p),
        "the example profile should move at least one rule"
    );
    // An eager trainer takes GPU-time reports only with a host profile (its model of the eager
    // step); the same rules as without --trainer. A graphed trainer has no host to model.
    let eager = dir.path().join("eager.json");
    let o = merge(&["--trainer", "eager"], &eager);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        text(&o.stderr).contains("--host-profile"),
        "{}",
        text(&o.stderr)
    );
    let o = merge(
        &[
            "--trainer",
            "eager",
            "--host-profile",
            "fixtures/host/example.json",
        ],
        &eager,
    );
    assert!(o.status.success(), "{}", text(&o.stderr));
    let e = read(&eager);
    assert_eq!(rule_starts(&e), hs);
    assert_eq!(e["provenance"]["trainer"], "eager");
    let o = merge(
        &[
            "--trainer",
            "graphed",
            "--host-profile",
            "fixtures/host/example.json",
        ],
        &dir.path().join("graphed.json"),
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(
        text(&o.stderr).contains("use --trainer eager with it"),
        "{}",
        text(&o.stderr)
    );
    // A broken profile: exit 2, the file and the fix named, nothing written.
    let bad = dir.path().join("bad.json");
    std::fs::write(&bad, r#"{"format": "adaptive-fp8-host-profile", "version": 1, "kinds": {"rows": {"bf16_ms": 1, "fp8_ms": 1}}}"#).unwrap();
    let out = dir.path().join("never.json");
    let o = merge(&["--host-profile", bad.to_str().unwrap()], &out);
    assert_eq!(o.status.code(), Some(2));
    let e = text(&o.stderr);
    assert!(
        e.contains("bad.json") && e.contains("kinds.rows") && e.contains("probe_host"),
        "{e}"
    );
    assert!(!out.exists());
}
