//! docs/ARCHITECTURE.md stays a true map: every repository path it names exists, every Rust
//! module path (`fp8_merge::model::fit`) resolves to a module file or to a name its last module
//! defines, and every Python module (`adaptive_fp8.bench.step_inputs`) is a file of the package.

use std::fs;
use std::path::{Path, PathBuf};

mod common;
use common::root;

/// The spans between backticks of a markdown text.
fn code_spans(text: &str) -> Vec<&str> {
    text.split('`').skip(1).step_by(2).collect()
}

/// The crate directory of a Rust crate name.
fn crate_src(name: &str) -> Option<PathBuf> {
    let dir = match name {
        "fp8sel" => "cli",
        "xtask" => return Some(root().join("xtask/src")),
        _ => name.strip_prefix("fp8_")?,
    };
    Some(root().join("crates").join(dir).join("src"))
}

/// The file of module `m` under `dir` (`m.rs` or `m/mod.rs`).
fn module_file(dir: &Path, m: &str) -> Option<PathBuf> {
    [dir.join(format!("{m}.rs")), dir.join(m).join("mod.rs")]
        .into_iter()
        .find(|p| p.exists())
}

/// Whether a Rust path resolves: its modules as files, then at most two trailing names
/// (`Type::method`, a function) defined in the last module or below it (a re-export).
fn rust_path_resolves(path: &str) -> Result<(), String> {
    let mut parts = path.split("::");
    let krate = parts.next().unwrap_or_default();
    let src = crate_src(krate).ok_or_else(|| format!("{path}: no crate {krate}"))?;
    let mut file = ["lib.rs", "main.rs"]
        .iter()
        .map(|f| src.join(f))
        .find(|p| p.exists())
        .ok_or_else(|| format!("{path}: {} has no lib.rs", src.display()))?;
    let mut dir = src;
    let rest: Vec<&str> = parts.collect();
    let mut i = 0;
    while i < rest.len() {
        let Some(f) = module_file(&dir, rest[i]) else {
            break;
        };
        dir = dir.join(rest[i]);
        file = f;
        i += 1;
    }
    let names = &rest[i..];
    if names.len() > 2 {
        return Err(format!(
            "{path}: no module {} in {}",
            names[0],
            dir.display()
        ));
    }
    let mut files = vec![file.clone()];
    if file.ends_with("mod.rs") || file.ends_with("lib.rs") || file.ends_with("main.rs") {
        common::rust_files(&dir, &mut files);
    } else {
        common::rust_files(&file.with_extension(""), &mut files);
    }
    let text: String = files
        .iter()
        .map(|f| fs::read_to_string(f).unwrap_or_default())
        .collect();
    for n in names {
        let n = n.trim_end_matches("()");
        let defined = [
            "fn ", "struct ", "enum ", "trait ", "type ", "const ", "mod ",
        ]
        .iter()
        .any(|k| text.contains(&format!("{k}{n}")));
        if !defined {
            return Err(format!("{path}: {n} is not defined in {}", file.display()));
        }
    }
    Ok(())
}

/// Whether a dotted Python module of the package is a file of it.
fn python_module_exists(path: &str) -> bool {
    let pkg = root().join("crates/py/python");
    let rel = path.replace('.', "/");
    pkg.join(format!("{rel}.py")).exists() || pkg.join(&rel).join("__init__.py").exists()
}

#[test]
fn the_resolver_tells_a_module_from_a_missing_one() {
    assert!(rust_path_resolves("fp8_merge::model::fit").is_ok());
    assert!(rust_path_resolves("fp8_policy::Policy::decide").is_ok());
    assert!(rust_path_resolves("fp8_merge::no_such_module").is_err());
    assert!(python_module_exists("adaptive_fp8.bench.step_inputs"));
    assert!(!python_module_exists("adaptive_fp8.bench.no_such_tool"));
}

#[test]
fn architecture_names_only_what_exists() {
    let text = fs::read_to_string(root().join("docs/ARCHITECTURE.md")).unwrap_or_default();
    let (mut paths, mut modules, mut missing) = (0, 0, Vec::new());
    for span in code_spans(&text) {
        let span = span.trim();
        let first = span.split_whitespace().next().unwrap_or_default();
        let is_path = [
            "crates/",
            "xtask/",
            "scripts/",
            "docs/",
            "fixtures/",
            "policies/",
        ]
        .iter()
        .any(|p| first.starts_with(p))
            && !first.contains('*')
            && !first.contains('<');
        if is_path {
            paths += 1;
            let p = first.trim_end_matches(['.', ',', ')', ':']);
            if !root().join(p).exists() {
                missing.push(p.to_owned());
            }
        } else if first.starts_with("fp8_") && first.contains("::") {
            modules += 1;
            let p = first.split(['(', ' ', ',', '{']).next().unwrap_or(first);
            if let Err(e) = rust_path_resolves(p) {
                missing.push(e);
            }
        } else if let Some(m) = first.strip_prefix("adaptive_fp8.") {
            modules += 1;
            let m = m
                .split(['*', '(', ' '])
                .next()
                .unwrap_or(m)
                .trim_end_matches('.');
            if !m.is_empty() && !python_module_exists(&format!("adaptive_fp8.{m}")) {
                missing.push(first.to_owned());
            }
        }
    }
    assert!(
        paths >= 10 && modules >= 10,
        "only {paths} paths and {modules} modules read"
    );
    assert!(
        missing.is_empty(),
        "docs/ARCHITECTURE.md names what does not exist: {missing:?}"
    );
}

#[test]
fn every_crate_has_its_entry_and_invariant() {
    let text = fs::read_to_string(root().join("docs/ARCHITECTURE.md")).unwrap_or_default();
    for dir in fs::read_dir(root().join("crates"))
        .into_iter()
        .flatten()
        .flatten()
    {
        if !dir.path().join("Cargo.toml").exists() {
            continue;
        }
        let name = dir.file_name().to_string_lossy().into_owned();
        let heading = format!("### `crates/{name}`");
        let entry = text
            .split(&heading)
            .nth(1)
            .unwrap_or_else(|| panic!("docs/ARCHITECTURE.md has no entry {heading}"));
        let entry = entry.split("\n### ").next().unwrap_or_default();
        assert!(
            entry.contains("*Invariant:*"),
            "{heading}: say what is deliberately absent (*Invariant:*)"
        );
    }
}
