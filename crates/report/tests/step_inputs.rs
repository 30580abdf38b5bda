//! The step model's inputs format: a document the worker writes is read back; unknown fields,
//! bad times, dangling groups, rows that contradict their mode or `groups`, and rows timed twice
//! are refused with the field named; no input makes it panic.

#![allow(clippy::unwrap_used)]

use std::path::Path;

use fp8_report::step_inputs::{StepPlans, parse_step_inputs};
use proptest::prelude::*;

fn doc() -> serde_json::Value {
    serde_json::json!({
        "format": "adaptive-fp8-step-inputs", "version": 1, "model": "m.json", "model_name": "m",
        "component": "llm", "recipe": "Float8BlockScaling()", "fp8_recipe": "blockwise", "device": "H200",
        "te_version": "2.20.2", "tp": 1, "ep": 1, "etp": 1, "layers": 2, "layer_types": ["dense", "dense"],
        "grad_accum": 1, "steps": 5, "rounds": 2,
        "groups": [{"group": "fc1", "key": {"kind": "layernorm_column", "ub_name": "fc1", "tp": 1}, "scale": 1,
                    "instances": 2, "in_features": 2048, "out_features": 8192, "graphed": true, "fp8_capable": true}],
        "modules": [{"tokens": 1024, "group": "fc1", "bf16": {"host_ms": [0.1, 0.1], "gpu_ms": [0.5, 0.6]},
                     "fp8": {"host_ms": [0.2, 0.2], "gpu_ms": [0.3, 0.3]}}],
        "step_times": [{"execution": "eager", "tokens": 1024, "mode": "bf16", "fp8_groups": [],
                        "wall_ms": [3.0, 3.1], "host_ms": 2.0, "gpu_ms": 1.5}],
        "failed": [], "notes": [], "complete": true,
    })
}

fn parse(v: &serde_json::Value) -> Result<(), String> {
    parse_step_inputs(&v.to_string(), Path::new("in.json"))
        .map(|_| ())
        .map_err(|e| e.to_string())
}

#[test]
fn what_settling_took_is_read_and_bad_values_are_refused() {
    let mut v = doc();
    v["settle_s"] = 12.0.into();
    v["settled"] = serde_json::json!({"at": "eager at 1024", "rounds": 7, "seconds": 2.5, "first_ms": 40.0, "last_ms": 31.0, "flat": true});
    let d = parse_step_inputs(&v.to_string(), Path::new("in.json")).unwrap();
    assert_eq!(d.settle_s, Some(12.0));
    assert_eq!(
        d.settled.as_ref().map(|s| (s.rounds, s.flat)),
        Some((7, true))
    );
    // A document of a worker before settling has neither.
    let old = parse_step_inputs(&doc().to_string(), Path::new("in.json")).unwrap();
    assert_eq!((old.settle_s, old.settled), (None, None));
    let cases: Vec<(&str, Change, &str)> = vec![
        (
            "a negative bound",
            Box::new(|v| v["settle_s"] = (-1.0).into()),
            "settle_s: -1 is not a bound in seconds",
        ),
        (
            "no rounds",
            Box::new(|v| {
                v["settled"] = serde_json::json!({"at": "eager at 1024", "rounds": 0, "seconds": 0.0, "first_ms": 1.0, "last_ms": 1.0, "flat": true});
            }),
            "settled (eager at 1024): rounds must be positive",
        ),
        (
            "a negative time",
            Box::new(|v| {
                v["settled"] = serde_json::json!({"at": "graphed at 2048", "rounds": 6, "seconds": 1.0, "first_ms": -1.0, "last_ms": 1.0, "flat": false});
            }),
            "settled (graphed at 2048)",
        ),
    ];
    assert_refused(cases);
}

#[test]
fn a_whole_step_may_have_up_to_three_times_rounds() {
    // The worker times a count of short steps in more rounds (`count_rounds`).
    for n in [2, 4, 6] {
        let mut v = doc();
        v["step_times"][0]["wall_ms"] = serde_json::json!(vec![3.0; n]);
        parse(&v).unwrap();
    }
}

#[test]
fn a_document_round_trips() {
    let d = parse_step_inputs(&doc().to_string(), Path::new("in.json")).unwrap();
    assert_eq!(
        d.groups[0].key.to_string(),
        "(kind=layernorm_column, ub_name=fc1, tp=1)"
    );
    let again = parse_step_inputs(&d.to_json(), Path::new("in.json")).unwrap();
    assert_eq!(d, again);
    let plans = StepPlans::new(Vec::new()).to_json();
    assert!(plans.contains("adaptive-fp8-step-plans"), "{plans}");
}

type Change = Box<dyn Fn(&mut serde_json::Value)>;

/// Each case's change to [`doc`] is refused, the file and `want` in the error.
fn assert_refused(cases: Vec<(&str, Change, &str)>) {
    for (what, change, want) in cases {
        let mut v = doc();
        change(&mut v);
        let e = parse(&v).unwrap_err();
        assert!(e.contains("in.json") && e.contains(want), "{what}: {e}");
    }
}

