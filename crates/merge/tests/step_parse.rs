//! The step merge over the typed step results (`fp8_report::step_results`): each row's verdict
//! as the benchmark wrote it, thresholds, provenance, and a parser that never panics on
//! arbitrary text or mutated real-shaped results.

#![allow(clippy::unwrap_used)]

use std::path::Path;

use fp8_merge::step::{failed_counts, parse_results, step_policy};
use proptest::prelude::*;
use serde_json::{Value, json};

/// One mode's figures (ratios 1, a tie), FP8 in `groups`.
fn mode(groups: &[&str]) -> Value {
    json!({"fp8_groups": groups, "ms_median": 10.0, "ms_p10": 9.5, "ms_p90": 10.5,
           "vs_bf16_median": 1.0, "vs_bf16_p10": 0.97, "vs_bf16_p90": 1.03, "verdict_vs_bf16": "tie",
           "vs_best_of_bf16_fp8": 1.0})
}

/// A timed row: all-BF16, all-FP8 over `all`, and the verdict `groups` by `by`.
fn row(tokens: u64, execution: &str, all: &[&str], groups: &[&str], by: &str) -> Value {
    json!({"tokens": tokens, "execution": execution,
           "modes": {"bf16": mode(&[]), "fp8": mode(all), "oracle": mode(groups)},
           "verdict": {"fp8_groups": groups, "by": by}})
}

/// A results document of `rows` with `header` fields over the defaults.
fn doc(header: Value, rows: Vec<Value>) -> String {
    let mut d = json!({"format": "adaptive-fp8-step-results", "version": 1, "model": "m.yaml",
        "model_name": "m", "component": "llm", "trainer": "te", "recipe": "Float8BlockScaling",
        "fp8_recipe": "blockwise", "device": "NVIDIA H200", "te_version": "2.20.2", "tp": 1,
        "layers": 2, "steps": 5, "repeats": 7, "execution": "eager,graphed",
        "group_keys": {"fc2": {"key": {"kind": "row", "ub_name": "fc2", "tp": 1}, "scale": 1},
                       "experts.fc1": {"key": {"kind": "column_grouped", "etp": 1, "num_gemms": 8}, "scale": 8}},
        "results": rows});
    for (k, v) in header.as_object().unwrap() {
        d[k] = v.clone();
    }
    d.to_string()
}

const ALL: [&str; 2] = ["fc2", "experts.fc1"];

fn good() -> String {
    doc(
        json!({}),
        vec![
            row(1024, "eager", &ALL, &["fc2"], "oracle"),
            row(2048, "graphed", &ALL, &["fc2", "experts.fc1"], "oracle"),
        ],
    )
}

#[test]
fn good_results_make_a_policy() {
    let runs = parse_results(&good(), Path::new("good.json")).unwrap();
    assert_eq!(runs.len(), 2);
    let p = step_policy(&runs).unwrap();
    assert_eq!(p.rule_count(), 2);
    // Each key's swept counts, in its own tokens, as the fold reads them.
    let step = p.provenance().unwrap().step.as_ref().unwrap();
    let experts = &step["verdicts"]["(kind=column_grouped, etp=1, num_gemms=8)"];
    assert_eq!(experts["swept_from"]["graphed"], 2048 * 8);
    assert_eq!(experts["swept_to"]["graphed"], 2048 * 8);
    assert_eq!(experts["swept_from"]["eager"], 1024 * 8);
    assert_eq!(
        step["verdicts"]["(kind=row, ub_name=fc2, tp=1)"]["swept_from"]["eager"],
        1024
    );
}

