//! The step benchmark's results: every committed file reads with the one typed reader, a
//! document round-trips, and what the reader refuses it names.

#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};

use fp8_report::step_results::{STEP_RESULTS_FORMAT, parse_step_results};

fn json_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            json_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "json") {
            out.push(p);
        }
    }
}

/// Whether a JSON document is the step benchmark's (rows with modes or an error).
fn is_step_results(v: &serde_json::Value) -> bool {
    v.get("results")
        .and_then(|r| r.as_array())
        .is_some_and(|rows| {
            rows.iter()
                .any(|r| r.get("modes").is_some() || r.get("error").is_some())
        })
}

#[test]
fn every_committed_step_result_reads_typed_and_round_trips() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut files = Vec::new();
    json_files(&root.join("reports"), &mut files);
    json_files(&root.join("docs/device-logs"), &mut files);
    let mut read = 0;
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        let Ok(v) = serde_json::from_str::<serde_json::Value>(&text) else {
            continue;
        };
        if !is_step_results(&v) {
            continue;
        }
        let doc = parse_step_results(&text, &f).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(doc.format, STEP_RESULTS_FORMAT);
        let again = parse_step_results(&doc.to_json(), &f).unwrap();
        assert_eq!(again, doc, "{}", f.display());
        read += 1;
    }
    assert!(read >= 200, "only {read} step results read");
}

#[test]
fn refusals_name_the_file_and_the_field() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let f = root.join("reports/h200/step/llama3_2_1b_tp1_ep1_etp1_step.json");
    let text = std::fs::read_to_string(&f).unwrap();
    let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
    v["results"][0]["modes"]["bf16"]["ms_median"] = serde_json::json!(-1.0);
    let e = parse_step_results(&v.to_string(), Path::new("s.json"))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("s.json") && e.contains("results[0]") && e.contains("bf16"),
        "{e}"
    );
    let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
    v["planted"] = serde_json::json!(1);
    let e = parse_step_results(&v.to_string(), Path::new("s.json"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("planted"), "{e}");
}

#[test]
fn a_precision_check_keeps_the_recipes_the_step_read_back() {
    // The Megatron judge's precision checks count the FP8 modules by the TE recipe each ran;
    // checks made before it read recipes back have none, and read the same.
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let f = root.join("docs/device-logs/recipe_plans/mix/judge_L8_16384.json");
    let text = std::fs::read_to_string(&f).unwrap();
    let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let before = parse_step_results(&text, &f).unwrap();
    assert!(before.precision_checks.iter().all(|c| c.recipes.is_empty()));
    v["precision_checks"][0]["recipes"] =
        serde_json::json!({"Float8BlockScaling": 2, "Float8CurrentScaling": 6});
    let doc = parse_step_results(&v.to_string(), &f).unwrap();
    let counts = &doc.precision_checks[0].recipes;
    assert_eq!(
        counts.values().sum::<u64>(),
        doc.precision_checks[0].fp8_modules
    );
    assert_eq!(counts["Float8CurrentScaling"], 6);
    assert_eq!(parse_step_results(&doc.to_json(), &f).unwrap(), doc);
    v["precision_checks"][0]["recipes"] = serde_json::json!({"Float8BlockScaling": -1});
    let e = parse_step_results(&v.to_string(), Path::new("s.json"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("s.json") && e.contains("recipes"), "{e}");
}

#[test]
fn a_precision_check_keeps_the_look_for_stale_fp8_weights() {
    // The judge's look at each FP8 module's cached weight across one more step: counts and the
    // stale modules, or why it was not made; checks made before it have none.
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let f = root.join("docs/device-logs/recipe_plans/mix/judge_L8_16384.json");
    let text = std::fs::read_to_string(&f).unwrap();
    assert!(
        parse_step_results(&text, &f)
            .unwrap()
            .precision_checks
            .iter()
            .all(|c| c.fp8_weights.is_none())
    );
    let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
    v["precision_checks"][0]["fp8_weights"] = serde_json::json!(
        {"cached": 2, "uncached": 0, "stale": ["decoder.layers.0.mlp.linear_fc1"], "unmoved": []});
    v["precision_checks"][1]["fp8_weights"] =
        serde_json::json!({"not_checked": "OutOfMemoryError: x"});
    let doc = parse_step_results(&v.to_string(), &f).unwrap();
    let look = doc.precision_checks[0].fp8_weights.as_ref().unwrap();
    assert_eq!(
        (look.cached, look.stale.len(), look.not_checked.is_none()),
        (2, 1, true)
    );
    let why = doc.precision_checks[1].fp8_weights.as_ref().unwrap();
    assert_eq!(
        (why.cached, why.not_checked.as_deref()),
        (0, Some("OutOfMemoryError: x"))
    );
    assert_eq!(parse_step_results(&doc.to_json(), &f).unwrap(), doc);
    v["precision_checks"][0]["fp8_weights"] = serde_json::json!({"cached": 1, "fresh": 1});
    let e = parse_step_results(&v.to_string(), Path::new("s.json"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("s.json") && e.contains("fresh"), "{e}");
}

#[test]
fn a_judge_run_records_whether_the_collector_was_off_in_timed_rounds() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let f = root.join("docs/device-logs/recipe_plans/mix/judge_L8_16384.json");
    let text = std::fs::read_to_string(&f).unwrap();
    assert!(!parse_step_results(&text, &f).unwrap().manual_gc);
    let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
    v["manual_gc"] = true.into();
    let doc = parse_step_results(&v.to_string(), &f).unwrap();
    assert!(doc.manual_gc);
    assert_eq!(parse_step_results(&doc.to_json(), &f).unwrap(), doc);
}

#[test]
fn a_judge_run_records_what_settling_took_and_bad_values_are_refused() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let f = root.join("docs/device-logs/recipe_plans/mix/judge_L8_16384.json");
    let text = std::fs::read_to_string(&f).unwrap();
    let old = parse_step_results(&text, &f).unwrap();
    assert_eq!((old.settle_s, old.settled), (None, None)); // a run before settling
    let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
    v["settle_s"] = 12.0.into();
    v["settled"] = serde_json::json!({"at": "eager at 16384", "rounds": 6, "seconds": 3.5, "first_ms": 180.0, "last_ms": 176.0, "flat": true});
    let doc = parse_step_results(&v.to_string(), &f).unwrap();
    assert_eq!(doc.settled.as_ref().map(|s| s.rounds), Some(6));
    assert_eq!(parse_step_results(&doc.to_json(), &f).unwrap(), doc);
    v["settled"]["last_ms"] = (-1.0).into();
    let e = parse_step_results(&v.to_string(), &f)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("judge_L8_16384.json") && e.contains("settled (eager at 16384)"),
        "{e}"
    );
}
