//! Your own model's policy, as a new user makes it: `gen-policy` does the whole job (both
//! thresholds, each with its source), `merge-policy --json` has typed rules, "never" is never shown
//! as a number, and a config with CUDA graphs reads the graphed thresholds unless told otherwise.

#![allow(clippy::unwrap_used)]

mod common;
use common::{err, estimated_policy, fp8sel, out, root, s};
use std::path::Path;
use std::process::{Command, Output};

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
    // (model, its policy files, the layout): a step-model key FP8 in one execution only carries
    // never in the other (Llama-3.2-1B TP 1's proj graphed), beside a VLM's two files and an
    // MoE's layouts.
    let ds = ("deepseek_v3.yaml", &["deepseek_v3.json"][..]);
    let vl = (
        "qwen3_vl_235b_a22b.yaml",
        &["qwen3_vl_235b_a22b.llm.json", "qwen3_vl_235b_a22b.vit.json"][..],
    );
    let cases: [(&str, &[&str], &[&str]); 5] = [
        ("llama3_2_1b.yaml", &["llama3_2_1b.json"], &["--tp", "1"]),
        (vl.0, vl.1, &["--tp", "1", "--ep", "8", "--etp", "1"]),
        (vl.0, vl.1, &["--tp", "4", "--ep", "16", "--etp", "1"]),
        (ds.0, ds.1, &["--tp", "8", "--ep", "64", "--etp", "1"]),
        (ds.0, ds.1, &["--tp", "1", "--ep", "16", "--etp", "1"]),
    ];
    let read = |p: &str| std::fs::read_to_string(root().join("policies").join(p)).unwrap();
    assert!(
        cases
            .iter()
            .any(|c| c.1.iter().any(|p| read(p).contains(never))),
        "the cases need a never threshold"
    );
    let mut shown_never = false;
    for (model, policies, layout) in cases {
        for cmd in ["explain", "check"] {
            for execution in ["eager", "graphed"] {
                for seq in ["1024", "32768"] {
                    let m = format!("fixtures/models/{model}");
                    let p = format!("policies/{}", policies[0]);
                    let mut a = vec![cmd, "--model", &m, "--policy", &p, "--seq-length", seq];
                    let vit = policies.get(1).map(|v| format!("policies/{v}"));
                    if let Some(v) = &vit {
                        a.extend(["--vit-policy", v]);
                    }
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

#[test]
fn gen_policy_never_writes_a_policy_over_the_model_config_it_reads() {
    // A JSON config named as its policy will be (`<name>.json`) in the folder the outputs go
    // to: refused before anything is measured, by the cost model and by the step model alike.
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("llama3_8b.json");
    std::fs::copy(root().join("examples/models/llama3_8b.json"), &config).unwrap();
    let before = std::fs::read(&config).unwrap();
    for backend in ["model", "step"] {
        let fake = root().join("crates/cli/tests/fake_te");
        let o = Command::new(env!("CARGO_BIN_EXE_fp8sel"))
            .current_dir(root())
            .args([
                "gen-policy",
                "--model",
                s(&config),
                "--tp",
                "1",
                "--backend",
                backend,
            ])
            .args(["--out", s(dir.path())])
            .env("PYTHONPATH", &fake)
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(2), "{backend}: {}", err(&o));
        assert!(
            err(&o).contains("same file as the input"),
            "{backend}: {}",
            err(&o)
        );
        assert_eq!(
            std::fs::read(&config).unwrap(),
            before,
            "{backend}: the config was damaged"
        );
        assert!(
            !dir.path().join("reports").exists(),
            "{backend}: measured before refusing"
        );
    }
    // A file given as the folder the outputs go to is refused by name.
    let o = fp8sel(&[
        "gen-policy",
        "--model",
        s(&config),
        "--tp",
        "1",
        "--out",
        s(&config),
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", err(&o));
    assert!(
        err(&o).contains("a file, not a folder") && err(&o).contains("fix:"),
        "{}",
        err(&o)
    );
    assert_eq!(std::fs::read(&config).unwrap(), before);
}

#[test]
fn gen_policy_refuses_zero_sizes_and_counts_and_reads_a_repeated_size_once() {
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("out");
    let run = |extra: &[&str]| {
        let model = ["gen-policy", "--model", "examples/models/llama3_8b.json"];
        fp8sel(&[&model[..], &["--out", s(&out_dir)], extra].concat())
    };
    for bad in [
        &["--tp", "0"][..],
        &["--tp", "1", "--ep", "0"],
        &["--tp", "1", "--etp", "0"],
        &["--tp", "1", "--tokens", "1024,0"],
    ] {
        let o = run(bad);
        assert_eq!(o.status.code(), Some(2), "{bad:?}: {}", err(&o));
        assert!(err(&o).contains("0 is not in 1.."), "{bad:?}: {}", err(&o));
        assert!(
            !dir.path().join("out").exists(),
            "{bad:?}: ran before refusing"
        );
    }
    let o = run(&["--tp", "1,1"]);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("1 report(s)"),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
}

#[test]
fn a_run_says_when_its_policy_folds_in_an_earlier_runs_reports() {
    // The policy is built from every report of the model in the reports folder: a second run
    // at another TP into the same folder keeps the first one's layout, and says so.
    let dir = tempfile::tempdir().unwrap();
    let run = |tp: &str| {
        let model = "examples/models/llama3_8b.json";
        fp8sel(&[
            "gen-policy",
            "--model",
            model,
            "--tp",
            tp,
            "--out",
            s(dir.path()),
        ])
    };
    let o = run("2");
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    assert!(!err(&o).contains("folds in an earlier run"), "{}", err(&o));
    let o = run("1");
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    assert!(
        err(&o).contains("folds in an earlier run's report(s)")
            && err(&o).contains("llama3_8b_tp2.json"),
        "{}",
        err(&o)
    );
    // The same run again: its own report, rewritten, is not an earlier one.
    let o = run("1");
    assert!(
        !err(&o).contains("llama3_8b_tp1.json (delete"),
        "{}",
        err(&o)
    );
}