#[test]
fn a_verdict_by_another_mode_than_the_oracle_is_said_in_provenance() {
    // At 2048 the row's rounds had all-FP8 faster than the oracle (fc2 alone) beyond the noise,
    // so the benchmark wrote all-FP8's groups as the verdict: both keys FP8 from 2048.
    let text = doc(
        json!({}),
        vec![
            row(1024, "eager", &ALL, &[], "oracle"),
            row(2048, "eager", &ALL, &ALL, "fp8"),
        ],
    );
    let p = step_policy(&parse_results(&text, Path::new("r.json")).unwrap()).unwrap();
    let v: Value = serde_json::from_str(&p.to_json()).unwrap();
    assert_eq!(v["rules"]["row"]["fc2"][0]["min_tokens"], 2048, "{v}");
    assert_eq!(
        v["rules"]["column_grouped"][0]["min_tokens"],
        2048 * 8,
        "{v}"
    );
    let runs = &p.provenance().unwrap().step.as_ref().unwrap()["runs"];
    assert_eq!(runs[0]["overruled"], json!({"2048": "fp8"}));
}

#[test]
fn a_row_without_a_verdict_is_refused_with_the_fix() {
    let mut r = row(1024, "eager", &ALL, &[], "oracle");
    r.as_object_mut().unwrap().remove("verdict");
    let e = parse_results(&doc(json!({}), vec![r]), Path::new("judge.json"))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("judge.json") && e.contains("results[0]") && e.contains("--oracle greedy"),
        "{e}"
    );
}

