//! `fp8sel diff A B`: where two policies decide differently, end to end.

#![allow(clippy::unwrap_used)]

mod common;

use common::{err, fp8sel, line_of, out, root, s};
use std::path::{Path, PathBuf};

/// The shipped Llama-3.2-1B policy with `change` applied, written into `dir` as `name`.
fn variant(dir: &Path, name: &str, change: impl FnOnce(&mut serde_json::Value)) -> PathBuf {
    let text = std::fs::read_to_string(root().join("policies/llama3_2_1b.json")).unwrap();
    let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
    change(&mut v);
    let p = dir.join(name);
    std::fs::write(&p, serde_json::to_string_pretty(&v).unwrap()).unwrap();
    p
}

/// The first rule of `(kind, ub)` in a policy document.
fn rule<'a>(v: &'a mut serde_json::Value, kind: &str, ub: &str) -> &'a mut serde_json::Value {
    &mut v["rules"][kind][ub][0]
}

#[test]
fn the_same_decisions_exit_0_whatever_the_provenance() {
    let dir = tempfile::tempdir().unwrap();
    let a = variant(dir.path(), "a.json", |_| {});
    let b = variant(dir.path(), "b.json", |v| {
        v.as_object_mut().unwrap().remove("provenance");
    });
    let o = fp8sel(&["diff", s(&a), s(&b)]);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    assert!(
        out(&o).contains("0 differ, 0 only in A, 0 only in B"),
        "{}",
        out(&o)
    );
    assert!(err(&o).is_empty(), "{}", err(&o));
}

#[test]
fn moved_thresholds_and_lone_rules_are_listed_and_exit_1() {
    let dir = tempfile::tempdir().unwrap();
    let a = variant(dir.path(), "a.json", |_| {});
    let b = variant(dir.path(), "b.json", |v| {
        let fc1 = rule(v, "layernorm_column", "fc1");
        let eager = fc1["min_tokens"].as_u64().unwrap();
        fc1["min_tokens"] = serde_json::json!(eager * 2);
        // qkv: never in eager, its graphed threshold kept.
        let qkv = rule(v, "layernorm_column", "qkv");
        let graphed = qkv["min_tokens_graphed"].clone();
        qkv["min_tokens"] = serde_json::json!(1u64 << 53);
        qkv["min_tokens_graphed"] = graphed;
        // fc2's TP 2 rule gone from B.
        v["rules"]["row"]["fc2"].as_array_mut().unwrap().truncate(1);
    });
    let o = fp8sel(&["diff", s(&a), s(&b)]);
    assert_eq!(o.status.code(), Some(1), "{}", err(&o));
    let text = out(&o);
    let fc1 = line_of(&text, |l| {
        l.starts_with("(kind=layernorm_column, ub_name=fc1, tp=1)")
    });
    assert!(fc1.contains("(x2.00)") && !fc1.contains("graphed"), "{fc1}");
    let qkv = line_of(&text, |l| {
        l.starts_with("(kind=layernorm_column, ub_name=qkv, tp=1)")
    });
    assert!(
        qkv.contains("-> never") && !qkv.contains("graphed"),
        "{qkv}"
    );
    assert!(
        text.contains("(kind=row, ub_name=fc2, tp=2): only in A"),
        "{text}"
    );
    assert!(text.contains("2 differ,"), "{text}");
    // Differing is not an error: stdout says why, stderr stays empty.
    assert!(err(&o).is_empty(), "{}", err(&o));

    let j = fp8sel(&["diff", s(&a), s(&b), "--json"]);
    assert_eq!(j.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_str(out(&j).trim()).unwrap();
    assert_eq!(v["same"], false);
    assert_eq!(v["differ"].as_array().unwrap().len(), 2);
    let qkv = v["differ"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["key"].as_str().unwrap().contains("qkv"))
        .unwrap();
    assert!(
        qkv["eager"][0].is_u64() && qkv["eager"][1].is_null(),
        "{qkv}"
    );
    assert_eq!(qkv["graphed"][0], qkv["graphed"][1]);
    assert_eq!(v["only_a"].as_array().unwrap().len(), 1);
    assert!(v["only_b"].as_array().unwrap().is_empty());
}

#[test]
fn a_bad_file_exits_2_and_names_it() {
    let dir = tempfile::tempdir().unwrap();
    let a = variant(dir.path(), "a.json", |_| {});
    let bad = dir.path().join("bad.json");
    std::fs::write(&bad, "{\"version\": 1, \"rules\": {\"row\": []}}").unwrap();
    let o = fp8sel(&["diff", s(&a), s(&bad)]);
    assert_eq!(o.status.code(), Some(2), "{}", err(&o));
    assert!(err(&o).contains("bad.json"), "{}", err(&o));
    assert!(out(&o).is_empty(), "{}", out(&o));
}
