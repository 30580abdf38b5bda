//! The step-results parser never panics and either returns runs or a typed error, on arbitrary
//! text and on mutated real-shaped results.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeSet;
use std::path::Path;

use fp8_merge::step::{failed_counts, parse_results, step_policy};
use proptest::prelude::*;

const GOOD: &str = r#"{"model_name": "m", "component": "llm", "fp8_recipe": "blockwise",
 "group_keys": {"fc2": {"key": {"kind": "row", "ub_name": "fc2", "tp": 1}, "scale": 1},
                "experts.fc1": {"key": {"kind": "column_grouped", "etp": 1, "num_gemms": 8}, "scale": 8}},
 "results": [{"tokens": 1024, "execution": "eager", "modes": {"oracle": {"fp8_groups": ["fc2"]}}},
             {"tokens": 2048, "execution": "graphed", "modes": {"oracle": {"fp8_groups": ["fc2", "experts.fc1"]}}}]}"#;

#[test]
fn good_results_make_a_policy() {
    let runs = parse_results(GOOD, Path::new("good.json")).unwrap();
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
fn a_count_all_fp8_beat_the_oracle_at_is_fp8_and_says_so_in_provenance() {
    // At 2048 the oracle kept fc2 alone, and the row's rounds had all-FP8 faster beyond the
    // noise: both keys FP8 from 2048, and provenance names the count and the reference.
    let text = r#"{"model_name": "m", "component": "llm", "fp8_recipe": "blockwise",
     "group_keys": {"fc1": {"key": {"kind": "layernorm_column", "ub_name": "fc1", "tp": 1}, "scale": 1},
                    "fc2": {"key": {"kind": "row", "ub_name": "fc2", "tp": 1}, "scale": 1}},
     "results": [{"tokens": 1024, "modes": {"fp8": {"fp8_groups": ["fc1", "fc2"]}, "oracle": {"fp8_groups": [],
                    "vs_min_of": "oracle", "vs_min_p10": 1.0}}},
                 {"tokens": 2048, "modes": {"fp8": {"fp8_groups": ["fc1", "fc2"]}, "oracle": {"fp8_groups": ["fc2"],
                    "vs_min_of": "fp8", "vs_min_p10": 1.012, "vs_min_p90": 1.03}}}]}"#;
    let p = step_policy(&parse_results(text, Path::new("r.json")).unwrap()).unwrap();
    let json: serde_json::Value = serde_json::from_str(&p.to_json()).unwrap();
    assert_eq!(
        json["rules"]["layernorm_column"]["fc1"][0]["min_tokens"], 2048,
        "{json}"
    );
    assert_eq!(json["rules"]["row"]["fc2"][0]["min_tokens"], 2048, "{json}");
    let runs = &p.provenance().unwrap().step.as_ref().unwrap()["runs"];
    assert_eq!(runs[0]["overruled"], serde_json::json!({"2048": "fp8"}));
}

