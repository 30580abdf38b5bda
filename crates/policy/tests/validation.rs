//! Every validation error the foundation issue lists, each checked for its path and problem.

#![allow(clippy::unwrap_used)]

use fp8_policy::{Policy, PolicyError, Problem};

fn err(json: &str) -> PolicyError {
    match Policy::from_json_str(json, "p.json") {
        Ok(p) => panic!("expected an error, got {p:?}"),
        Err(e) => e,
    }
}

fn invalid(json: &str) -> (String, Problem) {
    match err(json) {
        PolicyError::Invalid {
            path,
            problem,
            file,
        } => {
            assert_eq!(file.to_str(), Some("p.json"));
            (path, problem)
        }
        other => panic!("expected Invalid, got {other}"),
    }
}

fn with_rules(rules: &str) -> String {
    format!(r#"{{"version": 1, "speedup_threshold": 1.0, "rules": {rules}}}"#)
}

#[test]
fn missing_version() {
    let (path, p) = invalid(r#"{"speedup_threshold": 1.0, "rules": {}}"#);
    assert_eq!((path.as_str(), p), ("$", Problem::MissingKey("version")));
}

#[test]
fn unsupported_versions() {
    for v in ["2", "0", "\"1\"", "1.5", "null"] {
        let (path, p) = invalid(&format!(
            r#"{{"version": {v}, "speedup_threshold": 1.0, "rules": {{}}}}"#
        ));
        assert_eq!(path, "version");
        assert!(matches!(p, Problem::UnsupportedVersion(_)), "{v}: {p:?}");
    }
}

#[test]
fn missing_keys() {
    let (path, p) = invalid(r#"{"version": 1, "rules": {}}"#);
    assert_eq!(
        (path.as_str(), p),
        ("$", Problem::MissingKey("speedup_threshold"))
    );
    let (path, p) = invalid(r#"{"version": 1, "speedup_threshold": 1.0}"#);
    assert_eq!((path.as_str(), p), ("$", Problem::MissingKey("rules")));
    let (path, p) = invalid(&with_rules(r#"{"row": {"fc2": [{"tp": 1}]}}"#));
    assert_eq!(
        (path.as_str(), p),
        ("rules.row.fc2[0]", Problem::MissingKey("min_tokens"))
    );
    let (path, p) = invalid(&with_rules(
        r#"{"row_grouped": [{"etp": 1, "min_tokens": 5}]}"#,
    ));
    assert_eq!(
        (path.as_str(), p),
        ("rules.row_grouped[0]", Problem::MissingKey("num_gemms"))
    );
}

#[test]
fn wrong_types() {
    let cases = [
        (
            r#"{"row": {"fc2": [{"tp": "1", "min_tokens": 1}]}}"#,
            "rules.row.fc2[0].tp",
        ),
        (r#"{"row": {"fc2": {"tp": 1}}}"#, "rules.row.fc2"),
        (r#"{"row": {"fc2": [7]}}"#, "rules.row.fc2[0]"),
        (r#"{"row": 3}"#, "rules.row"),
        (
            r#"{"row": {"fc2": [{"tp": 1, "min_tokens": 1, "measured_speedup": "fast"}]}}"#,
            "rules.row.fc2[0].measured_speedup",
        ),
        (r#"[]"#, "rules"),
    ];
    for (rules, want) in cases {
        let (path, p) = invalid(&with_rules(rules));
        assert_eq!(path, want, "{rules}");
        assert!(matches!(p, Problem::WrongType { .. }), "{rules}: {p:?}");
    }
    let (path, p) = invalid(r#"{"version": 1, "speedup_threshold": "1", "rules": {}}"#);
    assert_eq!(path, "speedup_threshold");
    assert!(matches!(p, Problem::WrongType { .. }));
    let (path, _) = invalid("[1, 2]");
    assert_eq!(path, "$");
}

#[test]
fn negative_or_fractional_counts() {
    for (field, rule) in [
        ("min_tokens", r#"{"tp": 1, "min_tokens": -1}"#),
        ("min_tokens", r#"{"tp": 1, "min_tokens": 10.5}"#),
        ("tp", r#"{"tp": -2, "min_tokens": 1}"#),
        ("tp", r#"{"tp": 1.5, "min_tokens": 1}"#),
    ] {
        let (path, p) = invalid(&with_rules(&format!(r#"{{"row": {{"fc2": [{rule}]}}}}"#)));
        assert_eq!(path, format!("rules.row.fc2[0].{field}"));
        assert!(matches!(p, Problem::NotACount(_)), "{rule}: {p:?}");
    }
    for (field, rule) in [
        ("etp", r#"{"etp": -1, "num_gemms": 4, "min_tokens": 1}"#),
        (
            "num_gemms",
            r#"{"etp": 1, "num_gemms": 4.25, "min_tokens": 1}"#,
        ),
    ] {
        let (path, p) = invalid(&with_rules(&format!(r#"{{"column_grouped": [{rule}]}}"#)));
        assert_eq!(path, format!("rules.column_grouped[0].{field}"));
        assert!(matches!(p, Problem::NotACount(_)));
    }
}

#[test]
fn integral_floats_are_counts() {
    let p = Policy::from_json_str(
        &with_rules(r#"{"row": {"fc2": [{"tp": 1.0, "min_tokens": 8192.0}]}}"#),
        "p.json",
    )
    .unwrap();
    assert_eq!(p.rule_count(), 1);
}

#[test]
fn zero_sizes() {
    let (path, p) = invalid(&with_rules(
        r#"{"row": {"fc2": [{"tp": 0, "min_tokens": 1}]}}"#,
    ));
    assert_eq!((path.as_str(), p), ("rules.row.fc2[0].tp", Problem::Zero));
    let (path, p) = invalid(&with_rules(
        r#"{"column_grouped": [{"etp": 0, "num_gemms": 4, "min_tokens": 1}]}"#,
    ));
    assert_eq!(
        (path.as_str(), p),
        ("rules.column_grouped[0].etp", Problem::Zero)
    );
    let (path, p) = invalid(&with_rules(
        r#"{"column_grouped": [{"etp": 1, "num_gemms": 0, "min_tokens": 1}]}"#,
    ));
    assert_eq!(
        (path.as_str(), p),
        ("rules.column_grouped[0].num_gemms", Problem::Zero)
    );
    // min_tokens = 0 is legal: FP8 at any token count.
    assert!(
        Policy::from_json_str(
            &with_rules(r#"{"row": {"fc2": [{"tp": 1, "min_tokens": 0}]}}"#),
            "p"
        )
        .is_ok()
    );
}

#[test]
fn out_of_range_sizes() {
    let (path, p) = invalid(&with_rules(
        r#"{"row": {"fc2": [{"tp": 4294967296, "min_tokens": 1}]}}"#,
    ));
    assert_eq!(path, "rules.row.fc2[0].tp");
    assert!(matches!(p, Problem::OutOfRange(_)));
}

#[test]
fn bad_ratios() {
    for s in ["0", "-1.5", "0.0"] {
        let (path, p) = invalid(&with_rules(&format!(
            r#"{{"row": {{"fc2": [{{"tp": 1, "min_tokens": 1, "measured_speedup": {s}}}]}}}}"#
        )));
        assert_eq!(path, "rules.row.fc2[0].measured_speedup", "{s}");
        assert!(matches!(p, Problem::BadRatio(_)), "{s}: {p:?}");
    }
    // Out-of-range literals are refused by the JSON parser itself, with the file named.
    let e = err(&with_rules(
        r#"{"row": {"fc2": [{"tp": 1, "min_tokens": 1, "measured_speedup": 1e400}]}}"#,
    ));
    assert!(matches!(e, PolicyError::NotJson { .. }), "{e}");
    for s in ["0", "-1"] {
        let (path, p) = invalid(&format!(
            r#"{{"version": 1, "speedup_threshold": {s}, "rules": {{}}}}"#
        ));
        assert_eq!(path, "speedup_threshold");
        assert!(matches!(p, Problem::BadRatio(_)), "{s}: {p:?}");
    }
}

#[test]
fn nan_and_infinity_literals_get_a_plain_message() {
    for lit in ["NaN", "Infinity", "-Infinity"] {
        let e = err(&with_rules(&format!(
            r#"{{"row": {{"fc2": [{{"tp": 1, "min_tokens": 1, "measured_speedup": {lit}}}]}}}}"#
        )));
        let msg = e.to_string();
        assert!(matches!(e, PolicyError::NotJson { .. }));
        assert!(msg.contains("NaN and Infinity"), "{msg}");
        assert!(msg.contains("p.json"), "{msg}");
    }
}

#[test]
fn unknown_kind() {
    let (path, p) = invalid(&with_rules(r#"{"linear": {}}"#));
    assert_eq!(path, "rules.linear");
    assert_eq!(p, Problem::UnknownKind("linear".into()));
}

#[test]
fn flat_dense_list_is_the_old_format() {
    let e = err(&with_rules(r#"{"row": [{"tp": 1, "min_tokens": 1}]}"#));
    let msg = e.to_string();
    assert!(msg.contains("merge-policy"), "{msg}");
    match e {
        PolicyError::Invalid { path, problem, .. } => {
            assert_eq!(path, "rules.row");
            assert_eq!(problem, Problem::FlatDenseList("row".into()));
        }
        other => panic!("{other}"),
    }
    let (path, p) = invalid(&with_rules(r#"{"row_grouped": {"fc2": []}}"#));
    assert_eq!(path, "rules.row_grouped");
    assert_eq!(p, Problem::GroupedNotList("row_grouped".into()));
}

#[test]
fn duplicate_rules() {
    let (path, p) = invalid(&with_rules(
        r#"{"row": {"fc2": [{"tp": 1, "min_tokens": 1}, {"tp": 2, "min_tokens": 1}, {"tp": 1, "min_tokens": 9}]}}"#,
    ));
    assert_eq!(path, "rules.row.fc2[2]");
    match p {
        Problem::Duplicate { key, first } => {
            assert_eq!(first, "rules.row.fc2[0]");
            assert!(key.contains("tp=1") && key.contains("fc2"), "{key}");
        }
        other => panic!("{other:?}"),
    }
    let (path, p) = invalid(&with_rules(
        r#"{"column_grouped": [{"etp": 1, "num_gemms": 8, "min_tokens": 1}, {"etp": 1, "num_gemms": 8, "min_tokens": 2}]}"#,
    ));
    assert_eq!(path, "rules.column_grouped[1]");
    assert!(matches!(p, Problem::Duplicate { first, .. } if first == "rules.column_grouped[0]"));
}

#[test]
fn unknown_rule_keys_and_empty_ub_names() {
    let (path, p) = invalid(&with_rules(
        r#"{"row": {"fc2": [{"tp": 1, "min_tokens": 1, "measured_speed": 1.2}]}}"#,
    ));
    assert_eq!(path, "rules.row.fc2[0].measured_speed");
    assert_eq!(p, Problem::UnknownRuleKey("measured_speed".into()));
    let (path, p) = invalid(&with_rules(r#"{"row": {"": []}}"#));
    assert_eq!((path.as_str(), p), ("rules.row.", Problem::EmptyUbName));
}

#[test]
fn not_json_and_empty() {
    assert!(matches!(err(""), PolicyError::Empty { .. }));
    assert!(matches!(err("  \n "), PolicyError::Empty { .. }));
    match err("{\"version\": 1,\n  oops}") {
        PolicyError::NotJson { line, .. } => assert_eq!(line, 2),
        other => panic!("{other}"),
    }
}

#[test]
fn oversized_files_are_refused_before_reading() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("huge.json");
    let f = std::fs::File::create(&path).unwrap();
    f.set_len(fp8_policy::MAX_POLICY_BYTES + 1).unwrap();
    match Policy::load(&path) {
        Err(PolicyError::File(e)) => {
            assert!(
                matches!(e.kind(), fp8_io::ErrorKind::TooLarge { limit } if *limit == fp8_policy::MAX_POLICY_BYTES),
                "{e}"
            );
            assert_eq!(e.file(), path);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn missing_file_names_it() {
    let e = Policy::load("/nonexistent/dir/policy.json").unwrap_err();
    assert!(
        e.to_string().contains("/nonexistent/dir/policy.json"),
        "{e}"
    );
}

#[test]
fn every_message_names_file_path_and_fix() {
    let e = err(&with_rules(
        r#"{"row": {"fc2": [{"tp": 0, "min_tokens": 1}]}}"#,
    ));
    let msg = e.to_string();
    assert!(msg.starts_with("p.json: rules.row.fc2[0].tp: "), "{msg}");
    assert!(msg.contains("fix: "), "{msg}");
}

#[test]
fn extra_top_level_keys_survive_a_round_trip() {
    let text = r#"{"version": 1, "speedup_threshold": 1.0, "rules": {},
        "provenance": {"device": "NVIDIA H200", "reports": ["a.json"]}, "zz": 3}"#;
    let p = Policy::from_json_str(text, "p.json").unwrap();
    let again = Policy::from_json_str(&p.to_json(), "again.json").unwrap();
    assert_eq!(p, again);
    // Another tool's provenance (device as a string, not our list) is kept as it is.
    let v: serde_json::Value = serde_json::from_str(&again.to_json()).unwrap();
    assert_eq!(v["provenance"]["device"], "NVIDIA H200");
    assert_eq!(v["zz"], 3);
    assert!(again.provenance().is_none());
}

#[test]
fn duplicate_json_keys_are_errors_naming_both() {
    // The reference loader (and any JSON reader) keeps the last of two equal keys silently.
    for (text, path, key) in [
        (
            r#"{"version": 1, "speedup_threshold": 1.0, "rules": {
                "row": {"fc2": [{"tp": 1, "min_tokens": 1}]},
                "row": {"fc2": [{"tp": 1, "min_tokens": 99999}]}}}"#,
            "rules.row",
            "`rules` holds the key `row` twice: its keys #1 and #2",
        ),
        (
            r#"{"version": 1, "speedup_threshold": 1.0, "rules": {
                "row": {"fc2": [{"tp": 1, "min_tokens": 1}], "proj": [], "fc2": []}}}"#,
            "rules.row.fc2",
            "`rules.row` holds the key `fc2` twice: its keys #1 and #3",
        ),
        (
            r#"{"version": 1, "speedup_threshold": 1.0, "version": 1, "rules": {}}"#,
            "version",
            "`$` holds the key `version` twice",
        ),
    ] {
        let e = Policy::from_json_str(text, "dup.json").unwrap_err();
        match &e {
            PolicyError::Invalid { path: p, .. } => assert_eq!(p, path, "{e}"),
            other => panic!("{other}"),
        }
        let msg = e.to_string();
        assert!(msg.contains(key) && msg.contains("fix: "), "{msg}");
    }
}
