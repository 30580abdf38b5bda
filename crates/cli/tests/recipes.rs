//! The recipe plumbing end to end on the CPU: `--recipe` (and the reference's
//! `TE_LAYER_PERF_FP8_RECIPE=current`) into the report and the policy, the merge's refusal to mix
//! recipes, the warnings of `decide`/`explain`/`check` for a trainer on another recipe, and
//! gen-policy's per-recipe folders.

#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::process::Output;

mod common;

/// `fp8sel` with the reference's recipe variable only where a test sets it.
fn fp8sel(args: &[&str], env: &[(&str, &str)]) -> Output {
    common::fp8sel_with(args, env, &["TE_LAYER_PERF_FP8_RECIPE"])
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn bench(report: &Path, extra: &[&str], env: &[(&str, &str)]) -> serde_json::Value {
    let mut args = vec![
        "bench",
        "--backend",
        "model",
        "--quiet",
        "--model",
        "fixtures/models/qwen2_5_72b.yaml",
        "--tp",
        "8",
        "--max-tokens",
        "2048",
        "--report",
        report.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let o = fp8sel(&args, env);
    assert!(o.status.success(), "{}", text(&o.stderr));
    serde_json::from_str(&std::fs::read_to_string(report).unwrap()).unwrap()
}

#[test]
fn the_recipe_and_its_options_reach_report_and_policy_and_do_not_mix() {
    let dir = tempfile::tempdir().unwrap();
    let (cur, del, blk) = (
        dir.path().join("cur.json"),
        dir.path().join("del.json"),
        dir.path().join("blk.json"),
    );
    // The reference tool's variable and name: current = tensorwise.
    let r = bench(&cur, &[], &[("TE_LAYER_PERF_FP8_RECIPE", "current")]);
    assert_eq!(r["provenance"]["recipe"], "tensorwise fp8_format=e4m3");
    let r = bench(
        &del,
        &["--recipe", "delayed", "--amax-history-len", "16"],
        &[],
    );
    assert_eq!(
        r["provenance"]["recipe"],
        "delayed fp8_format=hybrid amax_history_len=16 amax_compute_algo=max"
    );
    let r = bench(&blk, &[], &[]);
    assert_eq!(r["provenance"]["recipe"], "blockwise");
    // The recipes move the estimate (per-tensor GEMMs are faster, casts differ).
    let sp = |f: &Path| -> Vec<f64> {
        let v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(f).unwrap()).unwrap();
        v["points"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["speedup"].as_f64().unwrap())
            .collect()
    };
    assert_ne!(sp(&cur), sp(&blk));
    // Merging two recipes is refused with the fix; --allow-mixed records both.
    let out = dir.path().join("mixed.json");
    let merge = |extra: &[&str]| {
        let mut a = vec![
            "merge-policy",
            "--reports",
            cur.to_str().unwrap(),
            blk.to_str().unwrap(),
            "--output",
            out.to_str().unwrap(),
        ];
        a.extend_from_slice(extra);
        fp8sel(&a, &[])
    };
    let o = merge(&[]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
    let e = text(&o.stderr);
    assert!(e.contains("recipe") && e.contains("--allow-mixed"), "{e}");
    assert!(!out.exists(), "a refused merge wrote a policy");
    let o = merge(&["--allow-mixed"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let p: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    let recipes: Vec<&str> = p["provenance"]["recipe"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(recipes, ["blockwise", "tensorwise fp8_format=e4m3"]);
}

#[test]
fn decide_warns_a_trainer_on_another_recipe() {
    let decide = |recipe: &str, json: bool| {
        let mut a = vec![
            "decide",
            "--policy",
            "policies/qwen2_5_72b.json",
            "--te-class",
            "TERowParallelLinear",
            "--ub-name",
            "fc2",
            "--tp",
            "8",
            "--num-tokens",
            "8192",
            "--recipe",
            recipe,
        ];
        if json {
            a.push("--json");
        }
        fp8sel(&a, &[])
    };
    // The shipped policy is blockwise: a tensorwise trainer still gets its answer, and a warning.
    let o = decide("current", false);
    assert!(o.status.success());
    assert_eq!(text(&o.stdout).lines().next(), Some("fp8"));
    let e = text(&o.stderr);
    assert!(
        e.contains("blockwise")
            && e.contains("Float8CurrentScaling")
            && e.contains("--recipe tensorwise"),
        "{e}"
    );
    let o = decide("blockwise", false);
    assert!(text(&o.stderr).is_empty(), "{}", text(&o.stderr));
    let o = decide("delayed", true);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(
        v["recipe_warning"]
            .as_str()
            .unwrap()
            .contains("DelayedScaling")
    );
    let o = decide("fp4", false);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o.stderr).contains("alias current"));
    // The policy made for the trainer's recipe is silent.
    let o = fp8sel(
        &[
            "decide",
            "--policy",
            "policies/delayed/qwen2_5_72b.json",
            "--te-class",
            "TERowParallelLinear",
            "--ub-name",
            "fc2",
            "--tp",
            "8",
            "--num-tokens",
            "8192",
            "--recipe",
            "delayed",
        ],
        &[],
    );
    assert!(
        o.status.success() && text(&o.stderr).is_empty(),
        "{}",
        text(&o.stderr)
    );
}

#[test]
fn explain_and_check_warn_a_trainer_on_another_recipe() {
    // The warning, in the text and in the JSON.
    let plan = |cmd: &str, recipe: &str| {
        fp8sel(
            &[
                cmd,
                "--model",
                "fixtures/models/qwen2_5_72b.yaml",
                "--policy",
                "policies/tensorwise/qwen2_5_72b.json",
                "--tp",
                "8",
                "--seq-length",
                "4096",
                "--recipe",
                recipe,
                "--json",
            ],
            &[],
        )
    };
    for cmd in ["explain", "check"] {
        let o = plan(cmd, "blockwise");
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        let warnings = v
            .pointer("/summary/warnings")
            .or_else(|| v.get("warnings"))
            .unwrap();
        assert!(
            warnings
                .as_array()
                .unwrap()
                .iter()
                .any(|w| w.as_str().unwrap().contains("tensorwise")),
            "{cmd}: {warnings}"
        );
        let o = plan(cmd, "tensorwise");
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        let warnings = v
            .pointer("/summary/warnings")
            .or_else(|| v.get("warnings"))
            .unwrap();
        assert!(
            !warnings
                .as_array()
                .unwrap()
                .iter()
                .any(|w| w.as_str().unwrap().contains("recipe")),
            "{cmd}: {warnings}"
        );
    }
}

#[test]
fn check_names_the_recipe_in_the_commands_that_fill_a_gap() {
    // TP 3 has no rule in the shipped policies: the fill command must measure the trainer's recipe.
    let o = fp8sel(
        &[
            "check",
            "--model",
            "fixtures/models/llama3_2_1b.yaml",
            "--policy",
            "policies/llama3_2_1b.json",
            "--tp",
            "4",
            "--seq-length",
            "4096",
            "--recipe",
            "delayed",
            "--json",
        ],
        &[],
    );
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let fill: Vec<&str> = v["fill_commands"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap())
        .collect();
    assert!(!fill.is_empty(), "{v}");
    assert!(
        fill[0].starts_with("fp8sel gen-policy") && fill[0].contains("--recipe delayed"),
        "{fill:?}"
    );
}

#[test]
fn gen_policy_keeps_each_recipe_in_its_own_folder_and_mxfp8_needs_blackwell() {
    let dir = tempfile::tempdir().unwrap();
    let run = |extra: &[&str]| {
        let mut a = vec![
            "gen-policy",
            "--model",
            "fixtures/models/llama3_2_1b.yaml",
            "--tp",
            "1",
            "--backend",
            "model",
            "--quiet",
            "--policies-dir",
            dir.path().to_str().unwrap(),
        ];
        a.extend_from_slice(extra);
        fp8sel(&a, &[])
    };
    let o = run(&["--recipe", "delayed"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let p = dir.path().join("estimated/h200/delayed/llama3_2_1b.json");
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
    assert!(
        v["provenance"]["recipe"][0]
            .as_str()
            .unwrap()
            .starts_with("delayed")
    );
    assert!(!dir.path().join("estimated/h200/llama3_2_1b.json").exists());
    // MXFP8 is estimated on the B200 profile only.
    let o = run(&["--recipe", "mxfp8", "--device-profile", "b200"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(
        dir.path()
            .join("estimated/b200/mxfp8/llama3_2_1b.json")
            .exists()
    );
    let o = run(&["--recipe", "mxfp8", "--device-profile", "h200"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        text(&o.stderr).contains("use --device-profile b200"),
        "{}",
        text(&o.stderr)
    );
    let o = fp8sel(
        &[
            "bench",
            "--backend",
            "model",
            "--model",
            "fixtures/models/llama3_2_1b.yaml",
            "--recipe",
            "mxfp8",
            "--report",
            dir.path().join("mx.json").to_str().unwrap(),
        ],
        &[],
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o.stderr).contains("Blackwell"), "{}", text(&o.stderr));
    assert!(!dir.path().join("mx.json").exists());
}
