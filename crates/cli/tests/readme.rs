//! The README is the front page, and every output it prints is the tool's: each `console`
//! block's `$ fp8sel ...` commands run in order, as printed, in a fresh directory that sees the
//! repository's `fixtures/`, `examples/` and `policies/` (no GPU: the cost model where a command
//! measures), and each one's stdout must be the lines the README shows below it.

#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
        .canonicalize()
        .unwrap()
}

/// (command, the stdout the README shows) for every `$ ` line of every `console` block, its
/// `\` continuations joined.
fn console_examples(readme: &str) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    let mut in_block = false;
    let mut continued = false;
    for line in readme.lines() {
        if line.starts_with("```") {
            in_block = line == "```console";
            continue;
        }
        if !in_block {
            continue;
        }
        if continued {
            let (cmd, _) = out.last_mut().unwrap();
            cmd.push(' ');
            cmd.push_str(line.trim().trim_end_matches('\\').trim());
            continued = line.ends_with('\\');
        } else if let Some(cmd) = line.strip_prefix("$ ") {
            continued = cmd.ends_with('\\');
            out.push((cmd.trim_end_matches('\\').trim().to_owned(), String::new()));
        } else {
            let (_, shown) = out.last_mut().unwrap();
            shown.push_str(line);
            shown.push('\n');
        }
    }
    out
}

#[test]
fn the_readme_is_a_front_page_of_at_most_200_lines() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let n = readme.lines().count();
    assert!(
        n <= 200,
        "README.md is {n} lines; keep it a front page (history goes to docs/RESULTS.md)"
    );
    let first_screen: String = readme.lines().take(40).collect::<Vec<_>>().join("\n");
    for step in ["fp8sel gen-policy", "fp8sel check"] {
        assert!(
            first_screen.contains(step),
            "the first screen lacks `{step}`"
        );
    }
}

#[test]
fn every_readme_command_prints_what_the_readme_shows() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let examples = console_examples(&readme);
    assert!(examples.len() >= 4, "{examples:?}");
    let dir = tempfile::tempdir().unwrap();
    for d in ["fixtures", "examples", "policies"] {
        std::os::unix::fs::symlink(root().join(d), dir.path().join(d)).unwrap();
    }
    let bin = Path::new(env!("CARGO_BIN_EXE_fp8sel"));
    let path = format!(
        "{}:{}",
        bin.parent().unwrap().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    for (cmd, shown) in examples {
        assert!(
            cmd.starts_with("fp8sel "),
            "a console example that is not fp8sel's: {cmd}"
        );
        let o = Command::new("sh")
            .args(["-c", &cmd])
            .current_dir(dir.path())
            .env("PATH", &path)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&o.stdout);
        assert!(
            o.status.code().is_some_and(|c| c <= 1),
            "{cmd}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        assert_eq!(
            stdout, shown,
            "README: `{cmd}` prints this now; update the README"
        );
    }
    // Nothing the README runs wrote into the repository.
    assert!(!root().join("policies/my-policies").exists());
}
