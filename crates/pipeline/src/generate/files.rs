//! The generated file set on disk: write it, and say where the tree on disk differs from it
//! (`cargo xtask gen-policy --check`).

use std::path::{Path, PathBuf};

use crate::build::Files;

/// Writes files under `out`, atomically each.
pub fn write_files(out: &Path, files: &Files) -> Result<(), String> {
    for (rel, bytes) in files {
        let path = out.join(rel);
        fp8_io::create_parent_dir(&path).map_err(|e| e.to_string())?;
        fp8_io::write_atomic(&path, bytes).map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// Files under `out` that differ from `files` (or are missing, or are generated files no longer
/// produced).
pub fn stale(out: &Path, files: &Files) -> Vec<String> {
    let mut bad = Vec::new();
    for (rel, bytes) in files {
        match std::fs::read(out.join(rel)) {
            Ok(have) if have == *bytes => {}
            Ok(_) => bad.push(format!("{} differs", rel.display())),
            Err(_) => bad.push(format!("{} is missing", rel.display())),
        }
    }
    for rel in orphans(out, files) {
        bad.push(format!("{} is no longer generated", rel.display()));
    }
    bad
}

/// Generated files under `out` (policies, summaries, plots; `estimated/` is another job's) that
/// `files` no longer produces, relative to `out`.
pub fn orphans(out: &Path, files: &Files) -> Vec<PathBuf> {
    let produced: std::collections::BTreeSet<&PathBuf> = files.keys().collect();
    let mut found = Vec::new();
    for entry in walk(out) {
        let rel = entry
            .strip_prefix(out)
            .map(Path::to_path_buf)
            .unwrap_or_default();
        let generated = rel
            .extension()
            .is_some_and(|e| e == "json" || e == "md" || e == "svg");
        if generated && !rel.starts_with("estimated") && !produced.contains(&rel) {
            found.push(rel);
        }
    }
    found.sort();
    found
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.filter_map(Result::ok) {
            let p = e.path();
            if p.is_dir() {
                out.extend(walk(&p))
            } else {
                out.push(p)
            }
        }
    }
    out
}
