//! What a new user meets: estimates labelled everywhere, warnings for a policy of another model
//! or a defaulted top-k, the commands that fill a gap, Megatron's flag names, one default for the
//! micro-batch size, typed JSON, a quiet --quiet, rank-0 tables, and no silent 1/N Slurm sweep
//! (your own model's policy: `own_model_policy.rs`).

#![allow(clippy::unwrap_used)]

mod common;
use common::{err, estimated_policy, fp8sel, fp8sel_env, out, root, s};

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
        "fc2",
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
    // gen-policy says it too, before the work (on the GPU, before minutes of measuring).
    let pol = dir.path().join("pol");
    let o = fp8sel(&[
        "gen-policy",
        "--model",
        s(&dsa),
        "--backend",
        "model",
        "--tp",
        "1",
        "--out",
        s(&pol),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    let said = err(&o);
    let warned = said
        .find("warning: interp_moe: llm: attention variant dsa")
        .unwrap_or_else(|| panic!("{said}"));
    assert!(warned < said.find("point(s) to measure").unwrap(), "{said}");
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

/// Every command's `--help` reads as written: no sentence is broken by the terminal's wrap into
/// a long line and a stub (a doc comment line past clap's width leaves a few words alone).
#[test]
fn help_text_is_never_wrapped_into_stubs() {
    let top = out(&fp8sel(&["--help"]));
    let commands: Vec<&str> = top
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .collect();
    assert!(commands.len() > 5, "{top}");
    for c in commands {
        let help = out(&fp8sel(&[c, "--help"]));
        let lines: Vec<&str> = help.lines().collect();
        for w in lines.windows(3) {
            let (long, stub, next) = (w[0], w[1].trim(), w[2].trim());
            let continues = !stub.is_empty() && !next.is_empty() && !next.starts_with('-');
            assert!(
                !(long.len() >= 90 && continues && stub.len() < 20 && !long.contains("Usage:")),
                "fp8sel {c} --help: a stub line after a wrapped one:\n{long}\n{stub}\n{next}"
            );
        }
    }
}
