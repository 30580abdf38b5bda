//! `fp8sel explain` and `fp8sel check` end to end.

#![allow(clippy::unwrap_used)]

mod common;
use common::{fp8sel, root};

/// The shipped Llama-3.2-1B with its policy at TP 1, 4096 tokens: a dense model's flags.
const LLAMA_1B_TP1: [&str; 8] = [
    "--model",
    "fixtures/models/llama3_2_1b.yaml",
    "--policy",
    "policies/llama3_2_1b.json",
    "--tp",
    "1",
    "--seq-length",
    "4096",
];

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn explain_table_and_summary() {
    let o = fp8sel(&[
        "explain",
        "--model",
        "fixtures/models/qwen2_5_72b.yaml",
        "--policy",
        "fixtures/policies/test_mixed.json",
        "--tp",
        "8",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let out = text(&o.stdout);
    assert!(out.starts_with("module "), "{out}");
    assert!(
        out.contains("decoder.layers.mlp.linear_fc2") && out.contains("3696 x 8192"),
        "{out}"
    );
    assert!(
        out.contains("tokens (llm): 4096 (seq 4096 x mbs 1)"),
        "{out}"
    );
    assert!(out.contains("fp8: 80 of 320 module instances"), "{out}");
}

#[test]
fn explain_json_has_every_field() {
    let o = fp8sel(&[
        "explain",
        "--model",
        "fixtures/models/deepseek_v3.yaml",
        "--policy",
        "fixtures/policies/test_mixed.json",
        "--tp",
        "8",
        "--ep",
        "32",
        "--etp",
        "1",
        "--seq-length",
        "8192",
        "--micro-batch-size",
        "1",
        "--json",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let modules = v["modules"].as_array().unwrap();
    assert_eq!(modules.len(), 11);
    for m in modules {
        for k in [
            "name",
            "component",
            "layers",
            "te_class",
            "module_kind",
            "ub_name",
            "in_features",
            "out_features",
            "num_gemms",
            "num_tokens",
            "use_fp8",
            "reason",
        ] {
            assert!(m.get(k).is_some(), "missing {k} in {m}");
        }
    }
    let experts = modules
        .iter()
        .find(|m| m["module_kind"] == "column_grouped")
        .unwrap();
    assert_eq!(experts["num_gemms"], 8);
    assert_eq!(experts["num_tokens"], 65536);
    assert_eq!(experts["use_fp8"], true);
    assert!(v["summary"]["fp8_flop_share"].as_f64().unwrap() > 0.0);
}

#[test]
fn config_policy_paths_resolve_against_root() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("policies")).unwrap();
    std::fs::copy(
        root().join("fixtures/policies/test_mixed.json"),
        dir.path().join("policies/qwen3_vl_235b_a22b.llm.json"),
    )
    .unwrap();
    std::fs::copy(
        root().join("fixtures/policies/test_vit.json"),
        dir.path().join("policies/qwen3_vl_235b_a22b.vit.json"),
    )
    .unwrap();
    let o = fp8sel(&[
        "explain",
        "--model",
        "fixtures/models/sel/qwen3_vl_235b_a22b_fp8_sel.yaml",
        "--config-root",
        "fixtures/models",
        "--root",
        dir.path().to_str().unwrap(),
        "--json",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let vit_fc1 = v["modules"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["component"] == "vit" && m["ub_name"] == "fc1")
        .unwrap();
    // fp8_dynamic_num_tokens: 16384 from the config's image_encoder section.
    assert_eq!(vit_fc1["num_tokens"], 16384);
    assert_eq!(vit_fc1["use_fp8"], true);
    assert!(
        v["summary"]["components_without_policy"]
            .as_array()
            .unwrap()
            .is_empty()
    );
    // A wrong root names the field the path came from.
    let o = fp8sel(&[
        "explain",
        "--model",
        "fixtures/models/sel/qwen3_vl_235b_a22b_fp8_sel.yaml",
        "--config-root",
        "fixtures/models",
        "--root",
        "/nonexistent",
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        text(&o.stderr).contains("fp8_dynamic_policy_path"),
        "{}",
        text(&o.stderr)
    );
}

#[test]
fn check_exits_1_and_lists_gaps() {
    let ok = fp8sel(&[
        "check",
        "--model",
        "fixtures/models/qwen2_5_72b.yaml",
        "--policy",
        "fixtures/policies/test_mixed.json",
        "--tp",
        "1",
    ]);
    assert_eq!(ok.status.code(), Some(0), "{}", text(&ok.stdout));
    assert!(text(&ok.stdout).starts_with("ok: the policy covers every module"));
    let gap = fp8sel(&[
        "check",
        "--model",
        "fixtures/models/qwen2_5_72b.yaml",
        "--policy",
        "fixtures/policies/test_mixed.json",
        "--tp",
        "4",
    ]);
    assert_eq!(gap.status.code(), Some(1));
    let out = text(&gap.stdout);
    assert!(
        out.contains("missing rule llm (kind=row, ub_name=fc2, tp=4)"),
        "{out}"
    );
    // No policy at all is a gap too.
    let none = fp8sel(&[
        "check",
        "--model",
        "fixtures/models/qwen2_5_72b.yaml",
        "--tp",
        "1",
    ]);
    assert_eq!(none.status.code(), Some(1));
    assert!(text(&none.stdout).contains("no policy for the llm component"));
}

#[test]
fn bad_model_inputs_exit_2() {
    for args in [
        vec![
            "explain",
            "--model",
            "/no/such.yaml",
            "--tp",
            "1",
            "--seq-length",
            "4",
        ],
        vec![
            "explain",
            "--model",
            "fixtures/models/qwen2_5_72b.yaml",
            "--tp",
            "3",
        ],
        vec!["explain", "--model", "fixtures/models/parts/qwen3_vit.yaml"],
        vec![
            "check",
            "--model",
            "fixtures/models/qwen2_5_72b.yaml",
            "--policy",
            "fixtures/models/qwen2_5_72b.yaml",
        ],
    ] {
        let o = fp8sel(&args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", text(&o.stderr));
        assert!(!text(&o.stderr).contains("panicked"));
    }
}

/// A policy whose rules at the layout's TP > 1 were timed one rank alone gets a note on how to
/// measure the communication; one made over a TP group of that size (the default policy's eager
/// thresholds at TP 2) and TP 1 (nothing to communicate) do not.
#[test]
fn check_notes_rules_timed_one_rank_alone_at_tp_above_one() {
    let run = |policy: &str, tp: &str| {
        fp8sel(&[
            "check",
            "--model",
            "fixtures/models/qwen2_5_72b.yaml",
            "--policy",
            policy,
            "--tp",
            tp,
            "--seq-length",
            "4096",
        ])
    };
    let o = run("policies/qwen2_5_72b.json", "8");
    assert_eq!(o.status.code(), Some(0));
    let e = text(&o.stderr);
    assert!(
        e.contains("note: at TP 8 the times are one rank's GEMMs alone")
            && e.contains("--tp-comm --tp 8"),
        "{e}"
    );
    // At TP 1 there is no TP group to leave out; the default policy's TP 2 rules are the step
    // model's on one GPU (one rank's shapes), and the note says so for an eager step too.
    let o = run("policies/qwen2_5_72b.json", "1");
    assert_eq!(o.status.code(), Some(0));
    // (The epsilon-guard note may stand there: no FP8_QUANT_* variable is set here.)
    assert!(!text(&o.stderr).contains("one rank's GEMMs alone"));
    let o = run("policies/qwen2_5_72b.json", "2");
    assert_eq!(o.status.code(), Some(0));
    assert!(text(&o.stderr).contains("at TP 2 the times are one rank's GEMMs alone"));
    let o = fp8sel(&[
        "check",
        "--model",
        "fixtures/models/qwen2_5_72b.yaml",
        "--policy",
        "policies/qwen2_5_72b.json",
        "--tp",
        "2",
        "--seq-length",
        "4096",
        "--execution",
        "graphed",
    ]);
    assert_eq!(o.status.code(), Some(0));
    assert!(
        text(&o.stderr).contains("at TP 2 the times are one rank's GEMMs alone"),
        "{}",
        text(&o.stderr)
    );
    // JSON carries the notes too.
    let o = fp8sel(&[
        "check",
        "--model",
        "fixtures/models/qwen2_5_72b.yaml",
        "--policy",
        "policies/qwen2_5_72b.json",
        "--tp",
        "4",
        "--json",
    ]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(v["notes"][0].as_str().unwrap().contains("at TP 4"), "{v}");
}

#[test]
fn vision_flags_on_a_language_model_are_refused_not_ignored() {
    let base = LLAMA_1B_TP1;
    for cmd in ["explain", "check"] {
        let o = fp8sel(
            &[
                &[cmd][..],
                &base,
                &["--vit-policy", "policies/qwen3_vl_235b_a22b.vit.json"],
            ]
            .concat(),
        );
        assert_eq!(o.status.code(), Some(2), "{cmd}: {}", text(&o.stderr));
        assert!(
            text(&o.stderr).contains("--vit-policy: the model has no vision encoder"),
            "{}",
            text(&o.stderr)
        );
        let o = fp8sel(&[&[cmd][..], &base, &["--vit-num-tokens", "1024"]].concat());
        assert_eq!(o.status.code(), Some(2), "{cmd}: {}", text(&o.stderr));
        assert!(
            text(&o.stderr).contains(
                "--vit-num-tokens: fixtures/models/llama3_2_1b.yaml has no vision encoder"
            ),
            "{}",
            text(&o.stderr)
        );
    }
    // A VLM takes both.
    let vlm = fp8sel(&[
        "explain",
        "--model",
        "fixtures/models/qwen3_vl_235b_a22b.yaml",
        "--policy",
        "policies/qwen3_vl_235b_a22b.llm.json",
        "--vit-policy",
        "policies/qwen3_vl_235b_a22b.vit.json",
        "--tp",
        "1",
        "--ep",
        "8",
        "--seq-length",
        "4096",
        "--vit-num-tokens",
        "2048",
    ]);
    assert!(
        !text(&vlm.stderr).contains("no vision encoder"),
        "{}",
        text(&vlm.stderr)
    );
}

#[test]
fn a_vlms_policy_named_as_one_file_points_to_the_two_gen_policy_wrote() {
    // The README's `--policy my-policies/<model>.json`, for a VLM: gen-policy wrote
    // <model>.llm.json and <model>.vit.json; the error names both and the flags.
    let args = |line: &'static str| line.split(' ').collect::<Vec<_>>();
    let o = fp8sel(&args(
        "check --model fixtures/models/qwen3_vl_235b_a22b.yaml --policy policies/qwen3_vl_235b_a22b.json --tp 1 --ep 8 --seq-length 4096",
    ));
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
    assert!(
        text(&o.stderr).contains(
            "pass --policy policies/qwen3_vl_235b_a22b.llm.json --vit-policy policies/qwen3_vl_235b_a22b.vit.json"
        ),
        "{}",
        text(&o.stderr)
    );
    // A missing file with no such pair beside it is the plain error.
    let o = fp8sel(&args(
        "check --model fixtures/models/llama3_2_1b.yaml --policy policies/nothing_here.json --seq-length 4096",
    ));
    assert_eq!(o.status.code(), Some(2));
    assert!(
        !text(&o.stderr).contains("--vit-policy"),
        "{}",
        text(&o.stderr)
    );
}

#[test]
fn expert_parallelism_on_a_dense_model_is_refused_with_the_fix_and_writes_nothing() {
    let out = std::env::temp_dir().join(format!("fp8sel-dense-ep-{}.yaml", std::process::id()));
    for cmd in ["check", "explain", "te-precision-config"] {
        let o_path = out.to_str().unwrap().to_owned();
        let output: &[&str] = if cmd == "te-precision-config" {
            &["--output", &o_path]
        } else {
            &[]
        };
        let args = [&[cmd][..], &LLAMA_1B_TP1, &["--ep", "8"], output].concat();
        let o = fp8sel(&args);
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{cmd}: {err}");
        assert!(
            err.contains("ep = 8 on a model without experts") && err.contains("fix: ep 1"),
            "{cmd}: {err}"
        );
    }
    assert!(!out.exists(), "te-precision-config wrote {}", out.display());
}
