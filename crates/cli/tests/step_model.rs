//! `fp8sel gen-policy --backend step` with the step model (its default tuner), end to end with
//! the stand-in worker (`tests/fake_te/adaptive_fp8/bench/step_inputs.py`: a made-up step of
//! known host and GPU times).

#![allow(clippy::unwrap_used)]

mod common;

use common::{err, root};

use std::path::Path;
use std::process::Command;

fn gen_step(out: &Path, extra: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    let mut args = vec!["--backend", "step", "--tp", "1"];
    args.extend_from_slice(extra);
    common::gen_with_stand_ins(out, &args, env)
}

/// An eager run with `extra` flags and the stand-in's `env`, which must succeed: its folder and
/// its stderr.
fn eager_ok(extra: &[&str], env: &[(&str, &str)]) -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let o = gen_step(
        dir.path(),
        &[&["--execution", "eager"], extra].concat(),
        env,
    );
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    (dir, err(&o))
}

fn policy(dir: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(dir.join("llama3_2_1b.json")).unwrap()).unwrap()
}

fn rule<'a>(p: &'a serde_json::Value, kind: &str, ub: &str) -> &'a serde_json::Value {
    &p["rules"][kind][ub][0]
}

/// The re-timing rounds' words in order (`recheck`, `recheck2`, ...): each its own document.
fn rounds() -> impl Iterator<Item = &'static str> {
    ["recheck", "recheck2", "recheck3"].into_iter()
}

#[test]
fn the_step_model_sets_both_thresholds_and_checks_its_plans_in_the_step() {
    let dir = tempfile::tempdir().unwrap();
    let o = gen_step(dir.path(), &[], &[]);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    let e = err(&o);
    assert!(
        e.contains("the step model's inputs") && e.contains("checking the model's plans"),
        "{e}"
    );
    assert!(
        e.contains("stand-in step_inputs: tp 1 check"),
        "the check ran: {e}"
    );
    // Without --check-anchor every calibrated count's all-BF16 or all-FP8 plan is the inputs'.
    assert!(!e.contains("timed again, to measure"), "{e}");
    assert!(e.contains("timed with the inputs"), "{e}");
    assert!(e.contains("held-out step(s) the model was within"), "{e}");
    let p = policy(dir.path());
    let fc1 = rule(&p, "layernorm_column", "fc1");
    let (eager, graphed) = (
        fc1["min_tokens"].as_u64().unwrap(),
        fc1["min_tokens_graphed"].as_u64().unwrap(),
    );
    // The made-up step: eager host-bound until about 3-4k tokens, graphed FP8 from the start.
    assert!(graphed < eager, "{fc1}");
    assert!((2048..=8192).contains(&eager), "{fc1}");
    assert_eq!(graphed, 1024, "{fc1}");
    // proj is slower in FP8 alone, on the GPU and in host time: never FP8, in either execution.
    assert!(
        p["provenance"]["measured_bf16_keys"]
            .to_string()
            .contains("proj"),
        "{}",
        p["provenance"]
    );
    let m = &p["provenance"]["step"]["model"][0];
    assert!(
        m["check"].as_array().unwrap().len() >= 15,
        "every swept count, 3 modes: {m}"
    );
    assert_eq!(m["disagreements"].as_array().unwrap().len(), 0, "{m}");
    assert!(m["held_out_worst_error"].as_f64().unwrap() < 0.03, "{m}");
    assert_eq!(p["provenance"]["eager_source"], "step");
    // The summary beside it, for people.
    let md = std::fs::read_to_string(dir.path().join("llama3_2_1b.md")).unwrap();
    assert!(
        md.contains("the step model's policy") && md.contains("| proj | never | never |"),
        "{md}"
    );
    assert!(md.contains("| eager | 8192 | plan |"), "{md}");
    // ...and its pictures, one per execution checked.
    for ex in ["eager", "graphed"] {
        let svg = dir
            .path()
            .join(format!("plots/llama3_2_1b/step-tp1-{ex}.svg"));
        let svg =
            std::fs::read_to_string(&svg).unwrap_or_else(|e| panic!("{}: {e}", svg.display()));
        assert!(svg.starts_with("<svg") && svg.contains("the policy, measured"));
    }
    // The worker got the layout, the counts and both executions.
    let argv = std::fs::read_to_string(
        dir.path()
            .join("reports/llama3_2_1b_tp1_ep1_etp1_inputs_step.json.argv"),
    )
    .unwrap();
    assert!(
        argv.contains("--tokens 1024,2048,4096,8192,16384 --execution eager,graphed"),
        "{argv}"
    );
    // The check ran in the inputs' worker (served: TE's import paid once), on its own plans.
    let check = std::fs::read_to_string(
        dir.path()
            .join("reports/llama3_2_1b_tp1_ep1_etp1_check_step.json.argv"),
    )
    .unwrap();
    let pid = |a: &str| a.rsplit_once(" pid=").map(|(_, p)| p.to_owned());
    assert!(argv.contains("--serve") && pid(&argv).is_some(), "{argv}");
    assert_eq!(pid(&check), pid(&argv), "{check}");
    assert!(
        check.contains("--check") && check.contains("_check_plans") && !argv.contains("--check"),
        "{check}"
    );
    // check accepts the policy for the model it was made for.
    let c = Command::new(env!("CARGO_BIN_EXE_fp8sel"))
        .current_dir(root())
        .args([
            "check",
            "--model",
            "fixtures/models/llama3_2_1b.yaml",
            "--tp",
            "1",
            "--policy",
        ])
        .arg(dir.path().join("llama3_2_1b.json"))
        .output()
        .unwrap();
    assert_eq!(c.status.code(), Some(0), "{}", err(&c));
}

