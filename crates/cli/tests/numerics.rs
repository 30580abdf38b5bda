//! `--numerics FILE --max-quant-error E`: a module whose FP8 quantization error is over the
//! bound runs BF16 whatever its speedup; provenance names the bound and each key it overruled,
//! explain gives it as the reason, and a bad report is refused naming the field.

#![allow(clippy::unwrap_used)]

mod common;

use common::{err, fp8sel};

use std::path::{Path, PathBuf};

use serde_json::json;

/// Llama-3.2-1B at TP 1: fc2's input quantizes badly (0.2), everything else well.
fn report(dir: &Path, fc2_error: f64) -> PathBuf {
    let m = |name: &str, kind: &str, ub: &str, e: f64| {
        json!({"component": "llm", "name": name, "key": {"kind": kind, "ub_name": ub, "tp": 1},
               "operands": {"input": {"rel_rms": e, "underflow": 0.001, "saturated": 0.0},
                            "weight": {"rel_rms": 0.02}, "grad_output": {"rel_rms": 0.03}}})
    };
    let v = json!({"format": "fp8sel-numerics", "version": 1, "model": "llama3_2_1b", "recipe": "blockwise",
        "modules": [m("decoder.layers.self_attention.linear_qkv", "layernorm_column", "qkv", 0.03),
                    m("decoder.layers.mlp.linear_fc2", "row", "fc2", fc2_error)]});
    let f = dir.join("numerics.json");
    std::fs::write(&f, v.to_string()).unwrap();
    f
}

/// merge-policy of the Llama-3.2-1B report into `out`, with `numerics` and a bound of 0.05.
fn merge_with_bound(numerics: &Path, out: &Path) -> std::process::Output {
    fp8sel(&[
        "merge-policy",
        "--reports",
        "reports/h200/llama3_2_1b_tp1.json",
        "--output",
        out.to_str().unwrap(),
        "--numerics",
        numerics.to_str().unwrap(),
        "--max-quant-error",
        "0.05",
    ])
}

#[test]
fn a_module_over_the_bound_runs_bf16_and_explain_says_why() {
    let dir = tempfile::tempdir().unwrap();
    let n = report(dir.path(), 0.2);
    let p = dir.path().join("p.json");
    let o = merge_with_bound(&n, &p);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    assert!(
        err(&o).contains("kept BF16 by the numerics bound"),
        "{}",
        err(&o)
    );
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
    assert!(v["rules"]["row"].get("fc2").is_none(), "{v}");
    assert!(
        v["rules"]["layernorm_column"]["qkv"].is_array(),
        "qkv stays (0.03 < 0.05)"
    );
    let b = &v["provenance"]["numerics"];
    assert_eq!(b["max_quant_error"], 0.05);
    assert_eq!(
        b["overruled"][0]["key"],
        json!({"kind": "row", "ub_name": "fc2", "tp": 1})
    );
    assert_eq!(b["overruled"][0]["operand"], "input");
    // Not a "measured, FP8 never won" key, and not a gap for check.
    assert!(
        !v["provenance"]["measured_bf16_keys"]
            .to_string()
            .contains("fc2")
    );
    let o = fp8sel(&[
        "explain",
        "--model",
        "fixtures/models/llama3_2_1b.yaml",
        "--policy",
        p.to_str().unwrap(),
        "--seq-length",
        "16384",
        "--json",
    ]);
    let e: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let fc2 = e["modules"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == "decoder.layers.mlp.linear_fc2")
        .unwrap();
    assert_eq!(fc2["use_fp8"], false);
    assert!(fc2["reason"].as_str().unwrap().contains("kept BF16 by the numerics bound (decoder.layers.mlp.linear_fc2's input has relative RMS error 0.2000 > 0.05"), "{fc2}");
    assert_eq!(e["summary"]["missing_rules"], json!([]));
    // Under the bound, the module keeps its speed rule.
    let n = report(dir.path(), 0.01);
    let q = dir.path().join("q.json");
    let o = merge_with_bound(&n, &q);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&q).unwrap()).unwrap();
    assert!(v["rules"]["row"]["fc2"].is_array());
    assert_eq!(v["provenance"]["numerics"]["overruled"], json!([]));
}

#[test]
fn bad_reports_and_bounds_are_refused_naming_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("p.json");
    let run = |n: &str, e: &str| {
        fp8sel(&[
            "merge-policy",
            "--reports",
            "reports/h200/llama3_2_1b_tp1.json",
            "--output",
            p.to_str().unwrap(),
            "--numerics",
            n,
            "--max-quant-error",
            e,
        ])
    };
    let good = report(dir.path(), 0.2);
    let text = std::fs::read_to_string(&good).unwrap();
    for (mutated, field) in [
        (text.replace("fp8sel-numerics", "other"), "field `format`"),
        (
            text.replace("\"version\":1", "\"version\":2"),
            "field `version`",
        ),
        (
            text.replace("\"underflow\":0.001", "\"underflow\":1.5"),
            "operands.input.underflow",
        ),
        (
            text.replace("\"rel_rms\":0.2", "\"rel_rms\":-1"),
            "operands.input.rel_rms",
        ),
    ] {
        let f = dir.path().join("bad.json");
        std::fs::write(&f, &mutated).unwrap();
        let o = run(f.to_str().unwrap(), "0.05");
        assert_eq!(o.status.code(), Some(2), "{field}");
        assert!(
            err(&o).contains(field) && err(&o).contains("bad.json"),
            "{field}: {}",
            err(&o)
        );
    }
    let o = run(good.to_str().unwrap(), "0");
    assert_eq!(o.status.code(), Some(2));
    assert!(err(&o).contains("--max-quant-error 0"), "{}", err(&o));
    // --numerics alone applies the stated default bound, 0.05.
    let o = fp8sel(&[
        "merge-policy",
        "--reports",
        "reports/h200/llama3_2_1b_tp1.json",
        "--output",
        p.to_str().unwrap(),
        "--numerics",
        good.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
    assert_eq!(v["provenance"]["numerics"]["max_quant_error"], 0.05, "{v}");
    // --max-quant-error without a report is a usage error.
    let o = fp8sel(&[
        "merge-policy",
        "--reports",
        "reports/h200/llama3_2_1b_tp1.json",
        "--output",
        p.to_str().unwrap(),
        "--max-quant-error",
        "0.1",
    ]);
    assert_eq!(o.status.code(), Some(2));
}
