//! Tests of the end-to-end section's readers and labels.
use std::path::Path;

use super::{
    LOGS, PARTS, Parts, TP_COMM_LABEL, from_log, is_objective_policy, policy_label, sections,
};

#[test]
fn a_log_keeps_its_per_token_medians_and_best_of() {
    let v = from_log(
        "  tokens 1024 eager: oracle up qkv: 0.99 (not kept)\n  tokens 1024 eager: bf16 1.000, fp8 1.250, policy:a.json 1.100, oracle 1.000\n\
         junk\n  tokens 4096 graphed: bf16 1.000, fp8 0.800, policy:a.json 0.880, oracle 0.800\n",
    );
    let r = &v.results;
    assert_eq!(r.len(), 2);
    assert_eq!(r[0].tokens, Some(1024));
    assert_eq!(r[1].execution.as_deref(), Some("graphed"));
    let p = r[1].mode("policy:a.json");
    assert!((p.median() - 0.88).abs() < 1e-12);
    // best of BF16 and FP8 is FP8 (0.8): 0.88 / 0.8
    assert!((p.best() - 1.1).abs() < 1e-12);
    assert_eq!(r[0].mode("policy:a.json").verdict(), "median only");
    assert!(v.complete && r[0].mode("policy:a.json").band().0.is_nan());
}

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
    for name in [
        "targets",
        "misses-intro",
        "agreement",
        "accum",
        "combine",
        "tp",
        "tp-policies",
        "tp-closing",
    ] {
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
    assert!(
        is_objective_policy("TE, eager", "eager") && !is_objective_policy("TE, eager", "graphed")
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
    assert!(
        is_objective_policy(TP_COMM_LABEL, "eager")
            && !is_objective_policy(TP_COMM_LABEL, "graphed")
    );
}
