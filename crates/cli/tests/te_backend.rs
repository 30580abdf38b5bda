//! `fp8sel bench --backend te`: the worker protocol, the report it makes, recompute in
//! provenance and in the merge, and clear errors where TE cannot run. The real worker needs TE
//! and a GPU (scripts/device/te_backend.sh); here a stand-in worker speaks the same protocol.

#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn root() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
}

fn fp8sel(args: &[&str], pythonpath: Option<&Path>) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_fp8sel"));
    c.current_dir(root()).args(args);
    match pythonpath {
        Some(p) => c.env("PYTHONPATH", p),
        None => c.env("PYTHONPATH", "/nonexistent"),
    };
    c.output().unwrap()
}

/// Exit 0, or the command's stderr in the failure message.
fn assert_ok(o: &Output) {
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

fn fake() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fake_te"))
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

const SWEEP: [&str; 10] = [
    "bench",
    "--backend",
    "te",
    "--quiet",
    "--model",
    "fixtures/models/llama3_2_1b.yaml",
    "--tp",
    "1",
    "--shape-sweep",
    "1024x1,4096x1",
];

#[test]
fn te_reports_carry_the_backend_the_version_and_recompute() {
    let dir = tempfile::tempdir().unwrap();
    let plain = dir.path().join("plain.json");
    let o = fp8sel(
        &[&SWEEP[..], &["--report", s(&plain)]].concat(),
        Some(&fake()),
    );
    assert_ok(&o);
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&plain).unwrap()).unwrap();
    assert_eq!(r["provenance"]["timing"], "te-eager");
    assert_eq!(r["provenance"]["te_version"], "9.9.9");
    assert_eq!(r["provenance"]["device"]["name"], "Fake H200");
    assert_eq!(r["provenance"]["recompute"], false);
    let p = &r["points"][0];
    assert_eq!(p["status"], "ok");
    assert!(p["bf16"]["gpu_total_ms"]["median"].as_f64().unwrap() > 0.0);
    assert_eq!(r["points"].as_array().unwrap().len(), 8);
    // With recompute: recorded, and it does not merge with the plain one.
    let rc = dir.path().join("rc.json");
    let o = fp8sel(
        &[&SWEEP[..], &["--recompute", "--report", s(&rc)]].concat(),
        Some(&fake()),
    );
    assert_ok(&o);
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&rc).unwrap()).unwrap();
    assert_eq!(r["provenance"]["recompute"], true);
    let out = dir.path().join("p.json");
    let o = fp8sel(
        &[
            "merge-policy",
            "--reports",
            s(&plain),
            s(&rc),
            "--output",
            s(&out),
        ],
        None,
    );
    assert_eq!(o.status.code(), Some(2));
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(
        e.contains("disagree on recompute") && e.contains("--allow-mixed"),
        "{e}"
    );
    // The reference tool's variable works too.
    let o = Command::new(env!("CARGO_BIN_EXE_fp8sel"))
        .current_dir(root())
        .args([&SWEEP[..], &["--report", s(&rc)]].concat())
        .env("PYTHONPATH", fake())
        .env("TE_LAYER_PERF_RECOMPUTE", "true")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0));
}

