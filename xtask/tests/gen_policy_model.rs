//! `cargo xtask gen-policy --backend model` on a fixture model, on the CPU: a policy that
//! `fp8sel validate` accepts, plots that are valid SVG, and a summary.

use std::process::Command;

use xtask::root;

#[test]
fn estimated_pipeline_on_a_fixture_model() {
    let out = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let status = Command::new(env!("CARGO"))
        .current_dir(root())
        .args([
            "run",
            "--quiet",
            "-p",
            "xtask",
            "--",
            "gen-policy",
            "--backend",
            "model",
            "--model",
            "fixtures/models/llama3_2_1b.yaml",
            "--tp",
            "1,2",
            "--out",
        ])
        .arg(out.path())
        .status()
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(status.success());
    let policy = out.path().join("llama3_2_1b.json");
    let p = fp8_policy::Policy::load(&policy).unwrap_or_else(|e| panic!("{e}"));
    assert!(p.estimated());
    // One file for both executions: the eager threshold (the GPU times with the H200 host
    // profile) above the graphed one (GPU time alone) where the host's cost matters.
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&policy).unwrap_or_else(|e| panic!("{e}")))
            .unwrap_or_else(|e| panic!("{e}"));
    let fc1 = &v["rules"]["layernorm_column"]["fc1"][0];
    let (eager, graphed) = (
        fc1["min_tokens"].as_u64(),
        fc1["min_tokens_graphed"].as_u64(),
    );
    assert!(
        matches!((eager, graphed), (Some(e), Some(g)) if e > g),
        "{fc1}"
    );
    let prov = &v["provenance"];
    assert!(
        prov["host_profile"]
            .as_str()
            .is_some_and(|t| t.contains("fixtures/host/h200"))
            && prov["sources"]
                .as_array()
                .is_some_and(|s| !s.is_empty() && s.iter().all(|k| k["eager"] == "host_profile")),
        "{prov}"
    );
    // The CLI's validator accepts it too.
    let v = Command::new(env!("CARGO"))
        .current_dir(root())
        .args(["run", "--quiet", "-p", "fp8sel", "--", "validate"])
        .arg(&policy)
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(v.status.success(), "{}", String::from_utf8_lossy(&v.stderr));
    assert!(String::from_utf8_lossy(&v.stdout).starts_with("ok: "));
    let summary = std::fs::read_to_string(out.path().join("llama3_2_1b.md"))
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(
        summary.contains("ESTIMATED") && summary.contains("| layout |"),
        "{summary}"
    );
    let plots: Vec<_> = std::fs::read_dir(out.path().join("plots/llama3_2_1b"))
        .unwrap_or_else(|e| panic!("{e}"))
        .map(|e| e.map(|e| e.path()))
        .collect::<Result<_, _>>()
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(plots.len(), 4);
    for plot in plots {
        let svg = std::fs::read_to_string(&plot).unwrap_or_else(|e| panic!("{e}"));
        assert!(
            svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"),
            "{}",
            plot.display()
        );
        assert!(svg.contains("threshold 1"), "{}", plot.display());
        // Well-formed enough for a browser: every element that opens closes.
        assert_eq!(svg.matches("<text").count(), svg.matches("</text>").count());
    }
    assert!(out.path().join("reports/llama3_2_1b_tp1.json").exists());
}
