//! `fp8sel merge-policy --step`: a policy from the step benchmark's oracle verdicts, eager into
//! `min_tokens`, graphed into `min_tokens_graphed`, with the step in provenance.

#![allow(clippy::unwrap_used)]

mod common;

use common::{err, fp8sel, out, root};

use std::path::{Path, PathBuf};

use serde_json::json;

/// One mode's figures in step_bench's format (a tie with BF16), FP8 in `groups`.
fn mode(groups: &[&str]) -> serde_json::Value {
    json!({"fp8_groups": groups, "ms_median": 10.0, "ms_p10": 9.7, "ms_p90": 10.3,
           "vs_bf16_median": 1.0, "vs_bf16_p10": 0.97, "vs_bf16_p90": 1.03, "verdict_vs_bf16": "tie",
           "vs_best_of_bf16_fp8": 1.0})
}

/// Results in step_bench's format: Llama-3.2-1B at TP 1, the oracle's FP8 groups per count.
/// Eager: fc1/fc2 from 4096, qkv only at 16384 (lost at 8192), proj never. Graphed: every group
/// from 1024 but proj from 2048.
fn results(dir: &Path) -> PathBuf {
    let key =
        |kind: &str, ub: &str| json!({"key": {"kind": kind, "ub_name": ub, "tp": 1}, "scale": 1});
    let row = |execution: &str, tokens: u64, groups: &[&str]| {
        let all = ["qkv", "proj", "fc1", "fc2"];
        json!({"tokens": tokens, "execution": execution,
               "modes": {"bf16": mode(&[]), "fp8": mode(&all), "oracle": mode(groups)},
               "verdict": {"fp8_groups": groups, "by": "oracle"}})
    };
    let v = json!({
        "format": "adaptive-fp8-step-results", "version": 1, "trainer": "te",
        "model": "fixtures/models/llama3_2_1b.yaml", "model_name": "llama3_2_1b", "component": "llm",
        "tp": 1, "layers": 2, "layer_types": ["dense", "dense"], "steps": 5, "repeats": 7,
        "execution": "eager,graphed", "grad_accum": 1, "recipe": "Float8BlockScaling()",
        "fp8_recipe": "blockwise", "device": "NVIDIA H200", "te_version": "2.20.2", "complete": true,
        "group_keys": {"qkv": key("layernorm_column", "qkv"), "proj": key("row", "proj"),
                       "fc1": key("layernorm_column", "fc1"), "fc2": key("row", "fc2")},
        "results": [
            row("eager", 1024, &[]), row("eager", 4096, &["fc1", "fc2", "qkv"]),
            row("eager", 8192, &["fc1", "fc2"]), row("eager", 16384, &["fc1", "fc2", "qkv"]),
            row("graphed", 1024, &["qkv", "fc1", "fc2"]), row("graphed", 2048, &["qkv", "proj", "fc1", "fc2"]),
            row("graphed", 4096, &["qkv", "proj", "fc1", "fc2"]),
            {"tokens": 8192, "execution": "graphed", "error": "RuntimeError: capture failed"},
        ],
    });
    let f = dir.join("step.json");
    std::fs::write(&f, serde_json::to_string_pretty(&v).unwrap()).unwrap();
    f
}