#[test]
fn bad_documents_are_refused_with_the_field_named() {
    let cases: Vec<(&str, Change, &str)> = vec![
        (
            "extra field",
            Box::new(|v| v["argv"] = "x".into()),
            "unknown field `argv`",
        ),
        (
            "extra nested",
            Box::new(|v| v["groups"][0]["extra"] = 1.into()),
            "unknown field `extra`",
        ),
        (
            "format",
            Box::new(|v| v["format"] = "other".into()),
            "format: expected",
        ),
        (
            "version",
            Box::new(|v| v["version"] = 2.into()),
            "version: this fp8sel reads version 1",
        ),
        (
            "negative",
            Box::new(|v| v["modules"][0]["bf16"]["gpu_ms"][0] = (-1.0).into()),
            "modules[0] (fc1 at 1024).bf16.gpu_ms",
        ),
        (
            "rounds",
            Box::new(|v| v["step_times"][0]["wall_ms"] = serde_json::json!([1.0])),
            "wall_ms: 1 values, expected rounds = 2 to 6",
        ),
        (
            "more rounds of a whole step than three times rounds",
            Box::new(|v| v["step_times"][0]["wall_ms"] = serde_json::json!(vec![1.0; 7])),
            "step_times[0] (eager at 1024).wall_ms: 7 values, expected rounds = 2 to 6",
        ),
        (
            "more rounds of a module than rounds",
            Box::new(|v| v["modules"][0]["bf16"]["gpu_ms"] = serde_json::json!(vec![1.0; 3])),
            "modules[0] (fc1 at 1024).bf16.gpu_ms: 3 values, expected rounds = 2",
        ),
        (
            "row steps above the document's",
            Box::new(|v| v["step_times"][0]["steps"] = 99.into()),
            "step_times[0] (eager at 1024).steps: 99 is not between 1 and the document's steps",
        ),
        (
            "row steps zero",
            Box::new(|v| v["step_times"][0]["steps"] = 0.into()),
            ".steps: 0 is not between 1",
        ),
        (
            "dangling",
            Box::new(|v| v["modules"][0]["group"] = "qkv".into()),
            "not a group of `groups`",
        ),
        (
            "mode",
            Box::new(|v| v["step_times"][0]["mode"] = "oracle".into()),
            "unknown variant `oracle`",
        ),
        (
            "execution",
            Box::new(|v| v["step_times"][0]["execution"] = "fast".into()),
            "unknown execution `fast`",
        ),
    ];
    assert_refused(cases);
}

#[test]
fn rows_that_contradict_their_mode_or_groups_or_repeat_are_refused() {
    let cases: Vec<(&str, Change, &str)> = vec![
        (
            "a step of 0 tokens",
            Box::new(|v| v["step_times"][0]["tokens"] = 0.into()),
            "step_times[0] (eager at 0).tokens: a step of 0 tokens",
        ),
        (
            "an all-BF16 row with FP8 groups",
            Box::new(|v| v["step_times"][0]["fp8_groups"] = serde_json::json!(["fc1"])),
            "step_times[0] (eager at 1024).fp8_groups: not what its mode runs",
        ),
        (
            "an all-FP8 row without every FP8-capable group",
            Box::new(|v| v["step_times"][0]["mode"] = "fp8".into()),
            "not what its mode runs",
        ),
        (
            "a plan with a group TE cannot run in FP8",
            Box::new(|v| {
                v["groups"][0]["fp8_capable"] = false.into();
                v["modules"][0]["fp8"] = serde_json::Value::Null;
                v["step_times"][0]["mode"] = "plan".into();
                v["step_times"][0]["fp8_groups"] = serde_json::json!(["fc1"]);
            }),
            "not what its mode runs",
        ),
        (
            "FP8 rounds of a group that is not FP8-capable",
            Box::new(|v| v["groups"][0]["fp8_capable"] = false.into()),
            "modules[0] (fc1 at 1024).fp8: FP8 rounds where `groups` says the group is not FP8-capable",
        ),
        (
            "no FP8 rounds of a capable group",
            Box::new(|v| v["modules"][0]["fp8"] = serde_json::Value::Null),
            "or none where it is",
        ),
        (
            "a group timed twice at a count",
            Box::new(|v| {
                let m = v["modules"][0].clone();
                v["modules"].as_array_mut().unwrap().push(m);
            }),
            "modules[1] (fc1 at 1024): the group is timed twice at this count",
        ),
        (
            "a mode timed twice at a count",
            Box::new(|v| {
                let r = v["step_times"][0].clone();
                v["step_times"].as_array_mut().unwrap().push(r);
            }),
            "step_times[1] (eager at 1024): the same mode is timed twice at this count",
        ),
    ];
    assert_refused(cases);
}

proptest! {
    /// Any field of the document replaced by any small JSON value: parsed or refused, never a panic.
    #[test]
    fn no_document_makes_the_reader_panic(path in 0usize..40, value in prop_oneof![
        Just(serde_json::Value::Null), any::<i64>().prop_map(serde_json::Value::from),
        any::<f64>().prop_map(serde_json::Value::from), "[a-z]{0,6}".prop_map(serde_json::Value::from),
        Just(serde_json::json!([])), Just(serde_json::json!({})),
    ]) {
        let mut v = doc();
        let mut leaves = Vec::new();
        collect(&v, String::new(), &mut leaves);
        let at = &leaves[path % leaves.len()];
        if let Some(slot) = v.pointer_mut(at) {
            *slot = value;
        }
        let _ = parse(&v);
    }
}

