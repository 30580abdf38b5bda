//! Per-module recipes end to end, without a GPU: the step model's inputs of one layout in
//! blockwise (measured on the H200) and in a tensorwise variant made from them (FP8 GEMMs of
//! fc1/fc2 30% cheaper), with a tensorwise numerics report that puts `proj` over the bound.
//! `merge-policy --step-model` chooses the plan; the reference's loader reads the file as the
//! blockwise policy; `explain` and `te-precision-config` show and export each module's recipe.

#![allow(clippy::unwrap_used)]

mod common;

use std::path::Path;

use common::{err, fp8sel, out, root, s};
use serde_json::{Value, json};

const INPUTS: &str = "docs/device-logs/step_model/shipped/llama3_2_1b/reports/llama3_2_1b_tp1_ep1_etp1_inputs_step.json";

fn read(p: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

fn write(p: &Path, v: &Value) {
    std::fs::write(p, serde_json::to_string_pretty(v).unwrap()).unwrap();
}

/// The tensorwise variant of the blockwise inputs.
fn tensorwise(mut v: Value) -> Value {
    v["fp8_recipe"] = json!("tensorwise");
    v["recipe"] = json!("Float8CurrentScaling");
    for m in v["modules"].as_array_mut().unwrap() {
        if ["fc1", "fc2"].contains(&m["group"].as_str().unwrap()) {
            for x in m["fp8"]["gpu_ms"].as_array_mut().unwrap() {
                *x = json!(x.as_f64().unwrap() * 0.7);
            }
        }
    }
    for st in v["step_times"].as_array_mut().unwrap() {
        if st["mode"] == "fp8" {
            for x in st["wall_ms"].as_array_mut().unwrap() {
                *x = json!(x.as_f64().unwrap() * 0.95);
            }
            if let Some(g) = st["gpu_ms"].as_f64() {
                st["gpu_ms"] = json!(g * 0.95);
            }
        }
    }
    v
}

fn numerics(recipe: &str, proj_error: f64) -> Value {
    let module = |ub: &str, kind: &str, e: f64| {
        json!({"component": "llm", "name": format!("decoder.layers.{ub}"),
               "key": {"kind": kind, "ub_name": ub, "tp": 1},
               "operands": {"input": {"rel_rms": e, "underflow": 0.0, "saturated": 0.0}}})
    };
    json!({"format": "fp8sel-numerics", "version": 1, "model": "llama3_2_1b", "recipe": recipe,
           "modules": [module("qkv", "layernorm_column", 0.027), module("proj", "row", proj_error),
                       module("fc1", "layernorm_column", 0.027), module("fc2", "row", 0.027)]})
}

/// `merge-policy` over the blockwise inputs alone, then over both recipes: refused without the
/// tensorwise numerics (nothing written), chosen with them. Returns (blockwise, mixed) files.
fn make_policies(d: &Path) -> (std::path::PathBuf, std::path::PathBuf) {
    let (b, t, nt) = (d.join("b.json"), d.join("t.json"), d.join("nt.json"));
    let blockwise = read(&root().join(INPUTS));
    write(&b, &blockwise);
    write(&t, &tensorwise(blockwise));
    write(&nt, &numerics("tensorwise", 0.09));
    let (base, mixed) = (d.join("base.json"), d.join("mixed.json"));
    let o = fp8sel(&["merge-policy", "--step-model", s(&b), "--output", s(&base)]);
    assert!(o.status.success(), "{}", err(&o));
    let both = |numerics: Option<&Path>| {
        let mut args = vec!["merge-policy", "--step-model", s(&b), s(&t)];
        if let Some(n) = numerics {
            args.extend(["--numerics", s(n)]);
        }
        args.extend(["--output", s(&mixed)]);
        fp8sel(&args)
    };
    // A second recipe without its numerics is refused before anything is written; so is a
    // report of another model (no fc2): fc2's tensorwise error would be unknown.
    let other = d.join("other.json");
    let mut partial = numerics("tensorwise", 0.09);
    partial["modules"].as_array_mut().unwrap().pop();
    write(&other, &partial);
    for (given, says) in [
        (None, "no numerics report of tensorwise"),
        (
            Some(other.as_path()),
            "measured no module of (kind=row, ub_name=fc2",
        ),
    ] {
        let o = both(given);
        assert!(!o.status.success());
        assert!(err(&o).contains(says), "{}", err(&o));
        assert!(!mixed.exists());
    }
    let o = both(Some(&nt));
    assert!(o.status.success(), "{}", err(&o));
    assert!(out(&o).contains("per-module recipes:"), "{}", out(&o));
    (base, mixed)
}

/// A key's recipe steps over both executions: (from, recipe).
fn steps(k: &Value) -> Vec<(u64, String)> {
    ["eager", "graphed"]
        .iter()
        .flat_map(|e| k[e].as_array().cloned().unwrap_or_default())
        .map(|s| {
            (
                s["from"].as_u64().unwrap(),
                s["recipe"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

/// The first key that runs tensorwise in eager: its ub_name and the count it starts at.
fn first_tensorwise(keys: &[Value]) -> (String, u64) {
    keys.iter()
        .find_map(|k| {
            let first = k["eager"]
                .as_array()?
                .iter()
                .find(|s| s["recipe"] == "tensorwise")?;
            Some((
                k["key"]["ub_name"].as_str()?.to_owned(),
                first["from"].as_u64()?,
            ))
        })
        .expect("a key runs tensorwise somewhere in eager")
}

/// `explain` names the recipe of `ub` at `tokens` and why; the export gives it its own config.
fn explain_and_export(d: &Path, mixed: &Path, ub: &str, tokens: u64) {
    let seq = tokens.to_string();
    let args = [
        "--model",
        "fixtures/models/llama3_2_1b.yaml",
        "--policy",
        s(mixed),
        "--seq-length",
        &seq,
    ];
    let o = fp8sel(&[&["explain", "--json"][..], &args].concat());
    assert!(o.status.success(), "{}", err(&o));
    let v: Value = serde_json::from_str(&out(&o)).unwrap();
    let row = v["modules"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["ub_name"] == ub)
        .unwrap();
    assert_eq!(row["recipe"], "tensorwise", "{row}");
    assert!(
        row["reason"]
            .as_str()
            .unwrap()
            .starts_with("recipe plan: tensorwise"),
        "{row}"
    );
    let yaml = d.join("te.yaml");
    let o = fp8sel(&[&["te-precision-config", "-o", s(&yaml)][..], &args].concat());
    assert!(o.status.success(), "{}", err(&o));
    let text = std::fs::read_to_string(&yaml).unwrap();
    assert!(
        text.contains("  fp8_tensorwise:\n")
            && text.contains("fp8_quantization_recipe: tensorwise"),
        "{text}"
    );
    assert!(text.contains("config: fp8_tensorwise"), "{text}");
}

#[test]
fn a_mixed_plan_is_chosen_read_as_blockwise_by_the_reference_and_exported_per_recipe() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (base, mixed) = make_policies(d);
    let (vb, vm) = (read(&base), read(&mixed));
    // The reference's loader reads `rules`: the blockwise policy's, unchanged.
    assert_eq!(vb["rules"], vm["rules"]);
    let plan = &vm["recipes"];
    assert_eq!(plan["base"], "blockwise");
    assert_eq!(plan["max_quant_error"], 0.05);
    let keys = plan["keys"].as_array().unwrap();
    let proj = keys.iter().find(|k| k["key"]["ub_name"] == "proj").unwrap();
    assert!(
        steps(proj).iter().all(|s| s.1 != "tensorwise"),
        "proj over the bound: {proj}"
    );
    let fc = first_tensorwise(keys);
    // Python: the seed's loader reads it.
    let py = std::process::Command::new("python3")
        .arg(root().join("fixtures/compat/seed_loader.py"))
        .args(["check", s(&mixed)])
        .output();
    if let Ok(py) = py {
        assert!(
            py.status.success(),
            "{}",
            String::from_utf8_lossy(&py.stderr)
        );
    }
    explain_and_export(d, &mixed, &fc.0, fc.1);
}
