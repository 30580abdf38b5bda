//! The step-results parser never panics and either returns runs or a typed error, on arbitrary
//! text and on mutated real-shaped results.

#![allow(clippy::unwrap_used)]

use std::path::Path;

use fp8_merge::step::{parse_results, step_policy};
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
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn arbitrary_text_never_panics(s in "\\PC{0,400}") {
        let _ = parse_results(&s, Path::new("x.json"));
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
