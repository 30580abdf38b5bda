//! `fp8sel te-precision-config` on a VLM, and the files it reads: Megatron's per-module config
//! matches the language model's decoder paths, so the vision encoder's modules fall to the BF16
//! catch-all; where the vision encoder's policy runs some of them FP8 the command says so loudly,
//! and the file written counts them apart. Every policy it reads (a flag's or the config's) is
//! an input the output may not overwrite.

#![allow(clippy::unwrap_used)]

mod common;

use common::{err, root};

use std::process::Command;

fn te_precision(
    dir: &std::path::Path,
    vit_tokens: &str,
    output: &std::path::Path,
) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_fp8sel"))
        .current_dir(root())
        .args([
            "te-precision-config",
            "--model",
            "fixtures/models/qwen3_vl_235b_a22b.yaml",
        ])
        .args([
            "--policy",
            "policies/qwen3_vl_235b_a22b.llm.json",
            "--vit-policy",
        ])
        .arg(dir.join("vit.json"))
        .args([
            "--tp",
            "4",
            "--ep",
            "16",
            "--seq-length",
            "8192",
            "--vit-num-tokens",
            vit_tokens,
        ])
        .arg("--output")
        .arg(output)
        .output()
        .unwrap()
}

#[test]
fn the_vision_encoders_fp8_modules_are_said_and_counted_apart() {
    let dir = tempfile::tempdir().unwrap();
    // A vision policy with fc1 FP8 from 16384 image tokens, fc2 from 32768, qkv and proj never
    // (TP 4 keys: the vision encoder runs at the layout's TP).
    let vit = r#"{"version": 1, "speedup_threshold": 1.0, "rules": {
        "layernorm_column": {"fc1": [{"tp": 4, "min_tokens": 16384}], "qkv": [{"tp": 4, "min_tokens": 9007199254740992}]},
        "row": {"fc2": [{"tp": 4, "min_tokens": 32768}], "proj": [{"tp": 4, "min_tokens": 9007199254740992}]}}}"#;
    std::fs::write(dir.path().join("vit.json"), vit).unwrap();
    let out = dir.path().join("te_precision.yaml");
    // At 16384 image tokens the vision policy runs fc1 FP8: a warning, and the file runs it BF16.
    let o = te_precision(dir.path(), "16384", &out);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    let (e, said) = (err(&o), String::from_utf8_lossy(&o.stdout).into_owned());
    assert!(
        e.contains("warning: the vision encoder's policy runs ")
            && e.contains(" module instances FP8 at this count; this file runs them BF16"),
        "{e}"
    );
    assert!(
        said.contains("of the language model; the vision encoder's "),
        "{said}"
    );
    let yaml = std::fs::read_to_string(&out).unwrap();
    assert!(
        !yaml.contains("vision") && !yaml.contains("image_encoder"),
        "{yaml}"
    );
    // At 4096 image tokens every vision module is BF16 by its policy too: a note only.
    let o = te_precision(dir.path(), "4096", &out);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    let e = err(&o);
    assert!(!e.contains("warning: the vision encoder's policy"), "{e}");
    assert!(e.contains("fall to the BF16 catch-all"), "{e}");
    // The vision policy is an input: writing over it is refused.
    let o = te_precision(dir.path(), "4096", &dir.path().join("vit.json"));
    assert_eq!(o.status.code(), Some(2), "{}", err(&o));
    assert!(
        std::fs::read_to_string(dir.path().join("vit.json"))
            .unwrap()
            .contains("16384")
    );
}

#[test]
fn a_policy_the_config_names_is_an_input_the_output_may_not_overwrite() {
    // The config's fp8_dynamic_policy_path (selective_fp8 on), resolved against --root, is read
    // as --policy is: --output naming it is refused and the policy is left as it was.
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("policies")).unwrap();
    let policy = dir.path().join("policies/deepseek_v3.json");
    std::fs::copy(root().join("policies/deepseek_v3.json"), &policy).unwrap();
    let before = std::fs::read(&policy).unwrap();
    let run = |out: &std::path::Path| {
        Command::new(env!("CARGO_BIN_EXE_fp8sel"))
            .current_dir(root())
            .args([
                "te-precision-config",
                "--model",
                "fixtures/models/sel/deepseek_v3_fp8_sel.yaml",
            ])
            .args(["--config-root", "fixtures/models", "--root"])
            .arg(dir.path())
            .args([
                "--tp",
                "8",
                "--ep",
                "64",
                "--etp",
                "1",
                "--seq-length",
                "4096",
                "--output",
            ])
            .arg(out)
            .output()
            .unwrap()
    };
    let o = run(&policy);
    assert_eq!(o.status.code(), Some(2), "{}", err(&o));
    assert!(err(&o).contains("deepseek_v3.json"), "{}", err(&o));
    assert_eq!(std::fs::read(&policy).unwrap(), before);
    // Elsewhere it writes.
    let o = run(&dir.path().join("te.yaml"));
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
}

/// A config that names no recipe: the file runs the recipe the policy was measured with, never
/// the default's in its place (a tensorwise policy's thresholds written as blockwise modules), and
/// a delayed policy is refused as delayed, naming the hook.
#[test]
fn a_config_without_a_recipe_runs_the_policys() {
    let dir = tempfile::tempdir().unwrap();
    let run = |policy: &str, extra: &[&str]| {
        let out = dir.path().join("te.yaml");
        let o = Command::new(env!("CARGO_BIN_EXE_fp8sel"))
            .current_dir(root())
            .args([
                "te-precision-config",
                "--model",
                "fixtures/models/qwen2_5_72b.yaml",
            ])
            .args(["--policy", policy, "--tp", "8", "--seq-length", "8192"])
            .args(extra)
            .arg("--output")
            .arg(&out)
            .output()
            .unwrap();
        let text = std::fs::read_to_string(&out).unwrap_or_default();
        let _ = std::fs::remove_file(&out);
        (o, text)
    };
    let (o, text) = run("policies/tensorwise/qwen2_5_72b.json", &[]);
    assert!(o.status.success(), "{}", err(&o));
    assert!(
        text.contains("fp8_quantization_recipe: tensorwise"),
        "{text}"
    );
    assert!(err(&o).contains("note: recipe tensorwise, the one the policy was measured with"));
    let (o, text) = run("policies/qwen2_5_72b.json", &[]);
    assert!(
        text.contains("fp8_quantization_recipe: blockwise"),
        "{text}"
    );
    assert!(!err(&o).contains("note: recipe"), "{}", err(&o));
    let (o, text) = run("policies/delayed/qwen2_5_72b.json", &[]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text.is_empty());
    assert!(err(&o).contains("refuses delayed scaling"), "{}", err(&o));
    // The trainer's recipe, given, is the file's (the policy's mismatch warned about).
    let (o, text) = run(
        "policies/tensorwise/qwen2_5_72b.json",
        &["--recipe", "blockwise"],
    );
    assert!(
        text.contains("fp8_quantization_recipe: blockwise"),
        "{text}"
    );
    assert!(
        err(&o).contains("measured with the tensorwise recipe"),
        "{}",
        err(&o)
    );
}
