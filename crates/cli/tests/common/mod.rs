//! What the CLI test files of the later issues share: the repository root and running `fp8sel`
//! from it. (Each test binary uses some of it.)

#![allow(dead_code, clippy::unwrap_used)]

use std::path::PathBuf;
use std::process::{Command, Output};

/// The repository root (tests run the CLI from there, as the README does).
pub fn root() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
}

/// `fp8sel args...` from the root.
pub fn fp8sel(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_fp8sel"))
        .current_dir(root())
        .args(args)
        .output()
        .unwrap()
}

/// `fp8sel args...` from the root, with `set` in its environment and `unset` removed from it.
pub fn fp8sel_with(args: &[&str], set: &[(&str, &str)], unset: &[&str]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_fp8sel"));
    c.current_dir(root()).args(args);
    for k in unset {
        c.env_remove(k);
    }
    for (k, v) in set {
        c.env(k, v);
    }
    c.output().unwrap()
}

/// `fp8sel args...` from the root, with `env` in its environment.
pub fn fp8sel_env(args: &[&str], env: &[(&str, &str)]) -> Output {
    fp8sel_with(args, env, &[])
}

/// Its stdout.
pub fn out(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Its stderr.
pub fn err(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The first line of `text` that `pred` picks; a missing one fails the test with the whole text.
pub fn line_of(text: &str, pred: impl Fn(&str) -> bool) -> &str {
    text.lines()
        .find(|l| pred(l))
        .unwrap_or_else(|| panic!("no such line in:\n{text}"))
}

/// A path as the `&str` an argument list takes.
pub fn s(p: &std::path::Path) -> &str {
    p.to_str().unwrap()
}

/// An estimated policy of Qwen2.5-72B at TP 1 (cost model, no GPU), written into `dir`.
pub fn estimated_policy(dir: &std::path::Path) -> PathBuf {
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

/// `fp8sel gen-policy --model <Llama-3.2-1B> --out OUT EXTRA...` from the root, with the
/// stand-in Python workers of `tests/fake_te` first on the path and `env` set (their settings).
pub fn gen_with_stand_ins(out: &std::path::Path, extra: &[&str], env: &[(&str, &str)]) -> Output {
    gen_model_with_stand_ins("fixtures/models/llama3_2_1b.yaml", out, extra, env)
}

/// [`gen_with_stand_ins`] for another model config.
pub fn gen_model_with_stand_ins(
    model: &str,
    out: &std::path::Path,
    extra: &[&str],
    env: &[(&str, &str)],
) -> Output {
    let fake = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fake_te"));
    let mut args = vec!["gen-policy", "--model", model, "--out", s(out)];
    args.extend_from_slice(extra);
    Command::new(env!("CARGO_BIN_EXE_fp8sel"))
        .current_dir(root())
        .env("PYTHONPATH", &fake)
        .envs(env.iter().copied())
        .args(&args)
        .output()
        .unwrap()
}