#[test]
fn a_plan_the_check_measures_slower_than_bf16_is_retimed_recorded_and_kept_out() {
    let (dir, e) = eager_ok(&[], &[("FAKE_STEP_PLAN_SLOW", "16384")]);
    assert!(
        e.contains("disagree beyond 3% and the noise at ")
            && e.contains("eager 16384")
            && e.contains("the model's plan measured slower than BF16 at 1); timing them again"),
        "{e}"
    );
    assert!(
        e.contains("disagree beyond 3%") && e.contains("slower than BF16"),
        "{e}"
    );
    // All-FP8 ran there too: the plan behind it is said, with both ratios.
    assert!(
        e.contains("more than 1% behind all-FP8, beyond both bands")
            && e.contains("eager 16384: 1.200 x BF16 against all-FP8's 0.7"),
        "{e}"
    );
    let p = policy(dir.path());
    let m = &p["provenance"]["step"]["model"][0];
    assert!(!m["disagreements"].as_array().unwrap().is_empty(), "{m}");
    assert_eq!(m["guarded"][0]["tokens"], 16384, "{m}");
    // The plan at 16384 ran fc1 FP8: its eager threshold moved above 16384.
    let fc1 = rule(&p, "layernorm_column", "fc1")["min_tokens"]
        .as_u64()
        .unwrap();
    assert!(fc1 > 16384, "{fc1}");
}

#[test]
fn a_plan_the_check_measures_behind_all_fp8_is_retimed_and_moves_the_crossings_down() {
    let (dir, e) = eager_ok(&[], &[("FAKE_STEP_PLAN_BEHIND", "2048")]);
    assert!(
        e.contains("the model's plan measured behind all-FP8 at ")
            && e.contains(" count(s); timing them again"),
        "{e}"
    );
    assert!(
        e.contains("eager at 2048: the check measured the model's plan behind all-FP8; fc1, qkv, fc2 (BF16 in it, FP8 further up by the model) FP8 from 2048"),
        "{e}"
    );
    let p = policy(dir.path());
    let m = &p["provenance"]["step"]["model"][0];
    let at_2048 = m["lifted"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["tokens"] == 2048)
        .unwrap_or_else(|| panic!("{m}"));
    assert_eq!(
        at_2048["groups"],
        serde_json::json!(["fc1", "qkv", "fc2"]),
        "{m}"
    );
    assert!(m["guarded"].as_array().unwrap().is_empty(), "{m}");
    // fc1, qkv and fc2 (faster alone on the GPU, FP8 from 2-8k in the made-up eager step) from
    // 2048; proj (slower alone in both) stays BF16.
    for (kind, ub) in [
        ("layernorm_column", "fc1"),
        ("layernorm_column", "qkv"),
        ("row", "fc2"),
    ] {
        assert_eq!(
            rule(&p, kind, ub)["min_tokens"],
            2048,
            "{ub}: {}",
            p["rules"]
        );
    }
    assert!(
        p["provenance"]["measured_bf16_keys"]
            .to_string()
            .contains("proj"),
        "{}",
        p["provenance"]
    );
}

