//! `fp8sel merge-policy --step`: a policy from the step benchmark's oracle verdicts, eager into
//! `min_tokens`, graphed into `min_tokens_graphed`, with the step in provenance.

#![allow(clippy::unwrap_used)]

mod common;

use common::{err, fp8sel, out, root};

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::json;

/// Results in step_bench's format: Llama-3.2-1B at TP 1, the oracle's FP8 groups per count.
/// Eager: fc1/fc2 from 4096, qkv only at 16384 (lost at 8192), proj never. Graphed: every group
/// from 1024 but proj from 2048.
fn results(dir: &Path) -> PathBuf {
    let key =
        |kind: &str, ub: &str| json!({"key": {"kind": kind, "ub_name": ub, "tp": 1}, "scale": 1});
    let row = |execution: &str, tokens: u64, groups: &[&str]| json!({"tokens": tokens, "execution": execution, "modes": {"oracle": {"fp8_groups": groups}}});
    let v = json!({
        "model": "fixtures/models/llama3_2_1b.yaml", "model_name": "llama3_2_1b", "component": "llm",
        "tp": 1, "layer_types": ["dense", "dense"], "grad_accum": 1, "recipe": "Float8BlockScaling()",
        "fp8_recipe": "blockwise", "device": "NVIDIA H200", "te_version": "2.20.2", "complete": true,
        "group_keys": {"qkv": key("layernorm_column", "qkv"), "proj": key("row", "proj"),
                       "fc1": key("layernorm_column", "fc1"), "fc2": key("row", "fc2")},
        "results": [
            row("eager", 1024, &[]), row("eager", 4096, &["fc1", "fc2", "qkv"]),
            row("eager", 8192, &["fc1", "fc2"]), row("eager", 16384, &["fc1", "fc2", "qkv"]),
            row("graphed", 1024, &["qkv", "fc1", "fc2"]), row("graphed", 2048, &["qkv", "proj", "fc1", "fc2"]),
            row("graphed", 4096, &["qkv", "proj", "fc1", "fc2"]),
            {"tokens": 8192, "execution": "graphed", "error": "RuntimeError: capture failed"},
        ],
    });
    let f = dir.join("step.json");
    std::fs::write(&f, serde_json::to_string_pretty(&v).unwrap()).unwrap();
    f
}

