//! `fp8sel gen-policy --recipes` with a per-module backend: the cost model's B200 estimates of
//! tensorwise and MXFP8, each module's recipe chosen from its estimated speedups within the
//! numerics bound, exported to Megatron's per-module config; and the refusals.

#![allow(clippy::unwrap_used)]

mod common;

use common::{err, fp8sel, s};

use std::path::{Path, PathBuf};

use serde_json::Value;

const TENSORWISE: &str = "docs/device-logs/recipe_plans/L1/numerics_tensorwise.json";

/// An MXFP8 numerics report of Llama-3.2-1B: the probe's blockwise report relabelled (a
/// stand-in: the errors are not MXFP8's), with fc2's input error put over the 0.05 bound.
fn mxfp8_report(dir: &Path) -> PathBuf {
    relabelled(dir, "mxfp8", 0.09)
}

/// The same relabelled as `recipe`, fc2's input error set to `fc2`.
fn relabelled(dir: &Path, recipe: &str, fc2: f64) -> PathBuf {
    let text = std::fs::read_to_string(
        common::root().join("docs/device-logs/recipe_plans/L1/numerics_blockwise.json"),
    )
    .unwrap();
    let mut v: Value = serde_json::from_str(&text).unwrap();
    v["recipe"] = recipe.into();
    for m in v["modules"].as_array_mut().unwrap() {
        if m["key"]["ub_name"] == "fc2" {
            m["operands"]["input"]["rel_rms"] = fc2.into();
        }
    }
    let out = dir.join(format!("{recipe}.json"));
    std::fs::write(&out, serde_json::to_string(&v).unwrap()).unwrap();
    out
}

