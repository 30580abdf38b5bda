//! The convergence report's reader: every committed report reads; what breaks the format is
//! refused with its field named; arbitrary text never panics.

#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};

use fp8_report::convergence::parse_convergence;
use proptest::prelude::*;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn committed() -> Vec<PathBuf> {
    let out = std::process::Command::new("git")
        .current_dir(root())
        .args(["ls-files", "*convergence.json"])
        .output()
        .unwrap();
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| root().join(l))
        .collect()
}

#[test]
fn every_committed_report_reads() {
    let files = committed();
    assert!(files.len() >= 5, "{files:?}");
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        let c = parse_convergence(&text, &f).unwrap_or_else(|e| panic!("{e}"));
        assert!(c.runs.contains_key("bf16") && c.summary.final_eval.contains_key("bf16"));
        assert_eq!(c.gap("bf16"), Some(0.0), "{}", f.display());
    }
}

fn sample() -> String {
    static SAMPLE: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    SAMPLE
        .get_or_init(|| std::fs::read_to_string(&committed()[0]).unwrap())
        .clone()
}

#[test]
fn a_broken_report_names_its_field() {
    let good = sample();
    let v: serde_json::Value = serde_json::from_str(&good).unwrap();
    let with = |f: &dyn Fn(&mut serde_json::Value)| {
        let mut v = v.clone();
        f(&mut v);
        parse_convergence(&v.to_string(), Path::new("c.json"))
            .unwrap_err()
            .to_string()
    };
    let e = with(&|v| v["format"] = "other".into());
    assert!(e.contains("c.json") && e.contains("format"), "{e}");
    let e = with(&|v| v["runs"]["bf16"]["surprise"] = 1.into());
    assert!(e.contains("surprise"), "{e}");
    let e = with(&|v| {
        v["runs"].as_object_mut().unwrap().remove("bf16");
    });
    assert!(e.contains("no `bf16` run"), "{e}");
    // A NaN written as null counts as a non-finite step; the count must say so.
    let e = with(&|v| v["runs"]["bf16"]["losses"][3] = serde_json::Value::Null);
    assert!(e.contains("runs.bf16") && e.contains("do not agree"), "{e}");
    let mut v2 = v.clone();
    v2["runs"]["bf16"]["losses"][3] = serde_json::Value::Null;
    v2["runs"]["bf16"]["nonfinite_steps"] = 1.into();
    assert!(parse_convergence(&v2.to_string(), Path::new("c.json")).is_ok());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn arbitrary_text_never_panics(s in "\\PC{0,300}") {
        let _ = parse_convergence(&s, Path::new("x.json"));
    }

    #[test]
    fn mutated_reports_never_panic(cut in 0usize..2000, byte in any::<u8>()) {
        let mut b = sample().into_bytes();
        let i = cut % b.len();
        b[i] = byte;
        if let Ok(s) = String::from_utf8(b) {
            let _ = parse_convergence(&s, Path::new("x.json"));
        }
    }
}
