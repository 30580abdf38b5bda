//! The report reader never panics, and what it accepts it checked.

#![allow(clippy::unwrap_used)]

use std::path::Path;

use fp8_report::{PointId, parse};
use proptest::prelude::*;

fn report_text(p10: f64, median: f64, p90: f64, tp: u32) -> String {
    format!(
        r#"{{"format": "fp8sel-report", "report_version": 1, "estimated": false,
        "provenance": {{"tool_version": "x", "device": {{"name": "d", "compute_capability": "9.0"}},
        "recipe": "blockwise", "scale_mode": "pow2", "fp8_param": true, "fp8_pad": 16, "warmup": 1,
        "iters": 1, "timing": "gpu", "model": "m", "model_config": "c",
        "parallel": {{"tp": 1, "ep": 1, "etp": 1, "cp": 1}}}},
        "points": [{{"component": "llm", "module": "m.fc2", "te_class": "TERowParallelLinear",
        "module_kind": "row", "ub_name": "fc2", "tp": {tp}, "etp": 1, "num_gemms": 1, "tokens": 1024,
        "gemm_rows": 1024, "padded_rows": 1024, "in_features": 64, "out_features": 64,
        "status": "ok",
        "bf16": {{"fwd_ms": {{"median": 1, "p10": 1, "p90": 1}}, "bwd_ms": {{"median": 1, "p10": 1, "p90": 1}},
                 "total_ms": {{"median": {median}, "p10": {p10}, "p90": {p90}}}, "launches": 3}},
        "fp8": {{"fwd_ms": {{"median": 1, "p10": 1, "p90": 1}}, "bwd_ms": {{"median": 1, "p10": 1, "p90": 1}},
                 "total_ms": {{"median": 1, "p10": 1, "p90": 1}}, "launches": 5}}}}]}}"#
    )
}

#[test]
fn a_valid_report_reads_and_its_point_has_one_identity() {
    let r = parse(&report_text(0.9, 1.0, 1.1, 2), Path::new("r.json")).unwrap();
    let id = r.points[0].id();
    assert_eq!(id.to_string().parse::<PointId>().unwrap(), id);
}

#[test]
fn a_field_of_the_wrong_type_is_named_with_its_path() {
    let text = report_text(0.9, 1.0, 1.1, 2).replace(r#""tokens": 1024"#, r#""tokens": "many""#);
    let e = parse(&text, Path::new("r.json")).unwrap_err().to_string();
    assert!(
        e.contains("r.json") && e.contains("points[0].tokens"),
        "{e}"
    );
}

proptest! {
    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let text = String::from_utf8_lossy(&bytes);
        let _ = parse(&text, Path::new("r.json"));
    }

    #[test]
    fn timings_are_accepted_exactly_when_positive_and_ordered(
        p10 in -1.0f64..3.0, median in -1.0f64..3.0, p90 in -1.0f64..3.0, tp in 0u32..3,
    ) {
        let ok = parse(&report_text(p10, median, p90, tp), Path::new("r.json")).is_ok();
        let valid = p10 > 0.0 && median > 0.0 && p90 > 0.0 && p10 <= median && median <= p90 && tp > 0;
        prop_assert_eq!(ok, valid);
    }

    #[test]
    fn point_ids_round_trip(
        component in "[a-z]{1,6}", module in "[a-z_.]{1,30}", split in proptest::option::of("[a-z0-9.]{1,8}"),
        tokens in any::<u64>(), k in any::<u64>(), n in any::<u64>(), g in any::<u32>(),
    ) {
        let id = PointId { component, module, split, tokens, in_features: k, out_features: n, num_gemms: g };
        prop_assert_eq!(id.to_string().parse::<PointId>().unwrap(), id);
    }
}

#[test]
fn the_step_documents_are_told_apart_from_reports_by_their_format() {
    use fp8_report::step_inputs::{STEP_INPUTS_FORMAT, STEP_PLANS_FORMAT};
    use fp8_report::step_results::STEP_RESULTS_FORMAT;
    for f in [STEP_INPUTS_FORMAT, STEP_PLANS_FORMAT, STEP_RESULTS_FORMAT] {
        assert!(
            fp8_report::is_step_document(&format!("{{\"format\": \"{f}\"}}")),
            "{f}"
        );
    }
    assert!(!fp8_report::is_step_document(&report_text(
        1.0, 1.1, 1.2, 1
    )));
    assert!(!fp8_report::is_step_document(
        "{\"format\": \"adaptive-fp8-step-other\"}"
    ));
    assert!(!fp8_report::is_step_document("[1, 2]"));
    assert!(!fp8_report::is_step_document("not json"));
}