#[test]
fn a_numerics_bound_keeps_the_step_models_keys_bf16_and_merge_policy_remakes_it() {
    // The H200 probe of Llama-3.2-1B in blockwise: every module about 0.027; a bound of 0.01
    // keeps every key BF16 whatever the model's gain.
    let probe =
        "docs/device-logs/recipe_plans/gen_L1/gen/reports/llama3_2_1b_blockwise_numerics.json";
    let (dir, e) = eager_ok(&["--numerics", probe, "--max-quant-error", "0.01"], &[]);
    assert!(
        e.contains("kept BF16 by the numerics bound: decoder.layers.mlp.linear_fc1's"),
        "{e}"
    );
    let p = policy(dir.path());
    assert_eq!(p["rules"], serde_json::json!({}), "{}", p["rules"]);
    let n = &p["provenance"]["numerics"];
    assert_eq!(n["max_quant_error"], 0.01, "{n}");
    assert_eq!(
        n["overruled"].as_array().unwrap().len(),
        3,
        "fc1, qkv, fc2 (proj is BF16 by speed): {n}"
    );
    // merge-policy from the saved reports, with the same bound: the same policy.
    let f = |tail: &str| {
        dir.path()
            .join(format!("reports/llama3_2_1b_tp1_ep1_etp1_{tail}_step.json"))
    };
    let remake = |numerics: &str| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_fp8sel"));
        cmd.current_dir(root())
            .args(["merge-policy", "--step-model"])
            .arg(f("inputs"));
        cmd.arg("--step-check").arg(f("check"));
        cmd.args(rounds().map(f).take_while(|p| p.exists()));
        cmd.args([
            "--numerics",
            numerics,
            "--max-quant-error",
            "0.01",
            "--output",
        ])
        .arg(dir.path().join("again.json"))
        .output()
        .unwrap()
    };
    let m = remake(probe);
    assert_eq!(m.status.code(), Some(0), "{}", err(&m));
    let again: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("again.json")).unwrap())
            .unwrap();
    assert_eq!(again["rules"], p["rules"]);
    assert_eq!(again["provenance"]["numerics"], p["provenance"]["numerics"]);
    // A report of another recipe bounds nothing of this one: refused, naming the fix.
    let other = remake(&probe.replace("blockwise", "tensorwise"));
    assert_eq!(other.status.code(), Some(2), "{}", err(&other));
    assert!(
        err(&other).contains("a numerics report of tensorwise") && err(&other).contains("fix:"),
        "{}",
        err(&other)
    );
    let tensorwise = probe.replace("blockwise", "tensorwise");
    let g = gen_step(
        &dir.path().join("tw"),
        &["--execution", "eager", "--numerics", &tensorwise],
        &[],
    );
    assert_ne!(g.status.code(), Some(0));
    assert!(
        err(&g).contains("a report of tensorwise, and this run measures blockwise"),
        "{}",
        err(&g)
    );
    assert!(
        !dir.path().join("tw").exists(),
        "refused before anything was measured"
    );
}

#[test]
fn per_module_flags_given_to_a_step_model_run_are_said_not_dropped() {
    let (_dir, e) = eager_ok(&["--margin", "0.2", "--iters", "7"], &[]);
    assert!(
        e.contains("note: --margin, --iters: per-module settings")
            && e.contains("does not read them"),
        "{e}"
    );
    // Left at their defaults: no such note.
    let (_plain, e) = eager_ok(&[], &[]);
    assert!(!e.contains("per-module settings"), "{e}");
}

#[test]
fn with_the_megatron_trainer_the_policy_is_judged_in_gptmodel_and_a_loss_there_moves_its_keys() {
    let (dir, e) = eager_ok(
        &["--step-trainer", "megatron"],
        &[("FAKE_JUDGE_SLOW", "8192")],
    );
    assert!(
        e.contains("the policy in megatron-core's GPTModel, eager")
            && e.contains("stand-in step_bench: judged"),
        "{e}"
    );
    assert!(
        e.contains("eager at 8192: the Megatron judge measured the policy slower than BF16"),
        "{e}"
    );
    // The judge got the draft policy, no oracle, the Megatron trainer.
    let judged: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(
            dir.path()
                .join("reports/llama3_2_1b_tp1_ep1_etp1_judge_eager_step.json"),
        )
        .unwrap(),
    )
    .unwrap();
    assert_eq!(judged["format"], "adaptive-fp8-step-results");
    let argv = std::fs::read_to_string(
        dir.path()
            .join("reports/llama3_2_1b_tp1_ep1_etp1_judge_eager_step.json.argv"),
    )
    .unwrap();
    assert!(
        argv.contains("--trainer megatron")
            && argv.contains("--oracle none --policy")
            && argv.contains("_draft_step.json"),
        "{argv}"
    );
    let p = policy(dir.path());
    let m = &p["provenance"]["step"]["model"][0];
    assert!(
        m["judged"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["mode"].as_str().unwrap().starts_with("hook:")),
        "{m}"
    );
    // fc1 ran FP8 at 8192 in the judged policy (from 4096): it moved above 8192.
    let fc1 = rule(&p, "layernorm_column", "fc1")["min_tokens"]
        .as_u64()
        .unwrap();
    assert!(fc1 > 8192, "{fc1}");
}