#[test]
fn where_te_cannot_run_the_error_says_why_and_how() {
    let dir = tempfile::tempdir().unwrap();
    let r = dir.path().join("r.json");
    // No adaptive_fp8 (or no torch) for this interpreter.
    let o = fp8sel(&[&SWEEP[..], &["--report", s(&r)]].concat(), None);
    assert_eq!(o.status.code(), Some(2));
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(
        e.contains("TE worker could not start") && e.contains("fix:"),
        "{e}"
    );
    let o = fp8sel(
        &[
            &SWEEP[..],
            &["--python", "/nonexistent/python", "--report", s(&r)],
        ]
        .concat(),
        None,
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--python"));
    // Recompute is a TE-backend measurement for now.
    let o = fp8sel(
        &[
            "bench",
            "--backend",
            "model",
            "--recompute",
            "--model",
            "fixtures/models/llama3_2_1b.yaml",
            "--report",
            s(&r),
        ],
        None,
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--backend te"));
    assert!(!r.exists());
}

#[test]
fn merge_policy_thresholds_the_trainers_figure() {
    let dir = tempfile::tempdir().unwrap();
    let te = dir.path().join("te.json");
    let o = fp8sel(&[&SWEEP[..], &["--report", s(&te)]].concat(), Some(&fake()));
    assert_eq!(o.status.code(), Some(0));
    let merge = |trainer: &str, report: &Path| {
        let out = dir.path().join(format!("p_{trainer}.json"));
        let o = fp8sel(
            &[
                "merge-policy",
                "--trainer",
                trainer,
                "--reports",
                s(report),
                "--output",
                s(&out),
            ],
            None,
        );
        (o, out)
    };
    let (o, eager) = merge("eager", &te);
    assert_ok(&o);
    let (o, graphed) = merge("graphed", &te);
    assert_ok(&o);
    let read = |p: &Path| -> serde_json::Value {
        serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
    };
    assert_eq!(read(&eager)["provenance"]["trainer"], "eager");
    assert_eq!(read(&graphed)["provenance"]["trainer"], "graphed");
    // The stand-in's GPU figures (half the eager ones, same ratio) give the same rules here; the
    // files differ only in what they say they are for.
    assert_eq!(read(&eager)["rules"], read(&graphed)["rules"]);
    // A GPU-time report cannot make an eager policy.
    let model = dir.path().join("m.json");
    let o = fp8sel(
        &[
            "bench",
            "--backend",
            "model",
            "--quiet",
            "--model",
            "fixtures/models/llama3_2_1b.yaml",
            "--shape-sweep",
            "1024x1",
            "--report",
            s(&model),
        ],
        None,
    );
    assert_eq!(o.status.code(), Some(0));
    let (o, _) = merge("eager", &model);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("needs eager step times"));
}

#[test]
fn gen_policy_runs_the_whole_job_through_te_into_the_default_file() {
    let dir = tempfile::tempdir().unwrap();
    let (pol, rep) = (dir.path().join("policies"), dir.path().join("reports"));
    let run = |trainer: &[&str]| {
        let mut args = vec!["gen-policy", "--backend", "te", "--quiet"];
        args.extend_from_slice(trainer);
        args.extend_from_slice(&[
            "--model",
            "fixtures/models/llama3_2_1b.yaml",
            "--tp",
            "1",
            "--policies-dir",
            s(&pol),
            "--reports-dir",
            s(&rep),
        ]);
        let o = fp8sel(&args, Some(&fake()));
        assert_ok(&o);
        let text = std::fs::read_to_string(pol.join("llama3_2_1b.json")).unwrap();
        serde_json::from_str::<serde_json::Value>(&text).unwrap()
    };
    // One execution asked for: that objective alone.
    let p = run(&["--trainer", "eager"]);
    assert_eq!(p["provenance"]["trainer"], "eager");
    assert_eq!(p["provenance"]["device"][0], "Fake H200", "{p}");
    // The policy and its summary say which backend and objective made them.
    assert_eq!(p["provenance"]["timing"], serde_json::json!(["te-eager"]));
    let md = std::fs::read_to_string(pol.join("llama3_2_1b.md")).unwrap();
    assert!(
        md.contains("through Transformer Engine") && md.contains("for an eager trainer"),
        "{md}"
    );
    // None asked for: one file for both, TE's eager times as min_tokens, its GPU times as
    // min_tokens_graphed, each named in provenance and in the summary's table.
    let p = run(&[]);
    assert_eq!(p["provenance"]["trainer"], "eager+graphed", "{p}");
    for s in p["provenance"]["sources"].as_array().unwrap() {
        assert_eq!(s["eager"], "eager_step", "{p}");
        assert_eq!(s["graphed"], "gpu_time", "{p}");
    }
    assert!(!pol.join("te").exists());
    let md = std::fs::read_to_string(pol.join("llama3_2_1b.md")).unwrap();
    assert!(md.contains("## Thresholds by execution"), "{md}");
    let reports: Vec<_> = std::fs::read_dir(rep).unwrap().collect();
    assert_eq!(reports.len(), 1);
    let gpu_dir = reports[0].as_ref().unwrap().path();
    assert!(gpu_dir.join("te/llama3_2_1b_tp1.json").is_file());
    // Recompute is a TE measurement; asked of another backend it is refused with the fix.
    let o = fp8sel(
        &[
            "gen-policy",
            "--backend",
            "model",
            "--recompute",
            "--model",
            "fixtures/models/llama3_2_1b.yaml",
            "--out",
            s(&dir.path().join("x")),
        ],
        None,
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--backend te"));
    assert!(!dir.path().join("x").exists());
}

/// `--tp-comm` with a stand-in for torchrun + te_tp (`fake_te/fake_torchrun.sh`).
fn tp_comm(dir: &Path, extra_env: &[(&str, &str)], report_src: &Path) -> (Output, String) {
    let argv = dir.join("argv.txt");
    let out = dir.join("tp2.json");
    let mut c = Command::new(env!("CARGO_BIN_EXE_fp8sel"));
    c.current_dir(root()).args([
        "bench",
        "--backend",
        "te",
        "--tp-comm",
        "--model",
        "fixtures/models/qwen2_5_72b.yaml",
        "--tp",
        "2",
        "--shape-sweep",
        "1024x1,4096x1",
        "--python",
        s(&fake().join("fake_torchrun.sh")),
        "--report",
        s(&out),
    ]);
    c.env("FAKE_ARGV", &argv).env("FAKE_REPORT", report_src);
    for (k, v) in extra_env {
        c.env(k, v);
    }
    let o = c.output().unwrap();
    (o, std::fs::read_to_string(&argv).unwrap_or_default())
}

#[test]
fn tp_comm_launches_torchrun_on_the_dense_modules_and_checks_what_comes_back() {
    let dir = tempfile::tempdir().unwrap();
    let (o, argv) = tp_comm(dir.path(), &[], &fake().join("te_tp_report.json"));
    assert_ok(&o);
    assert!(
        argv.contains(
            "-m torch.distributed.run --standalone --nproc-per-node=2 -m adaptive_fp8.bench.te_tp"
        ) && argv.contains("--tokens 1024,4096")
            && argv.contains("--recipe blockwise"),
        "{argv}"
    );
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("tp2.json")).unwrap())
            .unwrap();
    assert_eq!(r["provenance"]["tp_comm"], true);
    // The launcher failed: exit 2, said so, pointing at its messages.
    let (o, _) = tp_comm(
        dir.path(),
        &[("FAKE_EXIT", "1")],
        &fake().join("te_tp_report.json"),
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("adaptive_fp8.bench.te_tp` failed"));
    // What came back is a one-GPU report: refused, not taken for a TP-communication one.
    let plain = root().join("reports/h200/te/te_qwen2_5_72b_tp2.json");
    let (o, _) = tp_comm(dir.path(), &[], &plain);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("not marked tp_comm"));
}

