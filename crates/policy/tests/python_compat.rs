//! Files we write load in the seed's Python loader, and files it writes load in ours.
//!
//! The loader is a re-statement in `fixtures/compat/seed_loader.py`, since the reference
//! framework itself is not available here. Skips (with a printed reason) when python3 is absent.

#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::process::Command;

use fp8_policy::{DenseKind, GroupedKind, Lookup, Policy};

const LOADER: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../fixtures/compat/seed_loader.py"
);
const SEED: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../fixtures/policies/seed_example.json"
);

fn python() -> Option<&'static str> {
    ["python3", "python"].into_iter().find(|p| {
        Command::new(p)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
    })
}

fn run(py: &str, args: &[&str]) -> String {
    let out = Command::new(py).arg(LOADER).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn ours_loads_in_python_and_python_loads_in_ours() {
    let Some(py) = python() else {
        println!("skipped: no python3 on PATH (python compatibility not checked)");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    // Ours -> Python.
    let ours = dir.path().join("ours.json");
    let p = Policy::load(SEED).unwrap();
    p.write(&ours).unwrap();
    assert_eq!(
        run(py, &["check", ours.to_str().unwrap()]).trim(),
        format!("ok {}", p.rule_count())
    );
    // Python -> ours.
    let theirs = dir.path().join("theirs.json");
    run(py, &["write", theirs.to_str().unwrap()]);
    let q = Policy::load(Path::new(&theirs)).unwrap();
    assert_eq!(q.rule_count(), 6);
    let fc1 = Lookup::Dense {
        kind: DenseKind::LayernormColumn,
        ub_name: Some("fc1"),
        tp: 2,
    };
    assert!(q.decide(fc1, 4096).use_fp8);
    assert!(!q.decide(fc1, 4095).use_fp8);
    let experts = Lookup::Grouped {
        kind: GroupedKind::ColumnGrouped,
        etp: 1,
        num_gemms: 8,
    };
    assert!(q.decide(experts, 16384).use_fp8);
    // And what we re-write from it is still accepted by Python.
    let again = dir.path().join("again.json");
    q.write(&again).unwrap();
    assert_eq!(run(py, &["check", again.to_str().unwrap()]).trim(), "ok 6");
}

/// Every shipped policy (every recipe's folder included) loads in the seed's loader with the
/// same rule count as in ours: the recipe and its options are provenance fields it ignores.
#[test]
fn every_shipped_policy_of_every_recipe_loads_in_the_seed_loader() {
    let Some(py) = python() else {
        println!("skipped: no python3 on PATH (python compatibility not checked)");
        return;
    };
    let root = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../../policies"));
    let mut seen = Vec::new();
    for dir in [
        root.to_path_buf(),
        root.join("tensorwise"),
        root.join("delayed"),
    ] {
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            if p.extension().is_some_and(|x| x == "json") {
                let ours = Policy::load(&p).unwrap();
                assert_eq!(
                    run(py, &["check", p.to_str().unwrap()]).trim(),
                    format!("ok {}", ours.rule_count()),
                    "{}",
                    p.display()
                );
                seen.push(ours.recipes());
            }
        }
    }
    use fp8_policy::Recipe;
    for r in [Recipe::Blockwise, Recipe::Tensorwise, Recipe::Delayed] {
        assert!(seen.iter().any(|v| v == &vec![r]), "no shipped {r} policy");
    }
}