fn collect(v: &serde_json::Value, at: String, out: &mut Vec<String>) {
    out.push(at.clone());
    match v {
        serde_json::Value::Object(m) => m
            .iter()
            .for_each(|(k, x)| collect(x, format!("{at}/{k}"), out)),
        serde_json::Value::Array(a) => a
            .iter()
            .enumerate()
            .for_each(|(i, x)| collect(x, format!("{at}/{i}"), out)),
        _ => {}
    }
}

/// The committed schemas (docs/schemas/) are the types' own: regenerate with
/// `FP8_UPDATE_SCHEMAS=1 cargo test -p fp8-report --test step_inputs`.
#[test]
fn the_committed_schemas_are_generated_from_the_types() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/schemas");
    for (name, text) in [
        (
            "adaptive-fp8-step-inputs.v1.schema.json",
            fp8_report::step_inputs::step_inputs_schema(),
        ),
        (
            "adaptive-fp8-step-plans.v1.schema.json",
            fp8_report::step_inputs::step_plans_schema(),
        ),
        (
            "adaptive-fp8-step-results.v1.schema.json",
            fp8_report::step_results::step_results_schema(),
        ),
        (
            "adaptive-fp8-convergence.v1.schema.json",
            fp8_report::convergence::convergence_schema(),
        ),
    ] {
        let f = dir.join(name);
        if std::env::var_os("FP8_UPDATE_SCHEMAS").is_some() {
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(&f, &text).unwrap();
        }
        let committed = std::fs::read_to_string(&f).unwrap_or_default();
        assert!(
            committed == text,
            "{} is stale: FP8_UPDATE_SCHEMAS=1 cargo test -p fp8-report --test step_inputs",
            f.display()
        );
    }
    // The schema refuses what the reader refuses: unknown fields.
    for schema in [
        fp8_report::step_inputs::step_inputs_schema(),
        fp8_report::step_results::step_results_schema(),
        fp8_report::convergence::convergence_schema(),
    ] {
        let v: serde_json::Value = serde_json::from_str(&schema).unwrap();
        assert_eq!(v["additionalProperties"], false, "{v}");
    }
}

#[test]
fn whether_the_collector_was_off_in_timed_rounds_is_read_and_older_documents_say_no() {
    // `--manual-gc` (Python's collector off while steps are timed) is recorded; documents that
    // predate the field read as the collector left on, and a wrong type names the field.
    let older = parse_step_inputs(&doc().to_string(), Path::new("in.json")).unwrap();
    assert!(!older.manual_gc);
    let mut v = doc();
    v["manual_gc"] = true.into();
    let d = parse_step_inputs(&v.to_string(), Path::new("in.json")).unwrap();
    assert!(d.manual_gc);
    assert_eq!(
        parse_step_inputs(&d.to_json(), Path::new("in.json")).unwrap(),
        d
    );
    v["manual_gc"] = "yes".into();
    let e = parse(&v).unwrap_err();
    assert!(e.contains("in.json") && e.contains("manual_gc"), "{e}");
}

#[test]
fn check_rounds_are_named_once_and_read_in_round_order() {
    use fp8_report::step_inputs::{check_round, check_round_word, check_rounds_beside};
    assert_eq!(
        (0..4).map(check_round_word).collect::<Vec<_>>(),
        ["check", "recheck", "recheck2", "recheck3"]
    );
    for w in [
        "recheck1",
        "recheck0",
        "recheck02",
        "recheck+2",
        "inputs",
        "checks",
        "",
    ] {
        assert_eq!(check_round(w), None, "{w}");
    }
    // Beside a layout: round order (by name `recheck2` sorts before `recheck`), up to a gap.
    let dir = tempfile::tempdir().unwrap();
    for w in ["check", "recheck", "recheck2", "recheck4"] {
        std::fs::write(dir.path().join(format!("x_tp1_{w}_step.json")), "{}").unwrap();
    }
    let found: Vec<String> = check_rounds_beside(dir.path(), "x_tp1")
        .iter()
        .map(|p| p.display().to_string())
        .collect();
    assert_eq!(
        found,
        [
            "x_tp1_check_step.json",
            "x_tp1_recheck_step.json",
            "x_tp1_recheck2_step.json"
        ]
    );
}

proptest! {
    #[test]
    fn a_check_rounds_word_reads_back_as_its_round(round in 0usize..100_000) {
        use fp8_report::step_inputs::{check_round, check_round_word};
        prop_assert_eq!(check_round(&check_round_word(round)), Some(round));
    }

    #[test]
    fn any_word_read_as_a_round_is_that_rounds_word(word in "[a-z0-9]{0,12}") {
        use fp8_report::step_inputs::{check_round, check_round_word};
        if let Some(r) = check_round(&word) {
            prop_assert_eq!(check_round_word(r), word);
        }
    }
}