#[test]
fn merge_policy_from_the_saved_reports_remakes_gen_policys_policy() {
    // The shipped policies are made from saved reports (fp8_pipeline::step::saved): the same
    // choice, the check's rows (those the inputs timed included) and the same rules. Calibrated
    // at 512, 2048 and 16384: 2048's eager plan (host-bound) is all-BF16, the inputs' own
    // rounds; 512 is the anchor. The check's steps 2% slower than the inputs' (the whole step
    // moved between them).
    let dir = tempfile::tempdir().unwrap();
    let tokens = ["--tokens", "512,1024,2048,4096,16384", "--check-anchor"];
    let o = gen_step(dir.path(), &tokens, &[("FAKE_STEP_CHECK_DRIFT", "1.02")]);
    assert!(
        err(&o).contains("the smallest calibrated count timed again"),
        "{}",
        err(&o)
    );
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    // 2% apart is a steady machine: no note that the thresholds may not repeat.
    assert!(!err(&o).contains("may not repeat"), "{}", err(&o));
    let reports = dir.path().join("reports");
    let f = |tail: &str| reports.join(format!("llama3_2_1b_tp1_ep1_etp1_{tail}_step.json"));
    let out = dir.path().join("again.json");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_fp8sel"));
    cmd.args(["merge-policy", "--step-model"])
        .arg(f("inputs"))
        .arg("--step-check")
        .arg(f("check"));
    cmd.args(rounds().map(f).take_while(|p| p.exists()));
    let m = cmd.arg("--output").arg(&out).output().unwrap();
    assert_eq!(m.status.code(), Some(0), "{}", err(&m));
    let again: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    let made = policy(dir.path());
    assert_eq!(again["rules"], made["rules"]);
    let checked = |p: &serde_json::Value| p["provenance"]["step"]["model"][0]["check"].clone();
    assert_eq!(checked(&again), checked(&made));
    // Some rows are the inputs' own rounds (a calibrated count's all-BF16 plan), saved in the
    // check document with a note, so the saved path reads the same check; the smallest
    // calibrated count (the anchor) was timed again, so its rows are the check's own.
    let doc = |p: &Path| -> serde_json::Value {
        serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
    };
    let (check, inputs) = (doc(&f("check")), doc(&f("inputs")));
    let same = check["step_times"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| inputs["step_times"].as_array().unwrap().contains(r))
        .count();
    // (eager 2048's all-BF16 row as the inputs wrote it; its all-FP8 row's groups read back in
    // the reader's order)
    assert!(same >= 1, "{same}");
    let anchor: Vec<&serde_json::Value> = check["step_times"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["tokens"] == 512 && r["mode"] != "plan")
        .collect();
    assert!(
        !anchor.is_empty()
            && anchor
                .iter()
                .all(|r| !inputs["step_times"].as_array().unwrap().contains(r)),
        "{anchor:?}"
    );
    let repeats = &made["provenance"]["step"]["model"][0]["repeats"];
    // The anchor, timed again in both executions and modes: the 2% the step moved.
    let at_anchor: Vec<f64> = repeats
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["tokens"] == 512)
        .map(|r| r["change"].as_f64().unwrap())
        .collect();
    assert_eq!(at_anchor.len(), 4, "{repeats}");
    assert!(
        at_anchor.iter().all(|c| (c - 0.02).abs() < 1e-6),
        "{repeats}"
    );
    assert!(
        check["notes"].to_string().contains("timed_in_inputs"),
        "{}",
        check["notes"]
    );
    // A check timed with Python's collector off (--manual-gc) against inputs timed with it on
    // is refused, naming both files, and no policy is written.
    let mut off = check.clone();
    off["manual_gc"] = true.into();
    let off_file = dir.path().join("check_manual_gc.json");
    std::fs::write(&off_file, off.to_string()).unwrap();
    let refused = dir.path().join("refused.json");
    let m = Command::new(env!("CARGO_BIN_EXE_fp8sel"))
        .args(["merge-policy", "--step-model"])
        .arg(f("inputs"))
        .arg("--step-check")
        .arg(&off_file)
        .arg("--output")
        .arg(&refused)
        .output()
        .unwrap();
    assert_eq!(m.status.code(), Some(2), "{}", err(&m));
    let e = err(&m);
    assert!(
        e.contains("check_manual_gc.json") && e.contains("inputs_step.json") && e.contains("fix:"),
        "{e}"
    );
    assert!(!refused.exists());
}