#[test]
fn an_untyped_or_older_file_is_refused_naming_the_field() {
    for (text, want) in [
        (good().replace("adaptive-fp8-step-results", "x"), "format"),
        (good().replace("\"version\":1", "\"version\":2"), "version"),
        (
            good().replace("\"steps\":5", "\"steps\":5,\"extra\":1"),
            "extra",
        ),
        (
            good().replace("\"execution\":\"eager\"", "\"execution\":\"fast\""),
            "fast",
        ),
        (
            good().replacen("\"verdict\":{", "\"x\":1,\"verdict\":{", 1),
            "`x`",
        ),
    ] {
        let e = parse_results(&text, Path::new("s.json"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("s.json") && e.contains(want), "{want}: {e}");
    }
    // A verdict names only groups the row's all-FP8 mode ran.
    let bad = doc(
        json!({}),
        vec![row(1024, "eager", &["fc2"], &["experts.fc1"], "oracle")],
    );
    let e = parse_results(&bad, Path::new("s.json"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("verdict") && e.contains("experts.fc1"), "{e}");
}

#[test]
fn a_cut_run_and_a_finished_one_of_the_same_step_are_one_sweep() {
    // 1024 from a run its time limit cut ("complete": false), 2048 from a finished one: one
    // layout, so experts.fc1 (BF16 at 1024, FP8 at 2048) is FP8 from 2048, not BF16 for good
    // (two layouts would each need their own threshold, the larger kept).
    let one = |tokens: u64, fp8: &[&str], complete: bool| {
        let text = doc(
            json!({"complete": complete, "group_keys": {"experts.fc1": {"key": {"kind": "column_grouped", "etp": 1, "num_gemms": 8}, "scale": 8}}}),
            vec![row(tokens, "eager", &["experts.fc1"], fp8, "oracle")],
        );
        parse_results(&text, Path::new(&format!("r{tokens}.json"))).unwrap()
    };
    let mut runs = one(1024, &[], false);
    runs.extend(one(2048, &["experts.fc1"], true));
    let p = step_policy(&runs).unwrap();
    let step = p.provenance().unwrap().step.as_ref().unwrap();
    let experts = &step["verdicts"]["(kind=column_grouped, etp=1, num_gemms=8)"];
    assert_eq!(experts["swept_from"]["eager"], 1024 * 8);
    assert_eq!(experts["swept_to"]["eager"], 2048 * 8);
    assert_eq!(p.rule_count(), 1);
    let v: Value = serde_json::from_str(&p.to_json()).unwrap();
    assert_eq!(
        v["rules"]["column_grouped"][0]["min_tokens"],
        2048 * 8,
        "{v}"
    );
}

#[test]
fn provenance_keeps_the_layer_kinds_else_the_layer_count() {
    let layers = |header: Value| {
        let text = doc(header, vec![row(1024, "eager", &ALL, &[], "oracle")]);
        parse_results(&text, Path::new("r.json")).unwrap()[0].info()["layers"].clone()
    };
    // The TE blocks list each layer's kind; the Megatron judge, with an empty list, its count.
    assert_eq!(
        layers(json!({"layer_types": ["dense", "moe"]})),
        json!(["dense", "moe"])
    );
    assert_eq!(layers(json!({"layer_types": []})), json!(2));
}

#[test]
fn a_group_the_step_did_not_build_is_not_measured() {
    // fc2 is in the plan's group_keys but no all-FP8 row ran it: the step has no verdict on it.
    let text = doc(
        json!({}),
        vec![row(2048, "eager", &["experts.fc1"], &[], "oracle")],
    );
    let runs = parse_results(&text, Path::new("s.json")).unwrap();
    let groups: Vec<&str> = runs[0].groups.iter().map(|g| g.group.as_str()).collect();
    assert_eq!(groups, ["experts.fc1"]);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn arbitrary_text_never_panics(s in "\\PC{0,400}") {
        let _ = parse_results(&s, Path::new("x.json"));
        let _ = failed_counts(&s, Path::new("x.json"));
    }

    #[test]
    fn every_error_row_is_a_failed_count_and_no_verdict(
        rows in proptest::collection::vec((1u64..1 << 20, any::<bool>(), any::<bool>()), 1..12)
    ) {
        // (tokens, graphed?, failed?) rows; a failed row carries only its error.
        let results: Vec<Value> = rows.iter().map(|(t, g, f)| {
            let e = if *g { "graphed" } else { "eager" };
            if *f {
                json!({"tokens": t, "execution": e, "error": "OutOfMemoryError: CUDA out of memory. x"})
            } else {
                row(*t, e, &ALL, &[], "oracle")
            }
        }).collect();
        let text = doc(json!({}), results);
        let failed = failed_counts(&text, Path::new("x.json")).unwrap();
        prop_assert_eq!(failed.len(), rows.iter().filter(|r| r.2).count());
        prop_assert!(failed.iter().all(|f| f.out_of_memory()));
        let timed: usize = parse_results(&text, Path::new("x.json"))
            .map(|runs| runs.iter().map(|r| r.counts.len()).sum())
            .unwrap_or(0);
        prop_assert_eq!(timed, rows.iter().filter(|r| !r.2).count());
    }

    #[test]
    fn any_field_replaced_by_a_small_value_is_read_or_refused(
        at in 0usize..64, value in prop_oneof![Just(json!(null)), Just(json!(0)), Just(json!(-1)),
            Just(json!("")), Just(json!([])), Just(json!({})), Just(json!(1e308)), Just(json!(true))]
    ) {
        // Reaches past the parser: whatever it accepts makes a policy or a typed error.
        let mut v: Value = serde_json::from_str(&good()).unwrap();
        let mut paths = Vec::new();
        collect_paths(&v, String::new(), &mut paths);
        let p = &paths[at % paths.len()];
        if let Some(slot) = v.pointer_mut(p) {
            *slot = value;
        }
        if let Ok(runs) = parse_results(&v.to_string(), Path::new("x.json")) {
            let _ = step_policy(&runs);
        }
    }

    #[test]
    fn mutated_results_never_panic(cut in 0usize..512, byte in any::<u8>()) {
        let mut b = good().into_bytes();
        let i = cut % b.len();
        b[i] = byte;
        if let Ok(s) = String::from_utf8(b)
            && let Ok(runs) = parse_results(&s, Path::new("x.json"))
        {
            let _ = step_policy(&runs);
        }
    }
}

/// Every JSON pointer of a value's leaves and containers.
fn collect_paths(v: &Value, at: String, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                let p = format!("{at}/{k}");
                out.push(p.clone());
                collect_paths(x, p, out);
            }
        }
        Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                let p = format!("{at}/{i}");
                out.push(p.clone());
                collect_paths(x, p, out);
            }
        }
        _ => {}
    }
}
