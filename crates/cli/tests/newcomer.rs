//! What a new user meets: estimates labelled everywhere, warnings for a policy of another model
//! or a defaulted top-k, the commands that fill a gap, Megatron's flag names, one default for the
//! micro-batch size, typed JSON, a quiet --quiet, rank-0 tables, and no silent 1/N Slurm sweep.

#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn root() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
}

fn fp8sel_env(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_fp8sel"));
    c.current_dir(root()).args(args);
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().unwrap()
}

fn fp8sel(args: &[&str]) -> Output {
    fp8sel_env(args, &[])
}

fn out(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn err(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// An estimated policy of Qwen2.5-72B at TP 1 (cost model, no GPU).
fn estimated_policy(dir: &Path) -> PathBuf {
    let report = dir.join("r.json");
    let o = fp8sel(&[
        "bench",
        "--backend",
        "model",
        "--quiet",
        "--model",
        "fixtures/models/qwen2_5_72b.yaml",
        "--tp",
        "1",
        "--report",
        s(&report),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    let policy = dir.join("p.json");
    let o = fp8sel(&[
        "merge-policy",
        "--reports",
        s(&report),
        "--output",
        s(&policy),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    policy
}

#[test]
fn estimated_policies_are_labelled_by_every_command() {
    let dir = tempfile::tempdir().unwrap();
    let p = estimated_policy(dir.path());
    let o = fp8sel(&["validate", s(&p)]);
    assert!(out(&o).contains("ESTIMATED"), "{}", out(&o));
    let v: serde_json::Value =
        serde_json::from_str(&out(&fp8sel(&["validate", s(&p), "--json"]))).unwrap();
    assert_eq!(
        (v["ok"].clone(), v["estimated"].clone()),
        (true.into(), true.into())
    );
    let decide = [
        "decide",
        "--policy",
        s(&p),
        "--te-class",
        "TERowParallelLinear",
        "--ub-name",
        "fc2",
        "--tp",
        "1",
        "--seq-length",
        "32768",
    ];
    let o = fp8sel(&decide);
    assert!(out(&o).contains("ESTIMATED speedup"), "{}", out(&o));
    let v: serde_json::Value =
        serde_json::from_str(&out(&fp8sel(&[&decide[..], &["--json"]].concat()))).unwrap();
    assert_eq!(v["estimated"], true);
    assert!(v["reason"].as_str().unwrap().contains("ESTIMATED"));
    let explain = [
        "explain",
        "--model",
        "fixtures/models/qwen2_5_72b.yaml",
        "--policy",
        s(&p),
        "--tp",
        "1",
        "--seq-length",
        "4096",
    ];
    let o = fp8sel(&explain);
    // Diagnostics go to stderr, never into the table.
    assert!(
        err(&o).contains("warning: the llm policy is an ESTIMATE")
            && !out(&o).contains("warning: the llm policy is an ESTIMATE"),
        "{}",
        err(&o)
    );
    let v: serde_json::Value =
        serde_json::from_str(&out(&fp8sel(&[&explain[..], &["--json"]].concat()))).unwrap();
    assert!(
        v["modules"]
            .as_array()
            .unwrap()
            .iter()
            .all(|m| m["estimated"] == true)
    );
    assert_eq!(
        v["summary"]["estimated_policies"],
        serde_json::json!(["llm"])
    );
    // A measured policy says none of it.
    let o = fp8sel(&["validate", "policies/qwen2_5_72b.json"]);
    assert!(!out(&o).contains("ESTIMATED"));
}

#[test]
fn a_policy_of_another_model_is_a_warning_in_explain_and_a_failure_in_check() {
    let args = |cmd: &'static str, model: &'static str| {
        vec![
            cmd,
            "--model",
            model,
            "--policy",
            "policies/qwen2_5_72b.json",
            "--seq-length",
            "4096",
        ]
    };
    let o = fp8sel(&args("explain", "fixtures/models/llama3_2_1b.yaml"));
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    // Diagnostics go to stderr, never into the table; identity is by per-rank GEMM shape.
    let why =
        "(made for qwen2_5_72b) was measured at other per-rank GEMM shapes than llama3_2_1b's";
    assert!(
        err(&o).contains(why) && !out(&o).contains(why),
        "{}",
        err(&o)
    );
    let o = fp8sel(&args("check", "fixtures/models/llama3_2_1b.yaml"));
    assert_eq!(o.status.code(), Some(1), "{}", out(&o));
    assert!(
        out(&o).contains("another model's policy") && !out(&o).contains("ok:"),
        "{}",
        out(&o)
    );
    let o = fp8sel(&args("explain", "fixtures/models/qwen2_5_72b.yaml"));
    assert!(!err(&o).contains("made for"), "{}", err(&o));
}

#[test]
fn check_fails_on_a_same_named_config_of_other_shapes() {
    // The shipped Llama-3.2-1B's name, another model's dimensions (an 8B's hidden and FFN).
    let dir = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(root().join("fixtures/models/llama3_2_1b.yaml")).unwrap();
    let other = text
        .replace("hidden_size: 2048", "hidden_size: 4096")
        .replace("ffn_hidden_size: 8192", "ffn_hidden_size: 14336");
    assert_ne!(
        text, other,
        "the fixture's fields moved: update the replacements"
    );
    let cfg = dir.path().join("llama3_2_1b.yaml");
    std::fs::write(&cfg, other).unwrap();
    let o = fp8sel(&[
        "check",
        "--model",
        cfg.to_str().unwrap(),
        "--policy",
        "policies/llama3_2_1b.json",
        "--seq-length",
        "4096",
    ]);
    assert_eq!(o.status.code(), Some(1), "{}{}", out(&o), err(&o));
    assert!(
        out(&o).contains("other per-rank GEMM shapes than llama3_2_1b's"),
        "{}",
        out(&o)
    );
}

/// The lines of `text` that are commands for the user to run (indented, starting with fp8sel).
fn printed_commands(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| l.strip_prefix("  "))
        .filter(|l| l.starts_with("fp8sel "))
        .map(str::to_owned)
        .collect()
}

/// Runs `command` as a user would, in `dir`, with this build's fp8sel first on the PATH.
fn run_as_printed(command: &str, dir: &std::path::Path) -> std::process::Output {
    let bin = std::path::Path::new(env!("CARGO_BIN_EXE_fp8sel"));
    let path = format!(
        "{}:{}",
        bin.parent().unwrap().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    std::process::Command::new("sh")
        .args(["-c", command])
        .current_dir(dir)
        .env("PATH", path)
        .output()
        .unwrap()
}

#[test]
fn check_prints_one_fill_command_that_runs_as_printed_and_covers_the_layout() {
    let dir = tempfile::tempdir().unwrap();
    let root = root().canonicalize().unwrap();
    let model = root.join("fixtures/models/deepseek_v3.yaml");
    let policy = root.join("policies/deepseek_v3.json");
    let layout = [
        "--tp",
        "8",
        "--ep",
        "16",
        "--etp",
        "2",
        "--seq-length",
        "4096",
    ];
    let mut args = vec!["check", "--model", model.to_str().unwrap()];
    args.extend(["--policy", policy.to_str().unwrap()]);
    args.extend(layout);
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_fp8sel"))
        .args(&args)
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", err(&o));
    let commands = printed_commands(&out(&o));
    assert_eq!(commands.len(), 1, "{}", out(&o));
    let fill = &commands[0];
    assert!(
        fill.contains("--tp 8 --ep 16 --etp 2") && fill.ends_with("--out fp8sel-fill"),
        "{fill}"
    );
    let shipped = std::fs::read(&policy).unwrap();
    let ran = run_as_printed(fill, dir.path());
    assert_eq!(ran.status.code(), Some(0), "{fill}: {}", err(&ran));
    assert!(err(&ran).contains("cost model"), "{}", err(&ran));
    assert_eq!(
        std::fs::read(&policy).unwrap(),
        shipped,
        "the shipped file moved"
    );
    // The policy it wrote covers every module of the layout.
    let made = dir.path().join("fp8sel-fill/deepseek_v3.json");
    assert!(out(&o).contains("then pass --policy fp8sel-fill/deepseek_v3.json"));
    let mut again = vec!["check", "--model", model.to_str().unwrap()];
    again.extend(["--policy", made.to_str().unwrap()]);
    again.extend(layout);
    let o = fp8sel(&again);
    assert_eq!(o.status.code(), Some(0), "{}{}", out(&o), err(&o));
}

#[test]
fn megatron_flag_names_are_accepted() {
    let ours = fp8sel(&[
        "explain",
        "--json",
        "--model",
        "fixtures/models/deepseek_v3.yaml",
        "--policy",
        "policies/deepseek_v3.json",
        "--tp",
        "8",
        "--ep",
        "64",
        "--etp",
        "1",
        "--cp",
        "2",
        "--topk",
        "8",
        "--seq-length",
        "8192",
    ]);
    let megatron = fp8sel(&[
        "explain",
        "--json",
        "--model",
        "fixtures/models/deepseek_v3.yaml",
        "--policy",
        "policies/deepseek_v3.json",
        "--tensor-model-parallel-size",
        "8",
        "--expert-model-parallel-size",
        "64",
        "--expert-tensor-parallel-size",
        "1",
        "--context-parallel-size",
        "2",
        "--moe-router-topk",
        "8",
        "--seq-length",
        "8192",
    ]);
    assert_eq!(megatron.status.code(), Some(0), "{}", err(&megatron));
    assert_eq!(out(&ours), out(&megatron));
    let o = fp8sel(&[
        "decide",
        "--policy",
        "policies/qwen2_5_72b.json",
        "--te-class",
        "TERowParallelLinear",
        "--ub-name",
        "proj",
        "--tensor-model-parallel-size",
        "8",
        "--seq-length",
        "4096",
    ]);
    // One default for the micro-batch size everywhere: 1.
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    // The tokens compared are seq x 1, against the eager threshold (an eager step: Megatron's
    // default), whatever the shipped value is.
    let text = out(&o);
    let eager = text
        .lines()
        .nth(1)
        .and_then(|l| l.strip_prefix("tokens 4096 "))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(
        eager.contains("min_tokens ") && !eager.contains("min_tokens_graphed"),
        "{text}"
    );
}

#[test]
fn json_carries_typed_keys_and_token_counts() {
    let o = fp8sel(&[
        "explain",
        "--json",
        "--model",
        "fixtures/models/deepseek_v3.yaml",
        "--policy",
        "policies/deepseek_v3.json",
        "--tp",
        "8",
        "--ep",
        "16",
        "--etp",
        "2",
        "--seq-length",
        "4096",
    ]);
    let v: serde_json::Value = serde_json::from_str(&out(&o)).unwrap();
    let key = &v["summary"]["missing_rules"][0]["key"];
    assert_eq!(key["kind"], "column_grouped");
    assert_eq!(
        (key["etp"].as_u64(), key["num_gemms"].as_u64()),
        (Some(2), Some(16))
    );
    let t = &v["summary"]["token_counts"]["llm"];
    assert_eq!(
        (
            t["dense"].as_u64(),
            t["topk"].as_u64(),
            t["experts"].as_u64()
        ),
        (Some(4096), Some(8), Some(32768))
    );
}

#[test]
fn a_moe_config_without_topk_is_warned_about() {
    let dir = tempfile::tempdir().unwrap();
    let m = dir.path().join("moe.yaml");
    std::fs::write(
        &m,
        "num_layers: 4\nhidden_size: 1024\nnum_attention_heads: 8\nseq_length: 4096\n\
         num_moe_experts: 16\nmoe_ffn_hidden_size: 512\n",
    )
    .unwrap();
    let o = fp8sel(&["explain", "--model", s(&m)]);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    // Diagnostics go to stderr, never into the table.
    assert!(
        err(&o).contains("warning: llm: the config has no moe_router_topk")
            && !out(&o).contains("warning: llm: the config has no moe_router_topk"),
        "{}",
        err(&o)
    );
    let o = fp8sel(&["explain", "--model", s(&m), "--topk", "4"]);
    assert!(!out(&o).contains("no moe_router_topk"), "{}", out(&o));
    let o = fp8sel(&[
        "bench",
        "--backend",
        "model",
        "--model",
        s(&m),
        "--shape-sweep",
        "1024x1",
        "--quiet",
        "--report",
        s(&dir.path().join("r.json")),
    ]);
    assert!(err(&o).contains("no moe_router_topk"), "{}", err(&o));
}

const SWEEP: [&str; 9] = [
    "bench",
    "--backend",
    "model",
    "--model",
    "fixtures/models/llama3_2_1b.yaml",
    "--shape-sweep",
    "1024x1,4096x1",
    "--tp",
    "1",
];

#[test]
fn quiet_means_the_summary_line_only() {
    let dir = tempfile::tempdir().unwrap();
    let r = dir.path().join("r.json");
    let o = fp8sel(&[&SWEEP[..], &["--quiet", "--report", s(&r)]].concat());
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    assert_eq!(err(&o), "");
    let lines: Vec<String> = out(&o).lines().map(str::to_owned).collect();
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(
        lines[0].starts_with("8 ok, 0 failed, 0 skipped") && lines[0].contains("ESTIMATES"),
        "{lines:?}"
    );
    let loud = fp8sel(&[&SWEEP[..], &["--report", s(&r)]].concat());
    assert!(out(&loud).lines().count() > 8);
    // --json: one object with typed points.
    let o = fp8sel(&[&SWEEP[..], &["--json", "--report", s(&r)]].concat());
    let v: serde_json::Value = serde_json::from_str(&out(&o)).unwrap();
    assert_eq!(
        (v["ok"].as_u64(), v["estimated"].as_bool()),
        (Some(8), Some(true))
    );
    let p = &v["points"][0];
    assert!(p["speedup"].as_f64().unwrap() > 0.0 && p["tokens"].as_u64() == Some(1024));
}

#[test]
fn only_rank_0_prints_the_table() {
    let dir = tempfile::tempdir().unwrap();
    let r = dir.path().join("r.json");
    for rank in ["0", "1"] {
        let env = [("RANK", rank), ("WORLD_SIZE", "2"), ("LOCAL_RANK", rank)];
        let o = fp8sel_env(&[&SWEEP[..], &["--report", s(&r)]].concat(), &env);
        assert_eq!(o.status.code(), Some(0), "{}", err(&o));
        let table = out(&o).lines().any(|l| l.starts_with("module "));
        assert_eq!(table, rank == "0", "rank {rank}: {}", out(&o));
        assert!(out(&o).contains(" ok, 0 failed"), "{}", out(&o));
    }
}

#[test]
fn slurm_variables_without_srun_are_an_error_not_a_partial_sweep() {
    let dir = tempfile::tempdir().unwrap();
    let r = dir.path().join("r.json");
    let env = [("SLURM_PROCID", "0"), ("SLURM_NTASKS", "16")];
    let o = fp8sel_env(&[&SWEEP[..], &["--report", s(&r)]].concat(), &env);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        err(&o).contains("srun") && err(&o).contains("1/16"),
        "{}",
        err(&o)
    );
    assert!(!r.exists() && !dir.path().join("r.rank0.json").exists());
}

#[test]
fn config_forms_megatron_users_write() {
    let json = |model: &str| -> serde_json::Value {
        let o = fp8sel(&["explain", "--json", "--model", model]);
        assert_eq!(o.status.code(), Some(0), "{model}: {}", err(&o));
        serde_json::from_str(&out(&o)).unwrap()
    };
    // Megatron-LM's nested --yaml-cfg: sections flattened, run settings from the top level.
    let v = json("fixtures/models/forms/megatron_yaml_cfg.yaml");
    let qkv = &v["modules"][0];
    assert_eq!(
        (qkv["layers"].as_u64(), qkv["in_features"].as_u64()),
        (Some(32), Some(4096))
    );
    assert_eq!(v["summary"]["token_counts"]["llm"]["dense"], 8192); // 4096 x mbs 2
    assert_eq!(v["modules"][1]["in_features"], 2048); // proj at TP 2
    // Interpolation (${hidden_size}, the moe_freq resolver), Torch_RMSNorm, MTP layers.
    let v = json("fixtures/models/forms/interpolated_moe.yaml");
    let find = |name: &str| {
        v["modules"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["name"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("no {name}"))
    };
    assert_eq!(find("decoder.layers.mlp.linear_fc1")["layers"], 2); // [0]*2: two dense layers
    assert_eq!(
        find("decoder.layers.mlp.linear_fc1")["out_features"],
        2 * 2048
    ); // ffn = ${hidden_size}
    assert_eq!(find("decoder.layers.mlp.experts.linear_fc1")["layers"], 6);
    assert_eq!(
        find("decoder.layers.mlp.shared_experts.linear_fc1")["out_features"],
        2 * 512
    );
    let eh = find("mtp.layers.eh_proj");
    assert_eq!(
        (
            eh["in_features"].as_u64(),
            eh["out_features"].as_u64(),
            eh["ub_name"].as_str()
        ),
        (Some(4096), Some(2048), Some("mtp_eh_proj"))
    );
    assert_eq!(
        find("mtp.layers.mtp_model_layer.mlp.experts.linear_fc1")["layers"],
        1
    );
    // A typo of a field the engine reads is a warning with the likely key.
    let o = fp8sel(&["explain", "--model", "fixtures/models/forms/typo.yaml"]);
    // Diagnostics go to stderr, never into the table.
    assert!(
        err(&o).contains("unknown key `ffn_hidden_sise`: did you mean `ffn_hidden_size`?")
            && !out(&o).contains("unknown key `ffn_hidden_sise`: did you mean `ffn_hidden_size`?"),
        "{}",
        err(&o)
    );
    // DeepSeek Sparse Attention (GLM-5, DeepSeek-V3.2): MLA planned, the indexer said not to be.
    let dir = tempfile::tempdir().unwrap();
    let dsa = dir.path().join("dsa.yaml");
    let mla = std::fs::read_to_string(root().join("fixtures/models/forms/interpolated_moe.yaml"))
        .unwrap();
    std::fs::write(&dsa, format!("{mla}experimental_attention_variant: dsa\n")).unwrap();
    let o = fp8sel(&["explain", "--model", s(&dsa)]);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    assert!(
        err(&o).contains("attention variant dsa: the MLA projections are planned"),
        "{}",
        err(&o)
    );
    // Another attention variant the inventory does not model is refused by name.
    let o = fp8sel(&[
        "explain",
        "--model",
        "fixtures/models/forms/unsupported_attention.yaml",
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        err(&o).contains("attention variant dsv4_hybrid is not supported"),
        "{}",
        err(&o)
    );
}

#[test]
fn gen_policy_does_the_whole_job_for_your_own_model() {
    let dir = tempfile::tempdir().unwrap();
    let model = root().join("fixtures/models/deepseek_v3.yaml");
    let run = |extra: &[&str]| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_fp8sel"));
        c.current_dir(dir.path())
            .args([
                "gen-policy",
                "--model",
                s(&model),
                "--tp",
                "1,2,4",
                "--ep",
                "8",
            ])
            .args(extra);
        c.output().unwrap()
    };
    let o = run(&["--backend", "model"]);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    // Progress from the first line, and each distinct shape measured once.
    let e = err(&o);
    assert!(
        e.starts_with("gen-policy: 1 model(s), backend model"),
        "{e}"
    );
    assert!(
        e.contains("tp2 ep8 etp1 cp1: 72 point(s) to measure, 32 reused"),
        "{e}"
    );
    let est = dir.path().join("policies/estimated/h200");
    for f in [
        "deepseek_v3.json",
        "deepseek_v3.md",
        "plots/deepseek_v3/llm-row_grouped-experts.svg",
    ] {
        assert!(est.join(f).exists(), "{f} missing");
    }
    let r: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(est.join("reports/deepseek_v3_tp2_ep8.json")).unwrap(),
    )
    .unwrap();
    let reused = r["provenance"]["reused_points"].as_array().unwrap();
    assert_eq!(reused.len(), 32);
    assert!(
        reused
            .iter()
            .all(|id| id.as_str().unwrap().contains("experts"))
    );
    // Reused points carry their own layout's TP.
    assert!(r["points"].as_array().unwrap().iter().all(|p| p["tp"] == 2));
    // The merge treats the copies as one measurement: no "measured 3 times" warnings.
    let md = std::fs::read_to_string(est.join("deepseek_v3.md")).unwrap();
    assert!(!md.contains("measured 3 times"), "{md}");
    let o = run(&["--backend", "model", "--quiet"]);
    assert_eq!(err(&o), "");
    assert_eq!(out(&o).lines().count(), 1, "{}", out(&o));
    assert!(out(&o).contains("ESTIMATES"));
}

#[test]
fn merge_policy_json_has_typed_rules() {
    let dir = tempfile::tempdir().unwrap();
    let _ = estimated_policy(dir.path());
    let o = fp8sel(&[
        "merge-policy",
        "--json",
        "--reports",
        s(&dir.path().join("r.json")),
        "--output",
        s(&dir.path().join("q.json")),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    let v: serde_json::Value = serde_json::from_str(&out(&o)).unwrap();
    assert_eq!(v["estimated"], true);
    assert_eq!(v["written"][0], s(&dir.path().join("q.json")));
    let rule = v["rules"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["key"]["ub_name"] == "fc1")
        .unwrap();
    assert_eq!(
        (rule["key"]["kind"].as_str(), rule["key"]["tp"].as_u64()),
        (Some("layernorm_column"), Some(1))
    );
    assert!(rule["measured_counts"].as_array().unwrap().len() > 3);
}

#[test]
fn the_never_value_is_never_shown_as_a_number() {
    // Every shipped policy, at layouts it has rules for, in both executions: the tables and
    // diagnostics say "never" where the file carries 2^53 for the reference's loader.
    let never = "9007199254740992";
    let cases: [(&str, &str, &[&str]); 4] = [
        (
            "deepseek_v3.yaml",
            "deepseek_v3.json",
            &["--tp", "8", "--ep", "64", "--etp", "1"],
        ),
        (
            "deepseek_v3.yaml",
            "deepseek_v3.json",
            &["--tp", "1", "--ep", "16", "--etp", "1"],
        ),
        ("llama3_2_1b.yaml", "llama3_2_1b.json", &["--tp", "1"]),
        ("llama3_2_1b.yaml", "llama3_2_1b.json", &["--tp", "2"]),
    ];
    let mut shown_never = false;
    for (model, policy, layout) in cases {
        let shipped = std::fs::read_to_string(root().join("policies").join(policy)).unwrap();
        assert!(
            shipped.contains(never),
            "{policy}: the case needs a never threshold"
        );
        for cmd in ["explain", "check"] {
            for execution in ["eager", "graphed"] {
                for seq in ["1024", "32768"] {
                    let m = format!("fixtures/models/{model}");
                    let p = format!("policies/{policy}");
                    let mut a = vec![cmd, "--model", &m, "--policy", &p, "--seq-length", seq];
                    a.extend(["--execution", execution]);
                    a.extend(layout);
                    let o = fp8sel(&a);
                    let all = format!("{}{}", out(&o), err(&o));
                    assert!(!all.contains(never), "{a:?}: {all}");
                    shown_never |=
                        all.contains("min_tokens never") || all.contains("_graphed never");
                }
            }
        }
    }
    assert!(shown_never, "no case showed a never threshold");
    for entry in std::fs::read_dir(root().join("policies")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "md") {
            let text = std::fs::read_to_string(&path).unwrap();
            assert!(!text.contains(never), "{}", path.display());
        }
    }
}

/// Every rule of a policy file: (min_tokens, min_tokens_graphed).
fn both_thresholds(policy: &serde_json::Value) -> Vec<(u64, Option<u64>)> {
    let rule = |r: &serde_json::Value| {
        (
            r["min_tokens"].as_u64().unwrap(),
            r["min_tokens_graphed"].as_u64(),
        )
    };
    let mut out = Vec::new();
    for v in policy["rules"].as_object().unwrap().values() {
        match v {
            serde_json::Value::Array(rules) => out.extend(rules.iter().map(rule)),
            serde_json::Value::Object(by_ub) => {
                for rules in by_ub.values() {
                    out.extend(rules.as_array().unwrap().iter().map(rule));
                }
            }
            _ => panic!("{v}"),
        }
    }
    out
}

#[test]
fn gen_policy_gives_your_own_model_both_thresholds_with_their_source() {
    // Models that are in no fixture: a 14B-class dense model and a 64-expert MoE with GQA,
    // written from public dimensions into HF config.json files.
    let dir = tempfile::tempdir().unwrap();
    let dense = dir.path().join("Dense-14B/config.json");
    let moe = dir.path().join("Moe-16B/config.json");
    for (path, text) in [
        (
            &dense,
            r#"{"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 5120, "intermediate_size": 13824, "num_attention_heads": 40, "num_key_value_heads": 8, "num_hidden_layers": 48, "vocab_size": 152064, "hidden_act": "silu"}"#,
        ),
        (
            &moe,
            r#"{"architectures": ["Qwen2MoeForCausalLM"], "model_type": "qwen2_moe", "hidden_size": 2048, "intermediate_size": 5632, "moe_intermediate_size": 1408, "shared_expert_intermediate_size": 5632, "num_experts": 64, "num_experts_per_tok": 6, "num_attention_heads": 16, "num_key_value_heads": 4, "num_hidden_layers": 24, "vocab_size": 151936, "hidden_act": "silu"}"#,
        ),
    ] {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
    for (cfg, name, extra) in [
        (&dense, "Dense-14B", vec![]),
        (&moe, "Moe-16B", vec!["--ep", "8"]),
    ] {
        let out_dir = dir.path().join(format!("out-{name}"));
        let mut a = vec!["gen-policy", "--model", cfg.to_str().unwrap(), "--tp", "1"];
        a.extend(extra.iter().copied());
        a.extend(["--out", out_dir.to_str().unwrap()]);
        let o = fp8sel(&a);
        assert_eq!(o.status.code(), Some(0), "{}", err(&o));
        assert!(err(&o).contains("shipped host profile"), "{}", err(&o));
        let p: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(out_dir.join(format!("{name}.json"))).unwrap(),
        )
        .unwrap();
        let rules = both_thresholds(&p);
        assert!(!rules.is_empty(), "{p}");
        for (eager, graphed) in rules {
            let graphed =
                graphed.unwrap_or_else(|| panic!("{name}: a rule without min_tokens_graphed: {p}"));
            assert!(
                eager >= graphed,
                "{name}: eager {eager} below graphed {graphed}"
            );
        }
        let prov = &p["provenance"];
        assert_eq!(prov["eager_source"], "host_profile", "{prov}");
        assert!(
            prov["host_profile"]
                .as_str()
                .unwrap()
                .contains("h200_te2.20.2_blockwise")
        );
        assert!(!prov["shapes"].as_array().unwrap().is_empty());
    }
    // A cost-model profile without a host profile: GPU time alone, said loudly, and every
    // reader warns in eager steps.
    let out_dir = dir.path().join("out-b200");
    let o = fp8sel(&[
        "gen-policy",
        "--model",
        dense.to_str().unwrap(),
        "--tp",
        "1",
        "--backend",
        "model",
        "--device-profile",
        "b200",
        "--out",
        out_dir.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    assert!(
        err(&o).contains("warning: no host profile for b200"),
        "{}",
        err(&o)
    );
    let policy = out_dir.join("Dense-14B.json");
    let p: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&policy).unwrap()).unwrap();
    assert_eq!(p["provenance"]["eager_source"], "gpu_time");
    assert!(both_thresholds(&p).iter().all(|(e, g)| Some(*e) == *g));
    let explain = |execution: &str| {
        let (d, p) = (dense.to_str().unwrap(), policy.to_str().unwrap());
        err(&fp8sel(&[
            "explain",
            "--model",
            d,
            "--policy",
            p,
            "--seq-length",
            "2048",
            "--execution",
            execution,
        ]))
    };
    let e = explain("eager");
    assert!(
        e.contains("eager thresholds (min_tokens) are GPU time alone"),
        "{e}"
    );
    let g = explain("graphed");
    assert!(!g.contains("GPU time alone"), "{g}");
}

#[test]
fn a_config_with_cuda_graphs_reads_the_graphed_thresholds_unless_told() {
    // Megatron's rule: cuda_graph_impl local/transformer_engine/full_iteration is graphed.
    let dir = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(root().join("fixtures/models/llama3_2_1b.yaml")).unwrap();
    let graphed = dir.path().join("llama3_2_1b.yaml");
    std::fs::write(&graphed, format!("{text}\ncuda_graph_impl: local\n")).unwrap();
    let bad = dir.path().join("bad.yaml");
    std::fs::write(&bad, format!("{text}\ncuda_graph_impl: sometimes\n")).unwrap();
    let explain = |cfg: &Path, extra: &[&str]| {
        let mut a = vec!["explain", "--model", cfg.to_str().unwrap()];
        a.extend([
            "--policy",
            "policies/llama3_2_1b.json",
            "--seq-length",
            "4096",
            "--json",
        ]);
        a.extend(extra);
        fp8sel(&a)
    };
    let reasons = |o: &Output| -> Vec<String> {
        let v: serde_json::Value = serde_json::from_str(&out(o)).unwrap();
        v["modules"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["reason"].as_str().unwrap().to_owned())
            .collect()
    };
    let o = explain(&graphed, &[]);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    assert!(
        reasons(&o).iter().any(|r| r.contains("min_tokens_graphed")),
        "{:?}",
        reasons(&o)
    );
    assert!(
        err(&o).contains("execution graphed, from the model config"),
        "{}",
        err(&o)
    );
    let o = explain(&graphed, &["--execution", "eager"]);
    assert!(
        reasons(&o)
            .iter()
            .all(|r| !r.contains("min_tokens_graphed"))
    );
    let o = explain(&bad, &[]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        err(&o).contains("cuda_graph_impl") && err(&o).contains("full_iteration"),
        "{}",
        err(&o)
    );
}
