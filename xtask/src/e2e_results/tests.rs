//! Tests of the end-to-end section's readers and labels.
use std::path::Path;

use super::{LOGS, PARTS, Parts, TP_COMM_LABEL, policy_label, sections};

#[test]
fn prose_blocks_run_from_their_marker_to_the_next_as_written() {
    let p = Parts::parse(
        "<!-- a note, not a block -->\nignored\n<!-- one -->\n\n### A\ntext\n<!-- two -->\nlast",
    );
    assert_eq!(p.get("one").unwrap(), "\n### A\ntext\n");
    assert_eq!(p.get("two").unwrap(), "last");
    assert!(p.get("three").unwrap_err().contains("<!-- three -->"));
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let shipped = Parts::parse(&std::fs::read_to_string(root.join(PARTS)).unwrap());
    for name in ["accum", "combine", "tp", "tp-policies", "tp-closing"] {
        assert!(!shipped.get(name).unwrap().trim().is_empty(), "{name}");
    }
}

#[test]
fn the_sections_data_file_reads_and_names_existing_runs() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let sec = sections(&root).unwrap();
    assert!(sec.scenarios.len() >= 10 && !sec.grad_accum.is_empty() && !sec.combine.is_empty());
    for rel in sec.scenarios.iter().flat_map(|s| &s.files) {
        assert!(root.join(LOGS).join(rel).exists(), "{rel}");
    }
    for c in &sec.combine {
        assert!(
            root.join(&c.cublaslt).exists() && root.join(&c.te).exists(),
            "{}",
            c.model
        );
    }
}

#[test]
fn policies_are_labelled_by_backend_and_objective() {
    assert_eq!(policy_label("policy:qwen_te_eager.json", "x"), "TE, eager");
    assert_eq!(
        policy_label("policy:qwen_te_graphed.json", "x"),
        "TE, GPU time"
    );
    assert_eq!(
        policy_label("policy:qwen2_5_72b_host.json", "x"),
        "cuBLASLt + host profile (eager)"
    );
    assert_eq!(
        policy_label("policy:mixtral_8x7b.json", "c/sb/mixtral.json"),
        "cost model, GPU time"
    );
    assert_eq!(
        policy_label("policy:qwen2_5_72b.json", "ab/sb/qwen72b_tp8.json"),
        "cuBLASLt, GPU time"
    );
    // Policies that share a file name are named with their folder by the step benchmark.
    let f = "g/sb/qwen72b_tp2_comm_b.json";
    assert_eq!(
        policy_label("policy:policies/qwen2_5_72b.json", f),
        "cuBLASLt, GPU time"
    );
    assert_eq!(
        policy_label("policy:eager/qwen2_5_72b.json", f),
        "cuBLASLt + host profile (eager)"
    );
    assert_eq!(policy_label("policy:te/qwen2_5_72b.json", f), "TE, eager");
    assert_eq!(
        policy_label("policy:qwen2_5_72b_tp2_comm.json", f),
        TP_COMM_LABEL
    );
}
