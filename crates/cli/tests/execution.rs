//! `--execution eager|graphed`: decide, explain, check and te-precision-config pick a rule's
//! `min_tokens_graphed` for graphed steps and `min_tokens` otherwise (eager by default).

#![allow(clippy::unwrap_used)]

mod common;

use common::{fp8sel, out, root};

use std::path::PathBuf;
use std::process::Command;

/// Llama-3.2-1B at TP 1: every key eager from 8192, graphed from 1024.
fn policy(dir: &std::path::Path) -> PathBuf {
    let rule = r#"[{"tp": 1, "min_tokens": 8192, "min_tokens_graphed": 1024}]"#;
    let text = format!(
        r#"{{"version": 1, "speedup_threshold": 1.0, "rules": {{
            "layernorm_column": {{"qkv": {rule}, "fc1": {rule}}},
            "row": {{"proj": {rule}, "fc2": {rule}}}}}}}"#
    );
    let p = dir.join("both.json");
    std::fs::write(&p, text).unwrap();
    p
}

#[test]
fn decide_picks_the_threshold_of_the_execution() {
    let dir = tempfile::tempdir().unwrap();
    let p = policy(dir.path());
    let base = [
        "decide",
        "--policy",
        p.to_str().unwrap(),
        "--te-class",
        "TERowParallelLinear",
        "--ub-name",
        "fc2",
        "--tp",
        "1",
        "--seq-length",
        "4096",
    ];
    let eager = out(&fp8sel(&base));
    assert!(
        eager.starts_with("bf16\ntokens 4096 < min_tokens 8192"),
        "{eager}"
    );
    assert_eq!(
        out(&fp8sel(&[&base[..], &["--execution", "eager"]].concat())),
        eager
    );
    let g = out(&fp8sel(&[&base[..], &["--execution", "graphed"]].concat()));
    assert!(
        g.starts_with("fp8\ntokens 4096 >= min_tokens_graphed 1024"),
        "{g}"
    );
    let bad = fp8sel(&[&base[..], &["--execution", "captured"]].concat());
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("unknown execution"));
}

#[test]
fn explain_check_and_the_native_export_follow_it() {
    let dir = tempfile::tempdir().unwrap();
    let p = policy(dir.path());
    let model = [
        "--model",
        "fixtures/models/llama3_2_1b.yaml",
        "--policy",
        p.to_str().unwrap(),
        "--seq-length",
        "2048",
    ];
    let fp8 = |extra: &[&str]| -> u64 {
        let o = fp8sel(&[&["explain", "--json"][..], &model, extra].concat());
        let v: serde_json::Value = serde_json::from_str(&out(&o)).unwrap();
        v["summary"]["fp8_modules"].as_u64().unwrap()
    };
    assert_eq!(fp8(&[]), 0);
    assert_eq!(fp8(&["--execution", "graphed"]), 64);
    let o = fp8sel(&[&["check"][..], &model, &["--execution", "graphed"]].concat());
    assert_eq!(o.status.code(), Some(0));
    let o = fp8sel(
        &[
            &["te-precision-config"][..],
            &model,
            &["--execution", "graphed"],
        ]
        .concat(),
    );
    let yaml = out(&o);
    assert!(
        yaml.contains("config: fp8")
            && !yaml.contains("pattern: \"decoder.layers.*.mlp.linear_fc1\"\n    config: bf16"),
        "{yaml}"
    );
    // Graphed FP8 modules need the global FP8 region (megatron-core's graphs re-quantize cached
    // FP8 weights only under config.fp8): the header and the launch lines say so.
    let said = common::err(&o);
    assert!(
        yaml.contains("launch region: fp8") && said.contains("--fp8-format e4m3"),
        "{yaml}\n{said}"
    );
    assert!(said.contains("CUDA-graphed"), "{said}");
    let v: serde_json::Value = serde_json::from_str(&out(&fp8sel(
        &[
            &["explain", "--json"][..],
            &model,
            &["--execution", "graphed"],
        ]
        .concat(),
    )))
    .unwrap();
    assert_eq!(v["launch_region"], "fp8");
    assert_eq!(v["fp8_region_need"], "graphed_weights");
    // Eager, with FP8 dense modules (from 8192 here), the BF16 region: no --fp8-format.
    let eager = [&model[..5], &["8192"]].concat();
    let o = fp8sel(&[&["te-precision-config"][..], &eager].concat());
    let said = common::err(&o);
    assert!(
        out(&o).contains("launch region: bf16") && said.contains("eager steps only"),
        "{said}"
    );
}

