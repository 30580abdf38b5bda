//! Hostile and careless input: every case here hurt the user's machine or files before (ran out
//! of memory, hung, destroyed an input, replaced a device node, left temp files) or silently
//! answered from bad data. Each must now fail fast with a message that names the file, the field
//! and the fix, and leave every file as it was. None needs more than a few seconds or 1 GB.

#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

fn root() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
}

fn cmd(args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_fp8sel"));
    c.current_dir(root()).args(args);
    c
}

/// Runs fp8sel, killing it after `limit`: a hang is a failure, not a stuck test run.
fn run_within(mut c: Command, limit: Duration) -> Output {
    let mut child = c
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > limit {
            child.kill().unwrap();
            let out = child.wait_with_output().unwrap();
            panic!(
                "fp8sel did not finish within {limit:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

fn fp8sel(args: &[&str]) -> Output {
    run_within(cmd(args), Duration::from_secs(30))
}

fn err(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// A small estimated report (cost model, no GPU) of `model`.
fn report(dir: &Path, name: &str, model: &str) -> PathBuf {
    let path = dir.join(name);
    let o = fp8sel(&[
        "bench",
        "--backend",
        "model",
        "--quiet",
        "--model",
        model,
        "--tp",
        "1",
        "--shape-sweep",
        "1024x1,8192x1",
        "--report",
        s(&path),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    path
}

fn llama_report(dir: &Path) -> PathBuf {
    report(dir, "r.json", "fixtures/models/llama3_2_1b.yaml")
}

// 1. Bounded reads; non-regular files refused at once.

#[test]
fn dev_zero_is_refused_at_once_not_read_forever() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("p.json");
    let o = fp8sel(&[
        "merge-policy",
        "--reports",
        "/dev/zero",
        "--output",
        s(&out),
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", err(&o));
    assert!(err(&o).contains("/dev/zero") && err(&o).contains("character device"));
    let o = fp8sel(&["explain", "--model", "/dev/zero", "--seq-length", "4096"]);
    assert_eq!(o.status.code(), Some(2), "{}", err(&o));
    assert!(err(&o).contains("not a regular file"), "{}", err(&o));
    assert!(!out.exists());
}

#[test]
fn a_fifo_is_refused_instead_of_hanging() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("f");
    let c = std::ffi::CString::new(s(&fifo)).unwrap();
    // SAFETY: a valid NUL-terminated path; mkfifo only creates a node.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    for args in [
        vec!["validate", s(&fifo)],
        vec!["explain", "--model", s(&fifo), "--seq-length", "1"],
        vec![
            "merge-policy",
            "--reports",
            s(&fifo),
            "--output",
            "/tmp/never.json",
        ],
    ] {
        let o = run_within(cmd(&args), Duration::from_secs(10));
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", err(&o));
        assert!(err(&o).contains("FIFO"), "{}", err(&o));
    }
}

#[test]
fn oversized_files_are_refused_without_reading_them() {
    let dir = tempfile::tempdir().unwrap();
    // Sparse files: large to the reader, free on disk.
    let big_report = dir.path().join("big.json");
    std::fs::File::create(&big_report)
        .unwrap()
        .set_len(65 << 20)
        .unwrap();
    let o = fp8sel(&[
        "merge-policy",
        "--reports",
        s(&big_report),
        "--output",
        "/tmp/x.json",
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", err(&o));
    assert!(err(&o).contains("larger than the 64 MiB"), "{}", err(&o));
    let big_config = dir.path().join("big.yaml");
    std::fs::File::create(&big_config)
        .unwrap()
        .set_len(5 << 20)
        .unwrap();
    let o = fp8sel(&["explain", "--model", s(&big_config), "--seq-length", "1"]);
    assert_eq!(o.status.code(), Some(2), "{}", err(&o));
    assert!(err(&o).contains("larger than the 4 MiB"), "{}", err(&o));
}

// 2. An output that is an input.

#[test]
fn an_output_never_overwrites_an_input() {
    let dir = tempfile::tempdir().unwrap();
    let r = llama_report(dir.path());
    let before = std::fs::read(&r).unwrap();
    let o = fp8sel(&["merge-policy", "--reports", s(&r), "--output", s(&r)]);
    assert_eq!(o.status.code(), Some(2), "{}", err(&o));
    assert!(err(&o).contains("same file as the input"), "{}", err(&o));
    // Through another spelling of the same path, too.
    let other = format!("{}/./r.json", s(dir.path()));
    let o = fp8sel(&["merge-policy", "--reports", s(&r), "--output", &other]);
    assert_eq!(o.status.code(), Some(2), "{}", err(&o));
    // --output-dir D --name r is D/r.json.
    let o = fp8sel(&[
        "merge-policy",
        "--reports",
        s(&r),
        "--output-dir",
        s(dir.path()),
        "--name",
        "r",
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", err(&o));
    assert_eq!(std::fs::read(&r).unwrap(), before, "the report was damaged");
    // bench: the policy may not replace the report it is made from.
    let o = fp8sel(&[
        "bench",
        "--backend",
        "model",
        "--quiet",
        "--model",
        "fixtures/models/llama3_2_1b.yaml",
        "--shape-sweep",
        "1024x1",
        "--report",
        s(&r),
        "--policy-out",
        s(&r),
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", err(&o));
    assert_eq!(std::fs::read(&r).unwrap(), before, "the report was damaged");
}

// 3. Outputs that are device nodes or symlinks.

#[test]
fn a_device_node_output_is_refused_and_stays_a_device() {
    let dir = tempfile::tempdir().unwrap();
    let r = llama_report(dir.path());
    let o = fp8sel(&["merge-policy", "--reports", s(&r), "--output", "/dev/full"]);
    assert_eq!(o.status.code(), Some(2), "{}", err(&o));
    assert!(err(&o).contains("character device"), "{}", err(&o));
    use std::os::unix::fs::FileTypeExt;
    assert!(
        std::fs::metadata("/dev/full")
            .unwrap()
            .file_type()
            .is_char_device()
    );
}

#[test]
fn a_symlink_output_is_written_through_to_its_target() {
    let dir = tempfile::tempdir().unwrap();
    let r = llama_report(dir.path());
    let target = dir.path().join("real.json");
    std::fs::write(&target, "old").unwrap();
    let link = dir.path().join("link.json");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let o = fp8sel(&["merge-policy", "--reports", s(&r), "--output", s(&link)]);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    assert!(
        std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink()
    );
    let text = std::fs::read_to_string(&target).unwrap();
    assert!(text.contains("\"version\": 1"), "{text}");
    // A dangling link is refused.
    let dangling = dir.path().join("dangling.json");
    std::os::unix::fs::symlink(dir.path().join("nowhere/x.json"), &dangling).unwrap();
    let o = fp8sel(&["merge-policy", "--reports", s(&r), "--output", s(&dangling)]);
    assert_eq!(o.status.code(), Some(2), "{}", err(&o));
}

// 4. Hydra defaults: bounded fan-out, no escape from the config root, the right file named.

const MODEL_BODY: &str = "num_layers: 2\nhidden_size: 1024\nffn_hidden_size: 4096\n\
    num_attention_heads: 8\nseq_length: 4096\n";

#[test]
fn defaults_fan_out_is_linear_not_exponential() {
    let dir = tempfile::tempdir().unwrap();
    // Fifteen files, each listing the next four times: 4^15 loads if nothing is cached.
    for i in 0..15 {
        let next = format!("f{}", i + 1);
        let body = format!("defaults:\n{}", format!("  - {next}\n").repeat(4));
        std::fs::write(dir.path().join(format!("f{i}.yaml")), body).unwrap();
    }
    std::fs::write(dir.path().join("f15.yaml"), MODEL_BODY).unwrap();
    let start = Instant::now();
    let o = fp8sel(&["explain", "--model", s(&dir.path().join("f0.yaml"))]);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    assert!(start.elapsed() < Duration::from_secs(10));
    // The total number of includes is bounded too.
    let many = format!("defaults:\n{}", "  - f15\n".repeat(300));
    std::fs::write(dir.path().join("many.yaml"), many).unwrap();
    let o = fp8sel(&["explain", "--model", s(&dir.path().join("many.yaml"))]);
    assert_eq!(o.status.code(), Some(2), "{}", err(&o));
    assert!(
        err(&o).contains("more than 256 defaults entries"),
        "{}",
        err(&o)
    );
}

#[test]
fn defaults_do_not_leave_the_config_root_without_a_flag() {
    let dir = tempfile::tempdir().unwrap();
    let models = dir.path().join("models");
    std::fs::create_dir_all(models.join("llm")).unwrap();
    std::fs::write(dir.path().join("models/base.yaml"), MODEL_BODY).unwrap();
    std::fs::write(
        models.join("llm/m.yaml"),
        "defaults:\n  - ../base\n  - _self_\n",
    )
    .unwrap();
    let m = models.join("llm/m.yaml");
    let o = fp8sel(&["explain", "--model", s(&m)]);
    assert_eq!(o.status.code(), Some(2), "{}", err(&o));
    let e = err(&o);
    assert!(
        e.contains("outside the config root") && e.contains("base.yaml"),
        "{e}"
    );
    assert!(e.contains("--config-root"), "{e}");
    let o = fp8sel(&["explain", "--model", s(&m), "--config-root", s(&models)]);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
}

#[test]
fn a_rooted_entry_names_the_files_actually_looked_at() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("sub")).unwrap();
    std::fs::write(
        dir.path().join("sub/m.yaml"),
        "defaults:\n  - /parts/missing\n",
    )
    .unwrap();
    let o = fp8sel(&[
        "explain",
        "--model",
        s(&dir.path().join("sub/m.yaml")),
        "--config-root",
        s(dir.path()),
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", err(&o));
    let looked = dir
        .path()
        .canonicalize()
        .unwrap()
        .join("parts/missing.yaml");
    assert!(err(&o).contains(s(&looked)), "{}", err(&o));
    assert!(!err(&o).contains("sub/parts"), "{}", err(&o));
}

// 5. Duplicate JSON keys.

#[test]
fn duplicate_keys_in_a_policy_are_errors() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("p.json");
    std::fs::write(
        &p,
        r#"{"version": 1, "speedup_threshold": 1.0, "rules": {
            "row": {"fc2": [{"tp": 1, "min_tokens": 1}], "fc2": [{"tp": 1, "min_tokens": 99999}]}}}"#,
    )
    .unwrap();
    let o = fp8sel(&["validate", s(&p)]);
    assert_eq!(o.status.code(), Some(2), "{}", err(&o));
    assert!(
        err(&o).contains("rules.row.fc2") && err(&o).contains("#1 and #2"),
        "{}",
        err(&o)
    );
    let o = fp8sel(&[
        "decide",
        "--policy",
        s(&p),
        "--kind",
        "row",
        "--ub-name",
        "fc2",
        "--tp",
        "1",
        "--num-tokens",
        "4096",
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", err(&o));
}

// 6. Reports of different models.

#[test]
fn reports_of_different_models_do_not_merge_silently() {
    let dir = tempfile::tempdir().unwrap();
    let a = report(dir.path(), "a.json", "fixtures/models/llama3_2_1b.yaml");
    let b = report(dir.path(), "b.json", "fixtures/models/qwen2_5_72b.yaml");
    let out = dir.path().join("p.json");
    let o = fp8sel(&[
        "merge-policy",
        "--reports",
        s(&a),
        s(&b),
        "--output",
        s(&out),
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", err(&o));
    assert!(err(&o).contains("disagree on model") && err(&o).contains("--allow-mixed"));
    assert!(!out.exists());
    let o = fp8sel(&[
        "merge-policy",
        "--reports",
        s(&a),
        s(&b),
        "--output",
        s(&out),
        "--allow-mixed",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
}

// 7. Model configs that cannot be right.

#[test]
fn impossible_model_configs_name_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let moe = "num_moe_experts: 8\nmoe_ffn_hidden_size: 512\n";
    for (extra, field) in [
        (format!("{moe}moe_router_topk: 9\n"), "moe_router_topk"),
        ("kv_channels: 0\n".to_owned(), "kv_channels"),
        ("num_moe_experts: 0\n".to_owned(), "num_moe_experts"),
    ] {
        let m = dir.path().join("m.yaml");
        std::fs::write(&m, format!("{MODEL_BODY}{extra}")).unwrap();
        let o = fp8sel(&["explain", "--model", s(&m)]);
        assert_eq!(o.status.code(), Some(2), "{extra}: {}", err(&o));
        assert!(err(&o).contains(&format!("field `{field}`")), "{}", err(&o));
        assert!(err(&o).contains("fix: "), "{}", err(&o));
    }
    let m = dir.path().join("odd.yaml");
    std::fs::write(
        &m,
        "num_layers: 2\nhidden_size: 1000\nnum_attention_heads: 3\nseq_length: 8\n",
    )
    .unwrap();
    let o = fp8sel(&["explain", "--model", s(&m)]);
    assert_eq!(o.status.code(), Some(2), "{}", err(&o));
    assert!(err(&o).contains("field `hidden_size`") && err(&o).contains("kv_channels"));
}

// 8. Reports whose numbers cannot be right.

fn edit_report(r: &Path, f: impl Fn(&mut serde_json::Value)) {
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(r).unwrap()).unwrap();
    f(&mut v);
    std::fs::write(r, serde_json::to_string(&v).unwrap()).unwrap();
}

#[test]
fn reports_with_impossible_points_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("p.json");
    type Edit = fn(&mut serde_json::Value);
    let cases: [(Edit, &str); 4] = [
        (
            |v| v["points"][1]["fp8"]["total_ms"]["p10"] = 99.0.into(),
            "p10 99 <= median",
        ),
        (|v| v["points"][1]["tp"] = 0.into(), "tp is 0"),
        (|v| v["points"][1]["instances"] = 0.into(), "instances is 0"),
        (
            |v| {
                v["points"][1].as_object_mut().unwrap().remove("fp8");
            },
            "no fp8 timing",
        ),
    ];
    for (edit, words) in cases {
        let r = llama_report(dir.path());
        edit_report(&r, edit);
        let o = fp8sel(&["merge-policy", "--reports", s(&r), "--output", s(&out)]);
        assert_eq!(o.status.code(), Some(2), "{words}: {}", err(&o));
        assert!(
            err(&o).contains("points[1]") && err(&o).contains(words),
            "{}",
            err(&o)
        );
        assert!(!out.exists());
    }
}

// 9. Temp files after a signal.

#[test]
fn sigterm_during_a_write_leaves_no_temp_file_and_the_old_target() {
    let dir = tempfile::tempdir().unwrap();
    let r = llama_report(dir.path());
    let out = dir.path().join("p.json");
    std::fs::write(&out, "previous").unwrap();
    let mut c = cmd(&["merge-policy", "--reports", s(&r), "--output", s(&out)]);
    c.env("FP8_IO_TEST_HOLD_BEFORE_RENAME_MS", "20000")
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let mut child = c.spawn().unwrap();
    let temps = || {
        std::fs::read_dir(dir.path())
            .unwrap()
            .filter_map(Result::ok)
            .filter(|e| e.file_name().to_string_lossy().starts_with(".fp8-tmp-"))
            .count()
    };
    let start = Instant::now();
    while temps() == 0 {
        assert!(
            start.elapsed() < Duration::from_secs(15),
            "no temp file appeared"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let pid = libc::pid_t::try_from(child.id()).unwrap();
    // SAFETY: signalling our own child process.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
    let status = child.wait().unwrap();
    assert!(!status.success());
    assert_eq!(temps(), 0, "a temp file was left behind");
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "previous");
}

// 10. Token counts that overflow.

#[test]
fn overflowing_token_counts_are_errors_not_huge_counts() {
    let o = fp8sel(&[
        "decide",
        "--policy",
        "fixtures/policies/seed_example.json",
        "--kind",
        "row",
        "--ub-name",
        "fc2",
        "--tp",
        "1",
        "--seq-length",
        "18446744073709551615",
        "--micro-batch-size",
        "2",
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", err(&o));
    assert!(err(&o).contains("does not fit in 64 bits"), "{}", err(&o));
    let o = fp8sel(&[
        "explain",
        "--model",
        "fixtures/models/qwen2_5_72b.yaml",
        "--seq-length",
        "9223372036854775807",
        "--micro-batch-size",
        "4",
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", err(&o));
    assert!(err(&o).contains("does not fit in 64 bits"), "{}", err(&o));
}

// 11. The reference tool's reports pair by case.

#[test]
fn reference_reports_pair_by_case_not_by_token_count() {
    // One module at three seq x mbs cases of 8192 tokens, as the reference sweeps it.
    let mut results = Vec::new();
    for (seq, mbs, bf16, fp8) in [
        (8192, 1, 2.0, 1.5),
        (4096, 2, 2.1, 1.6),
        (2048, 4, 2.2, 1.7),
    ] {
        for (precision, ms) in [("bf16", bf16), ("fp8", fp8)] {
            results.push(serde_json::json!({
                "case_name": "llm_mlp_fc2", "model_name": format!("qwen_s{seq}_b{mbs}"),
                "module_name": "TERowParallelLinear", "module_kind": "row", "precision": precision,
                "num_tokens": 8192, "total_ms": ms, "tp_size": 1, "etp_size": 1, "num_gemms": 1,
                "ub_name": "fc2",
            }));
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let r = dir.path().join("ref.json");
    std::fs::write(&r, serde_json::to_string(&results).unwrap()).unwrap();
    let out = dir.path().join("p.json");
    let o = fp8sel(&["merge-policy", "--reports", s(&r), "--output", s(&out)]);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    assert!(!err(&o).contains("unpaired"), "{}", err(&o));
    // Three pairs at one count: combined by the median, as duplicates always are.
    assert!(err(&o).contains("measured 3 times"), "{}", err(&o));
    let p: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    assert_eq!(p["rules"]["row"]["fc2"][0]["min_tokens"], 8192);
    assert_eq!(p["provenance"]["models"], serde_json::json!(["qwen"]));
}