/// The one-GPU mode at TP > 1 says what it leaves out and how to measure it; at TP 1 it has
/// nothing to say, and --quiet silences it.
#[test]
fn a_one_rank_sweep_at_tp_above_one_notes_the_missing_communication() {
    let dir = tempfile::tempdir().unwrap();
    let loud: Vec<&str> = SWEEP.iter().copied().filter(|a| *a != "--quiet").collect();
    for (tp, quiet, want) in [("2", false, true), ("1", false, false), ("2", true, false)] {
        let out = dir.path().join(format!("r{tp}{quiet}.json"));
        let mut args = loud.clone();
        let i = args.iter().position(|a| *a == "--tp").unwrap();
        args[i + 1] = tp;
        args.extend(["--report", s(&out)]);
        if quiet {
            args.push("--quiet");
        }
        let o = fp8sel(&args, Some(&fake()));
        assert_ok(&o);
        let e = String::from_utf8_lossy(&o.stderr);
        assert_eq!(
            e.contains("note: at TP 2 the times are one rank's GEMMs alone")
                && e.contains("--tp-comm --tp 2"),
            want,
            "TP {tp} quiet {quiet}: {e}"
        );
    }
}

#[test]
fn with_out_and_no_reports_dir_the_measured_reports_go_beside_the_policies() {
    // Everything under --out: the reports too, and no earlier report of the working directory
    // (here the repository's own reports/h200/te/) is read or overwritten.
    let dir = tempfile::tempdir().unwrap();
    let shipped = root().join("reports/h200/te/llama3_2_1b_tp1.json");
    let before = std::fs::read(&shipped).ok();
    let o = fp8sel(
        &[
            "gen-policy",
            "--backend",
            "te",
            "--quiet",
            "--model",
            "fixtures/models/llama3_2_1b.yaml",
            "--tp",
            "1",
            "--out",
            s(dir.path()),
        ],
        Some(&fake()),
    );
    assert_ok(&o);
    assert!(dir.path().join("llama3_2_1b.json").is_file());
    assert!(
        dir.path()
            .join("reports/h200/te/llama3_2_1b_tp1.json")
            .is_file()
    );
    assert_eq!(std::fs::read(&shipped).ok(), before);
    let p: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join("llama3_2_1b.json")).unwrap(),
    )
    .unwrap();
    // This run's report alone (the working directory's reports/h200/te/ holds another
    // llama3_2_1b report, from another device: folded in, it would refuse the mix).
    assert_eq!(
        p["provenance"]["reports"],
        serde_json::json!(["reports/h200/te/llama3_2_1b_tp1.json"])
    );
}