#[test]
fn check_notes_a_launch_without_the_seeds_epsilon_guard() {
    let run_at = |seq: &str, model: &str, policy: &str, env: &[(&str, &str)], extra: &[&str]| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_fp8sel"));
        c.current_dir(root())
            .args(["check", "--model", model, "--policy", policy])
            .args(["--seq-length", seq, "--json"])
            .args(extra);
        for v in [
            "FP8_QUANT_FWD_INP_AMAX_EPS",
            "FP8_QUANT_FWD_WEIGHT_AMAX_EPS",
            "FP8_QUANT_BWD_GRAD_AMAX_EPS",
        ] {
            c.env_remove(v);
        }
        for (k, v) in env {
            c.env(k, v);
        }
        let v: serde_json::Value = serde_json::from_slice(&c.output().unwrap().stdout).unwrap();
        let notes = v["notes"].as_array().unwrap().iter();
        notes
            .filter_map(|n| n.as_str())
            .find(|n| n.contains("epsilon guard"))
            .map(str::to_owned)
    };
    let run_with = |model: &str, policy: &str, env: &[(&str, &str)], extra: &[&str]| {
        run_at("16384", model, policy, env, extra)
    };
    let llama = "fixtures/models/llama3_2_1b.yaml";
    let run = |env: &[(&str, &str)], extra: &[&str]| {
        run_with(llama, "policies/llama3_2_1b.json", env, extra).is_some()
    };
    assert!(run(&[], &[]));
    assert!(!run(&[("FP8_QUANT_FWD_INP_AMAX_EPS", "1e-12")], &[]));
    // Delayed scaling has no amax_epsilon: no note.
    assert!(!run(&[], &["--recipe", "delayed"]));
    // No module runs FP8 (64 tokens): nothing to guard.
    assert_eq!(
        run_at("64", llama, "policies/llama3_2_1b.json", &[], &[]),
        None
    );
    // A config that names no recipe: the launch runs the policy's (a delayed policy: no note; a
    // tensorwise one: the note, naming tensorwise).
    let qwen = "fixtures/models/qwen2_5_72b.yaml";
    let tp8 = ["--tp", "8"];
    assert_eq!(
        run_with(qwen, "policies/delayed/qwen2_5_72b.json", &[], &tp8),
        None
    );
    let note = run_with(qwen, "policies/tensorwise/qwen2_5_72b.json", &[], &tp8).unwrap();
    assert!(note.starts_with("tensorwise scaling"), "{note}");
}

/// `merge-policy --trainer both`: one file whose eager answers are the eager merge's and whose
/// graphed answers are the graphed merge's, for TE reports (both figures) and for cuBLASLt
/// reports with a host profile (eager side only).
#[test]
fn merge_policy_trainer_both_folds_the_two_objectives() {
    let dir = tempfile::tempdir().unwrap();
    for (reports, extra) in [
        (vec!["reports/h200/te/te_llama3_2_1b_tp1.json"], vec![]),
        (
            vec!["reports/h200/llama3_2_1b_tp1.json"],
            vec![
                "--host-profile",
                "fixtures/host/h200_te2.20.2_blockwise.json",
            ],
        ),
    ] {
        let merge = |trainer: &str, name: &str, with_profile: bool| {
            let p = dir.path().join(name);
            let mut a = vec!["merge-policy", "--reports"];
            a.extend(&reports);
            a.extend(["--output", p.to_str().unwrap(), "--trainer", trainer]);
            if with_profile {
                a.extend(&extra);
            }
            let o = fp8sel(&a);
            assert_eq!(
                o.status.code(),
                Some(0),
                "{trainer}: {}",
                String::from_utf8_lossy(&o.stderr)
            );
            p
        };
        let both = merge("both", "both.json", true);
        let eager = merge("eager", "eager.json", true);
        let graphed = merge("graphed", "graphed.json", false);
        let v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&both).unwrap()).unwrap();
        assert_eq!(v["provenance"]["trainer"], "eager+graphed");
        let answer = |p: &std::path::Path, ub: &str, class: &str, t: u64, e: &str| {
            let o = fp8sel(&[
                "decide",
                "--policy",
                p.to_str().unwrap(),
                "--te-class",
                class,
                "--ub-name",
                ub,
                "--tp",
                "1",
                "--seq-length",
                &t.to_string(),
                "--execution",
                e,
            ]);
            out(&o).lines().next().unwrap().to_owned()
        };
        for (ub, class) in [
            ("qkv", "TELayerNormColumnParallelLinear"),
            ("fc2", "TERowParallelLinear"),
        ] {
            for t in [256, 1024, 4096, 16384] {
                assert_eq!(
                    answer(&both, ub, class, t, "eager"),
                    answer(&eager, ub, class, t, "eager"),
                    "{ub} {t}"
                );
                assert_eq!(
                    answer(&both, ub, class, t, "graphed"),
                    answer(&graphed, ub, class, t, "eager"),
                    "{ub} {t}"
                );
            }
        }
    }
}

/// Graphed FP8 modules beside BF16 routed experts (DeepSeek-V3 at TP 1 EP 16, 4096 tokens: proj
/// and the dense MLP FP8, experts BF16): the FP8 region they need would pad the experts, so the
/// native file writes every module BF16 and launches the BF16 model, saying why; explain's JSON
/// names it; the hook's plan (explain) keeps them FP8.
#[test]
fn graphed_fp8_modules_beside_bf16_experts_are_written_bf16() {
    let r = root();
    let (m, p) = (
        r.join("fixtures/models/deepseek_v3.yaml"),
        r.join("policies/deepseek_v3.json"),
    );
    let args = [
        "--model",
        m.to_str().unwrap(),
        "--policy",
        p.to_str().unwrap(),
        "--tp",
        "1",
        "--ep",
        "16",
        "--seq-length",
        "4096",
        "--execution",
        "graphed",
    ];
    let o = fp8sel(&[&["te-precision-config"][..], &args].concat());
    assert_eq!(o.status.code(), Some(0));
    let (yaml, said) = (out(&o), common::err(&o));
    assert!(
        !yaml.contains("config: fp8\n") && yaml.contains("written BF16"),
        "{yaml}"
    );
    assert!(yaml.contains("launch region: bf16"), "{yaml}");
    assert!(
        said.contains("FP8 module instances are written BF16") && said.contains("routed experts"),
        "{said}"
    );
    let o = fp8sel(&[&["explain", "--json"][..], &args].concat());
    let v: serde_json::Value = serde_json::from_str(&out(&o)).unwrap();
    assert_eq!(v["native_bf16_because"], "padded_experts");
    assert_eq!(v["launch_region"], "bf16");
    assert!(v["summary"]["fp8_modules"].as_u64().unwrap() > 0);
}