fn decide(policy: &str, ub: &str, class: &str, tokens: &str, execution: &str) -> String {
    let o = fp8sel(&[
        "decide",
        "--policy",
        policy,
        "--te-class",
        class,
        "--ub-name",
        ub,
        "--tp",
        "1",
        "--seq-length",
        tokens,
        "--execution",
        execution,
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    out(&o).lines().next().unwrap().to_owned()
}

/// `merge-policy --step` of [`results`] into `dir/policy.json`: the run and the policy's path.
fn merged(dir: &Path) -> (std::process::Output, PathBuf) {
    let f = results(dir);
    let p = dir.join("policy.json");
    let o = fp8sel(&[
        "merge-policy",
        "--step",
        f.to_str().unwrap(),
        "--output",
        p.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    (o, p)
}

#[test]
fn the_step_sets_both_thresholds() {
    let dir = tempfile::tempdir().unwrap();
    let (o, p) = merged(dir.path());
    assert!(
        out(&o).contains("from the step (eager, graphed)"),
        "{}",
        out(&o)
    );
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
    let rule = |kind: &str, ub: &str| v["rules"][kind][ub][0].clone();
    assert_eq!(rule("layernorm_column", "fc1")["min_tokens"], 4096);
    assert_eq!(rule("layernorm_column", "fc1")["min_tokens_graphed"], 1024);
    // qkv lost at 8192 in eager: FP8 only from 16384 there.
    assert_eq!(rule("layernorm_column", "qkv")["min_tokens"], 16384);
    // proj never FP8 eager: the "never" threshold, graphed from 2048.
    assert_eq!(rule("row", "proj")["min_tokens"], 1u64 << 53);
    assert_eq!(rule("row", "proj")["min_tokens_graphed"], 2048);
    let prov = &v["provenance"];
    assert_eq!(prov["timing"], json!(["step-eager", "step-graphed"]));
    assert_eq!(prov["models"], json!(["llama3_2_1b"]));
    assert_eq!(
        prov["step"]["verdicts"]["(kind=row, ub_name=proj, tp=1)"]["graphed"][0],
        json!([1024, false])
    );
    let ps = p.to_str().unwrap();
    assert_eq!(
        decide(ps, "proj", "TERowParallelLinear", "4096", "eager"),
        "bf16"
    );
    assert_eq!(
        decide(ps, "proj", "TERowParallelLinear", "4096", "graphed"),
        "fp8"
    );
    assert_eq!(
        decide(
            ps,
            "qkv",
            "TELayerNormColumnParallelLinear",
            "8192",
            "eager"
        ),
        "bf16"
    );
    // The seed's loader reads it.
    let o = fp8sel(&["validate", ps]);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
}

#[test]
fn untyped_results_or_rows_without_a_verdict_are_refused_with_the_fix() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("old.json");
    std::fs::write(&f, r#"{"results": [{"tokens": 1024, "modes": {}}]}"#).unwrap();
    let p = dir.path().join("p.json");
    let o = fp8sel(&[
        "merge-policy",
        "--step",
        f.to_str().unwrap(),
        "--output",
        p.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        err(&o).contains("old.json")
            && err(&o).contains("format")
            && err(&o).contains("step_bench --json"),
        "{}",
        err(&o)
    );
    // Typed results whose rows carry no verdict (a judge run without the oracle).
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(results(dir.path())).unwrap()).unwrap();
    for r in v["results"].as_array_mut().unwrap() {
        r.as_object_mut().unwrap().remove("verdict");
    }
    std::fs::write(&f, v.to_string()).unwrap();
    let o = fp8sel(&[
        "merge-policy",
        "--step",
        f.to_str().unwrap(),
        "--output",
        p.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(err(&o).contains("--oracle greedy"), "{}", err(&o));
    assert!(!p.exists());
}

#[test]
fn check_notes_counts_outside_the_steps_sweep() {
    let dir = tempfile::tempdir().unwrap();
    let (_, p) = merged(dir.path());
    let notes = |tp: &str, tokens: &str, execution: &str| {
        let model = ["--model", "fixtures/models/llama3_2_1b.yaml"];
        let args = [
            "--policy",
            p.to_str().unwrap(),
            "--tp",
            tp,
            "--seq-length",
            tokens,
        ];
        check_notes(
            &[&model[..], &args, &["--execution", execution]].concat(),
            "count the training step timed",
        )
        .1
    };
    // Graphed was timed to 4096 (its 8192 row failed), eager to 16384.
    let n = notes("1", "8192", "graphed");
    assert!(
        n.len() == 1
            && n[0].contains("beyond the largest")
            && n[0].contains("(graphed: 1024-4096)")
            && n[0].contains("--tokens 4096,8192"),
        "{n:?}"
    );
    // Below the sweep's first count, the other end.
    let n = notes("1", "512", "eager");
    assert!(
        n.len() == 1 && n[0].contains("below the smallest") && n[0].contains("--tokens 512,1024"),
        "{n:?}"
    );
    assert!(notes("1", "4096", "graphed").is_empty());
    assert!(notes("1", "8192", "eager").is_empty());
    assert_eq!(notes("1", "32768", "eager").len(), 1);
    // Another TP was not timed by the step: its rules come from elsewhere, no such note.
    assert!(notes("2", "32768", "eager").is_empty());
}

#[test]
fn check_notes_graphed_thresholds_at_tp_above_one_that_no_step_timed() {
    // The shipped Qwen2.5-72B file as the step made it, and the same rules as a per-module
    // policy of GPU time would carry them (no step record).
    let dir = tempfile::tempdir().unwrap();
    let shipped = root().join("policies/qwen2_5_72b.json");
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&shipped).unwrap()).unwrap();
    let prov = v["provenance"].as_object_mut().unwrap();
    prov.remove("step");
    prov.insert("timing".into(), json!(["gpu", "te-eager"]));
    let proxy = dir.path().join("proxy.json");
    std::fs::write(&proxy, serde_json::to_string(&v).unwrap()).unwrap();
    let notes = |policy: &Path, tp: &str, execution: &str| {
        let p = policy.to_str().unwrap();
        let args = [
            "--model",
            "fixtures/models/qwen2_5_72b.yaml",
            "--policy",
            p,
            "--tp",
            tp,
        ];
        let n = check_notes(
            &[
                &args[..],
                &["--seq-length", "4096", "--execution", execution],
            ]
            .concat(),
            "are per-module GPU time, not a training step",
        );
        assert!(n.0, "fp8sel check of {p} at TP {tp} {execution} failed");
        n.1
    };
    let n = notes(&proxy, "2", "graphed");
    assert!(
        n.len() == 1 && n[0].contains("at TP 2") && n[0].contains("--tp 2 --execution graphed"),
        "{n:?}"
    );
    // The step timed TP 2 graphed in the shipped file.
    assert!(notes(&shipped, "2", "graphed").is_empty());
    // Eager thresholds are another objective's; TP 1 has no TP to misread.
    assert!(notes(&proxy, "2", "eager").is_empty());
    assert!(notes(&proxy, "1", "graphed").is_empty());
}

/// Whether `fp8sel check ARGS --json` passed, and its notes that contain `containing` (a check
/// that finds missing rules still prints its notes).
fn check_notes(args: &[&str], containing: &str) -> (bool, Vec<String>) {
    let o = fp8sel(&[&["check"][..], args, &["--json"]].concat());
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let notes = v["notes"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|n| n.as_str())
        .filter(|n| n.contains(containing))
        .map(str::to_owned)
        .collect();
    (o.status.success(), notes)
}
