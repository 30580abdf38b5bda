//! `fp8sel gen-policy --backend step --step-tuner oracle`: every layout swept through the step
//! worker (a stand-in here), midpoints timed where a threshold falls, a count out of memory timed
//! alone, refusals before any work, and a time limit that keeps the counts finished.

#![allow(clippy::unwrap_used)]

mod common;

use common::{err, out};

use std::path::Path;

use serde_json::json;

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
    let mut args = vec!["--backend", "step"];
    // These tests are the oracle's; the step model's are in step_model.rs.
    if !extra.contains(&"--step-tuner") {
        args.extend(["--step-tuner", "oracle"]);
    }
    args.extend_from_slice(extra);
    let o = common::gen_with_stand_ins(out, &args, env);
    let results = out.join(format!("reports/llama3_2_1b_tp{tp}_ep1_etp{tp}_step.json"));
    // The stand-in records its command line beside the results (`<json>.argv`).
    let argv = std::fs::read_to_string(results.with_extension("json.argv")).unwrap_or_default();
    let argv = std::fs::read_to_string(&results)
        .ok()
        .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
        .map(|r| format!("{argv} trainer={}", r["trainer"]))
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
    let argv = std::fs::read_to_string(refined.with_extension("json.argv")).unwrap();
    assert!(argv.contains("--tokens 2896 --execution eager"), "{argv}");
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
    let o = common::gen_model_with_stand_ins(
        "fixtures/models/deepseek_v3.yaml",
        dir.path(),
        &[
            "--backend",
            "step",
            "--tp",
            "1",
            "--ep",
            "16",
            "--tokens",
            "1024,2048",
            "--refine",
            "0",
        ],
        &[],
    );
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
fn a_count_off_the_layouts_token_step_is_refused_before_any_work() {
    // At TP 8 with sequence parallelism each rank holds an eighth of the count: 1000 tokens is
    // 125 rows, which TE's FP8 refuses. Both tuners refuse it before a worker runs.
    for tuner in ["oracle", "model"] {
        let dir = tempfile::tempdir().unwrap();
        let (o, argv) = gen_step(
            dir.path(),
            &["--tp", "8", "--tokens", "1000,2048", "--step-tuner", tuner],
            8,
        );
        assert_eq!(o.status.code(), Some(2), "{}", err(&o));
        assert!(
            err(&o).contains("1000")
                && err(&o).contains("multiples of 128")
                && err(&o).contains("1024"),
            "{}",
            err(&o)
        );
        assert!(argv.is_empty(), "no worker ran: {argv}");
    }
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
fn manual_gc_reaches_both_workers_and_is_said_unread_by_a_per_module_run() {
    // The oracle's worker (step_bench) and the step model's (step_inputs) time with Python's
    // collector off, as the trainer that runs with Megatron-LM's --manual-gc.
    let dir = tempfile::tempdir().unwrap();
    let (o, argv) = gen_step(
        dir.path(),
        &[
            "--tp",
            "1",
            "--tokens",
            "1024,2048",
            "--refine",
            "0",
            "--manual-gc",
        ],
        1,
    );
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    assert!(argv.contains("--manual-gc"), "{argv}");
    let dir = tempfile::tempdir().unwrap();
    let (o, _) = gen_step(
        dir.path(),
        &[
            "--step-tuner",
            "model",
            "--tp",
            "1",
            "--tokens",
            "1024,2048",
            "--manual-gc",
        ],
        1,
    );
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    let inputs = std::fs::read_to_string(
        dir.path()
            .join("reports/llama3_2_1b_tp1_ep1_etp1_inputs_step.json.argv"),
    )
    .unwrap();
    assert!(inputs.contains("--manual-gc"), "{inputs}");
    let dir = tempfile::tempdir().unwrap();
    let o = common::gen_with_stand_ins(
        dir.path(),
        &["--backend", "model", "--tp", "1", "--manual-gc"],
        &[],
    );
    assert_eq!(o.status.code(), Some(2), "{}", err(&o));
    assert!(err(&o).contains("--manual-gc"), "{}", err(&o));
}