#[test]
fn merge_policy_step_model_refuses_the_per_module_merges_settings() {
    let inputs = "reports/h200/step_model/llama3_2_1b_tp1_ep1_etp1_inputs_step.json";
    let out = tempfile::tempdir().unwrap();
    for flag in [
        &["--margin", "0.2"][..],
        &["--trainer", "eager"],
        &["--shared-key", "all-win"],
    ] {
        let o = Command::new(env!("CARGO_BIN_EXE_fp8sel"))
            .current_dir(root())
            .args(["merge-policy", "--step-model", inputs, "--output"])
            .arg(out.path().join("p.json"))
            .args(flag)
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(2), "{flag:?}: {}", err(&o));
        assert!(
            err(&o).contains("cannot be used with") && err(&o).contains(flag[0]),
            "{}",
            err(&o)
        );
        assert!(!out.path().join("p.json").exists());
    }
}

#[test]
fn the_step_models_flags_on_a_per_module_run_are_refused_or_said() {
    let dir = tempfile::tempdir().unwrap();
    let gen_policy = |backend: &str| {
        Command::new(env!("CARGO_BIN_EXE_fp8sel"))
            .current_dir(root())
            .args([
                "gen-policy",
                "--model",
                "fixtures/models/llama3_2_1b.yaml",
                "--tp",
                "1",
            ])
            .args([
                "--backend",
                backend,
                "--layers",
                "4",
                "--tokens",
                "2048",
                "--out",
            ])
            .arg(dir.path().join(backend))
            .output()
            .unwrap()
    };
    // Asked for a per-module backend: refused before anything is measured.
    let o = gen_policy("model");
    assert_eq!(o.status.code(), Some(2), "{}", err(&o));
    assert!(
        err(&o).contains("--tokens, --layers: the step model's settings")
            && err(&o).contains("fix:"),
        "{}",
        err(&o)
    );
    assert!(!dir.path().join("model").exists());
    // auto on a machine without TE measures per module (here: estimates) and says what it left.
    let o = gen_policy("auto");
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    assert!(
        err(&o).contains("note: --tokens, --layers: the step model's settings, not read"),
        "{}",
        err(&o)
    );
}

#[test]
fn a_model_the_step_cannot_build_is_refused_by_name_before_any_worker() {
    // Qwen3-Next's Gated DeltaNet is not among the step's layer types: `--backend step` says so
    // with the fix before it starts a worker (auto times such a model per module on a GPU).
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("qwen3_next.json");
    std::fs::write(
        &cfg,
        r#"{"architectures": ["Qwen3NextForCausalLM"], "model_type": "qwen3_next", "hidden_size": 2048,
        "intermediate_size": 5120, "num_attention_heads": 16, "num_key_value_heads": 2, "head_dim": 256,
        "num_hidden_layers": 48, "full_attention_interval": 4, "linear_num_value_heads": 32,
        "linear_num_key_heads": 16, "linear_key_head_dim": 128, "linear_value_head_dim": 128,
        "linear_conv_kernel_dim": 4, "num_experts": 512, "num_experts_per_tok": 10,
        "moe_intermediate_size": 512, "shared_expert_intermediate_size": 512, "vocab_size": 151936,
        "hidden_act": "silu", "rms_norm_eps": 1e-06}"#,
    )
    .unwrap();
    let out = dir.path().join("out");
    let o = common::gen_model_with_stand_ins(
        cfg.to_str().unwrap(),
        &out,
        &["--backend", "step", "--tp", "1"],
        &[],
    );
    let e = err(&o);
    assert_eq!(o.status.code(), Some(2), "{e}");
    assert!(
        e.contains("qwen3_next.json")
            && e.contains("Gated DeltaNet")
            && e.contains("--backend cuda or te"),
        "{e}"
    );
    assert!(!out.join("qwen3_next.json").exists(), "no policy written");
    // The plain Llama model is buildable: the same helper finds nothing to refuse.
    let llama = fp8_engine::load_model(root().join("fixtures/models/llama3_2_1b.yaml")).unwrap();
    assert_eq!(fp8_pipeline::step::step_cannot_build(&llama), None);
}