/// `te-precision-config` of `policy` at `seq` tokens: its YAML, and the run (stderr).
fn te_precision(policy: &Path, seq: &str) -> (String, std::process::Output) {
    let o = fp8sel(&[
        "te-precision-config",
        "--model",
        "fixtures/models/llama3_2_1b.yaml",
        "--policy",
        s(policy),
        "--tp",
        "1",
        "--seq-length",
        seq,
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    (common::out(&o), o)
}

fn gen_policy(out: &Path, extra: &[&str]) -> std::process::Output {
    let mut args = vec![
        "gen-policy",
        "--model",
        "fixtures/models/llama3_2_1b.yaml",
        "--tp",
        "1",
        "--backend",
        "model",
        "--quiet",
        "--out",
        s(out),
    ];
    args.extend_from_slice(extra);
    fp8sel(&args)
}

#[test]
fn blackwell_recipes_are_chosen_per_module_from_the_cost_models_estimates() {
    let dir = tempfile::tempdir().unwrap();
    let mx = mxfp8_report(dir.path());
    let out = dir.path().join("b200");
    let o = gen_policy(
        &out,
        &[
            "--device-profile",
            "b200",
            "--recipes",
            "tensorwise,mxfp8",
            "--numerics",
            TENSORWISE,
            s(&mx),
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    assert!(
        out.join("reports/mxfp8").is_dir(),
        "each recipe's reports kept"
    );
    let policy = out.join("llama3_2_1b.json");
    let p: Value = serde_json::from_str(&std::fs::read_to_string(&policy).unwrap()).unwrap();
    assert_eq!(p["provenance"]["estimated"], true, "labelled as estimates");
    assert_eq!(p["recipes"]["base"], "tensorwise");
    let keys = p["recipes"]["keys"].as_array().unwrap();
    let uses = |ub: &str, r: &str| {
        keys.iter().filter(|k| k["key"]["ub_name"] == ub).any(|k| {
            ["eager", "graphed"]
                .iter()
                .flat_map(|e| k[*e].as_array().unwrap())
                .any(|s| s["recipe"] == r)
        })
    };
    assert!(uses("fc1", "mxfp8"), "{keys:?}");
    assert!(
        !uses("fc2", "mxfp8"),
        "fc2 is over the bound in mxfp8: {keys:?}"
    );
    assert!(uses("fc2", "tensorwise"), "{keys:?}");
    let md = std::fs::read_to_string(out.join("llama3_2_1b.md")).unwrap();
    assert!(
        md.contains("## Recipes per module") && md.contains("mxfp8 from"),
        "the summary shows the plan: {md}"
    );

    // Exported: one config per recipe the plan runs at this count, each module on its own.
    let (yaml, o) = te_precision(&policy, "16384");
    assert!(yaml.contains("fp8_quantization_recipe: mxfp8"), "{yaml}");
    assert!(
        yaml.contains("# recipe: tensorwise"),
        "the plan's base: {yaml}"
    );
    assert!(err(&o).contains("ESTIMATE"), "{}", err(&o));
}

#[test]
fn a_per_module_choice_is_refused_without_every_recipes_error_or_on_the_wrong_device() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("x");
    // No MXFP8 report: refused before anything is measured.
    let o = gen_policy(
        &out,
        &[
            "--device-profile",
            "b200",
            "--recipes",
            "tensorwise,mxfp8",
            "--numerics",
            TENSORWISE,
        ],
    );
    assert_eq!(o.status.code(), Some(2), "{}", err(&o));
    assert!(
        err(&o).contains("no numerics report of mxfp8"),
        "{}",
        err(&o)
    );
    assert!(err(&o).contains("--numerics"), "{}", err(&o));
    assert!(!out.join("reports").exists(), "nothing measured");
    // MXFP8 on a Hopper profile.
    let mx = mxfp8_report(dir.path());
    let o = gen_policy(
        &out,
        &[
            "--device-profile",
            "h200",
            "--recipes",
            "tensorwise,mxfp8",
            "--numerics",
            TENSORWISE,
            s(&mx),
        ],
    );
    assert_eq!(o.status.code(), Some(2), "{}", err(&o));
    assert!(err(&o).contains("b200"), "{}", err(&o));
    assert!(!out.join("llama3_2_1b.json").exists());
}

#[test]
fn nvfp4_is_chosen_per_module_on_blackwell_and_exported_as_megatrons_fp4_recipe() {
    let dir = tempfile::tempdir().unwrap();
    let mx = relabelled(dir.path(), "mxfp8", 0.03);
    // NVFP4's error bound is the user's: here 0.2 admits every module.
    let nv = relabelled(dir.path(), "nvfp4", 0.03);
    let out = dir.path().join("b200");
    let o = gen_policy(
        &out,
        &[
            "--device-profile",
            "b200",
            "--recipes",
            "mxfp8,nvfp4",
            "--numerics",
            s(&mx),
            s(&nv),
            "--max-quant-error",
            "0.2",
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    let policy = out.join("llama3_2_1b.json");
    let text = std::fs::read_to_string(&policy).unwrap();
    let p: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(p["recipes"]["base"], "mxfp8");
    assert!(
        text.contains("\"nvfp4\""),
        "some module runs NVFP4 somewhere: {}",
        p["recipes"]
    );
    let (yaml, _) = te_precision(&policy, "131072");
    assert!(yaml.contains("fp4_quantization_recipe: nvfp4"), "{yaml}");
    let fp4 = yaml.split("fp4_quantization_recipe: nvfp4").nth(1).unwrap();
    let block = fp4.split("\n  ").next().unwrap();
    assert!(
        !block.contains("fp8_format"),
        "an FP4 config has no FP8 format: {yaml}"
    );
}

#[test]
fn nvfp4s_measured_error_keeps_it_off_under_the_default_bound_and_on_under_a_raised_one() {
    // The H200 probe's NVFP4 report of Llama-3.2-1B (0.089-0.111 for every module).
    let nvfp4 = "docs/device-logs/recipe_plans/fp4/numerics_nvfp4.json";
    let dir = tempfile::tempdir().unwrap();
    let runs_nvfp4 = |bound: Option<&str>| {
        let out = dir.path().join(bound.unwrap_or("default"));
        let mut extra = vec![
            "--device-profile",
            "b200",
            "--recipes",
            "tensorwise,nvfp4",
            "--numerics",
            TENSORWISE,
            nvfp4,
        ];
        if let Some(b) = bound {
            extra.extend(["--max-quant-error", b]);
        }
        let o = gen_policy(&out, &extra);
        assert_eq!(o.status.code(), Some(0), "{}", err(&o));
        let text = std::fs::read_to_string(out.join("llama3_2_1b.json")).unwrap();
        let p: Value = serde_json::from_str(&text).unwrap();
        p["recipes"]["keys"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|k| {
                k["eager"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|s| s["recipe"] == "nvfp4")
            })
            .count()
    };
    assert_eq!(runs_nvfp4(None), 0);
    assert_eq!(
        runs_nvfp4(Some("0.12")),
        4,
        "every key once the bound admits it"
    );
}
