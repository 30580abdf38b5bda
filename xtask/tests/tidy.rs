//! Tidy checks that run with `cargo test`: the workspace conventions ARCHITECTURE.md states.

use std::fs;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default()
}

fn crate_dirs() -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = fs::read_dir(root().join("crates"))
        .map(|rd| {
            rd.filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|p| p.join("Cargo.toml").exists())
                .collect()
        })
        .unwrap_or_default();
    dirs.push(root().join("xtask"));
    dirs.sort();
    dirs
}

fn read(p: &Path) -> String {
    fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

#[test]
fn every_lib_opens_with_a_crate_doc_paragraph() {
    for dir in crate_dirs() {
        for entry in ["src/lib.rs", "src/main.rs"] {
            let p = dir.join(entry);
            if p.exists() {
                let text = read(&p);
                assert!(
                    text.starts_with("//!"),
                    "{} must open with a `//!` paragraph",
                    p.display()
                );
            }
        }
    }
}

#[test]
fn crates_inherit_lints_and_workspace_dependencies() {
    for dir in crate_dirs() {
        let manifest = read(&dir.join("Cargo.toml"));
        assert!(
            manifest.contains("[lints]\nworkspace = true"),
            "{}: add `[lints] workspace = true`",
            dir.display()
        );
        let mut section = "";
        for line in manifest.lines() {
            if line.starts_with('[') {
                section = line;
                continue;
            }
            let in_deps = section.contains("dependencies");
            if in_deps && line.contains('=') && !line.trim_start().starts_with('#') {
                assert!(
                    line.contains("workspace = true"),
                    "{}: `{line}` must be declared once in [workspace.dependencies] and inherited",
                    dir.display()
                );
            }
        }
    }
}

#[test]
fn internal_crates_are_not_published() {
    for dir in crate_dirs() {
        let manifest = read(&dir.join("Cargo.toml"));
        let published = dir.ends_with("policy");
        assert_eq!(
            !manifest.contains("publish = false"),
            published,
            "{}: only fp8-policy is published; internal crates say `publish = false`",
            dir.display()
        );
    }
}

#[test]
fn only_the_bench_links_cudarc() {
    for dir in crate_dirs() {
        let manifest = read(&dir.join("Cargo.toml"));
        if !dir.ends_with("bench") {
            assert!(
                !manifest.contains("cudarc"),
                "{}: only fp8-bench may depend on cudarc",
                dir.display()
            );
        }
    }
}

#[test]
fn rust_toolchain_is_pinned() {
    let t = read(&root().join("rust-toolchain.toml"));
    assert!(t.contains("channel = \"1.95.0\""));
}
