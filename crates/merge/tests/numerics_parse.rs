//! The numerics-report parser never panics, and what it accepts has every share in [0, 1] and
//! every error finite and non-negative.

#![allow(clippy::unwrap_used)]

use std::path::Path;

use fp8_merge::numerics::{NumericsBound, parse_numerics};
use fp8_policy::{DenseKind, RuleKey};
use proptest::prelude::*;

const GOOD: &str = r#"{"format": "fp8sel-numerics", "version": 1,
 "modules": [{"component": "llm", "name": "decoder.layers.mlp.linear_fc2",
   "key": {"kind": "row", "ub_name": "fc2", "tp": 1},
   "operands": {"input": {"rel_rms": 0.031, "underflow": 0.0, "saturated": 0.001},
                "weight": {"rel_rms": 0.02}}}]}"#;

#[test]
fn a_good_report_reads_with_its_worst_operand() {
    let r = parse_numerics(GOOD, Path::new("n.json")).unwrap();
    assert_eq!(r.modules[0].worst(), Some(("input", 0.031)));
}

/// The report the Python probe writes (`adaptive_fp8.bench.numerics.report`; its test checks that it
/// writes exactly this file) reads here, and bounds the module it should.
#[test]
fn the_python_probes_report_reads_and_bounds() {
    let file =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/numerics/probe_sample.json");
    let text = std::fs::read_to_string(&file).unwrap();
    let report = parse_numerics(&text, &file).unwrap();
    assert_eq!(report.modules.len(), 2);
    assert_eq!(report.modules[0].worst(), Some(("grad_output", 0.05)));
    let bound = NumericsBound {
        report,
        max_quant_error: 0.1,
    };
    let fc2 = RuleKey::Dense {
        kind: DenseKind::Row,
        ub_name: "fc2".into(),
        tp: 1,
    };
    let fc1 = RuleKey::Dense {
        kind: DenseKind::LayernormColumn,
        ub_name: "fc1".into(),
        tp: 1,
    };
    assert_eq!(
        bound.overrule("llm", &fc2),
        Some(("decoder.layers.mlp.linear_fc2", "weight", 0.2))
    );
    assert_eq!(bound.overrule("llm", &fc1), None);
    assert_eq!(bound.overrule("vit", &fc2), None);
    // The probe's layout (TP 1) bounds the same modules at every layout.
    let fc2_tp8 = RuleKey::Dense {
        kind: DenseKind::Row,
        ub_name: "fc2".into(),
        tp: 8,
    };
    assert_eq!(
        bound.overrule("llm", &fc2_tp8),
        Some(("decoder.layers.mlp.linear_fc2", "weight", 0.2))
    );
    assert!(bound.covers("llm", &fc2_tp8) && bound.covers("llm", &fc1));
    let proj = RuleKey::Dense {
        kind: DenseKind::Row,
        ub_name: "proj".into(),
        tp: 1,
    };
    assert!(!bound.covers("llm", &proj) && !bound.covers("vit", &fc2));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn arbitrary_text_never_panics(s in "\\PC{0,300}") {
        let _ = parse_numerics(&s, Path::new("x.json"));
    }

    #[test]
    fn mutated_reports_never_panic_and_accepted_ones_are_sane(cut in 0usize..GOOD.len(), byte in any::<u8>()) {
        let mut b = GOOD.as_bytes().to_vec();
        b[cut] = byte;
        if let Ok(s) = String::from_utf8(b)
            && let Ok(r) = parse_numerics(&s, Path::new("x.json"))
        {
            for m in &r.modules {
                for (_, e) in &m.operands {
                    prop_assert!(e.rel_rms.is_finite() && e.rel_rms >= 0.0);
                    prop_assert!((0.0..=1.0).contains(&e.underflow) && (0.0..=1.0).contains(&e.saturated));
                }
            }
        }
    }
}