fn decide(policy: &str, ub: &str, class: &str, tokens: &str, execution: &str) -> String {
    let o = fp8sel(&[
        "decide",
        "--policy",
        policy,
        "--te-class",
        class,
        "--ub-name",
        ub,
        "--tp",
        "1",
        "--seq-length",
        tokens,
        "--execution",
        execution,
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    out(&o).lines().next().unwrap().to_owned()
}

/// `merge-policy --step` of [`results`] into `dir/policy.json`: the run and the policy's path.
fn merged(dir: &Path) -> (std::process::Output, PathBuf) {
    let f = results(dir);
    let p = dir.join("policy.json");
    let o = fp8sel(&[
        "merge-policy",
        "--step",
        f.to_str().unwrap(),
        "--output",
        p.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    (o, p)
}

#[test]
fn the_step_sets_both_thresholds() {
    let dir = tempfile::tempdir().unwrap();
    let (o, p) = merged(dir.path());
    assert!(
        out(&o).contains("from the step (eager, graphed)"),
        "{}",
        out(&o)
    );
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
    let rule = |kind: &str, ub: &str| v["rules"][kind][ub][0].clone();
    assert_eq!(rule("layernorm_column", "fc1")["min_tokens"], 4096);
    assert_eq!(rule("layernorm_column", "fc1")["min_tokens_graphed"], 1024);
    // qkv lost at 8192 in eager: FP8 only from 16384 there.
    assert_eq!(rule("layernorm_column", "qkv")["min_tokens"], 16384);
    // proj never FP8 eager: the "never" threshold, graphed from 2048.
    assert_eq!(rule("row", "proj")["min_tokens"], 1u64 << 53);
    assert_eq!(rule("row", "proj")["min_tokens_graphed"], 2048);
    let prov = &v["provenance"];
    assert_eq!(prov["timing"], json!(["step-eager", "step-graphed"]));
    assert_eq!(prov["models"], json!(["llama3_2_1b"]));
    assert_eq!(
        prov["step"]["verdicts"]["(kind=row, ub_name=proj, tp=1)"]["graphed"][0],
        json!([1024, false])
    );
    let ps = p.to_str().unwrap();
    assert_eq!(
        decide(ps, "proj", "TERowParallelLinear", "4096", "eager"),
        "bf16"
    );
    assert_eq!(
        decide(ps, "proj", "TERowParallelLinear", "4096", "graphed"),
        "fp8"
    );
    assert_eq!(
        decide(
            ps,
            "qkv",
            "TELayerNormColumnParallelLinear",
            "8192",
            "eager"
        ),
        "bf16"
    );
    // The seed's loader reads it.
    let o = fp8sel(&["validate", ps]);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
}

#[test]
fn results_without_keys_or_oracle_are_refused_with_the_fix() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("old.json");
    std::fs::write(&f, r#"{"results": [{"tokens": 1024, "modes": {}}]}"#).unwrap();
    let p = dir.path().join("p.json");
    let o = fp8sel(&[
        "merge-policy",
        "--step",
        f.to_str().unwrap(),
        "--output",
        p.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        err(&o).contains("no `group_keys`") && err(&o).contains("re-run"),
        "{}",
        err(&o)
    );
    std::fs::write(
        &f,
        r#"{"group_keys": {"fc2": {"key": {"kind": "row", "ub_name": "fc2", "tp": 1}}}, "results": [{"tokens": 1024, "execution": "eager", "modes": {"bf16": {}}}]}"#,
    )
    .unwrap();
    let o = fp8sel(&[
        "merge-policy",
        "--step",
        f.to_str().unwrap(),
        "--output",
        p.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(err(&o).contains("--oracle greedy"), "{}", err(&o));
    assert!(!p.exists());
}

/// The Llama-3.2-1B policy a `gen-policy` run wrote into `dir`, as JSON.
fn llama_policy(dir: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(dir.join("llama3_2_1b.json")).unwrap()).unwrap()
}

/// `fp8sel gen-policy --backend step` for Llama-3.2-1B into `out`, the stand-in worker on the
/// path; and the command line the worker got for the layout `tp`.
fn gen_step(out: &Path, extra: &[&str], tp: u32) -> (std::process::Output, String) {
    gen_step_with(out, extra, tp, &[])
}

/// As `gen_step`, with the stand-in's settings in `env` (`FAKE_STEP_EAGER_FROM`: eager FP8 from
/// that count; `FAKE_STEP_FAIL_TOKENS`: fail when asked for exactly those counts).
fn gen_step_with(
    out: &Path,
    extra: &[&str],
    tp: u32,
    env: &[(&str, &str)],
) -> (std::process::Output, String) {
    let fake = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fake_te"));
    let mut args = vec![
        "gen-policy",
        "--model",
        "fixtures/models/llama3_2_1b.yaml",
        "--backend",
        "step",
        "--out",
        out.to_str().unwrap(),
    ];
    // These tests are the oracle's; the step model's are in step_model.rs.
    if !extra.contains(&"--step-tuner") {
        args.extend(["--step-tuner", "oracle"]);
    }
    args.extend_from_slice(extra);
    let o = Command::new(env!("CARGO_BIN_EXE_fp8sel"))
        .current_dir(root())
        .env("PYTHONPATH", &fake)
        .envs(env.iter().copied())
        .args(&args)
        .output()
        .unwrap();
    let results = out.join(format!("reports/llama3_2_1b_tp{tp}_ep1_etp{tp}_step.json"));
    let argv = std::fs::read_to_string(results)
        .ok()
        .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
        .map(|r| {
            let a = r["argv"].as_array().cloned().unwrap_or_default();
            let a: Vec<String> = a
                .iter()
                .filter_map(|x| x.as_str().map(str::to_owned))
                .collect();
            format!("{} trainer={}", a.join(" "), r["trainer"])
        })
        .unwrap_or_default();
    (o, argv)
}

#[test]
fn gen_policy_backend_step_sweeps_every_layout_through_the_worker() {
    let dir = tempfile::tempdir().unwrap();
    let (o, argv) = gen_step(
        dir.path(),
        &[
            "--tp",
            "1,2",
            "--tokens",
            "1024,2048,4096,8192",
            "--grad-accum",
            "8",
        ],
        2,
    );
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    // The worker's tables stay off our stdout; its progress reaches stderr.
    assert!(!out(&o).contains("tables go to stdout"), "{}", out(&o));
    assert!(err(&o).contains("stand-in step_bench: tp 2"), "{}", err(&o));
    let p = dir.path().join("llama3_2_1b.json");
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
    for (i, tp) in [(0, 1), (1, 2)] {
        let r = &v["rules"]["row"]["fc2"][i];
        assert_eq!(
            (
                r["tp"].as_u64(),
                r["min_tokens"].as_u64(),
                r["min_tokens_graphed"].as_u64()
            ),
            (Some(tp), Some(4096), Some(1024)),
            "{v}"
        );
    }
    assert_eq!(v["rules"]["row"]["proj"][0]["min_tokens"], 1u64 << 53);
    assert!(
        argv.contains(
            "--tokens 1024,2048,4096,8192 --execution eager,graphed --grad-accum 8 --trainer te"
        ),
        "{argv}"
    );
    // The Megatron judge is the worker with --step-trainer megatron, in both executions.
    let (o, argv) = gen_step(dir.path(), &["--step-trainer", "megatron", "--tp", "1"], 1);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    assert!(
        argv.contains("--execution eager,graphed")
            && argv.contains("--trainer megatron --layers 2 --oracle greedy")
            && argv.ends_with("trainer=\"megatron\""),
        "{argv}"
    );
}

#[test]
fn gen_policy_backend_step_times_the_midpoint_where_a_threshold_falls() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = ["--tp", "1", "--tokens", "1024,2048,4096,8192"];
    // FP8 pays from 2800 eager: the sweep says 4096, the midpoint of (2048, 4096) says 2896.
    let (o, _) = gen_step_with(dir.path(), &tokens, 1, &[("FAKE_STEP_EAGER_FROM", "2800")]);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    assert!(
        err(&o).contains("refinement 1, eager at 2896"),
        "{}",
        err(&o)
    );
    let refined = dir
        .path()
        .join("reports/llama3_2_1b_tp1_ep1_etp1_refine1_eager_step.json");
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&refined).unwrap()).unwrap();
    let argv = r["argv"].to_string();
    assert!(
        argv.contains(r#""--tokens","2896","--execution","eager""#),
        "{argv}"
    );
    let policy = |d: &Path| -> serde_json::Value {
        serde_json::from_str(&std::fs::read_to_string(d.join("llama3_2_1b.json")).unwrap()).unwrap()
    };
    let v = policy(dir.path());
    let fc1 = &v["rules"]["layernorm_column"]["fc1"][0];
    // Graphed is FP8 from the sweep's first count: nothing to refine there.
    assert_eq!(
        (
            fc1["min_tokens"].as_u64(),
            fc1["min_tokens_graphed"].as_u64()
        ),
        (Some(2896), Some(1024)),
        "{v}"
    );
    assert!(
        !dir.path()
            .join("reports/llama3_2_1b_tp1_ep1_etp1_refine1_graphed_step.json")
            .exists()
    );
    assert_eq!(
        v["provenance"]["reports"].as_array().map(Vec::len),
        Some(2),
        "{v}"
    );
    // The stderr and fc1's eager threshold after `rounds` rounds.
    let after = |rounds: &str| {
        let d = tempfile::tempdir().unwrap();
        let (o, _) = gen_step_with(
            d.path(),
            &[&tokens[..], &["--refine", rounds]].concat(),
            1,
            &[("FAKE_STEP_EAGER_FROM", "2800")],
        );
        assert_eq!(o.status.code(), Some(0), "{}", err(&o));
        let fc1 = policy(d.path())["rules"]["layernorm_column"]["fc1"][0]["min_tokens"].as_u64();
        (err(&o), fc1)
    };
    // Two rounds bisect again, (2048, 2896) at 2432: BF16 there, so the threshold stays.
    let (e, fc1) = after("2");
    assert!(
        e.contains("refinement 2, eager at 2432") && fc1 == Some(2896),
        "{fc1:?} {e}"
    );
    // --refine 0 is the sweep alone.
    let (e, fc1) = after("0");
    assert!(
        !e.contains("refinement") && fc1 == Some(4096),
        "{fc1:?} {e}"
    );
}

#[test]
fn a_count_out_of_memory_after_others_is_timed_alone_in_a_fresh_worker() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = ["--tp", "1", "--tokens", "1024,2048,4096,8192"];
    let (o, _) = gen_step_with(dir.path(), &tokens, 1, &[("FAKE_STEP_OOM_TOKENS", "4096")]);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    for e in ["eager", "graphed"] {
        assert!(
            err(&o).contains(&format!(
                "{e} at 4096 ran out of memory after other counts; timing it alone"
            )),
            "{}",
            err(&o)
        );
        let alone = format!("reports/llama3_2_1b_tp1_ep1_etp1_alone4096_{e}_step.json");
        assert!(dir.path().join(alone).is_file(), "{}", err(&o));
    }
    assert!(
        err(&o).contains("timed alone in a fresh one"),
        "{}",
        err(&o)
    );
    let v = llama_policy(dir.path());
    // The stand-in's eager FP8 starts at 4096: only the retried count can place it there.
    assert_eq!(v["rules"]["row"]["fc2"][0]["min_tokens"], 4096, "{v}");

    // Out of memory alone too: no verdict there, said, and the policy from the other counts.
    let (o, _) = gen_step_with(
        dir.path(),
        &tokens,
        1,
        &[
            ("FAKE_STEP_OOM_TOKENS", "4096"),
            ("FAKE_STEP_OOM_ALONE", "1"),
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    assert!(
        err(&o).contains("eager at 4096: no verdict, it ran out of memory after other counts and alone too (OutOfMemoryError: CUDA out of memory.)"),
        "{}",
        err(&o)
    );
    let v = llama_policy(dir.path());
    let eager = v["rules"]["row"]["fc2"][0]["min_tokens"].as_u64().unwrap();
    assert!(eager > 4096, "{v}");
    // 4096 is the midpoint of 2048 and 8192: the refinement does not try it a third time.
    assert!(
        !err(&o).contains("refinement 1, eager at 4096"),
        "{}",
        err(&o)
    );
}

#[test]
fn a_step_of_deepseek_v3_builds_a_dense_layer_beside_the_moe_one() {
    let dir = tempfile::tempdir().unwrap();
    let fake = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fake_te"));
    let o = Command::new(env!("CARGO_BIN_EXE_fp8sel"))
        .current_dir(root())
        .env("PYTHONPATH", &fake)
        .args([
            "gen-policy",
            "--model",
            "fixtures/models/deepseek_v3.yaml",
            "--backend",
            "step",
        ])
        .args([
            "--tp",
            "1",
            "--ep",
            "16",
            "--tokens",
            "1024,2048",
            "--refine",
            "0",
            "--out",
        ])
        .arg(dir.path())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    // The step model's worker (the default tuner) got the dense layer beside the MoE one.
    let argv = std::fs::read_to_string(
        dir.path()
            .join("reports/deepseek_v3_tp1_ep16_etp1_inputs_step.json.argv"),
    )
    .unwrap();
    assert!(argv.contains("--layers 2 --dense-layers 1"), "{argv}");
}

#[test]
fn more_dense_layers_than_layers_is_refused_before_any_work() {
    let dir = tempfile::tempdir().unwrap();
    let (o, argv) = gen_step(dir.path(), &["--layers", "2", "--dense-layers", "3"], 1);
    assert_eq!(o.status.code(), Some(2), "{}", err(&o));
    assert!(
        err(&o).contains("--dense-layers 3 is more than --layers 2; fix: at most --layers"),
        "{}",
        err(&o)
    );
    assert!(argv.is_empty(), "no worker ran: {argv}");
}

#[test]
fn a_failed_refinement_keeps_the_sweeps_thresholds_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let env = [
        ("FAKE_STEP_EAGER_FROM", "2800"),
        ("FAKE_STEP_FAIL_TOKENS", "2896"),
    ];
    let (o, _) = gen_step_with(
        dir.path(),
        &["--tp", "1", "--tokens", "1024,2048,4096,8192"],
        1,
        &env,
    );
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    assert!(
        err(&o).contains(
            "refinement 1 (eager) failed, the thresholds keep the counts timed before it"
        ),
        "{}",
        err(&o)
    );
    let v = llama_policy(dir.path());
    assert_eq!(
        v["rules"]["layernorm_column"]["fc1"][0]["min_tokens"], 4096,
        "{v}"
    );
    assert_eq!(
        v["provenance"]["reports"].as_array().map(Vec::len),
        Some(1),
        "{v}"
    );
}

#[test]
fn a_time_limit_stops_the_worker_and_the_policy_comes_from_the_counts_it_finished() {
    let dir = tempfile::tempdir().unwrap();
    // 0.5 s per count, 8 count-executions (eager first, FP8 from its first count): a 2 s limit
    // stops the worker part way, however slowly the interpreter starts.
    let limit = [
        "--tp",
        "1",
        "--tokens",
        "1024,2048,4096,8192",
        "--time-limit",
        "2",
    ];
    let slow = [
        ("FAKE_STEP_SECONDS", "0.5"),
        ("FAKE_STEP_EAGER_FROM", "1024"),
    ];
    let t0 = std::time::Instant::now();
    let (o, _) = gen_step_with(dir.path(), &limit, 1, &slow);
    assert!(t0.elapsed().as_secs_f64() < 3.5, "{:?}", t0.elapsed());
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    let e = err(&o);
    let timed: usize = e
        .split("stopped at the time limit with ")
        .nth(1)
        .and_then(|t| t.split(" of 8 count(s) timed").next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{e}"));
    assert!((1..8).contains(&timed), "{e}");
    // Eager FP8 from 1024 (timed first). Graphed: from 1024 if its first count was reached;
    // else no graphed threshold (a graphed step then follows min_tokens) and no graphed timing.
    let p = dir.path().join("llama3_2_1b.json");
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
    let fc1 = &v["rules"]["layernorm_column"]["fc1"][0];
    assert_eq!(fc1["min_tokens"], 1024, "{v}");
    if timed > 4 {
        assert_eq!(fc1["min_tokens_graphed"], 1024, "{v}");
    } else {
        assert!(fc1.get("min_tokens_graphed").is_none(), "{v}");
        assert!(
            e.contains("(graphed not reached: no threshold of its own"),
            "{e}"
        );
        assert_eq!(v["provenance"]["timing"], json!(["step-eager"]), "{v}");
    }
    // Stopped before the first count: an error with the fix, and no policy.
    let dir = tempfile::tempdir().unwrap();
    let (o, _) = gen_step_with(
        dir.path(),
        &["--tp", "1", "--tokens", "1024", "--time-limit", "1"],
        1,
        &[("FAKE_STEP_SECONDS", "3")],
    );
    assert_eq!(o.status.code(), Some(2), "{}", err(&o));
    assert!(
        err(&o).contains("the time limit ran out before the step finished one token count")
            && err(&o).contains("fix:"),
        "{}",
        err(&o)
    );
    assert!(!dir.path().join("llama3_2_1b.json").exists());
}

#[test]
fn the_megatron_judge_at_tp_2_asks_for_two_gpus_before_any_work() {
    let dir = tempfile::tempdir().unwrap();
    let (o, _) = gen_step(
        dir.path(),
        &["--step-trainer", "megatron", "--tp", "1,2"],
        1,
    );
    // Refused before any layout ran, TP 1's included (the tests run where there is no GPU).
    assert_eq!(o.status.code(), Some(2), "{}", err(&o));
    assert!(
        err(&o).contains("TP 2 needs 2 GPUs") && err(&o).contains("fix: --tp"),
        "{}",
        err(&o)
    );
    assert!(!dir.path().join("reports").read_dir().unwrap().any(|_| true));
}

#[test]
fn check_notes_counts_outside_the_steps_sweep() {
    let dir = tempfile::tempdir().unwrap();
    let (_, p) = merged(dir.path());
    let notes = |tp: &str, tokens: &str, execution: &str| {
        let model = ["--model", "fixtures/models/llama3_2_1b.yaml"];
        let args = [
            "--policy",
            p.to_str().unwrap(),
            "--tp",
            tp,
            "--seq-length",
            tokens,
        ];
        check_notes(
            &[&model[..], &args, &["--execution", execution]].concat(),
            "count the training step timed",
        )
        .1
    };
    // Graphed was timed to 4096 (its 8192 row failed), eager to 16384.
    let n = notes("1", "8192", "graphed");
    assert!(
        n.len() == 1
            && n[0].contains("beyond the largest")
            && n[0].contains("(graphed: 1024-4096)")
            && n[0].contains("--tokens 4096,8192"),
        "{n:?}"
    );
    // Below the sweep's first count, the other end.
    let n = notes("1", "512", "eager");
    assert!(
        n.len() == 1 && n[0].contains("below the smallest") && n[0].contains("--tokens 512,1024"),
        "{n:?}"
    );
    assert!(notes("1", "4096", "graphed").is_empty());
    assert!(notes("1", "8192", "eager").is_empty());
    assert_eq!(notes("1", "32768", "eager").len(), 1);
    // Another TP was not timed by the step: its rules come from elsewhere, no such note.
    assert!(notes("2", "32768", "eager").is_empty());
}

#[test]
fn check_notes_graphed_thresholds_at_tp_above_one_that_no_step_timed() {
    let notes = |tp: &str, ep: &str, execution: &str| {
        let model = ["--model", "fixtures/models/deepseek_v3.yaml"];
        let args = [
            "--policy",
            "policies/deepseek_v3.json",
            "--tp",
            tp,
            "--ep",
            ep,
        ];
        let n = check_notes(
            &[
                &model[..],
                &args,
                &["--seq-length", "4096", "--execution", execution],
            ]
            .concat(),
            "are per-module GPU time, not a training step",
        );
        assert!(n.0, "fp8sel check at TP {tp} EP {ep} {execution} failed");
        n.1
    };
    // The shipped DeepSeek-V3 file: the step timed TP 8 EP 64 graphed, not TP 2.
    let n = notes("2", "16", "graphed");
    assert!(
        n.len() == 1 && n[0].contains("at TP 2") && n[0].contains("--tp 2 --execution graphed"),
        "{n:?}"
    );
    assert!(notes("8", "64", "graphed").is_empty());
    // Eager thresholds are another objective's; TP 1 has no TP to misread.
    assert!(notes("2", "16", "eager").is_empty());
    assert!(notes("1", "16", "graphed").is_empty());
}

/// Whether `fp8sel check ARGS --json` passed, and its notes that contain `containing` (a check
/// that finds missing rules still prints its notes).
fn check_notes(args: &[&str], containing: &str) -> (bool, Vec<String>) {
    let o = fp8sel(&[&["check"][..], args, &["--json"]].concat());
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let notes = v["notes"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|n| n.as_str())
        .filter(|n| n.contains(containing))
        .map(str::to_owned)
        .collect();
    (o.status.success(), notes)
}
