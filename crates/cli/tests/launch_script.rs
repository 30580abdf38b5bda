//! A Megatron-LM user's launch script as `--model`: the model, its layout and its sequence length
//! come from the flags it passes `pretrain_gpt.py`, through every command of the README's path;
//! a read field whose value the script computes in ways fp8sel does not evaluate is refused,
//! naming the file, the field and the fix.

#![allow(clippy::unwrap_used)]

mod common;

use common::{err, fp8sel, out, s};

const SCRIPT: &str = "fixtures/models/launch/pretrain_moe_16l.sh";

#[test]
fn the_readmes_path_reads_a_launch_script_as_its_model_and_layout() {
    // explain: TP 2 and EP 4 from the script (the experts' 16 GEMMs, proj's 1024 rows), its
    // sequence length, and the default it took said on stderr.
    let o = fp8sel(&["explain", "--model", SCRIPT, "--json"]);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    let v: serde_json::Value = serde_json::from_str(&out(&o)).unwrap();
    assert_eq!(v["model"], "pretrain_moe_16l");
    let rows = v["modules"].as_array().unwrap();
    let find = |n: &str| {
        rows.iter()
            .find(|r| r["name"].as_str().unwrap().ends_with(n))
            .unwrap()
    };
    assert_eq!(find("experts.linear_fc1")["num_gemms"], 16);
    assert_eq!(find("self_attention.linear_proj")["in_features"], 1024);
    assert_eq!(find("self_attention.linear_proj")["num_tokens"], 4096);
    assert!(err(&o).contains("$SEQ_LEN"), "{}", err(&o));
    // gen-policy, check and te-precision-config on it, as on a YAML.
    let dir = tempfile::tempdir().unwrap();
    let pol = dir.path().join("pol");
    // The layout the script trains (TP 2, EP 4) first, said, then the other TPs at its EP.
    let o = fp8sel(&[
        "gen-policy",
        "--model",
        SCRIPT,
        "--backend",
        "model",
        "--out",
        s(&pol),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    let e = err(&o);
    assert!(
        e.contains("TP 2 (the config's tensor_model_parallel_size) first"),
        "{e}"
    );
    let order: Vec<&str> = e
        .lines()
        .filter(|l| l.contains("point(s) to measure"))
        .map(|l| l.split(' ').nth(1).unwrap())
        .collect();
    assert_eq!(order, ["tp2", "tp1", "tp4", "tp8"], "{e}");
    assert!(pol.join("reports/pretrain_moe_16l_tp2_ep4.json").is_file());
    let policy = pol.join("pretrain_moe_16l.json");
    let o = fp8sel(&["check", "--model", SCRIPT, "--policy", s(&policy)]);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    let te = dir.path().join("te.yaml");
    let o = fp8sel(&[
        "te-precision-config",
        "--model",
        SCRIPT,
        "--policy",
        s(&policy),
        "--output",
        s(&te),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    assert!(
        std::fs::read_to_string(&te)
            .unwrap()
            .contains("layout: tp 2 ep 4")
    );
}

#[test]
fn a_read_field_the_script_computes_out_of_reach_is_refused_with_the_fix() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("train.sh");
    std::fs::write(
        &p,
        "L=$(python get_layers.py)\ntorchrun pretrain_gpt.py --num-layers $L --hidden-size 1024\n",
    )
    .unwrap();
    let o = fp8sel(&["explain", "--model", s(&p)]);
    assert_eq!(o.status.code(), Some(2));
    let e = err(&o);
    assert!(
        e.contains("train.sh")
            && e.contains("num_layers")
            && e.contains("--num-layers $L")
            && e.contains("fix:"),
        "{e}"
    );
}

/// A dense launch script deciding modules with Megatron's own per-module config.
fn native_script(dir: &std::path::Path, extra: &str) -> std::path::PathBuf {
    let text = format!(
        "#!/bin/bash\nARGS=(\n    --num-layers 16 --hidden-size 2048 --ffn-hidden-size 8192\n    \
         --num-attention-heads 32 --group-query-attention --num-query-groups 8\n    \
         --swiglu --normalization RMSNorm --disable-bias-linear --seq-length 4096\n    \
         --bf16 --te-precision-config-file te.yaml {extra}\n)\n\
         torchrun pretrain_gpt.py \"${{ARGS[@]}}\"\n"
    );
    let p = dir.join("train.sh");
    std::fs::write(&p, text).unwrap();
    p
}

#[test]
fn a_native_launch_without_the_fp8_region_its_plan_needs_is_said() {
    let dir = tempfile::tempdir().unwrap();
    // FP8 from 1024 tokens, in either execution.
    let rule = r#"[{"tp": 1, "min_tokens": 1024}]"#;
    let policy = dir.path().join("p.json");
    std::fs::write(
        &policy,
        format!(
            r#"{{"version": 1, "speedup_threshold": 1.0, "rules": {{
            "layernorm_column": {{"qkv": {rule}, "fc1": {rule}}}, "row": {{"proj": {rule}, "fc2": {rule}}}}}}}"#
        ),
    )
    .unwrap();
    let said = |extra: &str| {
        let script = native_script(dir.path(), extra);
        let o = fp8sel(&["explain", "--model", s(&script), "--policy", s(&policy)]);
        assert_eq!(o.status.code(), Some(0), "{}", err(&o));
        err(&o)
    };
    // Graphed, no --fp8-format: the replays would reuse the captured step's FP8 weights.
    let e = said("--cuda-graph-impl local");
    assert!(
        e.contains("--te-precision-config-file te.yaml without --fp8-format")
            && e.contains("CUDA-graphed"),
        "{e}"
    );
    // check fails on it (the policy covers every module: the launch is what to fix), typed in
    // its JSON.
    let script = native_script(dir.path(), "--cuda-graph-impl local");
    let o = fp8sel(&[
        "check",
        "--model",
        s(&script),
        "--policy",
        s(&policy),
        "--json",
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", err(&o));
    let v: serde_json::Value = serde_json::from_str(&out(&o)).unwrap();
    assert_eq!(v["launch_problems"].as_array().unwrap().len(), 1);
    assert!(v["fill_commands"].as_array().unwrap().is_empty());
    assert!(err(&o).contains("1 launch problem(s)"), "{}", err(&o));
    // With the region, or eager (FP8 modules enter FP8 themselves): nothing to say.
    let e = said("--cuda-graph-impl local --fp8-format e4m3 --fp8-recipe blockwise");
    assert!(!e.contains("without --fp8-format"), "{e}");
    let script = native_script(dir.path(), "--cuda-graph-impl local --fp8-format e4m3");
    let o = fp8sel(&["check", "--model", s(&script), "--policy", s(&policy)]);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    assert!(!said("").contains("without --fp8-format"));
}
