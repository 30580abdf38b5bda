//! Tidy checks that run with `cargo test`: the workspace conventions ARCHITECTURE.md states.

use std::fs;
use std::path::{Path, PathBuf};

mod common;
use common::root;

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
        // fp8-policy (the schema) and fp8-engine (for Rust launchers) are published; fp8-io
        // because both depend on it.
        let published = dir.ends_with("policy") || dir.ends_with("io") || dir.ends_with("engine");
        assert_eq!(
            !manifest.contains("publish = false"),
            published,
            "{}: only fp8-policy, fp8-engine and fp8-io are published; internal crates say `publish = false`",
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

/// The normal (non-dev, non-build) dependency graph of the workspace's crates, from
/// `cargo metadata --no-deps` (no network, no registry): package name -> names of the packages it
/// declares. External crates appear only as leaves, which is enough: none of them depends on a
/// workspace crate, and cudarc is reached only through a workspace crate that declares it.
fn dependency_graph() -> std::collections::BTreeMap<String, Vec<String>> {
    let out = std::process::Command::new(env!("CARGO"))
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .current_dir(root())
        .output()
        .expect("cargo metadata runs");
    assert!(
        out.status.success(),
        "cargo metadata: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("metadata is JSON");
    v["packages"]
        .as_array()
        .expect("packages")
        .iter()
        .map(|p| {
            let deps = p["dependencies"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|d| d["kind"].is_null())
                .filter_map(|d| d["name"].as_str().map(str::to_owned))
                .collect();
            (p["name"].as_str().unwrap_or_default().to_owned(), deps)
        })
        .collect()
}

fn reaches(graph: &std::collections::BTreeMap<String, Vec<String>>, from: &str, to: &str) -> bool {
    let mut seen = std::collections::BTreeSet::new();
    let mut stack = vec![from.to_owned()];
    while let Some(n) = stack.pop() {
        if n == to {
            return true;
        }
        if seen.insert(n.clone()) {
            stack.extend(graph.get(&n).into_iter().flatten().cloned());
        }
    }
    false
}

#[test]
fn crate_graph_follows_architecture() {
    let g = dependency_graph();
    // The decision side and the format crates never depend on the measurement.
    for c in [
        "fp8-io",
        "fp8-policy",
        "fp8-report",
        "fp8-engine",
        "fp8-merge",
    ] {
        assert!(g.contains_key(c), "{c} is not in the workspace graph");
        assert!(
            !reaches(&g, c, "fp8-bench"),
            "{c} must not depend on fp8-bench"
        );
        assert!(!reaches(&g, c, "cudarc"), "{c} must not link cudarc");
    }
    // The producer of reports does not depend on their consumer: both share fp8-report.
    assert!(
        !reaches(&g, "fp8-bench", "fp8-merge"),
        "fp8-bench must not depend on fp8-merge"
    );
    for c in ["fp8-bench", "fp8-merge"] {
        assert!(
            reaches(&g, c, "fp8-report"),
            "{c} reads or writes reports through fp8-report"
        );
    }
    // Only fp8-bench depends on cudarc directly.
    let direct: Vec<&String> = g
        .iter()
        .filter(|(_, deps)| deps.iter().any(|d| d == "cudarc"))
        .map(|(n, _)| n)
        .collect();
    assert_eq!(direct, ["fp8-bench"], "only fp8-bench may link cudarc");
    // Published crates depend only on published workspace crates.
    for c in ["fp8-policy", "fp8-engine", "fp8-io"] {
        for d in g
            .get(c)
            .into_iter()
            .flatten()
            .filter(|d| d.starts_with("fp8-"))
        {
            assert!(
                ["fp8-policy", "fp8-io"].contains(&d.as_str()),
                "{c} is published but depends on the internal {d}"
            );
        }
    }
    // The published schema crate stays small: no workspace crate but fp8-io under it.
    for d in g.get("fp8-policy").into_iter().flatten() {
        assert!(
            !d.starts_with("fp8-") || d == "fp8-io",
            "fp8-policy depends on {d}"
        );
    }
}

#[test]
fn rust_toolchain_is_pinned() {
    let t = read(&root().join("rust-toolchain.toml"));
    assert!(t.contains("channel = \"1.95.0\""));
}

/// The device scripts run where nothing can be fixed between calls (the machine is given back
/// 30 s after a call): each must at least parse, and every Python module it names must exist.
#[test]
fn device_scripts_parse_and_name_existing_python_modules() {
    let dir = root().join("scripts/device");
    let pkg = root().join("crates/py/python/adaptive_fp8");
    let mut n = 0;
    for e in std::fs::read_dir(&dir).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "sh") {
            n += 1;
            let o = std::process::Command::new("bash")
                .arg("-n")
                .arg(&p)
                .output()
                .unwrap();
            assert!(
                o.status.success(),
                "{}: {}",
                p.display(),
                String::from_utf8_lossy(&o.stderr)
            );
            let text = read(&p);
            for m in text.split("adaptive_fp8.").skip(1) {
                // A dotted module path: `bench.step_bench` is bench/step_bench.py.
                let name: String = m
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '.')
                    .collect();
                let name = name.trim_end_matches('.');
                if name.is_empty() || name.starts_with('_') {
                    continue;
                }
                // The module is the longest prefix that is a file or a package; what follows it
                // is an attribute (`megatron.run_in_fp8`). A package's next part must be a module.
                let parts: Vec<&str> = name.split('.').collect();
                let is_module = |n: usize| {
                    let f = pkg.join(parts[..n].join("/"));
                    f.with_extension("py").exists() || f.join("__init__.py").exists()
                };
                let longest = (1..=parts.len()).rev().find(|&n| is_module(n));
                let in_package = longest.is_some_and(|n| {
                    n == parts.len() || !pkg.join(parts[..n].join("/")).join("__init__.py").exists()
                });
                assert!(
                    in_package,
                    "{} names adaptive_fp8.{name}, which does not exist",
                    p.display()
                );
            }
        }
    }
    assert!(n >= 5, "only {n} device scripts found");
}