#[test]
fn a_cut_run_and_a_finished_one_of_the_same_step_are_one_sweep() {
    // 1024 from a run its time limit cut ("complete": false), 2048 from a finished one: one
    // layout, so experts.fc1 (BF16 at 1024, FP8 at 2048) is FP8 from 2048, not BF16 for good
    // (two layouts would each need their own threshold, the larger kept).
    let one = |tokens: u64, fp8: &str, complete: bool| {
        let text = format!(
            r#"{{"model_name": "m", "component": "llm", "fp8_recipe": "blockwise", "complete": {complete},
             "group_keys": {{"experts.fc1": {{"key": {{"kind": "column_grouped", "etp": 1, "num_gemms": 8}}, "scale": 8}}}},
             "results": [{{"tokens": {tokens}, "execution": "eager", "modes": {{"oracle": {{"fp8_groups": [{fp8}]}}}}}}]}}"#
        );
        parse_results(&text, Path::new(&format!("r{tokens}.json"))).unwrap()
    };
    let mut runs = one(1024, "", false);
    runs.extend(one(2048, r#""experts.fc1""#, true));
    let p = step_policy(&runs).unwrap();
    let step = p.provenance().unwrap().step.as_ref().unwrap();
    let experts = &step["verdicts"]["(kind=column_grouped, etp=1, num_gemms=8)"];
    assert_eq!(experts["swept_from"]["eager"], 1024 * 8);
    assert_eq!(experts["swept_to"]["eager"], 2048 * 8);
    assert_eq!(p.rule_count(), 1);
    let json: serde_json::Value = serde_json::from_str(&p.to_json()).unwrap();
    let rule = &json["rules"]["column_grouped"][0];
    assert_eq!(rule["min_tokens"], 2048 * 8, "{json}");
}

#[test]
fn provenance_keeps_the_layer_kinds_else_the_layer_count() {
    let layers = |extra: &str| {
        let text = GOOD.replacen('{', &format!("{{{extra}"), 1);
        parse_results(&text, Path::new("r.json")).unwrap()[0].info["layers"].clone()
    };
    // The TE blocks list each layer's kind; the Megatron judge, with an empty list, its count.
    assert_eq!(
        layers(r#""layer_types": ["dense", "moe"], "layers": 2, "#),
        serde_json::json!(["dense", "moe"])
    );
    assert_eq!(
        layers(r#""layer_types": [], "layers": 2, "#),
        serde_json::json!(2)
    );
    assert_eq!(layers(""), serde_json::Value::Null);
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
        let results: Vec<serde_json::Value> = rows.iter().map(|(t, g, f)| {
            let e = if *g { "graphed" } else { "eager" };
            if *f {
                serde_json::json!({"tokens": t, "execution": e, "error": "OutOfMemoryError: CUDA out of memory. x"})
            } else {
                serde_json::json!({"tokens": t, "execution": e, "modes": {"oracle": {"fp8_groups": []}}})
            }
        }).collect();
        let text = serde_json::json!({"group_keys": {"fc2": {"key": {"kind": "row", "ub_name": "fc2", "tp": 1}}},
                                      "results": results}).to_string();
        let failed = failed_counts(&text, Path::new("x.json")).unwrap();
        prop_assert_eq!(failed.len(), rows.iter().filter(|r| r.2).count());
        prop_assert!(failed.iter().all(|f| f.out_of_memory()));
        let timed: usize = parse_results(&text, Path::new("x.json"))
            .map(|runs| runs.iter().map(|r| r.counts.len()).sum())
            .unwrap_or(0);
        prop_assert_eq!(timed, rows.iter().filter(|r| !r.2).count());
    }

    #[test]
    fn a_marked_run_without_the_oracle_reads_its_fastest_mode_ahead_of_bf16(
        modes in proptest::collection::vec((0.7f64..1.3, 0.0f64..0.2, any::<u8>()), 1..6)
    ) {
        // Policy modes (median, band half-width, a subset of four groups) beside BF16, no oracle.
        let groups = ["qkv", "proj", "fc1", "fc2"];
        let subset = |bits: u8| -> Vec<&str> { groups.iter().enumerate().filter(|(i, _)| bits >> i & 1 == 1).map(|(_, g)| *g).collect() };
        let mut m = serde_json::Map::new();
        m.insert("bf16".into(), serde_json::json!({"fp8_groups": []}));
        for (i, (median, half, bits)) in modes.iter().enumerate() {
            m.insert(format!("policy:p{i}.json"), serde_json::json!({"fp8_groups": subset(*bits),
                "vs_bf16_median": median, "vs_bf16_p10": median - half, "vs_bf16_p90": median + half}));
        }
        let keys: serde_json::Map<String, serde_json::Value> = groups.iter()
            .map(|g| ((*g).to_owned(), serde_json::json!({"key": {"kind": "row", "ub_name": g, "tp": 2}}))).collect();
        let text = serde_json::json!({"verdict_without_oracle": "fastest_mode", "group_keys": keys,
            "results": [{"tokens": 2048, "modes": m}]}).to_string();
        let count = &parse_results(&text, Path::new("g.json")).unwrap()[0].counts[0];
        let ahead: Vec<&(f64, f64, u8)> = modes.iter().filter(|(md, h, _)| md + h < 1.0).collect();
        match ahead.iter().min_by(|a, b| a.0.total_cmp(&b.0)) {
            // Nothing measured ahead of BF16 beyond the noise: BF16, never a guess.
            None => prop_assert!(count.fp8_groups.is_empty() && count.overruled_by.as_deref() == Some("bf16")),
            Some(best) => {
                let want: BTreeSet<String> = subset(best.2).into_iter().map(str::to_owned).collect();
                prop_assert_eq!(&count.fp8_groups, &want);
            }
        }
    }

    #[test]
    fn mutated_results_never_panic(cut in 0usize..GOOD.len(), byte in any::<u8>()) {
        let mut b = GOOD.as_bytes().to_vec();
        b[cut] = byte;
        if let Ok(s) = String::from_utf8(b)
            && let Ok(runs) = parse_results(&s, Path::new("x.json"))
        {
            let _ = step_policy(&runs);
        }
    }
}
